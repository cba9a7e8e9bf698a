"""Bounded GUID tables for reverse-path routing and duplicate detection.

A router has to remember, for every ping, query and query hit it passes on, which
connection the message came from, so that replies can retrace the path and repeats can
be dropped. The network never says when such a memory may be forgotten, so the table
must decide by itself, cheaply, on every message.

Theory of operation: two generations, as in LimeWire. New entries go into the *current*
dict; lookups try *current*, then *previous*. At each rotation *previous* is dropped
whole, *current* becomes *previous* and a fresh *current* begins. Expiry therefore costs
nothing per entry (no timestamps to scan, no heap to maintain): it is one dict thrown
away now and then, and the per-message price is a float comparison against a deadline
worked out at the last rotation.

Rotations fall on a fixed grid of ``generation_seconds``, so with time as the only
trigger an entry is kept for more than one and at most two generations. Memory is
bounded as well: when the current generation holds ``capacity`` entries it is rotated
early (and the grid restarts from that moment), so the table never holds more than
``2 * capacity`` entries. Under a flood that shortens lifetimes instead of growing
memory, which is the right trade for a router: a lost reverse route costs one reply, an
unbounded table costs the process.

Time is passed in as ``now`` (seconds on any monotonic clock); nothing here reads a
clock, so tests can drive time directly.

For the dumps, an entry also keeps when it was recorded, to the millisecond, and the TTL
and hops its message arrived with (4 bits each; the router records only messages within
the hard TTL limit of 15, so nothing is lost), packed into one integer in a second dict
beside the values (see :func:`pack_meta`), and how many replies were routed back through
it (a sparse dict, only for entries that had any, pruned at each rotation). Two dicts
rather than three because every insert into a generation of tens of thousands of
entries is a likely cache miss: the packing's one small allocation per entry costs less
than the third insert it saves.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Generic, Literal, TypeVar

from gnutella_router.net.route_entry import RouteEntry

__all__ = [
    "DEFAULT_CAPACITY",
    "PING_GENERATION_SECONDS",
    "PUSH_GENERATION_SECONDS",
    "QUERY_GENERATION_SECONDS",
    "RouteEntry",
    "RouteTable",
    "RouteTableStatistics",
    "SeenTable",
    "SeenTableStatistics",
    "pack_detail",
]

V = TypeVar("V")
_Generation = Literal["current", "previous"]

#: Generation lengths used by LimeWire: pings live 2-4 minutes, queries 5-10 minutes,
#: push routes 7-14 minutes (a download may start long after the hit arrived).
PING_GENERATION_SECONDS = 120.0
QUERY_GENERATION_SECONDS = 300.0
PUSH_GENERATION_SECONDS = 420.0
#: LimeWire's cap per generation; a table holds at most twice this.
DEFAULT_CAPACITY = 50_000


def pack_detail(ttl: int, hops: int) -> int:
    """TTL and hops as a route entry keeps them: 4 bits each, each capped at 15."""
    return (ttl if ttl < 15 else 15) << 4 | (hops if hops < 15 else 15)


def stamp(now: float) -> int:
    """``now`` in whole milliseconds (rounded down, also below zero: trio's clock may
    start anywhere), shifted into place above a packed detail."""
    return math.floor(now * 1000.0) << 8


def pack_meta(now: float, detail: int) -> int:
    """What an entry keeps beside its value: :func:`stamp` of ``now`` and a
    :func:`pack_detail` in the low 8 bits."""
    return stamp(now) | detail


def meta_time(meta: int) -> float:
    """The recording time (to the millisecond) of a :func:`pack_meta`."""
    return (meta >> 8) / 1000.0


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
    #: Entries dropped by rotations.
    expired: int
    #: Age of the oldest entry held, or None when the table is empty.
    oldest_age: float | None


class RouteTable(Generic[V]):
    """GUID -> value for a limited time, in two generations.

    The value is whatever the router wants back on a reply: normally the connection the
    request arrived on, or a marker for requests this node originated. ``lookup``
    returns None for an unknown GUID, so None should not be stored as a value unless
    only membership matters (that is what `SeenTable` does).

    ``now`` must not go backwards between calls.
    """

    __slots__ = (
        "_capacity",
        "_current",
        "_current_meta",
        "_deadline",
        "_duplicates",
        "_expired",
        "_forgotten",
        "_generation_seconds",
        "_hits",
        "_lookups",
        "_misses",
        "_name",
        "_previous",
        "_previous_meta",
        "_recorded",
        "_refreshed",
        "_rotations",
        "_rotations_for_capacity",
    )

    def __init__(self, name: str, generation_seconds: float, capacity: int, now: float = 0.0):
        if not generation_seconds > 0.0:
            raise ValueError(f"generation_seconds must be positive, not {generation_seconds!r}")
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity!r}")
        self._name = name
        self._generation_seconds = float(generation_seconds)
        self._capacity = capacity
        # Values and their packed time and detail live in parallel dicts with the same
        # keys in the same order. A (value, meta) tuple per entry would be an object the
        # cyclic garbage collector has to look at (until it untracks it); an int is not.
        self._current: dict[bytes, V] = {}
        self._current_meta: dict[bytes, int] = {}
        self._previous: dict[bytes, V] = {}
        self._previous_meta: dict[bytes, int] = {}
        self._hits: dict[bytes, int] = {}
        self._deadline = now + self._generation_seconds
        self._recorded = 0
        self._duplicates = 0
        self._refreshed = 0
        self._forgotten = 0
        self._lookups = 0
        self._misses = 0
        self._rotations = 0
        self._rotations_for_capacity = 0
        self._expired = 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def generation_seconds(self) -> float:
        return self._generation_seconds

    @property
    def capacity(self) -> int:
        return self._capacity

    # -- the per-message path: keep these to a comparison and a couple of dict operations

    def record(self, guid: bytes, value: V, now: float, ttl: int = 0, hops: int = 0) -> bool:
        """Remember where ``guid`` came from, unless it is already known.

        Returns False for a GUID held in either generation: the message is a duplicate
        and must not be forwarded again. The first value is kept, because replies
        should follow the path the request took first (the fastest one). ``ttl`` and
        ``hops`` are kept for the dumps only, each capped at 15.
        """
        if now >= self._deadline:
            self._rotate_for_time(now)
        if guid in self._previous:
            self._duplicates += 1
            return False
        current = self._current
        size = len(current)
        if size >= self._capacity:
            if guid in current:  # only checked here, at the rare rotation point
                self._duplicates += 1
                return False
            self._rotate_for_capacity(now)
            current = self._current
            size = 0
        # One probe of a large, cache-cold dict instead of a lookup then an insert.
        current.setdefault(guid, value)
        if len(current) == size:
            self._duplicates += 1
            return False
        self._current_meta[guid] = pack_meta(now, pack_detail(ttl, hops))
        self._recorded += 1
        return True

    def record_new(self, guids: list[bytes], value: V, now: float, details: list[int]) -> bool:
        """Record a batch of GUIDs that must all be new, or none of them.

        The router's batch path: one membership pass over the previous generation, then
        one probe-and-insert per GUID into the current one and one insert of its packed
        time and detail, with no call per message. True when every GUID was new (none
        held, none repeated within ``guids``) and all were recorded, exactly as
        ``record`` one by one would have; False when the table changed nothing and the
        caller must fall back to ``record`` per message (a duplicate, a rotation due, or
        a generation that would fill up mid-batch). ``details`` are the packed TTL/hops
        of each GUID (see :func:`pack_detail`).
        """
        current = self._current
        count = len(guids)
        if now >= self._deadline or len(current) + count > self._capacity:
            return False
        previous = self._previous
        if previous and not previous.keys().isdisjoint(guids):
            return False
        size = len(current)
        for index, guid in enumerate(guids):
            # One probe that inserts a new GUID and leaves a held one alone.
            current.setdefault(guid, value)
            size += 1
            if len(current) != size:  # held already, or twice in the batch: undo
                for inserted in guids[:index]:
                    del current[inserted]
                return False
        moment = stamp(now)
        meta = self._current_meta
        for guid, detail in zip(guids, details, strict=True):
            meta[guid] = moment | detail
        self._recorded += count
        return True

    def unrecord(self, guids: list[bytes]) -> None:
        """Take back entries just made by :meth:`record_new` (their messages were not
        routed after all: their link closed part-way through the batch)."""
        current = self._current
        for guid in guids:
            if guid in current:
                del current[guid]
                del self._current_meta[guid]
                self._recorded -= 1

    def note_hit(self, guid: bytes) -> None:
        """Count a reply routed back through ``guid``'s entry (for the dumps)."""
        hits = self._hits
        hits[guid] = hits.get(guid, 0) + 1

    def lookup(self, guid: bytes, now: float) -> V | None:
        """The value recorded for ``guid``, or None once it has expired or was never seen."""
        if now >= self._deadline:
            self._rotate_for_time(now)
        self._lookups += 1
        value = self._current.get(guid)
        if value is None:
            value = self._previous.get(guid)
            if value is None:
                self._misses += 1
        return value

    def first(self, guid: bytes) -> tuple[V, int] | None:
        """The value and TTL (capped at 15) ``guid`` was first recorded with, if held;
        for telling a peer's own repeats from the network's duplicates. Not counted as
        a lookup."""
        value = self._current.get(guid)
        if value is not None:
            return value, self._current_meta[guid] >> 4 & 0x0F
        value = self._previous.get(guid)
        if value is not None:
            return value, self._previous_meta[guid] >> 4 & 0x0F
        return None

    def raise_ttl(self, guid: bytes, ttl: int) -> None:
        """Remember a higher TTL for ``guid`` (a copy that came with more room to go),
        so that only a copy with still more is relayed again."""
        capped = ttl if ttl < 15 else 15
        for metas in (self._current_meta, self._previous_meta):
            meta = metas.get(guid)
            if meta is not None:
                metas[guid] = meta & ~0xF0 | capped << 4
                return

    # -- less frequent operations

    def refresh(self, guid: bytes, value: V, now: float) -> None:
        """Store ``value`` for ``guid`` as if just recorded, replacing any older entry.

        Push routes are learned from query hits, and a servent that keeps answering
        should stay reachable: refreshing moves its entry into the current generation
        so it survives the next rotation, and points it at the latest connection.
        """
        if now >= self._deadline:
            self._rotate_for_time(now)
        self._refreshed += 1
        current = self._current
        if guid in current:
            del current[guid]
            del self._current_meta[guid]
        else:
            if guid in self._previous:
                del self._previous[guid]
                del self._previous_meta[guid]
            if len(current) >= self._capacity:
                self._rotate_for_capacity(now)
                current = self._current
        # Re-inserting (rather than assigning in place) keeps each generation in
        # recording order, which `entries` and ``oldest_age`` rely on.
        current[guid] = value
        self._current_meta[guid] = stamp(now)

    def forget_value(self, value: V) -> int:
        """Drop every entry whose value equals ``value``; return how many.

        Called when a connection closes, so that replies for it are dropped at lookup
        rather than handed to a dead object. Linear in the table size, which is fine
        for an event that happens once per connection.
        """
        removed = 0
        for table, metas in (
            (self._current, self._current_meta),
            (self._previous, self._previous_meta),
        ):
            doomed = [guid for guid, stored in table.items() if stored == value]
            for guid in doomed:
                del table[guid]
                del metas[guid]
                self._hits.pop(guid, None)
            removed += len(doomed)
        self._forgotten += removed
        return removed

    def __len__(self) -> int:
        return len(self._current) + len(self._previous)

    def __contains__(self, guid: object) -> bool:
        # Without a ``now`` this cannot apply a due rotation: it answers for the table
        # as of the last call that carried the time.
        return guid in self._current or guid in self._previous

    def entries(
        self, now: float, limit: int | None = None, offset: int = 0
    ) -> Iterator[RouteEntry[V]]:
        """The entries, newest first, for dumps: ``limit`` of them after skipping
        ``offset`` (so that a large table can be read in pages).

        The entries are copied when this is called, so the caller may walk them at
        leisure (across awaits, say) while the router keeps changing the table.
        """
        if limit is not None and limit < 0:
            raise ValueError(f"limit must not be negative, not {limit!r}")
        if offset < 0:
            raise ValueError(f"offset must not be negative, not {offset!r}")
        if now >= self._deadline:
            self._rotate_for_time(now)
        snapshot: list[RouteEntry[V]] = []
        for table, metas, generation in self._generations():
            skip = min(offset, len(table))
            offset -= skip
            rest = None if limit is None else limit - len(snapshot)
            snapshot.extend(self._newest(table, metas, generation, now, skip, rest))
        return iter(snapshot)

    def _generations(
        self,
    ) -> tuple[tuple[dict[bytes, V], dict[bytes, int], _Generation], ...]:
        return (
            (self._current, self._current_meta, "current"),
            (self._previous, self._previous_meta, "previous"),
        )

    def _newest(
        self,
        table: dict[bytes, V],
        metas: dict[bytes, int],
        generation: _Generation,
        now: float,
        skip: int,
        limit: int | None,
    ) -> list[RouteEntry[V]]:
        stop = None if limit is None else skip + limit
        return [
            self._entry(guid, value, metas, generation, now)
            for guid, value in islice(reversed(table.items()), skip, stop)
        ]

    def _entry(
        self,
        guid: bytes,
        value: V,
        metas: dict[bytes, int],
        generation: _Generation,
        now: float,
    ) -> RouteEntry[V]:
        meta = metas[guid]
        recorded_at = meta_time(meta)
        return RouteEntry(
            guid,
            value,
            recorded_at,
            now - recorded_at,
            generation,
            ttl=meta >> 4 & 0x0F,
            hops=meta & 0x0F,
            hits=self._hits.get(guid, 0),
        )

    def entry(self, guid: bytes, now: float) -> RouteEntry[V] | None:
        """The entry for ``guid`` as :meth:`entries` shows it, or None, for dumps.

        Unlike :meth:`lookup` this is not counted as a lookup or a miss, so looking
        inside a table does not change its statistics.
        """
        if now >= self._deadline:
            self._rotate_for_time(now)
        for table, metas, generation in self._generations():
            if guid in table:
                return self._entry(guid, table[guid], metas, generation, now)
        return None

    def statistics(self, now: float) -> RouteTableStatistics:
        if now >= self._deadline:
            self._rotate_for_time(now)
        oldest = self._previous_meta or self._current_meta
        oldest_age = None
        if oldest:
            oldest_age = now - meta_time(next(iter(oldest.values())))
        return RouteTableStatistics(
            name=self._name,
            size=len(self),
            current_size=len(self._current),
            previous_size=len(self._previous),
            capacity=self._capacity,
            generation_seconds=self._generation_seconds,
            recorded=self._recorded,
            duplicates=self._duplicates,
            refreshed=self._refreshed,
            forgotten=self._forgotten,
            lookups=self._lookups,
            misses=self._misses,
            rotations=self._rotations,
            rotations_for_capacity=self._rotations_for_capacity,
            expired=self._expired,
            oldest_age=oldest_age,
        )

    # -- rotation

    def _rotate(self) -> None:
        self._expired += len(self._previous)
        if self._hits:
            dropped = self._previous
            self._hits = {g: n for g, n in self._hits.items() if g not in dropped}
        self._previous = self._current
        self._previous_meta = self._current_meta
        self._current = {}
        self._current_meta = {}
        self._rotations += 1

    def _rotate_for_time(self, now: float) -> None:
        # Catch up with every grid point passed since the last call. After two or more
        # of them both generations are stale: rotating twice drops everything, rather
        # than letting a table that sat idle keep entries for longer than promised.
        period = self._generation_seconds
        passed = int((now - self._deadline) // period) + 1
        self._rotate()
        if passed >= 2:
            self._rotate()
        deadline = self._deadline + passed * period
        if deadline <= now:  # rounding on very long idle periods
            deadline = now + period
        self._deadline = deadline

    def _rotate_for_capacity(self, now: float) -> None:
        self._rotate()
        self._rotations_for_capacity += 1
        self._deadline = now + self._generation_seconds


@dataclass(frozen=True, slots=True)
class SeenTableStatistics:
    """A snapshot of a `SeenTable`; the fields mean what they mean for a route table."""

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
        self._table: RouteTable[None] = RouteTable(name, generation_seconds, capacity, now)

    def add(self, guid: bytes, now: float) -> bool:
        """Note ``guid``; False means it was already seen and the message is a repeat."""
        return self._table.record(guid, None, now)

    def __len__(self) -> int:
        return len(self._table)

    def __contains__(self, guid: object) -> bool:
        return guid in self._table

    def entries(self, now: float, limit: int | None = None) -> Iterator[RouteEntry[None]]:
        return self._table.entries(now, limit)

    def statistics(self, now: float) -> SeenTableStatistics:
        s = self._table.statistics(now)
        return SeenTableStatistics(
            name=s.name,
            size=s.size,
            capacity=s.capacity,
            generation_seconds=s.generation_seconds,
            added=s.recorded,
            duplicates=s.duplicates,
            rotations=s.rotations,
            rotations_for_capacity=s.rotations_for_capacity,
            expired=s.expired,
            oldest_age=s.oldest_age,
        )
