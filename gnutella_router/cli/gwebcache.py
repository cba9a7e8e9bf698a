"""``gnutella-router gwebcache``: a GWebCache service routers on many machines bootstrap from."""

from __future__ import annotations

import argparse
import ipaddress
import signal
import sys
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import trio

from gnutella_router.cli.arguments import count, non_negative, option_values, positive
from gnutella_router.cli.interrupt import INTERRUPTED
from gnutella_router.config import ConfigError, parse_host_port
from gnutella_router.discovery.gwebcache_server import (
    CONNECTIONS_PER_ADDRESS,
    IDLE_SECONDS,
    MAX_CONNECTIONS,
    REQUEST_SECONDS,
)


class _Limit(NamedTuple):
    """A numeric option that sets the field of its own name (its dest): declared once,
    in :data:`_SERVICE_LIMITS` or :data:`_SERVER_LIMITS`, for both the parser and what
    the command builds from it."""

    flag: str
    parse: Callable[[str], object]
    default: object
    metavar: str
    help: str

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


_SERVICE_LIMITS = (
    _Limit("--max-hosts", count(1, 100_000), 200, "N",
           "hosts kept, the stalest dropped first (default 200)"),
    _Limit("--host-max-age", positive, 3600.0, "S",
           "seconds a host is kept without a new update (default 3600)"),
    _Limit("--answer-hosts", count(1, 1000), 20, "N",
           "hosts in one answer, the freshest first (default 20)"),
    _Limit("--client-interval", non_negative, 0.0, "S",
           "least seconds between two host requests from one address; sooner gets "
           "'You came back too early' (default 0: no limit)"),
    _Limit("--hosts-per-address", count(1, 100_000), 2, "N",
           "hosts one client address (IPv6: /64) may have registered at once; a new one "
           "replaces its oldest (default 2)"),
    _Limit("--hosts-per-group", count(1, 100_000), 10, "N",
           "hosts one /16 (IPv6: /32) may hold; a new one replaces its stalest (default 10)"),
    _Limit("--update-interval", non_negative, 300.0, "S",
           "least seconds between two updates from one client address (default 300; 0: "
           "no limit)"),
)  # fmt: skip
"""The service's limits: each sets the `ServiceSettings` field of its name."""
_SERVER_LIMITS = (
    _Limit("--max-connections", count(1, 100_000), MAX_CONNECTIONS, "N",
           f"connections served at once; more get 503 (default {MAX_CONNECTIONS})"),
    _Limit("--connections-per-address", count(1, 100_000), CONNECTIONS_PER_ADDRESS, "N",
           "connections served at once from one client address (IPv6: /64); more get 503 "
           f"(default {CONNECTIONS_PER_ADDRESS})"),
    _Limit("--idle-seconds", positive, IDLE_SECONDS, "S",
           f"seconds a client may send nothing while sending its request (default "
           f"{IDLE_SECONDS:g})"),
    _Limit("--request-seconds", positive, REQUEST_SECONDS, "S",
           f"seconds a client has for its whole request (default {REQUEST_SECONDS:g})"),
)  # fmt: skip
"""The server's limits: each sets the `GWebCacheServer` argument of its name."""


def _add_limits(parser: argparse.ArgumentParser, limits: tuple[_Limit, ...]) -> None:
    for limit in limits:
        parser.add_argument(
            limit.flag,
            dest=limit.dest,
            type=limit.parse,
            default=limit.default,
            metavar=limit.metavar,
            help=limit.help,
        )


def listen_address(text: str) -> tuple[str, int]:
    try:
        return parse_host_port(text, key="--listen")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def literal_host(text: str) -> tuple[str, int]:
    from gnutella_router.discovery.gwebcache import parse_literal_host_port

    host = parse_literal_host_port(text)
    if host is None:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a literal IP:PORT")
    return host


def network_list(text: str) -> list[str]:
    """``--trusted``: a network ("10.0.0.0/8", "::1"), or "none"."""
    if text.lower() == "none":
        return []
    try:
        return [str(ipaddress.ip_network(text, strict=False))]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f'{text!r}: expected a network such as 10.0.0.0/8 or ::1, or "none"'
        ) from None


