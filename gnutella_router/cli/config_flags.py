"""The flags of ``run`` and ``check-config`` that override single settings.

Each flag names a dotted setting; its type, its choices and the default its help shows
come from that setting's declaration (:mod:`gnutella_router.config.sections`), so a flag
and the file can never disagree. Values reach :func:`gnutella_router.config.load_config`
as overrides and are checked there like the file's.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import msgspec

from gnutella_router.config import Config, config_as_dict, load_config
from gnutella_router.config.loading import TYPES
from gnutella_router.config.rules import declared

_FLAGS = {
    "--listen": ("node.listen", "HOST:PORT", "address to accept peers on; port 0 picks one"),
    "--max-ttl": ("network.max_ttl", "N", "broadcast clamp on hops + TTL, 1 to 15"),
    "--slow-peer": ("slow_peer.policy", None, "slow peer policy"),
    "--query-delay-ms": (
        "router.query_delay_ms",
        "MS",
        "blocking delay injected per query, for overload experiments",
    ),
    "--log-format": ("log.format", None, "log output"),
    "--log-level": ("log.level", None, "lowest level logged"),
    "--state-dir": ("node.state_dir", "DIR", "directory for the host cache and dumps"),
    "--min-connections": (
        "catcher.min_connections",
        "N",
        "dial out while fewer peers are connected",
    ),
    "--max-connections": ("network.max_connections", "N", "most peer connections at once"),
}
"""Flags that override one setting each: the dotted key, the metavar and the help; the
type, the choices and the default shown come from the setting's declaration."""


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--config`` and the flags that override single settings to ``parser``.

    Every flag defaults to ``None`` (``--seed`` to no list), meaning "not given", so the
    file's value stands. Read the result with :func:`config_from_args`.
    """
    defaults = config_as_dict(Config())
    group = parser.add_argument_group(
        "configuration", "settings come from --config FILE; these flags override it"
    )
    group.add_argument("--config", type=Path, metavar="FILE", help="TOML configuration file")
    for flag, (key, metavar, words) in _FLAGS.items():
        section, name = key.split(".")
        kind, _ = declared(TYPES[section][name])
        if get_origin(kind) is Literal:
            options: dict[str, Any] = {"type": str.lower, "choices": get_args(kind)}
        else:
            options = {"type": kind, "metavar": metavar}
        group.add_argument(flag, help=f"{words} (default {defaults[section][name]})", **options)
        if flag == "--listen":
            group.add_argument(
                "--seed",
                action="append",
                metavar="HOST:PORT",
                help="peer to dial first; repeatable, added to the file's seeds",
            )
    group.add_argument(
        "--profile",
        action="store_const",
        const=True,
        help="sample queues, pool, RSS and rates ([profiler]); written to the state dir at exit",
    )


def config_from_args(args: argparse.Namespace) -> Config:
    """The configuration that the flags of :func:`add_config_arguments` describe.

    Reads ``--config`` if given, applies the other flags that were given as
    overrides, and appends ``--seed`` addresses to the file's seeds.

    Raises:
        ConfigError: as :func:`load_config`; callers usually pass the message to
            ``parser.error``.
    """
    given = {
        key: getattr(args, flag[2:].replace("-", "_"), None) for flag, (key, *_) in _FLAGS.items()
    }
    given["profiler.enabled"] = getattr(args, "profile", None)
    given["trace.record"] = getattr(args, "record", None)  # run's --record, made absolute
    overrides = {key: value for key, value in given.items() if value is not None}
    config = load_config(getattr(args, "config", None), overrides)
    if extra_seeds := getattr(args, "seed", None):
        seeds = (*config.catcher.seeds, *extra_seeds)
        config = msgspec.structs.replace(
            config, catcher=msgspec.structs.replace(config.catcher, seeds=seeds)
        )
    return config
