"""The paper's outgoing queue: a threshold past which the connection is closed, its
byte safety net, bulk offers, and its books."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gnutella_router.net.flow_control_queue import FlowControlQueue
from gnutella_router.net.outqueue import DropReason, Verdict
from gnutella_router.net.threshold_queue import ThresholdQueue
from protocol.constants import HEADER_SIZE
from tests.support.outqueue import BYE, HIT, PING, PONG, PUSH, QUERY, VENDOR, drain, message, offer

# -- threshold ------------------------------------------------------------------------


def test_threshold_closes_on_the_message_past_the_threshold_and_only_once() -> None:
    queue = ThresholdQueue(max_messages=3)
    for _ in range(3):
        assert offer(queue, QUERY)[0] is Verdict.QUEUED
    assert offer(queue, QUERY)[0] is Verdict.CLOSE
    assert queue.closed
    assert queue.close_reason == "outgoing queue passed 3 messages"
    assert queue.close_code is None
    for message_type in (QUERY, HIT, VENDOR):
        assert offer(queue, message_type)[0] is Verdict.DROPPED
    assert queue.check(1.0) is Verdict.QUEUED  # the close was already reported
    assert queue.pending_messages == 3

    stats = queue.statistics(0.0)
    assert stats.policy == "threshold"
    assert stats.capacity == 3
    assert (stats.pending_messages, stats.pending_bytes) == (3, 300)
    assert stats.queued_total == 3
    assert stats.dropped["overflow"] == 1
    assert stats.dropped["closed"] == 3
    assert set(stats.dropped) == {reason.value for reason in DropReason}
    assert stats.dropped_by_type == {QUERY: 2, HIT: 1, VENDOR: 1}
    assert stats.closed
    assert not stats.flow_controlled
    assert stats.flow_control_entries == 0


def test_threshold_queued_messages_survive_the_close_and_can_still_be_taken() -> None:
    queue = ThresholdQueue(max_messages=2)
    first, second = offer(queue, PING)[1], offer(queue, PONG)[1]
    assert offer(queue, HIT)[0] is Verdict.CLOSE
    assert drain(queue) == [first, second]
    assert queue.statistics(0.0).sent_total == 2


def test_threshold_byte_safety_net() -> None:
    queue = ThresholdQueue(max_messages=500, max_bytes=1000)
    assert offer(queue, HIT, 400)[0] is Verdict.QUEUED
    assert offer(queue, HIT, 400)[0] is Verdict.QUEUED
    assert offer(queue, HIT, 200)[0] is Verdict.QUEUED  # exactly at the limit
    assert queue.pending_bytes == 1000
    assert offer(queue, PING, HEADER_SIZE)[0] is Verdict.CLOSE
    assert queue.close_reason == "outgoing queue passed 1000 bytes"


def test_threshold_one_message_larger_than_the_byte_limit_closes() -> None:
    queue = ThresholdQueue(max_bytes=1000)
    assert offer(queue, HIT, 1001)[0] is Verdict.CLOSE
    assert queue.pending_bytes == 0


def test_threshold_unlimited_needs_the_experiment_switch() -> None:
    with pytest.raises(ValueError, match="unbounded_experiment"):
        ThresholdQueue(max_messages=0)
    queue = ThresholdQueue(max_messages=0, unbounded_experiment=True)
    # Well past both the default 500 messages and the default 4 MiB.
    for _ in range(5000):
        assert queue.offer(bytes(1024), QUERY, 1, 0.0) is Verdict.QUEUED
    assert queue.pending_bytes == 5000 * 1024
    assert queue.statistics(0.0).capacity == 0


def test_threshold_switch_does_not_lift_an_explicit_limit() -> None:
    queue = ThresholdQueue(max_messages=1, unbounded_experiment=True)
    assert offer(queue, PING)[0] is Verdict.QUEUED
    assert offer(queue, PING)[0] is Verdict.CLOSE


@pytest.mark.parametrize(
    ("max_messages", "max_bytes"), [(-1, 1000), (10, 0), (10, -5)], ids=["neg", "zero", "negb"]
)
def test_threshold_rejects_bad_settings(max_messages: int, max_bytes: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        ThresholdQueue(max_messages=max_messages, max_bytes=max_bytes)


def test_threshold_take_is_fifo_and_respects_max_bytes() -> None:
    queue = ThresholdQueue()
    sent = [offer(queue, t, 100)[1] for t in (HIT, PING, VENDOR, QUERY, PUSH)]
    assert queue.take(250) == sent[:2]
    assert queue.take(300) == sent[2:5]
    assert queue.take() == []
    assert queue.pending_bytes == 0
    stats = queue.statistics(0.0)
    assert (stats.sent_total, stats.peak_messages, stats.peak_bytes) == (5, 5, 500)


def test_threshold_take_always_returns_at_least_one_message() -> None:
    queue = ThresholdQueue()
    big, small = offer(queue, HIT, 5000)[1], offer(queue, PING, 50)[1]
    assert queue.take(100) == [big]
    assert queue.take(10) == [small]
    assert queue.take(10) == []


def test_threshold_admits_one_bye_after_the_close() -> None:
    queue = ThresholdQueue(max_messages=1)
    offer(queue, QUERY)
    assert offer(queue, QUERY)[0] is Verdict.CLOSE
    assert queue.clear() == 1
    verdict, bye = offer(queue, BYE, 40)
    assert verdict is Verdict.QUEUED
    assert offer(queue, BYE, 40)[0] is Verdict.DROPPED
    assert queue.take() == [bye]
    stats = queue.statistics(0.0)
    assert stats.dropped["cleared"] == 1
    assert stats.dropped["closed"] == 1
    assert stats.queued_total == 2
    assert stats.sent_total == 1


def test_threshold_offer_bulk_queues_all_or_nothing() -> None:
    queue = ThresholdQueue(max_messages=5, max_bytes=1000)
    first = [message(QUERY) for _ in range(3)]
    assert queue.offer_bulk(first, 300)
    too_many = [message(QUERY) for _ in range(3)]
    assert not queue.offer_bulk(too_many, 300)  # 6 > 5: the caller must offer one by one
    too_big = [message(HIT, 400), message(HIT, 400)]
    assert not queue.offer_bulk(too_big, 800)  # 1100 bytes > 1000
    assert (queue.pending_messages, queue.pending_bytes) == (3, 300)
    assert not queue.closed  # a bulk refusal decides nothing
    assert queue.offer_bulk(too_many[:2], 200)
    assert drain(queue) == first + too_many[:2]
    assert queue.statistics(0.0).queued_total == 5


def test_offer_bulk_refuses_once_closed_and_for_flow_control() -> None:
    queue = ThresholdQueue(max_messages=1)
    offer(queue, QUERY)
    assert offer(queue, QUERY)[0] is Verdict.CLOSE
    queue.clear()
    assert not queue.offer_bulk([message(QUERY)], 100)
    assert queue.pending_messages == 0
    flow = FlowControlQueue()
    assert not flow.offer_bulk([message(QUERY)], 100)  # every message needs its level
    assert flow.pending_messages == 0


@settings(max_examples=150)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("offer"), st.integers(HEADER_SIZE, 400)),
            st.tuples(st.just("bulk"), st.lists(st.integers(HEADER_SIZE, 400), max_size=4)),
            st.tuples(st.just("take"), st.integers(0, 1500)),
        ),
        max_size=40,
    )
)
def test_threshold_queue_matches_a_plain_fifo(
    steps: list[tuple[str, int] | tuple[str, list[int]]],
) -> None:
    limit_messages, limit_bytes = 8, 2000
    queue = ThresholdQueue(max_messages=limit_messages, max_bytes=limit_bytes)
    model: list[bytes] = []
    closed = False
    for step in steps:
        if step[0] == "offer":
            assert isinstance(step[1], int)
            verdict, data = offer(queue, QUERY, step[1])
            fits = len(model) < limit_messages and sum(map(len, model)) + step[1] <= limit_bytes
            if closed:
                assert verdict is Verdict.DROPPED
            elif fits:
                assert verdict is Verdict.QUEUED
                model.append(data)
            else:
                assert verdict is Verdict.CLOSE
                closed = True
        elif step[0] == "bulk":
            assert isinstance(step[1], list)
            datas = [message(QUERY, size) for size in step[1]]
            total = sum(step[1])
            fits = (
                len(model) + len(datas) <= limit_messages
                and sum(map(len, model)) + total <= limit_bytes
            )
            assert queue.offer_bulk(datas, total) is (fits and not closed)
            if fits and not closed:
                model.extend(datas)
        else:
            assert isinstance(step[1], int)
            batch = queue.take(step[1])
            assert batch == model[: len(batch)]
            assert bool(batch) == bool(model)
            if len(batch) > 1:
                assert sum(map(len, batch)) <= step[1]
            if len(batch) < len(model):
                assert sum(map(len, batch)) + len(model[len(batch)]) > step[1]
            del model[: len(batch)]
        assert queue.pending_messages == len(model)
        assert queue.pending_bytes == sum(map(len, model))


def test_room_for_a_batch_is_judged_in_messages_and_never_once_closed() -> None:
    queue = ThresholdQueue(max_messages=4)
    assert queue.has_room_for(4)
    assert not queue.has_room_for(5)
    queue.offer(b"x" * 30, 0x80, 0, 0.0)
    assert queue.has_room_for(3)
    assert not queue.has_room_for(4)
    for _ in range(4):
        queue.offer(b"x" * 30, 0x80, 0, 0.0)  # the fifth message closes it
    assert queue.closed
    assert not queue.has_room_for(0)


def test_an_unbounded_experiment_queue_always_has_room() -> None:
    queue = ThresholdQueue(max_messages=0, unbounded_experiment=True)
    assert queue.has_room_for(1_000_000)


def test_flow_control_never_lets_writes_wait_for_a_batch() -> None:
    """Its verdicts depend on what is queued and when, so it cannot promise room."""
    assert not FlowControlQueue().has_room_for(1)


def test_within_its_grace_a_full_queue_drops_and_keeps_its_peer() -> None:
    from gnutella_router.net.outqueue import DropReason, Verdict
    from gnutella_router.net.threshold_queue import ThresholdQueue

    queue = ThresholdQueue(max_messages=3, grace=2.0)
    for _ in range(3):
        assert queue.offer(b"q" * 30, 0x80, 1, 0.0) is Verdict.QUEUED
    assert queue.offer(b"q" * 30, 0x80, 1, 0.5) is Verdict.DROPPED  # full: dropped
    assert queue.check(1.0) is Verdict.QUEUED
    assert queue.take() == [b"q" * 30] * 3  # the peer read: the grace starts again
    for _ in range(3):
        assert queue.offer(b"q" * 30, 0x80, 1, 2.0) is Verdict.QUEUED
    assert queue.offer(b"q" * 30, 0x80, 1, 3.0) is Verdict.DROPPED
    assert queue.offer(b"q" * 30, 0x80, 1, 4.5) is Verdict.DROPPED  # 1.5 s full
    assert queue.offer(b"q" * 30, 0x80, 1, 5.0) is Verdict.CLOSE  # 2 s full: too slow
    assert queue.close_reason is not None
    stats = queue.statistics(5.0)
    assert stats.dropped[DropReason.QUEUE_FULL.value] == 3


def test_a_queue_full_for_its_grace_closes_at_the_check_with_nothing_offered() -> None:
    from gnutella_router.net.outqueue import Verdict
    from gnutella_router.net.threshold_queue import ThresholdQueue

    queue = ThresholdQueue(max_messages=1, grace=1.0)
    assert queue.offer(b"p", 0x00, 0, 0.0) is Verdict.QUEUED
    assert queue.offer(b"p", 0x00, 0, 0.1) is Verdict.DROPPED
    assert queue.check(0.5) is Verdict.QUEUED
    assert queue.check(1.2) is Verdict.CLOSE


def test_without_a_grace_the_first_message_that_does_not_fit_closes() -> None:
    from gnutella_router.net.outqueue import Verdict
    from gnutella_router.net.threshold_queue import ThresholdQueue

    queue = ThresholdQueue(max_messages=1)
    assert queue.offer(b"p", 0x00, 0, 0.0) is Verdict.QUEUED
    assert queue.offer(b"p", 0x00, 0, 0.0) is Verdict.CLOSE
