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
unbounded table costs the process. But a full generation is first looked at by who
filled it: when one connection holds far more than its share (a peer spraying unique
GUIDs), its own oldest entries make the room instead, so one peer cannot rotate the
routes of everyone else's pending queries out (:meth:`RouteTable._make_room`). That
eviction is a pass over the generation, so it too is spread over the inserts that follow
(a few entries each, :meth:`RouteTable._sift`), during which lookups see the generation
as it was.

Time is passed in as ``now`` (seconds on any monotonic clock); nothing here reads a
clock, so tests can drive time directly.

Each entry is one integer in one dict: the value (an int: the router stores connection
ids) above 40 bits that hold, for the dumps, when the entry was recorded (milliseconds
since its generation began, 32 bits) and the TTL and hops its message arrived with (4
bits each; the router records only messages within the hard TTL limit of 15, so nothing
is lost); see :func:`pack_entry`. How many replies were routed back through an entry is
kept apart, in a sparse dict of only the entries that had any, pruned at each rotation.
One dict rather than a dict of values beside a dict of details because under a flood
the tables are the router's largest cost: every insert into a generation of tens of
thousands of entries is a likely cache miss, and so is every slot a growing dict moves
when it resizes, so a second dict doubled the misses per new GUID.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import islice
from typing import Final, cast

from gnutella_router.routing.route_entry import (
    OFFSET_LIMIT,
    VALUE_SHIFT,
    Generation,
    RouteEntry,
    RoutePage,
    RouteSnapshot,
    RouteTableStatistics,
    recorded_at,
    route_entry,
)
from gnutella_router.snapshots import from_attributes

__all__ = [
    "DEFAULT_CAPACITY",
    "OWN",
    "PING_GENERATION_SECONDS",
    "PUSH_GENERATION_SECONDS",
    "QUERY_GENERATION_SECONDS",
    "VALUE_SHIFT",
    "RouteEntry",
    "RouteSnapshot",
    "RouteTable",
    "RouteTableStatistics",
    "pack_detail",
    "pack_entry",
]

#: Generation lengths used by LimeWire: pings live 2-4 minutes, queries 5-10 minutes,
#: push routes 7-14 minutes (a download may start long after the hit arrived).
PING_GENERATION_SECONDS = 120.0
QUERY_GENERATION_SECONDS = 300.0
PUSH_GENERATION_SECONDS = 420.0
#: LimeWire's cap per generation; a table holds at most twice this.
DEFAULT_CAPACITY = 50_000

#: Where an entry's value begins: below it, 32 bits of milliseconds and 8 of detail.
OWN: Final = 0
"""The value of routes to the router itself (connection ids start at 1)."""
SIFTED_PER_INSERT: Final = 8
"""Entries of an eviction sifted per insert by default (see :meth:`RouteTable._sift`): at
eight, an eviction of a full generation is over within an eighth of a generation of
inserts, before another can begin."""


def pack_detail(ttl: int, hops: int) -> int:
    """TTL and hops as a route entry keeps them: 4 bits each, each capped at 15."""
    return (ttl if ttl < 15 else 15) << 4 | (hops if hops < 15 else 15)


def pack_entry(value: int, offset: float, detail: int) -> int:
    """One entry: ``value`` above the milliseconds of ``offset`` (seconds since its
    generation began) above a :func:`pack_detail`.

    ``offset`` is truncated to the millisecond and kept within 0 and 49 days (a
    generation lasts at most one day), so that not even a clock that went backwards
    can borrow from the value. Negative values work too: ``entry >> VALUE_SHIFT`` gives
    them back, and the low bits read the same.
    """
    milliseconds = int(offset * 1000.0)
    if milliseconds < 0:
        milliseconds = 0
    elif milliseconds > OFFSET_LIMIT:
        milliseconds = OFFSET_LIMIT
    return value << VALUE_SHIFT | milliseconds << 8 | detail


