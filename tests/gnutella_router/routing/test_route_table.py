"""Two-generation GUID tables: lifetimes, bounds, and the bookkeeping dumps rely on."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gnutella_router.routing.route_table import (
    OWN,
    VALUE_SHIFT,
    RouteEntry,
    RouteTable,
    RouteTableStatistics,
    pack_detail,
    pack_entry,
)
from gnutella_router.routing.seen_table import SeenTable


def guid(n: int) -> bytes:
    return n.to_bytes(16, "big")


A, B, C, D = guid(1), guid(2), guid(3), guid(4)


def test_record_then_lookup_returns_the_value() -> None:
    table: RouteTable = RouteTable("query", 300.0, 100)
    assert table.record(A, 11, 1.0) is True
    assert table.lookup(A, 2.0) == 11
    assert A in table
    assert B not in table
    assert len(table) == 1


def test_duplicate_record_keeps_the_first_value_and_is_counted() -> None:
    table: RouteTable = RouteTable("query", 300.0, 100)
    assert table.record(A, 1, 1.0)
    assert table.record(A, 2, 2.0) is False
    assert table.lookup(A, 3.0) == 1
    stats = table.statistics(3.0)
    assert (stats.recorded, stats.duplicates, stats.size) == (1, 1, 1)


def test_duplicate_is_detected_in_the_previous_generation_too() -> None:
    table: RouteTable = RouteTable("query", 10.0, 100)
    table.record(A, 1, 1.0)
    assert table.record(B, 3, 12.0)  # rotates: A is now in the previous generation
    assert table.statistics(12.0).previous_size == 1
    assert table.record(A, 2, 12.0) is False
    assert table.lookup(A, 12.0) == 1


def test_lookup_of_an_unknown_guid_is_a_counted_miss() -> None:
    table: RouteTable = RouteTable("ping", 120.0, 100)
    table.record(A, 7, 0.0)
    assert table.lookup(B, 1.0) is None
    assert table.lookup(A, 1.0) == 7
    stats = table.statistics(1.0)
    assert (stats.lookups, stats.misses) == (2, 1)


def test_an_entry_survives_one_rotation_but_not_two() -> None:
    table: RouteTable = RouteTable("ping", 10.0, 100)
    table.record(A, 7, 0.0)
    assert table.lookup(A, 9.999) == 7
    assert table.lookup(A, 10.0) == 7  # first rotation: moved to previous
    assert table.statistics(10.0).previous_size == 1
    assert table.lookup(A, 19.999) == 7
    assert table.lookup(A, 20.0) is None  # second rotation: gone
    stats = table.statistics(20.0)
    assert (stats.rotations, stats.expired, stats.size) == (2, 1, 0)


def test_lifetime_is_between_one_and_two_generations() -> None:
    table: RouteTable = RouteTable("ping", 10.0, 100)
    table.record(A, 8, 9.5)  # recorded just before the first boundary
    table.record(B, 9, 10.0)  # recorded right at it: starts the next generation
    # A lives just over one generation, B the full two.
    assert table.lookup(A, 19.9) == 8
    assert table.lookup(A, 20.0) is None
    assert table.lookup(B, 29.9) == 9
    assert table.lookup(B, 30.0) is None


def test_rotations_stay_on_the_grid_when_calls_come_late() -> None:
    table: RouteTable = RouteTable("ping", 10.0, 100)
    table.record(A, 1, 0.0)
    table.record(B, 2, 13.0)  # first call after the boundary at 10
    # The next boundary is 20, not 23: A goes at 20 although it was rotated at 13.
    assert table.lookup(A, 19.9) == 1
    assert table.lookup(A, 20.0) is None
    assert table.lookup(B, 29.9) == 2
    assert table.lookup(B, 30.0) is None


def test_an_idle_table_drops_everything_after_two_generations() -> None:
    table: RouteTable = RouteTable("ping", 10.0, 100)
    table.record(A, 1, 0.0)
    table.record(B, 2, 5.0)
    # No call between 5 and 25: two boundaries passed at once.
    assert table.lookup(A, 25.0) is None
    assert table.lookup(B, 25.0) is None
    assert len(table) == 0
    stats = table.statistics(25.0)
    assert (stats.expired, stats.rotations) == (2, 2)
    table.record(C, 3, 25.0)  # the grid carries on: boundaries at 30, 40
    assert table.lookup(C, 39.9) == 3
    assert table.lookup(C, 40.0) is None


def test_a_full_generation_rotates_early() -> None:
    table: RouteTable = RouteTable("query", 100.0, 3)
    for n in range(3):
        assert table.record(guid(n), n, 1.0)
    stats = table.statistics(1.0)
    assert (stats.current_size, stats.previous_size, stats.rotations) == (3, 0, 0)
    assert table.record(guid(3), 3, 2.0)
    stats = table.statistics(2.0)
    assert (stats.current_size, stats.previous_size) == (1, 3)
    assert (stats.rotations, stats.rotations_for_capacity, stats.expired) == (1, 1, 0)
    assert all(table.lookup(guid(n), 2.0) == n for n in range(4))
    for n in range(4, 7):
        table.record(guid(n), n, 3.0)
    stats = table.statistics(3.0)
    assert (stats.rotations_for_capacity, stats.expired, stats.size) == (2, 3, 4)
    assert [table.lookup(guid(n), 3.0) for n in range(3)] == [None, None, None]


def test_a_capacity_rotation_restarts_the_generation_clock() -> None:
    table: RouteTable = RouteTable("query", 10.0, 2)
    table.record(A, 1, 0.0)
    table.record(B, 2, 8.0)
    table.record(C, 3, 8.0)  # full: rotates at 8, the next time boundary is 18
    assert table.lookup(A, 17.9) == 1
    assert table.lookup(A, 18.0) is None
    assert table.lookup(C, 27.9) == 3
    assert table.lookup(C, 28.0) is None


def test_forget_value_drops_every_route_to_a_closed_connection() -> None:
    table: RouteTable = RouteTable("query", 10.0, 100)
    table.record(A, -1, 0.0)
    table.record(B, 6, 0.0)
    table.record(C, -1, 11.0)  # A and B are now in the previous generation
    table.record(D, 6, 11.0)
    assert table.forget_value(-1) == 2
    assert table.lookup(A, 12.0) is None
    assert table.lookup(C, 12.0) is None
    assert table.lookup(B, 12.0) == 6
    assert table.lookup(D, 12.0) == 6
    assert table.forget_value(-1) == 0
    stats = table.statistics(12.0)
    assert (stats.forgotten, stats.size) == (2, 2)


def test_refresh_keeps_an_entry_alive_across_rotations() -> None:
    table: RouteTable = RouteTable("push", 10.0, 100)
    table.record(A, 20, 0.0)
    table.refresh(A, 21, 15.0)  # A was in previous; now current again, new value
    stats = table.statistics(15.0)
    assert (stats.current_size, stats.previous_size) == (1, 0)
    assert table.lookup(A, 29.9) == 21
    assert table.lookup(A, 30.0) is None
    assert table.statistics(30.0).refreshed == 1


def test_refresh_inserts_an_unknown_guid_and_updates_a_current_one() -> None:
    table: RouteTable = RouteTable("push", 10.0, 100)
    table.refresh(A, 7, 1.0)
    assert table.lookup(A, 1.0) == 7
    table.record(B, 8, 2.0)
    table.refresh(A, 9, 3.0)
    assert table.lookup(A, 3.0) == 9
    assert len(table) == 2
    assert [e.guid for e in table.entries(3.0)] == [A, B]  # A moved to the newest end


def test_refresh_respects_capacity() -> None:
    table: RouteTable = RouteTable("push", 100.0, 2)
    for n in range(10):
        table.refresh(guid(n), n, float(n))
        assert len(table) <= 4
    assert table.statistics(10.0).rotations_for_capacity == 4


def test_entries_are_newest_first_with_ages_and_generations() -> None:
    table: RouteTable = RouteTable("query", 10.0, 100)
    table.record(A, 1, 1.0)
    table.record(B, 2, 2.0)
    table.record(C, 3, 12.0)
    table.record(D, 4, 13.0)
    got = list(table.entries(14.0))
    assert got == [
        RouteEntry(D, 4, 13.0, 1.0, "current"),
        RouteEntry(C, 3, 12.0, 2.0, "current"),
        RouteEntry(B, 2, 2.0, 12.0, "previous"),
        RouteEntry(A, 1, 1.0, 13.0, "previous"),
    ]
    assert [e.guid for e in table.entries(14.0, limit=3)] == [D, C, B]
    assert [e.guid for e in table.entries(14.0, limit=1)] == [D]
    assert list(table.entries(14.0, limit=0)) == []
    # A due rotation is applied first: a dump never shows expired routes.
    assert [e.guid for e in table.entries(20.0)] == [D, C]


def test_entries_are_a_snapshot() -> None:
    table: RouteTable = RouteTable("query", 10.0, 100)
    for n in range(5):
        table.record(guid(n), n, 0.0)
    walked = []
    for entry in table.entries(1.0):
        table.record(guid(100 + entry.value), 0, 1.0)  # would break a live dict iterator
        walked.append(entry.value)
    assert walked == [4, 3, 2, 1, 0]


def test_a_snapshot_shows_every_page_as_the_table_held_it() -> None:
    """Pages small and large, across both generations: a small page of a large
    generation is copied by itself, a large one with its generation; both read alike."""
    table: RouteTable = RouteTable("query", 10.0, 60)
    for n in range(50):
        table.record(guid(n), n, 1.0 + n / 100, ttl=n % 16, hops=n % 3)
    for n in range(50, 90):
        table.record(guid(n), n, 12.0 + n / 100)  # the first 50 are now the previous
    for n in range(0, 90, 7):
        table.note_hit(guid(n))
    whole = list(table.entries(13.0))
    assert [e.value for e in whole] == list(range(89, -1, -1))
    assert {e.generation for e in whole[:40]} == {"current"}
    assert [e.hits for e in whole if e.hits] == [1] * len(range(0, 90, 7))
    for offset in (*range(12), 38, 39, 40, 41, 49, 50, 88, 89, 90, 95):
        for limit in (None, 0, 1, 2, 3, 9, 10, 11, 39, 40, 41, 50, 89, 90, 100):
            page = table.snapshot(13.0, limit, offset)
            expected = whole[offset:] if limit is None else whole[offset : offset + limit]
            assert list(page.entries()) == expected, (offset, limit)
            assert len(page) == len(expected)


def test_reply_counts_live_as_long_as_their_entries() -> None:
    """Counts noted in an entry's first and second generation both show; they go with
    their entry at the rotation that drops it, and a refreshed entry keeps its count."""
    table: RouteTable = RouteTable("push", 10.0, 100)
    table.record(guid(1), 1, 0.0)
    table.record(guid(2), 2, 0.0)
    table.note_hit(guid(1))
    table.note_hit(guid(2))
    table.record(guid(3), 3, 11.0)  # a rotation: 1 and 2 are the previous generation
    table.note_hit(guid(1))
    table.note_hit(guid(3))
    hits = {e.value: e.hits for e in table.entries(11.0)}
    assert hits == {1: 2, 2: 1, 3: 1}
    assert table.entry(guid(1), 11.0) is not None
    assert table.entry(guid(1), 11.0).hits == 2  # type: ignore[union-attr]
    table.refresh(guid(2), 2, 12.0)  # into the current generation, its count with it
    table.record(guid(4), 4, 21.0)  # a rotation: 1 is dropped, 2 and 3 are previous
    assert {e.value: e.hits for e in table.entries(21.0)} == {2: 1, 3: 1, 4: 0}
    table.record(guid(5), 5, 31.0)  # and another: 2 and 3 go, nothing is left of them
    table.record(guid(1), 1, 31.0)  # the GUID seen afresh starts from nothing
    assert {e.value: e.hits for e in table.entries(31.0)} == {1: 0, 4: 0, 5: 0}


def test_a_snapshot_is_read_after_the_table_changed() -> None:
    table: RouteTable = RouteTable("query", 10.0, 100)
    for n in range(5):
        table.record(guid(n), n, 0.0)
    table.note_hit(guid(1))
    large, small = table.snapshot(1.0), table.snapshot(1.0, limit=1)
    table.forget_value(1)
    table.note_hit(guid(2))
    for n in range(5, 300):
        table.record(guid(n), n, 1.0)  # rotations for capacity: the old entries are gone
    assert [(e.value, e.hits) for e in large.entries()] == [(4, 0), (3, 0), (2, 0), (1, 1), (0, 0)]
    assert [e.value for e in small.entries()] == [4]
    assert [e.value for e in large.entries()] == [4, 3, 2, 1, 0]  # and read again alike


def test_entries_rejects_a_negative_limit() -> None:
    table: RouteTable = RouteTable("query", 10.0, 100)
    with pytest.raises(ValueError, match="limit"):
        table.entries(0.0, limit=-1)


def test_statistics_tell_the_whole_story() -> None:
    table: RouteTable = RouteTable("query", 10.0, 2, now=100.0)
    assert table.statistics(100.0).oldest_age is None
    table.record(A, 1, 101.0)
    table.record(A, 5, 102.0)  # duplicate
    table.record(B, 2, 103.0)
    table.record(C, 3, 104.0)  # capacity rotation; the grid restarts at 114
    table.lookup(A, 105.0)
    table.lookup(D, 105.0)  # miss
    table.refresh(D, 4, 106.0)
    table.forget_value(2)
    assert table.statistics(107.0) == RouteTableStatistics(
        name="query",
        size=3,
        current_size=2,
        previous_size=1,
        capacity=2,
        generation_seconds=10.0,
        recorded=3,
        duplicates=1,
        refreshed=1,
        forgotten=1,
        lookups=2,
        misses=1,
        rotations=1,
        rotations_for_capacity=1,
        evicted=0,
        expired=0,
        oldest_age=6.0,  # A, recorded at 101
    )
    stats = table.statistics(114.0)  # time rotation: A goes
    assert (stats.rotations, stats.expired, stats.size, stats.oldest_age) == (2, 1, 2, 10.0)


@pytest.mark.parametrize(("seconds", "capacity"), [(0.0, 10), (-1.0, 10), (10.0, 0)])
def test_rejects_nonsense_parameters(seconds: float, capacity: int) -> None:
    with pytest.raises(ValueError, match="must"):
        RouteTable("bad", seconds, capacity)


def test_seen_table_reports_repeats() -> None:
    seen = SeenTable("push-seen", 10.0, 100)
    assert seen.add(A, 0.0) is True
    assert seen.add(A, 5.0) is False
    assert A in seen
    assert seen.add(A, 19.0) is False  # still in the previous generation
    assert seen.add(A, 20.0) is True  # expired, so a new message as far as we know
    stats = seen.statistics(20.0)
    assert (stats.added, stats.duplicates, stats.expired, stats.size) == (2, 2, 1, 1)
    assert [e.guid for e in seen.entries(20.0)] == [A]
    assert len(seen) == 1


# -- differential test against a deliberately naive model


@dataclass
class NaiveTable:
    """Every entry tagged with its generation number; one loop turn per boundary."""

    generation_seconds: float
    capacity: int
    boundary: float
    sifted_per_insert: int
    generation: int = 0
    entries: dict[bytes, tuple[int, float, int]] = field(default_factory=dict)
    sifting: list[tuple[bytes, bool]] = field(default_factory=list)
    """An eviction under way: the generation's entries as they were, oldest first, each
    with whether it is evicted; each insert settles ``sifted_per_insert`` of them (a
    kept one moves behind the newer ones)."""
    evicted: set[bytes] = field(default_factory=set)
    """The evicted entries of the eviction under way: gone from the sizes and the dumps
    at once, but lookups and duplicates see them until the eviction is over."""

    def _advance(self, now: float) -> None:
        while now >= self.boundary:
            self.generation += 1
            self.boundary += self.generation_seconds
            self._drop()

    def _drop(self) -> None:
        self._sift(len(self.sifting))
        self.entries = {g: e for g, e in self.entries.items() if e[2] >= self.generation - 1}

    def _sift(self, count: int) -> None:
        for key, evicted in self.sifting[:count]:
            if not evicted:
                self.entries[key] = self.entries.pop(key)
        del self.sifting[:count]
        if not self.sifting:
            for key in self.evicted:
                del self.entries[key]
            self.evicted.clear()

    def _live(self) -> int:
        """Entries of the current generation, the evicted ones left out."""
        held = sum(1 for e in self.entries.values() if e[2] == self.generation)
        return held - len(self.evicted)

    def size(self) -> int:
        return len(self.entries) - len(self.evicted)

    def _make_room(self, now: float) -> None:
        self._sift(len(self.sifting))
        current = [(g, e) for g, e in self.entries.items() if e[2] == self.generation]
        if len(current) < self.capacity:
            return
        counts: dict[int, int] = {}
        for _, entry in current:
            if entry[0] != OWN:  # the router's own routes are nobody's share
                counts[entry[0]] = counts.get(entry[0], 0) + 1
        if len(counts) >= 2:
            most, heaviest = max((n, v) for v, n in counts.items())
            share = self.capacity // len(counts)
            if most - share >= max(1, self.capacity // 8):
                # The one far over its share loses its oldest, down to half a share.
                self.evicted = set([g for g, e in current if e[0] == heaviest][: most - share // 2])
                self.sifting = [(g, g in self.evicted) for g, _ in current]
                return
        self.generation += 1
        self.boundary = now + self.generation_seconds
        self._drop()

    def record(self, key: bytes, value: int, now: float) -> bool:
        self._advance(now)
        if key in self.entries:
            return False
        if self._live() >= self.capacity:
            self._make_room(now)
        self.entries[key] = (value, now, self.generation)
        self._sift(self.sifted_per_insert)
        return True

    def record_many(self, keys: list[bytes], value: int, now: float) -> list[int]:
        """As the run router records a run: one by one if the generation fills within
        it; otherwise all of it, then the eviction under way moved on for each."""
        self._advance(now)
        if self._live() + len(keys) > self.capacity:
            return [i for i, key in enumerate(keys) if not self.record(key, value, now)]
        held = []
        for index, key in enumerate(keys):
            if key in self.entries:
                held.append(index)
            else:
                self.entries[key] = (value, now, self.generation)
        self._sift(self.sifted_per_insert * len(keys))
        return held

    def lookup(self, key: bytes, now: float) -> int | None:
        self._advance(now)
        entry = self.entries.get(key)
        return None if entry is None else entry[0]

    def refresh(self, key: bytes, value: int, now: float) -> None:
        self._advance(now)
        self._sift(len(self.sifting))
        old = self.entries.pop(key, None)
        if old is None or old[2] != self.generation:
            self._make_room(now)
        self.entries[key] = (value, now, self.generation)

    def forget_value(self, value: int) -> int:
        self._sift(len(self.sifting))
        before = len(self.entries)
        self.entries = {g: e for g, e in self.entries.items() if e[0] != value}
        return before - len(self.entries)

    def dump(self, now: float) -> list[tuple[bytes, int, float, str]]:
        """Newest first; the current generation as it will be once the eviction under
        way is over: what was recorded since it began, then what it keeps."""
        self._advance(now)
        waiting = {g for g, _ in self.sifting} | self.evicted
        kept = [g for g, evicted in self.sifting if not evicted]
        current = [g for g, e in self.entries.items() if e[2] == self.generation]
        order = {
            "current": [g for g in current if g not in waiting] + kept,
            "previous": [g for g, e in self.entries.items() if e[2] == self.generation - 1],
        }
        return [
            (g, self.entries[g][0], self.entries[g][1], label)
            for label, keys in order.items()
            for g in reversed(keys)
        ]


operations = st.lists(
    st.one_of(
        st.tuples(st.just("record"), st.integers(0, 63), st.sampled_from([0, 0, 0, 1, 2, 3])),
        st.tuples(st.just("lookup"), st.integers(0, 63), st.just(0)),
        st.tuples(st.just("refresh"), st.integers(0, 63), st.integers(0, 3)),
        st.tuples(st.just("forget"), st.just(0), st.integers(0, 3)),
        st.tuples(st.just("wait"), st.integers(0, 25), st.just(0)),
        st.tuples(st.just("batch"), st.lists(st.integers(0, 63), max_size=12), st.integers(0, 3)),
    ),
    max_size=120,
)


@settings(max_examples=300)
@given(
    generation_seconds=st.integers(1, 10),
    capacity=st.integers(1, 40),
    sifted_per_insert=st.integers(1, 9),
    ops=operations,
)
def test_matches_a_naive_model_and_stays_bounded(
    generation_seconds: int,
    capacity: int,
    sifted_per_insert: int,
    ops: list[tuple[str, int | list[int], int]],
) -> None:
    # Whole-number times keep float arithmetic exact, so both sides see the same grid.
    table: RouteTable = RouteTable(
        "model", float(generation_seconds), capacity, sifted_per_insert=sifted_per_insert
    )
    model = NaiveTable(
        float(generation_seconds),
        capacity,
        boundary=float(generation_seconds),
        sifted_per_insert=sifted_per_insert,
    )
    now = 0.0
    duplicates = misses = 0
    for op, arg, value in [*ops, ("wait", 0, 0)]:
        key = guid(arg) if isinstance(arg, int) else b""
        if isinstance(arg, list):  # a run, as the run router records one
            keys = [guid(n) for n in arg]
            expected_held = model.record_many(keys, value, now)
            held = table.record_many(keys, value, now, [pack_detail(n % 8, 1) for n in arg])
            assert held == expected_held
            duplicates += len(held)
        elif op == "record":
            expected = model.record(key, value, now)
            assert table.record(key, value, now) == expected
            duplicates += not expected
        elif op == "lookup":
            expected_value = model.lookup(key, now)
            assert table.lookup(key, now) == expected_value
            misses += expected_value is None
        elif op == "refresh":
            model.refresh(key, value, now)
            table.refresh(key, value, now)
        elif op == "forget":
            assert table.forget_value(value) == model.forget_value(value)
        else:
            assert isinstance(arg, int)
            now += arg
        assert len(table) <= 2 * capacity
        # Thanks to the fixed grid, looking at the table never changes what it will do.
        dump = [(e.guid, e.value, e.recorded_at, e.generation) for e in table.entries(now)]
        assert dump == model.dump(now)
        assert all(e.age < 2 * generation_seconds for e in table.entries(now))
    stats = table.statistics(now)
    assert (stats.duplicates, stats.misses, stats.size) == (duplicates, misses, model.size())
    assert stats.current_size <= capacity
    assert stats.previous_size <= capacity


@settings(max_examples=100)
@given(
    gaps=st.lists(st.floats(0.0, 30.0, allow_nan=False), min_size=1, max_size=40),
    probe=st.floats(0.0, 40.0, allow_nan=False),
)
def test_time_alone_keeps_entries_more_than_one_and_at_most_two_generations(
    gaps: list[float], probe: float
) -> None:
    table: RouteTable = RouteTable("lifetime", 10.0, 10_000)
    now = 0.0
    recorded: list[tuple[bytes, float]] = []
    for n, gap in enumerate(gaps):
        now += gap
        table.record(guid(n), n, now)
        recorded.append((guid(n), now))
    now += probe
    for n, (key, at) in enumerate(recorded):
        found = table.lookup(key, now)
        if now - at <= 10.0:
            assert found == n
        if now - at >= 20.0:
            assert found is None


def test_first_gives_the_first_value_and_ttl_without_counting_a_lookup() -> None:
    table: RouteTable = RouteTable("query", 10.0, 100)
    table.record(b"g" * 16, 3, 0.0, ttl=20, hops=1)
    table.record(b"g" * 16, 4, 1.0, ttl=5)
    assert table.first(b"g" * 16) == (3, 15)  # TTL capped at 15
    table.record(b"h" * 16, 5, 11.0, ttl=4)  # rotates: g is now in the previous generation
    assert table.first(b"g" * 16) == (3, 15)
    assert table.first(b"x" * 16) is None
    assert table.statistics(11.0).lookups == 0


@pytest.mark.parametrize("start", [-5000.25, 0.0, 123_456.789])
def test_an_entry_keeps_its_time_to_the_millisecond_and_its_ttl_and_hops(start: float) -> None:
    """Time, TTL and hops share one packed integer per entry; each reads back on its
    own, whatever the clock's origin (trio's may be anywhere), and raising the TTL keeps
    the rest."""
    table: RouteTable = RouteTable("query", 10.0, 100, now=start)
    table.record(A, 1, start + 1.2345, ttl=7, hops=3)
    assert table.record_many([B, C], 2, start + 2.5, [pack_detail(4, 2), pack_detail(20, 1)]) == []
    table.raise_ttl(A, 9)
    entries = {e.guid: e for e in table.entries(start + 3.0)}
    assert entries[A].recorded_at == pytest.approx(start + 1.234, abs=1e-6)
    assert (entries[A].ttl, entries[A].hops) == (9, 3)
    assert entries[B].recorded_at == pytest.approx(start + 2.5, abs=1e-6)
    assert (entries[C].ttl, entries[C].hops) == (15, 1)
    assert table.first(C) == (2, 15)
    assert table.statistics(start + 3.0).oldest_age == pytest.approx(3.0 - 1.234, abs=1e-6)


def test_record_many_records_the_new_and_names_the_held() -> None:
    table: RouteTable = RouteTable("ping", 10.0, 100)
    table.record(B, 1, 0.0)
    assert table.record_many([A, B, C, A], 2, 1.0, [0, 0, 0, 0]) == [1, 3]
    assert sorted(e.guid for e in table.entries(1.0)) == sorted([A, B, C])
    assert table.lookup(B, 1.0) == 1  # the first route stays
    assert table.statistics(1.0).duplicates == 2


@pytest.mark.parametrize("value", [0, 1, -1, 2**22 + 5, -(2**40), 2**70])
def test_any_int_value_reads_back_beside_its_time_ttl_and_hops(value: int) -> None:
    """An entry packs its value above its time and detail: large values, negative
    markers and the time, TTL and hops below them must not bleed into each other."""
    table = RouteTable("query", 10.0, 100, now=50.0)
    table.record(A, value, 59.999, ttl=15, hops=15)
    assert table.record_many([B], value, 59.5, [pack_detail(3, 4)]) == []
    table.refresh(C, value, 59.0)
    assert table.lookup(A, 59.999) == value
    assert table.first(A) == (value, 15)
    table.raise_ttl(A, 2)
    entries = {e.guid: e for e in table.entries(59.999)}
    assert (entries[A].value, entries[A].ttl, entries[A].hops) == (value, 2, 15)
    assert entries[A].recorded_at == pytest.approx(59.999, abs=1e-6)
    assert (entries[B].value, entries[B].ttl, entries[B].hops) == (value, 3, 4)
    assert entries[C].value == value
    assert entries[C].recorded_at == pytest.approx(59.0)
    assert table.forget_value(value) == 3
    assert len(table) == 0


def test_an_entry_time_out_of_range_is_clamped_not_carried_into_the_value() -> None:
    """A clock that went backwards (the table asks callers not to) records 0, and more
    than 49 days since the generation began records 49 days: never a borrow or carry
    into the value above."""
    for offset, milliseconds in ((-0.5, 0), (0.0, 0), (1.0019, 1001), (10.0**9, 2**32 - 1)):
        entry = pack_entry(-7, offset, pack_detail(3, 4))
        assert (entry >> VALUE_SHIFT, entry >> 8 & (2**32 - 1)) == (-7, milliseconds)
        assert entry & 0xFF == pack_detail(3, 4)


def test_a_spray_from_one_connection_evicts_its_own_routes_not_the_others() -> None:
    """One connection filling the generation with unique GUIDs takes the room from its
    own oldest entries: another connection's pending routes stay, with no rotation."""
    table: RouteTable = RouteTable("query", 300.0, 1000)
    honest = [b"h%015d" % n for n in range(20)]
    for key in honest:
        assert table.record(key, 2, 0.0)
    sprayed = [b"s%015d" % n for n in range(100_000)]
    for start in range(0, len(sprayed), 250):
        table.record_many(sprayed[start : start + 250], 9, 1.0, [0] * 250)
    assert [table.lookup(key, 2.0) for key in honest] == [2] * 20
    stats = table.statistics(2.0)
    assert stats.rotations_for_capacity == 0
    assert stats.evicted > 90_000
    assert stats.size <= 1000
    assert table.lookup(sprayed[-1], 2.0) == 9  # the newest of the spray still routes


