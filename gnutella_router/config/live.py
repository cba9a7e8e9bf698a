"""Which settings a running router takes on a reload, and what a reload changes.

Theory of operation
-------------------
A reload (SIGHUP, ``POST /reload``, ``gnutella-router ctl reload``) reads the
configuration again the way the router was started (the same file, the same flags on
top) and compares it with the configuration in force, setting by setting. A setting is
*live* when the part of the router that holds it reads it again for every use, or holds
it in a plain attribute that may be given a new value at any moment without breaking an
invariant of that part; :data:`LIVE_SETTINGS` names each one with where the new value
takes effect. Every other setting is fixed at start: it sized a table, chose a policy,
bound a socket or built an object that keeps its own copy, and changing it would need
that object rebuilt with its contents. A reload applies the live settings that
changed, and names the others that changed as needing a restart; it never applies
half of a change.

:func:`plan_reload` is the whole decision, pure: the configuration in force and the one
read give the changes, sorted into the two kinds, and the configuration that is in
force afterwards: the old one with the live changes only, so that a fixed setting read
again later (a new connection's queue, say) still sees its value from the start, and a
later reload names it again until a restart takes it. The daemon carries the plan out
(:meth:`gnutella_router.daemon.Daemon.reload`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType

import msgspec

from gnutella_router.config.loading import config_as_dict
from gnutella_router.config.sections import Config

__all__ = ["LIVE_SETTINGS", "ReloadError", "ReloadPlan", "plan_reload"]

LIVE_SETTINGS: Mapping[str, str] = MappingProxyType(
    {
        "log.level": "every logger of the process, at once",
        "network.max_connections": "ultrapeer slots for handshakes from now (peers over a "
        "lowered limit stay connected)",
        "network.max_leaves": "leaf slots for handshakes from now",
        "network.connections_per_address": "the per-address limit, for handshakes from now",
        "network.connects_per_ip_per_minute": "the limit on connection attempts, at once",
        "network.handshake_timeout": "handshakes begun from now",
        "router.peer_query_rate": "every peer's query bucket, at its next query",
        "router.peer_query_burst": "every peer's query bucket, at its next query",
        "catcher.seeds": "added seeds go into the host cache and are dialled when "
        "connections are short; removed ones leave it",
        "catcher.min_connections": "the catcher's next round (once a second)",
        "catcher.dial_timeout": "dials begun from now",
        "catcher.drop_hold": "peers dropped from now",
        "abuse.ban_seconds": "bans from now",
    }
)
"""The settings a reload applies, each with where its new value takes effect."""


class ReloadError(Exception):
    """The configuration could not be reloaded; the router runs on as it was."""


@dataclasses.dataclass(frozen=True, slots=True)
class ReloadPlan:
    """What a reload does: see :func:`plan_reload`."""

    applied: dict[str, tuple[object, object]]
    """Live settings that changed: ``{key: (old, new)}``."""
    needs_restart: tuple[str, ...]
    """Settings that changed but are fixed at start, by key (their values are not
    kept: one may be the admin token)."""
    effective: Config
    """The configuration in force after the reload: the old one with ``applied``."""

    def changed(self, key: str) -> bool:
        """Whether the live setting ``key`` takes a new value."""
        return key in self.applied

    def to_json(self) -> dict[str, object]:
        """The answer of ``POST /reload``: what was applied (from, to) and what needs a
        restart."""
        return {
            "applied": {
                key: {"from": _plain(old), "to": _plain(new)}
                for key, (old, new) in self.applied.items()
            },
            "needs_restart": list(self.needs_restart),
        }


def plan_reload(current: Config, read: Config) -> ReloadPlan:
    """Compare the configuration in force with the one read again.

    Raises:
        ConfigError: the live changes alone make an invalid configuration (a live
            setting bound by a rule to a fixed one that changed too); nothing is
            applied then.
    """
    before = _flat(current)
    after = _flat(read)
    changes = {key: (before[key], after[key]) for key in before if before[key] != after[key]}
    applied = {key: change for key, change in changes.items() if key in LIVE_SETTINGS}
    needs_restart = tuple(key for key in changes if key not in applied)
    effective = current
    if applied:
        sections: dict[str, dict[str, object]] = {}
        for key in applied:
            section, _, name = key.partition(".")
            sections.setdefault(section, {})[name] = getattr(getattr(read, section), name)
        replaced = {
            section: msgspec.structs.replace(getattr(current, section), **values)
            for section, values in sections.items()
        }
        effective = msgspec.structs.replace(current, **replaced)
    return ReloadPlan(applied, needs_restart, effective)


def _plain(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


def _flat(config: Config) -> dict[str, object]:
    """Every setting by dotted key, lists as tuples (so that they compare)."""
    return {
        f"{section}.{name}": tuple(value) if isinstance(value, list) else value
        for section, values in config_as_dict(config).items()
        for name, value in values.items()
    }
