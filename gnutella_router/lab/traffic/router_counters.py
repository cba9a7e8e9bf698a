"""The router's own counters over a traffic run, read from its admin interface.

The load client and the trace replay both set what they sent and received beside what
the router says it did in the same span: its ``/stats`` page read once before the
traffic and once after, and the difference taken. A loss can then be told apart from a
drop (the router says why) and from a copy still in flight. Reading ``/stats`` needs
the admin token when the router has one: pass ``token`` (the commands take ``--token``
or ``$GNUTELLA_ADMIN_TOKEN``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import trio

from gnutella_router.observe.admin_client import FetchError, fetch
from traffic_models.latency import RouterCounts

READ_TIMEOUT = 5.0


class RouterCounterReader:
    """Reads the router's counters before and after a run; remembers why it could not."""

    def __init__(self, admin: tuple[str, int] | None, token: str = "") -> None:
        self.admin = admin
        self.token = token
        self.before: dict[str, Any] | None = None
        self.after: dict[str, Any] | None = None
        self.note: str | None = None
        """Why there are no counters (the first failure; later reads are not tried)."""

    async def read_before(self) -> None:
        self.before = await self._read()

    async def read_after(self) -> None:
        self.after = await self._read()

    async def _read(self) -> dict[str, Any] | None:
        """The router's /stats counters, or None (with :attr:`note` saying why)."""
        if self.admin is None or self.note is not None:
            return None
        try:
            data = await trio.to_thread.run_sync(
                functools.partial(
                    fetch, self.admin, "/stats", token=self.token, timeout=READ_TIMEOUT
                )
            )
        except FetchError as exc:
            self.note = str(exc)
            return None
        router = data.get("router") if isinstance(data, dict) else None
        if not isinstance(router, dict):
            self.note = "the admin interface's /stats has no router counters"
            return None
        return router

    def reconcile(self, copies_at_our_peers: dict[str, int]) -> RouterCounts | None:
        """The router's counts for the run (after minus before) beside ours; None when
        no admin interface was given."""
        if self.admin is None:
            return None
        host, port = self.admin
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        before, after = self.before, self.after
        if before is None or after is None:
            return RouterCounts(admin=where, note=self.note or "not read")
        dropped: dict[str, dict[str, int]] = {}
        before_dropped = _mapping(before.get("dropped"))
        for reason, by_type in _mapping(after.get("dropped")).items():
            delta = _delta(_mapping(by_type), _mapping(before_dropped.get(reason)))
            if delta:
                dropped[reason] = delta
        return RouterCounts(
            admin=where,
            received=_delta(_mapping(after.get("received")), _mapping(before.get("received"))),
            forwarded=_delta(_mapping(after.get("forwarded")), _mapping(before.get("forwarded"))),
            generated=_delta(_mapping(after.get("generated")), _mapping(before.get("generated"))),
            dropped=dropped,
            copies_at_our_peers={k: v for k, v in copies_at_our_peers.items() if v},
        )


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _delta(after: Mapping[str, Any], before: Mapping[str, Any]) -> dict[str, int]:
    """Per-key increase of integer counters; keys that did not move are left out."""
    out: dict[str, int] = {}
    for key, value in after.items():
        if isinstance(value, int):
            previous = before.get(key, 0)
            increase = value - (previous if isinstance(previous, int) else 0)
            if increase:
                out[key] = increase
    return out