def test_a_closed_connections_leftovers_are_nobodys_share() -> None:
    """The entries of a connection that has closed stay until they expire, but do not
    make the next peer to fill the generation look like one taking more than its share:
    the generation rotates, rather than being sifted again at every fill to keep them."""
    open_links = {9}
    table: RouteTable = RouteTable(
        "query", 300.0, 1000, holder_alive=lambda value: value in open_links
    )
    for n in range(100):
        assert table.record(b"c%015d" % n, 2, 0.0)  # connection 2, since closed
    for start in range(0, 5000, 250):
        keys = [b"s%015d" % n for n in range(start, start + 250)]
        table.record_many(keys, 9, 1.0, [0] * 250)
    stats = table.statistics(1.0)
    assert stats.evicted == 0
    assert stats.rotations_for_capacity == 5
    assert table.lookup(b"c%015d" % 0, 1.0) is None  # rotated out in time
    open_links.add(2)  # had it been open, its routes would have been kept
    table = RouteTable("query", 300.0, 1000, holder_alive=lambda value: value in open_links)
    for n in range(100):
        table.record(b"c%015d" % n, 2, 0.0)
    for start in range(0, 5000, 250):
        keys = [b"s%015d" % n for n in range(start, start + 250)]
        table.record_many(keys, 9, 1.0, [0] * 250)
    assert table.statistics(1.0).evicted > 0
    assert table.lookup(b"c%015d" % 0, 1.0) == 2