def add_gwebcache_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "gwebcache",
        help="run a GWebCache (v1 and v2) that routers bootstrap from and report to",
        description=(
            "Serve a GWebCache: servents ask it for hosts (get=1, hostfile=1) and caches "
            "(urlfile=1) and register themselves (update=1&ip=IP:PORT); an update may only "
            "name the requester's own address unless --trust-updates. One address may "
            "register only a few hosts, only so often, and hold only a few connections, "
            "unless it is in a --trusted network (loopback by default). Point routers at it "
            'with catcher.gwebcache = "http://HOST:PORT/". Runs until Ctrl-C (exit 130) '
            "or SIGTERM (exit 0)."
        ),
    )
    parser.add_argument(
        "--listen",
        type=listen_address,
        default="127.0.0.1:8080",
        metavar="HOST:PORT",
        help="where to serve (default 127.0.0.1:8080; 0.0.0.0:8080 for other machines)",
    )
    _add_limits(parser, _SERVICE_LIMITS)
    parser.add_argument(
        "--trust-updates", action="store_true",
        help="accept updates naming any address, not only the requester's own",
    )  # fmt: skip
    parser.add_argument(
        "--trusted", type=network_list, action="append", metavar="NETWORK",
        help="clients in this network are exempt from the per-address limits; repeatable; "
        '"none" for no network (default 127.0.0.0/8 and ::1)',
    )  # fmt: skip
    parser.add_argument(
        "--allow-private-urls", action="store_true",
        help="keep cache URLs naming loopback, private or link-local addresses or local names "
        "(a test network)",
    )  # fmt: skip
    _add_limits(parser, _SERVER_LIMITS)
    parser.add_argument(
        "--seed-host", type=literal_host, action="append", default=[], metavar="IP:PORT",
        help="a host to list from the start, never expired; it fills answers that have "
        "too few reported hosts; repeatable (at most 100)",
    )  # fmt: skip
    parser.add_argument(
        "--log-format", choices=("auto", "console", "json"), default="auto",
        help="log output (default auto)",
    )  # fmt: skip
    parser.set_defaults(handler=cmd_gwebcache)


def cmd_gwebcache(args: argparse.Namespace) -> int:
    from gnutella_router.discovery.gwebcache_server import GWebCacheServer
    from gnutella_router.discovery.gwebcache_service import (
        DEFAULT_TRUSTED,
        MAX_SEEDS,
        GWebCacheService,
        ServiceSettings,
    )
    from gnutella_router.logs import configure_logging

    if len(set(args.seed_host)) > MAX_SEEDS:
        print(f"gnutella-router gwebcache: at most {MAX_SEEDS} --seed-host", file=sys.stderr)
        return 2

    configure_logging(args.log_format, "info")
    settings = ServiceSettings(
        **option_values(args, (limit.dest for limit in _SERVICE_LIMITS)),
        trust_updates=args.trust_updates,
        trusted=DEFAULT_TRUSTED
        if args.trusted is None
        else tuple(n for networks in args.trusted for n in networks),
        allow_private_urls=args.allow_private_urls,
    )
    host, port = args.listen

    async def serve() -> None:
        service = GWebCacheService(settings, clock=trio.current_time)
        for seed in args.seed_host:
            service.add_seed(seed)
        server = GWebCacheServer(
            service, **option_values(args, (limit.dest for limit in _SERVER_LIMITS))
        )
        async with trio.open_nursery() as nursery:
            where = await nursery.start(partial(server.serve, host, port))
            shown = ", ".join(
                f"http://{h}:{p}/" if ":" not in h else f"http://[{h}]:{p}/" for h, p in where
            )
            print(f"gwebcache serving on {shown}", file=sys.stderr, flush=True)
            with trio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    break
            print(
                f"gwebcache stopped: {service.statistics.requests} requests, "
                f"{len(service.hosts)} hosts known",
                file=sys.stderr,
                flush=True,
            )
            nursery.cancel_scope.cancel()

    try:
        trio.run(serve)
    except KeyboardInterrupt:
        return INTERRUPTED
    except OSError as exc:
        print(f"gnutella-router gwebcache: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 1
    return 0
