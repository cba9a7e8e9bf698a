"""The live connections, by id: the registry the router's outbox writes to.

It keeps a tuple snapshot (rebuilt when a connection comes or goes) that the router
iterates cheaply on every batch, and remembers how to name recent peers for dumps.
"""

from __future__ import annotations

import collections

import trio

from gnutella_router.net.connection import Connection, format_address

PEER_LABELS_KEPT = 10_000
"""Closed connections whose peer is still named in dumps (route tables outlive them)."""


class ConnectionTable:
    """The live connections, with a tuple snapshot the router can iterate cheaply.

    It also remembers, for the :data:`PEER_LABELS_KEPT` most recent connections, live
    or closed, how to name the peer: its listening address when its handshake gave one
    (``Listen-IP``, ``X-Listen-IP``, ``Node``), else the address it connected from. A
    route recorded through a connection keeps a readable next hop after it closes.
    """

    def __init__(self) -> None:
        self._by_id: dict[int, Connection] = {}
        self._snapshot: tuple[Connection, ...] = ()
        self._emptied = trio.lowlevel.ParkingLot()
        self._labels: collections.OrderedDict[int, str] = collections.OrderedDict()

    def add(self, connection: Connection) -> None:
        self._by_id[connection.id] = connection
        self._snapshot = tuple(self._by_id.values())
        listen = connection.listen_address
        self._labels[connection.id] = format_address(*listen) if listen else connection.peer_text
        if len(self._labels) > PEER_LABELS_KEPT:
            self._labels.popitem(last=False)

    def label(self, connection_id: int) -> str | None:
        """How to name the peer of ``connection_id`` (live or recently closed)."""
        return self._labels.get(connection_id)

    def remove(self, connection: Connection) -> None:
        if self._by_id.pop(connection.id, None) is not None:
            self._snapshot = tuple(self._by_id.values())
            if not self._by_id:
                self._emptied.unpark_all()

    async def wait_empty(self) -> None:
        """Return once no connection is left (at shutdown, after the Byes)."""
        while self._by_id:
            await self._emptied.park()

    def snapshot(self) -> tuple[Connection, ...]:
        return self._snapshot

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, connection_id: int) -> Connection | None:
        return self._by_id.get(connection_id)

    def count(self, role: str) -> int:
        return sum(1 for c in self._snapshot if c.role == role and not c.closing)

    def addresses(self) -> set[tuple[str, int]]:
        """Every address a live peer is known by: where it came from and where it listens."""
        known: set[tuple[str, int]] = set()
        for connection in self._snapshot:
            known.add(connection.peer)
            if connection.listen_address is not None:
                known.add(connection.listen_address)
        return known
