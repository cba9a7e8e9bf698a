"""A route table as dumps and statistics show it: an entry, a page of them, its counts.

Apart from :mod:`.route_table` because that module is compiled with mypyc where a
compiler is at hand (``hatch_build.py``), and what is here is made only for a dump or a
statistics call, so it loses nothing by staying interpreted.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Final, Literal

Generation = Literal["current", "previous"]

VALUE_SHIFT: Final = 40
"""Where an entry's value begins: below it, 32 bits of milliseconds and 8 of detail
(see :func:`gnutella_router.routing.route_table.pack_entry`)."""
OFFSET_LIMIT: Final = 0xFFFF_FFFF
"""The most milliseconds an entry keeps of when it was recorded: 49 days."""


@dataclass(frozen=True, slots=True)
class RouteEntry:
    """One entry, as shown in dumps."""

    guid: bytes
    value: int
    """The connection id (or marker) replies are routed to."""
    recorded_at: float
    #: ``now - recorded_at`` for the ``now`` given to ``entries``.
    age: float
    generation: Generation
    #: TTL and hops of the message as it arrived, each capped at 15 (0 when not given).
    ttl: int = 0
    hops: int = 0
    #: Replies routed back through this entry so far (see ``note_hit``).
    hits: int = 0


@dataclass(frozen=True, slots=True)
class RouteTableStatistics:
    """A snapshot of one table, taken after any rotation that ``now`` makes due."""

    name: str
    #: Entries held in both generations.
    size: int
    current_size: int
    previous_size: int
    #: Largest size of one generation; the table holds at most twice this.
    capacity: int
    generation_seconds: float
    #: Entries inserted by ``record``.
    recorded: int
    #: ``record`` calls for a GUID the table already held (the first value was kept).
    duplicates: int
    #: ``refresh`` calls.
    refreshed: int
    #: Entries dropped by ``forget_value`` (their connection closed).
    forgotten: int
    lookups: int
    #: Lookups that found nothing: the route expired or never existed.
    misses: int
    #: All rotations, whatever their trigger.
    rotations: int
    #: Rotations made early because the current generation was full; if this grows,
    #: entries live shorter than the generation length promises.
    rotations_for_capacity: int
    #: Entries dropped to keep one connection within its share of a full generation.
    evicted: int
    #: Entries dropped by rotations.
    expired: int
    #: Age of the oldest entry held, or None when the table is empty.
    oldest_age: float | None


@dataclass(frozen=True, slots=True)
class RoutePage:
    """The part of one generation a snapshot shows: ``entries`` (a copy, oldest first)
    read newest first, skipping ``skip`` and stopping before ``stop``."""

    entries: dict[bytes, int]
    since: float
    generation: Generation
    skip: int
    stop: int | None


def recorded_at(entry: int, since: float) -> float:
    """When ``entry`` was recorded, to the millisecond, in a generation begun at ``since``."""
    return since + (entry >> 8 & OFFSET_LIMIT) / 1000.0


class RouteSnapshot:
    """A page of one route table's entries as they were at one instant (see
    :meth:`RouteTable.snapshot`).

    It holds copies only, so it may be read on any thread, across awaits, for as long as
    the reader likes; dropping it frees them.
    """

    __slots__ = ("_hits", "_now", "_pages", "_size")

    def __init__(self, pages: list[RoutePage], hits: dict[bytes, int], now: float, size: int):
        self._pages = pages
        self._hits = hits
        self._now = now
        self._size = size

    def __len__(self) -> int:
        """Entries in the page."""
        return self._size

    def entries(self) -> Iterator[RouteEntry]:
        """The page's entries, newest first."""
        now = self._now
        hits = self._hits
        for page in self._pages:
            since = page.since
            generation = page.generation
            for guid, entry in islice(reversed(page.entries.items()), page.skip, page.stop):
                yield route_entry(guid, entry, since, generation, now, hits)


def route_entry(
    guid: bytes,
    entry: int,
    since: float,
    generation: Generation,
    now: float,
    hits: dict[bytes, int],
) -> RouteEntry:
    """``guid``'s packed ``entry``, of a generation begun at ``since``, as dumps show it."""
    recorded = recorded_at(entry, since)
    return RouteEntry(
        guid,
        entry >> VALUE_SHIFT,
        recorded,
        now - recorded,
        generation,
        ttl=entry >> 4 & 0x0F,
        hops=entry & 0x0F,
        hits=hits.get(guid, 0),
    )
