"""Message GUIDs seen recently, for requests deduplicated but never routed back (pushes).

Apart from :mod:`.route_table` because that module is compiled where a compiler is at
hand and this is not on the hot path: a push is rare, and the table it wraps is the
compiled one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from gnutella_router.routing.route_entry import RouteEntry
from gnutella_router.routing.route_table import RouteTable
from gnutella_router.snapshots import from_attributes


@dataclass(frozen=True, slots=True)
class SeenTableStatistics:
    """A snapshot of a `SeenTable`: the fields of the route table it wraps that mean
    something for it, under the same names (``added`` is the table's ``recorded``)."""

    name: str
    size: int
    capacity: int
    generation_seconds: float
    added: int
    duplicates: int
    rotations: int
    rotations_for_capacity: int
    expired: int
    oldest_age: float | None


class SeenTable:
    """Message GUIDs seen recently, for requests that are deduplicated but not routed back.

    Pushes are routed by the target servent's GUID, so a repeated push can only be
    recognised by its message GUID; this remembers those, with the same bounded
    two-generation expiry as the route tables.
    """

    __slots__ = ("_table",)

    def __init__(self, name: str, generation_seconds: float, capacity: int, now: float = 0.0):
        self._table = RouteTable(name, generation_seconds, capacity, now)

    def add(self, guid: bytes, now: float) -> bool:
        """Note ``guid``; False means it was already seen and the message is a repeat."""
        return self._table.record(guid, 0, now)

    def __len__(self) -> int:
        return len(self._table)

    def __contains__(self, guid: object) -> bool:
        return guid in self._table

    def entries(self, now: float, limit: int | None = None) -> Iterator[RouteEntry]:
        return self._table.entries(now, limit)

    def statistics(self, now: float) -> SeenTableStatistics:
        table = self._table.statistics(now)
        return from_attributes(SeenTableStatistics, table, added=table.recorded)