def test_a_generation_shared_evenly_still_rotates_when_full() -> None:
    table: RouteTable = RouteTable("query", 300.0, 100)
    for n in range(300):
        table.record(b"e%015d" % n, n % 4, 0.0)
    stats = table.statistics(0.0)
    assert stats.evicted == 0
    assert stats.rotations_for_capacity == 2


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.binary(min_size=16, max_size=16), min_size=1, max_size=60),
    st.lists(st.binary(min_size=16, max_size=16), max_size=60),
    st.booleans(),
)
def test_a_guid_of_the_previous_generation_is_a_duplicate_whatever_its_bytes(
    earlier: list[bytes], later: list[bytes], in_bulk: bool
) -> None:
    """The previous generation's filter never hides a GUID it holds: after a rotation,
    every GUID recorded before is still a duplicate, and only those are."""
    table = RouteTable("query", 10.0, 1_000)
    if in_bulk:
        table.record_many(earlier, 1, 0.0, [0] * len(earlier))
    else:
        for guid in earlier:
            table.record(guid, 1, 0.0)
    table.record(b"\xff" * 16, 1, 11.0)  # a rotation: the earlier ones are the previous
    mixed = [*later, *earlier]
    seen = {*earlier, b"\xff" * 16}
    expected = []
    for index, guid in enumerate(mixed):
        if guid in seen:
            expected.append(index)
        seen.add(guid)
    if in_bulk:
        assert table.record_many(mixed, 2, 11.0, [0] * len(mixed)) == expected
    else:
        assert [i for i, g in enumerate(mixed) if not table.record(g, 2, 11.0)] == expected