class RouteTable:
    """GUID -> value (an int) for a limited time, in two generations.

    The value is what the router wants back on a reply: the id of the connection the
    request arrived on, or a marker for requests this node originated. ``lookup``
    returns None for an unknown GUID.

    ``now`` must not go backwards between calls.
    """

    __slots__ = (
        "_capacity",
        "_counts",
        "_current",
        "_current_since",
        "_deadline",
        "_duplicates",
        "_evicted",
        "_expired",
        "_forgotten",
        "_generation_seconds",
        "_hits",
        "_hits_before",
        "_holder_alive",
        "_lookups",
        "_misses",
        "_name",
        "_previous",
        "_previous_since",
        "_recorded",
        "_refreshed",
        "_rotations",
        "_rotations_for_capacity",
        "_sift_drop",
        "_sift_heavy",
        "_sift_items",
        "_sift_left",
        "_sifted_per_insert",
        "_sifting",
    )

    def __init__(
        self,
        name: str,
        generation_seconds: float,
        capacity: int,
        now: float = 0.0,
        sifted_per_insert: int = SIFTED_PER_INSERT,
        holder_alive: Callable[[int], bool] | None = None,
    ):
        if not generation_seconds > 0.0:
            raise ValueError(f"generation_seconds must be positive, not {generation_seconds!r}")
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity!r}")
        if sifted_per_insert < 1:
            raise ValueError(f"sifted_per_insert must be at least 1, not {sifted_per_insert!r}")
        self._name = name
        self._sifted_per_insert = sifted_per_insert
        self._holder_alive = holder_alive
        """Whether the connection of a value is still open (None: every value is): the
        entries of a closed one stay until they expire, since a route to it simply no
        longer resolves, but they are nobody's share (:meth:`_make_room`)."""
        self._generation_seconds = float(generation_seconds)
        self._capacity = capacity
        # Each generation: GUID -> pack_entry(value, time since the generation began,
        # detail). An int per entry, not a (value, time, detail) tuple: the cyclic
        # garbage collector never looks at ints.
        self._current: dict[bytes, int] = {}
        self._previous: dict[bytes, int] = {}
        self._counts: dict[int, int] = {}
        """Entries of the current generation by value (connection), for its shares."""

        self._current_since = now
        self._previous_since = now
        self._hits: dict[bytes, int] = {}
        """Replies routed back through an entry, noted in this generation (see
        :meth:`note_hit`)."""
        self._hits_before: dict[bytes, int] = {}
        """Those noted in the generation before: an entry lives two generations, so its
        count is in one of the two, or both, and each is dropped whole in turn, with no
        pass over the generation dropped (the only cost: a GUID recorded again within a
        generation of its entry's end shows the replies of its old entry)."""
        self._sifting: dict[bytes, int] = {}
        """The current generation as it was when an eviction began (see
        :meth:`_make_room`): its entries are copied into the current one, oldest first,
        a few per insert, but for the evicted ones. Every lookup sees it until the
        eviction is over."""
        self._sift_items: Iterator[tuple[bytes, int]] = iter(())
        """Where the eviction under way has got to in ``_sifting``."""
        self._sift_left = 0
        """Entries of ``_sifting`` not yet copied or dropped."""
        self._sift_heavy = 0
        """The connection whose oldest entries the eviction under way drops."""
        self._sift_drop = 0
        """How many more of its entries, the next ones met, are to be dropped."""
        self._deadline = now + self._generation_seconds
        self._recorded = self._duplicates = self._refreshed = self._forgotten = 0
        self._lookups = self._misses = self._evicted = self._expired = 0
        self._rotations = self._rotations_for_capacity = 0

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

    def record(self, guid: bytes, value: int, now: float, ttl: int = 0, hops: int = 0) -> bool:
        """Remember where ``guid`` came from, unless it is already known.

        Returns False for a GUID held in either generation: the message is a duplicate
        and must not be forwarded again. The first value is kept, because replies
        should follow the path the request took first (the fastest one). ``ttl`` and
        ``hops`` are kept for the dumps only, each capped at 15.
        """
        if now >= self._deadline:
            self._rotate_for_time(now)
        sifting = self._sifting
        if guid in self._previous or (sifting and guid in sifting):
            self._duplicates += 1
            return False
        current = self._current
        size = len(current)
        if size + self._sift_left - self._sift_drop >= self._capacity:
            if guid in current:  # only checked here, at the rare rotation point
                self._duplicates += 1
                return False
            self._make_room(now)
            current = self._current
            size = len(current)
        # One probe of a large, cache-cold dict instead of a lookup then an insert.
        current.setdefault(
            guid, pack_entry(value, now - self._current_since, pack_detail(ttl, hops))
        )
        if len(current) == size:
            self._duplicates += 1
            return False
        self._recorded += 1
        counts = self._counts
        counts[value] = counts.get(value, 0) + 1
        if self._sift_left:
            self._sift(self._sifted_per_insert)
        return True

    def record_many(
        self, guids: list[bytes], value: int, now: float, details: list[int]
    ) -> list[int]:
        """Record a run's GUIDs at once; the positions of those that were not new.

        Exactly what :meth:`record` one by one would do, rotations included: a GUID
        held in either generation, or repeated within ``guids``, is a duplicate (its
        first entry stays) and its position is returned; every other GUID is recorded.
        The run router's way in: one membership pass over the previous generation
        (skipped per GUID when it holds none of them, as it mostly does), then one
        probe-and-insert per GUID into the current one, with no call per message.
        ``details`` are the packed TTL/hops of each GUID (see :func:`pack_detail`).
        """
        if now >= self._deadline:
            self._rotate_for_time(now)  # what the first of the calls would do first
        current = self._current
        sifting = self._sifting
        count = len(guids)
        repeats: list[int] = []
        if len(current) + self._sift_left - self._sift_drop + count > self._capacity:
            # A generation fills within the run (once per ``capacity`` GUIDs): one by one.
            for index in range(count):
                detail = details[index]
                if not self.record(guids[index], value, now, detail >> 4, detail & 0x0F):
                    repeats.append(index)
            return repeats
        previous = self._previous
        check_previous = bool(previous) and not previous.keys().isdisjoint(guids)
        check_sifting = bool(sifting) and not sifting.keys().isdisjoint(guids)
        base = pack_entry(value, now - self._current_since, 0)
        # The entries as objects, so that GUIDs with the same TTL and hops (under a flood,
        # nearly all of a run) share one: an int made per GUID would be an allocation
        # per GUID now and a free per GUID when its generation is dropped.
        entries = cast("dict[bytes, object]", current)
        detail = -1
        entry: object = None
        size = len(current)
        for index, guid in enumerate(guids):
            if (check_previous and guid in previous) or (check_sifting and guid in sifting):
                repeats.append(index)
                continue
            if details[index] != detail:
                detail = details[index]
                entry = base | detail
            # One probe that inserts a new GUID and leaves a held one alone.
            entries.setdefault(guid, entry)
            if len(current) == size:  # held already, or earlier in the run
                repeats.append(index)
            else:
                size += 1
        recorded = count - len(repeats)
        if recorded:
            self._recorded += recorded
            counts = self._counts
            counts[value] = counts.get(value, 0) + recorded
        self._duplicates += len(repeats)
        if self._sift_left:
            self._sift(self._sifted_per_insert * count)
        return repeats

    def unrecord(self, guids: list[bytes]) -> None:
        """Take back entries just made by :meth:`record_many` (their messages were not
        routed after all: their link closed part-way through the run)."""
        current = self._current
        counts = self._counts
        for guid in guids:
            entry = current.pop(guid, None)
            if entry is not None:
                self._recorded -= 1
                value = entry >> VALUE_SHIFT
                counts[value] -= 1

    def note_hit(self, guid: bytes) -> None:
        """Count a reply routed back through ``guid``'s entry (for the dumps)."""
        hits = self._hits
        hits[guid] = hits.get(guid, 0) + 1

    def lookup(self, guid: bytes, now: float) -> int | None:
        """The value recorded for ``guid``, or None once it has expired or was never seen."""
        if now >= self._deadline:
            self._rotate_for_time(now)
        self._lookups += 1
        entry = self._current.get(guid)
        if entry is None and self._sifting:
            entry = self._sifting.get(guid)
        if entry is None:
            entry = self._previous.get(guid)
            if entry is None:
                self._misses += 1
                return None
        return entry >> VALUE_SHIFT

    def first(self, guid: bytes) -> tuple[int, int] | None:
        """The value and TTL (capped at 15) ``guid`` was first recorded with, if held;
        for telling a peer's own repeats from the network's duplicates. Not counted as
        a lookup."""
        entry = self._current.get(guid)
        if entry is None and self._sifting:
            entry = self._sifting.get(guid)
        if entry is None:
            entry = self._previous.get(guid)
            if entry is None:
                return None
        return entry >> VALUE_SHIFT, entry >> 4 & 0x0F

    def raise_ttl(self, guid: bytes, ttl: int) -> None:
        """Remember a higher TTL for ``guid`` (a copy that came with more room to go),
        so that only a copy with still more is relayed again."""
        capped = ttl if ttl < 15 else 15
        for table in (self._current, self._sifting, self._previous):
            entry = table.get(guid)
            if entry is not None:
                table[guid] = entry & ~0xF0 | capped << 4
                return

    # -- less frequent operations

    def refresh(self, guid: bytes, value: int, now: float) -> None:
        """Store ``value`` for ``guid`` as if just recorded, replacing any older entry.

        Push routes are learned from query hits, and a servent that keeps answering
        should stay reachable: refreshing moves its entry into the current generation
        so it survives the next rotation, and points it at the latest connection.
        """
        if now >= self._deadline:
            self._rotate_for_time(now)
        self._finish_sift()
        self._refreshed += 1
        current = self._current
        counts = self._counts
        old = current.pop(guid, None)
        if old is not None:
            counts[old >> VALUE_SHIFT] -= 1
        else:
            self._previous.pop(guid, None)
            if len(current) >= self._capacity:
                self._make_room(now)
                current = self._current
        # Re-inserting (rather than assigning in place) keeps each generation in
        # recording order, which `entries` and ``oldest_age`` rely on.
        current[guid] = pack_entry(value, now - self._current_since, 0)
        hits_before = self._hits_before
        if hits_before and guid in hits_before:  # its count goes on with it
            hits = self._hits
            hits[guid] = hits.get(guid, 0) + hits_before.pop(guid)
        counts = self._counts
        counts[value] = counts.get(value, 0) + 1

    def forget_value(self, value: int) -> int:
        """Drop every entry whose value equals ``value``; return how many.

        Called when a connection closes, so that replies for it are dropped at lookup
        rather than handed to a dead object. Linear in the table size, which is fine
        for an event that happens once per connection.
        """
        self._finish_sift()
        removed = 0
        for table in (self._current, self._previous):
            doomed = [guid for guid, entry in table.items() if entry >> VALUE_SHIFT == value]
            for guid in doomed:
                del table[guid]
                self._hits.pop(guid, None)
                self._hits_before.pop(guid, None)
            removed += len(doomed)
        self._forgotten += removed
        self._counts.pop(value, None)
        return removed

    def __len__(self) -> int:
        return len(self._current) + self._sift_left - self._sift_drop + len(self._previous)

    def __contains__(self, guid: object) -> bool:
        # Without a ``now`` this cannot apply a due rotation: it answers for the table
        # as of the last call that carried the time.
        return guid in self._current or guid in self._sifting or guid in self._previous

    def entries(
        self, now: float, limit: int | None = None, offset: int = 0
    ) -> Iterator[RouteEntry]:
        """The entries, newest first, for dumps: ``limit`` of them after skipping
        ``offset`` (so that a large table can be read in pages).

        The entries are copied when this is called (see :meth:`snapshot`), so the caller
        may walk them at leisure (across awaits, say) while the router keeps changing
        the table.
        """
        return self.snapshot(now, limit, offset).entries()

    def snapshot(self, now: float, limit: int | None = None, offset: int = 0) -> RouteSnapshot:
        """A page of the entries as they are now (``limit`` newest after skipping
        ``offset``), to be read later without touching the table again.

        Cheap enough to take on the routing thread with the whole table as the page:
        each generation the page reaches into is copied whole, a shallow ``dict.copy``
        (about a millisecond per 100,000 entries), and nothing is decoded until the
        snapshot is read. A page that is a small part of a large generation copies only
        its own entries instead.
        """
        if limit is not None and limit < 0:
            raise ValueError(f"limit must not be negative, not {limit!r}")
        if offset < 0:
            raise ValueError(f"offset must not be negative, not {offset!r}")
        if now >= self._deadline:
            self._rotate_for_time(now)
        pages: list[RoutePage] = []
        taken = 0
        for table, since, generation in self._generations():
            held = len(table)
            skip = min(offset, held)
            offset -= skip
            stop = None if limit is None else skip + limit - taken
            count = held - skip if stop is None else min(held, stop) - skip
            if count <= 0:
                continue
            taken += count
            if stop is not None and stop * 4 < held:
                # A small page of a large generation: walking to it costs less than
                # copying what lies beyond it. Kept oldest first, like a generation.
                page = list(islice(reversed(table.items()), skip, stop))
                page.reverse()
                pages.append(RoutePage(dict(page), since, generation, 0, None))
            else:
                pages.append(RoutePage(table.copy(), since, generation, skip, stop))
        return RouteSnapshot(pages, self._hits_of(pages, taken), now, taken)

    def _hits_of(self, pages: list[RoutePage], size: int) -> dict[bytes, int]:
        """The reply counts a snapshot of ``size`` entries in ``pages`` needs: a copy of
        them all, or of its own when it is far smaller than they are."""
        hits = self._hits
        before = self._hits_before
        if len(hits) + len(before) <= 4 * size:
            counts = before.copy()
            for guid, count in hits.items():
                counts[guid] = counts.get(guid, 0) + count
            return counts
        return {
            guid: hits.get(guid, 0) + before.get(guid, 0)
            for page in pages
            for guid in islice(reversed(page.entries.keys()), page.skip, page.stop)
            if guid in hits or guid in before
        }

    def _generations(self) -> tuple[tuple[dict[bytes, int], float, Generation], ...]:
        return (
            (self._current_view(), self._current_since, "current"),
            (self._previous, self._previous_since, "previous"),
        )

    def entry(self, guid: bytes, now: float) -> RouteEntry | None:
        """The entry for ``guid`` as :meth:`entries` shows it, or None, for dumps.

        Unlike :meth:`lookup` this is not counted as a lookup or a miss, so looking
        inside a table does not change its statistics.
        """
        if now >= self._deadline:
            self._rotate_for_time(now)
        for table, since, generation in self._generations():
            held = table.get(guid)
            if held is not None:
                hits = self._hits.get(guid, 0) + self._hits_before.get(guid, 0)
                return route_entry(guid, held, since, generation, now, {guid: hits})
        return None

    def statistics(self, now: float) -> RouteTableStatistics:
        if now >= self._deadline:
            self._rotate_for_time(now)
        oldest_age = None
        for table, since in (
            (self._previous, self._previous_since),
            (self._sifting if self._sift_left else {}, self._current_since),
            (self._current, self._current_since),
        ):
            if table:
                oldest_age = now - recorded_at(next(iter(table.values())), since)
                break
        return from_attributes(
            RouteTableStatistics,
            self,
            size=len(self),
            current_size=len(self._current) + self._sift_left - self._sift_drop,
            previous_size=len(self._previous),
            oldest_age=oldest_age,
        )

    # -- rotation

    def _rotate(self, since: float) -> None:
        """Drop the previous generation; the current one becomes it, and a new one
        begins at ``since``."""
        self._finish_sift()
        self._expired += len(self._previous)
        # An entry's replies were noted in the generation it was recorded in or the next
        # one: those noted two generations ago are of entries dropped now.
        self._hits_before = self._hits
        self._hits = {}
        self._previous = self._current
        self._previous_since = self._current_since
        self._current = {}
        self._counts = {}
        self._current_since = since
        self._rotations += 1

    def _rotate_for_time(self, now: float) -> None:
        # Catch up with every grid point passed since the last call. After two or more
        # of them both generations are stale: rotating twice drops everything, rather
        # than letting a table that sat idle keep entries for longer than promised.
        period = self._generation_seconds
        passed = int((now - self._deadline) // period) + 1
        deadline = self._deadline + passed * period
        if deadline <= now:  # rounding on very long idle periods
            deadline = now + period
        since = min(now, deadline - period)
        self._rotate(since)
        if passed >= 2:
            self._rotate(since)
        self._deadline = deadline

    def _make_room(self, now: float) -> None:
        """Room in a full current generation: taken from the connection that holds far
        more of it than its share, or else made by a rotation.

        A full generation shared by several connections, one of which holds an eighth
        of the generation or more beyond an equal share (``capacity`` over the
        connections in it): that one is the cause, and its oldest entries go, down to
        half a share, with no rotation, so the others' routes live out their time.
        Otherwise (the generation is shared about evenly, or one connection is all
        there is) it rotates, as it always did. The router's own entries
        (value :data:`OWN`: its pings and queries) and those of closed connections are
        nobody's share: a peer alone beside them is all there is (were a closed peer's
        leftovers a share, every fill by the next peer would be an eviction that keeps
        them, and the generation would never rotate). Counting and evicting are passes over the
        generation at C speed, made at most once per eighth of a generation of inserts,
        so a spraying peer pays for its own evictions and nobody else's routes go.
        """
        self._finish_sift()
        current = self._current
        counts = self._counts
        if len(counts) >= 2:
            alive = self._holder_alive
            heaviest = 0
            most = 0
            holders = 0
            for value, count in counts.items():  # the largest; of equals, the highest value
                if count > 0 and value != OWN and (alive is None or alive(value)):
                    holders += 1
                    if count > most or (count == most and value > heaviest):
                        heaviest = value
                        most = count
            share = self._capacity // max(1, holders)
            if holders >= 2 and most - share >= max(1, self._capacity // 8):
                # The generation sifted without the holder's oldest, down to half a
                # share, a few entries per insert from now on (see :meth:`_sift`): at
                # once it would be a pass over tens of thousands of cache-cold entries,
                # milliseconds for every message queued behind this one.
                cut: int = most - share // 2
                self._sifting = current
                self._sift_items = iter(current.items())
                self._sift_left = len(current)
                self._current = {}
                self._sift_heavy = heaviest
                self._sift_drop = cut
                counts[heaviest] = most - cut
                self._evicted += cut
                return
        self._rotate_for_capacity(now)

    def _current_view(self) -> dict[bytes, int]:
        """The current generation as it will be once the eviction under way is over
        (the entries recorded since it began, then those it keeps), without moving it
        on: what dumps show, so that looking at a table never changes what it does. A
        pass over the generation, for dumps only."""
        left = self._sift_left
        if not left:
            return self._current
        view = self._current.copy()
        sifting = self._sifting
        heavy = self._sift_heavy
        drop = self._sift_drop
        for guid, entry in islice(sifting.items(), len(sifting) - left, None):
            if drop and entry >> VALUE_SHIFT == heavy:
                drop -= 1
                continue
            view.setdefault(guid, entry)
        return view

    def _sift(self, count: int) -> None:
        """Copy up to ``count`` more entries of the eviction under way into the current
        generation, oldest first, dropping the evicted connection's until its oldest
        ``cut`` are gone. Spread over the inserts that follow the eviction, the pass
        over a full generation (an object per GUID, mostly cache-cold by now) costs
        each message a few entries' worth instead of milliseconds for the one that
        filled the generation and every message queued behind it. Meanwhile lookups
        see the generation being sifted whole, so no route is missing for a moment; an
        evicted one is only kept a little longer. Entries recorded during the eviction
        come before the older ones still to be copied, so the current generation is in
        recording order only to within the few thousand inserts an eviction lasts."""
        items = self._sift_items
        current = self._current
        heavy = self._sift_heavy
        left = self._sift_left
        steps = count if count < left else left
        for _ in range(steps):
            guid, entry = next(items)
            if self._sift_drop and entry >> VALUE_SHIFT == heavy:
                self._sift_drop -= 1
                continue
            current.setdefault(guid, entry)
        self._sift_left = left - steps
        if self._sift_left == 0:
            self._sifting = {}
            self._sift_items = iter(())
            self._sift_drop = 0
            previous = self._previous
            if self._hits:
                self._hits = {g: n for g, n in self._hits.items() if g in current or g in previous}
            if self._hits_before:
                self._hits_before = {
                    g: n for g, n in self._hits_before.items() if g in current or g in previous
                }

    def _finish_sift(self) -> None:
        """Complete the eviction under way at once: before a rotation or another
        eviction, and before what rewrites the generation as a whole."""
        if self._sift_left:
            self._sift(self._sift_left)

    def _rotate_for_capacity(self, now: float) -> None:
        self._rotate(now)
        self._rotations_for_capacity += 1
        self._deadline = now + self._generation_seconds
