"""gtk-gnutella's outgoing queue: flow control's hysteresis, priorities, eviction and
refusal, its time limit, and a stateful model checked against it."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from gnutella_router.net.flow_control_queue import DROPPABLE_TYPES, FlowControlQueue, priority_level
from gnutella_router.net.outqueue import Verdict
from protocol.constants import HEADER_SIZE, ByeCode
from tests.support.outqueue import (
    BYE,
    HIT,
    PING,
    PONG,
    PUSH,
    QRP,
    QUERY,
    VENDOR,
    drain,
    header_of,
    message,
    offer,
    types_of,
)

# -- flow control: the hysteresis -----------------------------------------------------


def fill_into_flow_control(
    queue: FlowControlQueue, message_type: int, size: int, hops: int = 0
) -> list[bytes]:
    queued = []
    while not queue.flow_controlled:
        verdict, data = offer(queue, message_type, size, hops)
        assert verdict is Verdict.QUEUED
        queued.append(data)
    return queued


def test_flow_control_enters_at_the_high_water_mark() -> None:
    queue = FlowControlQueue(max_bytes=1000)
    offer(queue, HIT, 499, now=1.0)
    assert not queue.flow_controlled
    offer(queue, HIT, HEADER_SIZE + 0, now=2.0)  # 522 bytes: past 500
    assert queue.flow_controlled
    stats = queue.statistics(7.5)
    assert stats.flow_control_entries == 1
    assert stats.seconds_in_flow_control == pytest.approx(5.5)


def test_flow_control_enters_exactly_at_the_mark() -> None:
    queue = FlowControlQueue(max_bytes=1000)
    offer(queue, HIT, 477)
    assert not queue.flow_controlled
    offer(queue, HIT, HEADER_SIZE)
    assert queue.pending_bytes == 500
    assert queue.flow_controlled


def test_flow_control_leaves_only_below_the_low_water_mark() -> None:
    queue = FlowControlQueue(max_bytes=1000)
    first = offer(queue, HIT, 250)[1]
    offer(queue, HIT, 250)
    second = offer(queue, HIT, 100)[1]
    assert queue.flow_controlled  # 600 bytes
    offer(queue, HIT, 100)
    offer(queue, HIT, 150)
    assert queue.take(250) == [first]  # 600 left, still above 500
    assert queue.flow_controlled
    queue.take(250)
    assert queue.pending_bytes == 350  # between the marks: hysteresis keeps FC on
    assert queue.flow_controlled
    assert queue.take(100) == [second]
    assert queue.pending_bytes == 250  # at the low mark, not below it
    assert queue.flow_controlled
    queue.take(100)
    assert queue.pending_bytes == 150
    assert not queue.flow_controlled
    assert queue.statistics(0.0).seconds_in_flow_control == 0.0


def test_flow_control_peaks_survive_take_and_eviction() -> None:
    queue = FlowControlQueue(max_bytes=1000)
    for _ in range(4):
        offer(queue, PING, 100)
    queue.take(150)
    fill_into_flow_control(queue, PING, 100)
    assert offer(queue, PUSH, 900)[0] is Verdict.QUEUED  # 5 pings -> 1 ping + the push
    drain(queue)
    stats = queue.statistics(0.0)
    assert (stats.peak_messages, stats.peak_bytes) == (5, 1000)
    assert stats.pending_messages == 0


def test_flow_control_counts_each_entry() -> None:
    queue = FlowControlQueue(max_bytes=1000)
    for _ in range(3):
        offer(queue, HIT, 600)
        drain(queue)
    assert queue.statistics(0.0).flow_control_entries == 3
    assert not queue.flow_controlled


# -- flow control: priorities -----------------------------------------------------------


def test_take_hands_out_the_most_important_first() -> None:
    queue = FlowControlQueue(max_bytes=100_000)
    order = [PING, QUERY, PONG, HIT, PUSH, VENDOR, PING, HIT, QRP, QUERY]
    sent: dict[int, list[bytes]] = {t: [] for t in order}
    for message_type in order:
        sent[message_type].append(offer(queue, message_type)[1])
    batch = queue.take()
    control = [data for data in batch if header_of(data)[1] in (VENDOR, QRP)]
    assert types_of(control) == [VENDOR, QRP]  # control keeps its arrival order
    assert types_of(batch) == [VENDOR, QRP, PUSH, HIT, HIT, PONG, QUERY, QUERY, PING, PING]
    for message_type in (PING, HIT, QUERY):
        assert [d for d in batch if header_of(d)[1] == message_type] == sent[message_type]


def test_hops_order_broadcasts_and_replies_opposite_ways() -> None:
    queue = FlowControlQueue(max_bytes=100_000)
    for hops in (3, 0, 5, 1):
        offer(queue, QUERY, hops=hops)
        offer(queue, HIT, hops=hops)
    batch = queue.take()
    hit_hops = [header_of(d)[2] for d in batch if header_of(d)[1] == HIT]
    query_hops = [header_of(d)[2] for d in batch if header_of(d)[1] == QUERY]
    assert hit_hops == [5, 3, 1, 0]  # a far-travelled reply is nearly home
    assert query_hops == [0, 1, 3, 5]  # a far-travelled query has covered its horizon


def test_priority_levels_are_ordered_by_class_then_hops() -> None:
    assert priority_level(PING, 0) < priority_level(QUERY, 9) < priority_level(QUERY, 0)
    assert priority_level(QUERY, 0) < priority_level(PONG, 0) < priority_level(HIT, 0)
    assert priority_level(HIT, 9) < priority_level(PUSH, 0) < priority_level(VENDOR, 0)
    assert priority_level(VENDOR, 0) == priority_level(BYE, 3) == priority_level(0x99, 7)
    # Hop counts past the last bucket share it.
    assert priority_level(QUERY, 7) == priority_level(QUERY, 200)
    assert priority_level(PONG, 7) == priority_level(PONG, 255)
    assert {PING, PONG, QUERY} == DROPPABLE_TYPES


def test_take_respects_max_bytes_but_returns_at_least_one() -> None:
    queue = FlowControlQueue(max_bytes=100_000)
    big = offer(queue, PUSH, 5000)[1]
    hits = [offer(queue, HIT, 100)[1] for _ in range(3)]
    ping = offer(queue, PING, 100)[1]
    assert queue.take(1000) == [big]
    assert queue.take(250) == hits[:2]
    assert queue.take(250) == [hits[2], ping]
    assert queue.take(250) == []


def test_take_stops_at_the_first_message_that_does_not_fit() -> None:
    # Strict priority: a small, less important message does not overtake a large one.
    queue = FlowControlQueue(max_bytes=100_000)
    hit = offer(queue, HIT, 100)[1]
    offer(queue, PONG, 900)
    offer(queue, PING, 50)
    assert queue.take(500) == [hit]


# -- flow control: eviction and refusal -------------------------------------------------


def test_in_flow_control_a_droppable_message_evicts_less_important_ones() -> None:
    queue = FlowControlQueue(max_bytes=1000)
    pings = fill_into_flow_control(queue, PING, 100)
    before = queue.pending_bytes
    verdict, query = offer(queue, QUERY, 150)
    assert verdict is Verdict.QUEUED
    assert queue.pending_bytes == before - 200 + 150  # two oldest pings made room
    remaining = drain(queue)
    assert remaining == [query, *pings[2:]]
    stats = queue.statistics(0.0)
    assert stats.dropped["evicted"] == 2
    assert stats.dropped_by_type == {PING: 2}


def test_in_flow_control_a_droppable_message_is_refused_even_if_it_fits() -> None:
    # gtk-gnutella's rule: in flow control droppable traffic may replace less important
    # traffic but never grow the queue.
    queue = FlowControlQueue(max_bytes=1000)
    queries = fill_into_flow_control(queue, QUERY, 100)
    assert queue.pending_bytes + 100 <= 1000
    for message_type in (QUERY, PING):
        assert offer(queue, message_type, 100)[0] is Verdict.DROPPED
    assert drain(queue) == queries  # nothing evicted
    stats = queue.statistics(0.0)
    assert stats.dropped["flow_control"] == 2
    assert stats.dropped["evicted"] == 0


def test_in_flow_control_a_query_with_more_hops_cannot_displace_one_with_fewer() -> None:
    queue = FlowControlQueue(max_bytes=1000)
    queries = fill_into_flow_control(queue, QUERY, 100, hops=1)
    assert offer(queue, QUERY, 100, hops=4)[0] is Verdict.DROPPED
    verdict, closer = offer(queue, QUERY, 100, hops=0)
    assert verdict is Verdict.QUEUED  # ... but fewer hops displaces more
    assert drain(queue) == [closer, *queries[1:]]


def test_in_flow_control_replies_still_queue_while_they_fit() -> None:
    queue = FlowControlQueue(max_bytes=1000)
    fill_into_flow_control(queue, PONG, 100)
    assert offer(queue, HIT, 300)[0] is Verdict.QUEUED
    assert offer(queue, VENDOR, 100)[0] is Verdict.QUEUED
    assert queue.statistics(0.0).dropped["evicted"] == 0


def test_a_reply_that_does_not_fit_evicts_but_never_more_important_ones() -> None:
    queue = FlowControlQueue(max_bytes=1000)
    queries = [offer(queue, QUERY, 100)[1] for _ in range(3)]
    kept = [offer(queue, t, 200)[1] for t in (PUSH, VENDOR, HIT)]
    assert queue.pending_bytes == 900
    verdict, hit = offer(queue, HIT, 250)
    assert verdict is Verdict.QUEUED
    assert queue.pending_bytes == 950
    assert drain(queue) == [kept[1], kept[0], kept[2], hit, queries[2]]
    assert queue.statistics(0.0).dropped_by_type == {QUERY: 2}


def test_outside_flow_control_a_droppable_message_that_cannot_fit_is_dropped() -> None:
    queue = FlowControlQueue(max_bytes=1000)
    offer(queue, HIT, 400)
    assert not queue.flow_controlled
    assert offer(queue, QUERY, 700)[0] is Verdict.DROPPED
    assert offer(queue, PING, 5000)[0] is Verdict.DROPPED
    stats = queue.statistics(0.0)
    assert stats.dropped["queue_full"] == 2
    assert stats.dropped_by_type == {QUERY: 1, PING: 1}
    assert not queue.closed


def test_a_hit_that_cannot_fit_asks_for_bye_502() -> None:
    queue = FlowControlQueue(max_bytes=1000)
    offer(queue, QUERY, 50)
    for _ in range(3):
        offer(queue, PUSH, 300)
    verdict, _ = offer(queue, HIT, 200)
    assert verdict is Verdict.BYE_AND_CLOSE
    assert queue.close_code == ByeCode.SEND_QUEUE_FULL
    assert queue.close_code == 502
    assert queue.close_reason == "send queue full"
    # A hopeless offer evicts nothing: the query is still there.
    assert queue.statistics(0.0).dropped["evicted"] == 0
    assert queue.pending_messages == 4
    assert offer(queue, HIT, 30)[0] is Verdict.DROPPED
    assert offer(queue, VENDOR, 30)[0] is Verdict.DROPPED
    assert queue.check(1000.0) is Verdict.QUEUED  # reported once, by offer
    assert queue.clear() == 4
    verdict, bye = offer(queue, BYE, 60)
    assert verdict is Verdict.QUEUED
    assert queue.take() == [bye]
    stats = queue.statistics(0.0)
    assert stats.dropped["overflow"] == 1
    assert stats.dropped["closed"] == 2
    assert stats.dropped["cleared"] == 4


@pytest.mark.parametrize("message_type", [PUSH, VENDOR, QRP, BYE])
def test_control_and_push_messages_are_never_evicted(message_type: int) -> None:
    queue = FlowControlQueue(max_bytes=1000)
    kept = [offer(queue, VENDOR, 100)[1] for _ in range(9)]
    assert offer(queue, message_type, 200)[0] is Verdict.BYE_AND_CLOSE
    assert drain(queue) == kept


def test_a_message_larger_than_the_whole_queue() -> None:
    queue = FlowControlQueue(max_bytes=1000)
    assert offer(queue, PONG, 1001)[0] is Verdict.DROPPED
    assert offer(queue, PUSH, 1001)[0] is Verdict.BYE_AND_CLOSE


# -- flow control: time limit, clear, settings ------------------------------------------


def test_check_asks_for_bye_405_after_too_long_in_flow_control() -> None:
    queue = FlowControlQueue(max_bytes=1000, max_flow_control_seconds=180.0)
    assert queue.check(5.0) is Verdict.QUEUED
    offer(queue, HIT, 600, now=10.0)
    assert queue.check(190.0) is Verdict.QUEUED  # 180 s exactly is not "longer"
    assert queue.statistics(190.0).seconds_in_flow_control == pytest.approx(180.0)
    assert queue.check(190.5) is Verdict.BYE_AND_CLOSE
    assert queue.close_code == ByeCode.ACTIVITY_TIMEOUT
    assert queue.close_code == 405
    assert queue.close_reason is not None
    assert "180" in queue.close_reason
    assert queue.check(500.0) is Verdict.QUEUED  # reported once
    assert offer(queue, PUSH, 30)[0] is Verdict.DROPPED


def test_leaving_flow_control_restarts_the_clock() -> None:
    queue = FlowControlQueue(max_bytes=1000, max_flow_control_seconds=100.0)
    offer(queue, HIT, 600, now=0.0)
    assert queue.check(90.0) is Verdict.QUEUED
    drain(queue)
    offer(queue, HIT, 600, now=95.0)
    assert queue.check(150.0) is Verdict.QUEUED
    assert queue.check(195.5) is Verdict.BYE_AND_CLOSE


def test_clear_empties_the_queue_and_leaves_flow_control() -> None:
    queue = FlowControlQueue(max_bytes=1000)
    fill_into_flow_control(queue, PING, 100)
    offer(queue, VENDOR, 100)
    assert queue.clear() == 6
    assert (queue.pending_messages, queue.pending_bytes) == (0, 0)
    assert not queue.flow_controlled
    assert queue.take() == []
    assert queue.clear() == 0
    stats = queue.statistics(0.0)
    assert stats.dropped["cleared"] == 6
    assert stats.peak_bytes == 600
    assert stats.peak_messages == 6
    assert stats.queued_total == 6
    # Usable again afterwards.
    assert offer(queue, PING, 100)[0] is Verdict.QUEUED


@pytest.mark.parametrize(
    "settings_",
    [
        {"max_bytes": 0},
        {"enter_ratio": 0.2, "leave_ratio": 0.3},
        {"enter_ratio": 1.5},
        {"leave_ratio": 0.0},
        {"max_flow_control_seconds": 0.0},
    ],
)
def test_flow_control_rejects_bad_settings(settings_: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"must be|need"):
        FlowControlQueue(**settings_)  # type: ignore[arg-type]


# -- the stateful model ---------------------------------------------------------------

MAX_BYTES = 4096
ENTER, LEAVE = 2048, 1024
FC_SECONDS = 60.0
TYPES = [PING, PONG, QUERY, HIT, PUSH, VENDOR, QRP, BYE, 0xCD]
LARGEST = 3000
# Round sizes and whole seconds land exactly on the marks and limits now and then.
SIZES = st.one_of(
    st.sampled_from([HEADER_SIZE, 64, 256, 512, 1024, 2600]), st.integers(HEADER_SIZE, LARGEST)
)
SECONDS = st.one_of(st.integers(0, 30).map(float), st.floats(0.0, 30.0))


def queued_in_send_order(queue: FlowControlQueue) -> list[bytes]:
    """White-box view of the queue, most important level first, FIFO within a level."""
    return [data for level in reversed(queue._levels) if level is not None for data in level]


class FlowControlMachine(RuleBasedStateMachine):
    """Random offers, takes, clock ticks and clears against a model of what is queued.

    Each step checks the verdict against the queue's state before it (free room, bytes
    below the message's level, flow control, closed), which messages were evicted, and
    the batch ``take`` handed out; the invariants check the books, the memory bound and
    the hysteresis after every step.
    """

    def __init__(self) -> None:
        super().__init__()
        self.queue = FlowControlQueue(MAX_BYTES, max_flow_control_seconds=FC_SECONDS)
        self.now = 0.0
        self.fc_since: float | None = None
        self.offered = 0
        self.taken: set[bytes] = set()
        self.live: list[bytes] = []  # what the model believes is queued
        self.level: dict[bytes, int] = {}
        self.closed = False
        self.bye_admitted = False
        self.peak_bytes = 0
        self.peak_messages = 0

    def _track_flow_control(self, was: bool) -> None:
        if self.queue.flow_controlled and not was:
            self.fc_since = self.now
        elif not self.queue.flow_controlled:
            self.fc_since = None

    @rule(
        message_type=st.sampled_from(TYPES),
        size=SIZES,
        hops=st.integers(0, 9),
    )
    def offer(self, message_type: int, size: int, hops: int) -> None:
        self._offer(message_type, size, hops)

    @rule(
        message_type=st.sampled_from(sorted(DROPPABLE_TYPES)),
        size=st.integers(MAX_BYTES - 1000, MAX_BYTES + 1000),
        hops=st.integers(0, 9),
    )
    def offer_large_droppable(self, message_type: int, size: int, hops: int) -> None:
        # Large enough to overflow the queue outside flow control; refused, never fatal.
        self._offer(message_type, size, hops)

    def _offer(self, message_type: int, size: int, hops: int) -> None:
        queue = self.queue
        before = queued_in_send_order(queue)
        was_fc = queue.flow_controlled
        level = priority_level(message_type, hops)
        lower_bytes = sum(len(d) for d in before if self.level[d] < level)
        droppable = message_type in DROPPABLE_TYPES
        data = message(message_type, size, hops)
        self.level[data] = level
        self.offered += 1

        verdict = queue.offer(data, message_type, hops, self.now)

        after = queued_in_send_order(queue)
        still_queued = set(after)
        evicted = [d for d in before if d not in still_queued]
        if verdict is Verdict.QUEUED:
            assert data in after
            self.live = [d for d in self.live if d not in evicted] + [data]
        else:
            assert data not in after
            assert evicted == []
        if evicted:
            assert not self.closed
            # Only strictly less important messages, never control, least important first,
            # oldest first within a level, and no more than needed.
            assert all(self.level[d] < level for d in evicted)
            assert all(header_of(d)[1] in DROPPABLE_TYPES | {HIT, PUSH} for d in evicted)
            worst_evicted = max(self.level[d] for d in evicted)
            for kept in after:
                assert self.level[kept] >= worst_evicted
                if self.level[kept] == worst_evicted:
                    same_level = [d for d in evicted if self.level[d] == worst_evicted]
                    assert all(before.index(kept) > before.index(d) for d in same_level)
            # Stopped as soon as enough was freed: without the last one evicted (highest
            # level, newest in it) there would not have been room.
            last = max(evicted, key=lambda d: (self.level[d], before.index(d)))
            evicted_bytes = sum(len(d) for d in evicted)
            needed = size if (was_fc and droppable) else sum(map(len, before)) + size - MAX_BYTES
            assert evicted_bytes >= needed
            assert evicted_bytes - len(last) < needed

        if self.closed:
            if message_type == BYE and not self.bye_admitted:
                assert verdict is Verdict.QUEUED
                self.bye_admitted = True
            else:
                assert verdict is Verdict.DROPPED
        elif verdict is Verdict.BYE_AND_CLOSE:
            assert not droppable
            assert sum(map(len, before)) - lower_bytes + size > MAX_BYTES
            assert queue.close_code == 502
            self.closed = True
        elif verdict is Verdict.DROPPED:
            assert droppable
            if was_fc:
                assert lower_bytes < size
            else:
                assert sum(map(len, before)) - lower_bytes + size > MAX_BYTES
        else:
            assert verdict is Verdict.QUEUED
            if was_fc and droppable:
                # It had to displace at least its own size, even if it would have fitted.
                assert sum(map(len, evicted)) >= size
            elif sum(map(len, before)) + size <= MAX_BYTES:
                assert evicted == []
        self._track_flow_control(was_fc)

    @rule(max_bytes=st.integers(0, 6000))
    def take(self, max_bytes: int) -> None:
        before = queued_in_send_order(self.queue)
        was_fc = self.queue.flow_controlled
        batch = self.queue.take(max_bytes)
        # The batch is the longest prefix of the send order within max_bytes, or the
        # first message alone.
        assert batch == before[: len(batch)]
        if before:
            assert batch
            if len(batch) > 1:
                assert sum(map(len, batch)) <= max_bytes
            if len(batch) < len(before):
                assert sum(map(len, batch)) + len(before[len(batch)]) > max_bytes
        else:
            assert batch == []
        for data in batch:
            assert data not in self.taken
            self.taken.add(data)
        self.live = [d for d in self.live if d not in set(batch)]
        self._track_flow_control(was_fc)

    @rule(seconds=SECONDS)
    def check(self, seconds: float) -> None:
        self.now += seconds
        verdict = self.queue.check(self.now)
        expired = (
            not self.closed and self.fc_since is not None and self.now - self.fc_since > FC_SECONDS
        )
        if expired:
            assert verdict is Verdict.BYE_AND_CLOSE
            assert self.queue.close_code == 405
            self.closed = True
        else:
            assert verdict is Verdict.QUEUED

    @rule(now_and_then=st.integers(0, 9))
    def clear(self, now_and_then: int) -> None:
        # Mostly the connection's move after a close verdict, sometimes out of the blue.
        if not (self.closed or now_and_then == 0):
            return
        was_fc = self.queue.flow_controlled
        count = self.queue.clear()
        assert count == len(self.live)
        self.live = []
        assert not self.queue.flow_controlled
        self._track_flow_control(was_fc)

    @invariant()
    def books_balance(self) -> None:
        queue = self.queue
        queued = queued_in_send_order(queue)
        # Within one operation the queue only grows at the very end, so the largest
        # size seen between operations is the true peak.
        self.peak_bytes = max(self.peak_bytes, sum(map(len, queued)))
        self.peak_messages = max(self.peak_messages, len(queued))
        stats = queue.statistics(self.now)
        assert (stats.peak_bytes, stats.peak_messages) == (self.peak_bytes, self.peak_messages)
        assert sorted(queued) == sorted(self.live)
        assert queue.pending_messages == stats.pending_messages == len(queued)
        assert queue.pending_bytes == stats.pending_bytes == sum(map(len, queued))
        assert self.offered == stats.sent_total + stats.pending_messages + sum(
            stats.dropped.values()
        )
        assert stats.queued_total == (
            stats.sent_total
            + stats.pending_messages
            + stats.dropped["evicted"]
            + stats.dropped["cleared"]
        )
        assert stats.sent_total == len(self.taken)
        not_cleared = sum(stats.dropped.values()) - stats.dropped["cleared"]
        assert sum(stats.dropped_by_type.values()) == not_cleared

    @invariant()
    def memory_is_bounded(self) -> None:
        # The budget holds outright; only the farewell Bye may go past it.
        limit = MAX_BYTES + (LARGEST if self.bye_admitted else 0)
        assert self.queue.pending_bytes <= limit

    @invariant()
    def hysteresis(self) -> None:
        pending = self.queue.pending_bytes
        if pending >= ENTER:
            assert self.queue.flow_controlled
        if pending < LEAVE:
            assert not self.queue.flow_controlled
        stats = self.queue.statistics(self.now)
        if self.fc_since is None:
            assert stats.seconds_in_flow_control == 0.0
        else:
            assert stats.seconds_in_flow_control == self.now - self.fc_since

    @invariant()
    def control_messages_are_never_lost_while_open(self) -> None:
        if not self.closed:
            dropped = self.queue.statistics(self.now).dropped_by_type
            assert not {VENDOR, QRP, BYE, 0xCD} & set(dropped)


FlowControlMachine.TestCase.settings = settings(
    max_examples=120,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_flow_control_machine = FlowControlMachine.TestCase
