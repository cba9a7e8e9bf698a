"""Class-based admission and degradation: the response-time controller's control law with
classes and a quality level, on a simulated clock, and the router's side of both."""

from __future__ import annotations

import pytest
import trio

from gnutella_router.config.sections import SheddingConfig
from gnutella_router.control.response_time import (
    LEAF_QUERIES,
    OTHERS,
    QUERIES,
    QualityLevel,
    ResponseTimeController,
    admission_class,
)
from gnutella_router.control.shedding import Shedder
from gnutella_router.runtime.stage_queue import StageQueue
from protocol.codec import encode_message
from protocol.constants import MessageType
from protocol.framing import Frame, FrameDecoder
from protocol.messages import Message, Ping, Pong, Query, random_guid
from tests.support.links import Network

WEIGHTS = ((OTHERS, 4.0), (LEAF_QUERIES, 2.0), (QUERIES, 1.0))


def controller(quality: QualityLevel | None = None) -> ResponseTimeController:
    return ResponseTimeController(
        0.1,
        initial_rate=100.0,
        min_rate=5.0,
        max_rate=10_000.0,
        additive_increase=20.0,
        samples_per_update=10,
        interval=1.0,
        weights=WEIGHTS,
        quality=quality,
    )


def update(control: ResponseTimeController, name: str, seconds: float, now: float) -> None:
    """One update of class ``name``: ten samples of ``seconds``."""
    for _ in range(10):
        control.observe(seconds, now, name)


def rates(control: ResponseTimeController) -> dict[str, float]:
    return {c.name: round(c.rate, 3) for c in control.state().classes}


def test_messages_are_classed_by_type_and_origin() -> None:
    assert admission_class(MessageType.QUERY, from_leaf=True) == LEAF_QUERIES
    assert admission_class(MessageType.QUERY, from_leaf=False) == QUERIES
    assert admission_class(MessageType.QUERY_HIT, from_leaf=True) == OTHERS
    assert admission_class(MessageType.PONG, from_leaf=False) == OTHERS


def test_the_heaviest_class_starts_unrestricted_the_others_at_the_initial_rate() -> None:
    assert rates(controller()) == {OTHERS: 10_000.0, LEAF_QUERIES: 100.0, QUERIES: 100.0}


def test_a_class_over_target_cuts_the_lighter_classes_not_itself() -> None:
    control = controller()
    update(control, OTHERS, 0.5, now=0.0)  # hits and pongs wait too long
    assert rates(control) == {OTHERS: 10_000.0, LEAF_QUERIES: 83.333, QUERIES: 83.333}
    update(control, LEAF_QUERIES, 0.5, now=0.1)  # only the ultrapeers' queries are lighter
    assert rates(control) == {OTHERS: 10_000.0, LEAF_QUERIES: 83.333, QUERIES: 69.444}
    update(control, QUERIES, 0.5, now=0.2)  # the lightest has none below: it is cut
    assert rates(control)[QUERIES] == 57.87


def test_a_class_under_target_grows_by_its_weight() -> None:
    control = controller()
    control.admit(10_000, now=0.0, name=QUERIES)  # both refuse: their rates limit
    control.admit(10_000, now=0.0, name=LEAF_QUERIES)
    update(control, QUERIES, 0.05, now=0.0)  # error 0.5: + 20 x 0.5 x 1
    update(control, LEAF_QUERIES, 0.05, now=0.1)  # + 20 x 0.5 x 2
    assert rates(control) == {OTHERS: 10_000.0, LEAF_QUERIES: 120.0, QUERIES: 110.0}


def test_the_shedder_keeps_hits_and_pongs_flowing_while_it_sheds_queries() -> None:
    shed: list[str] = []
    shedder = Shedder(
        SheddingConfig(
            policy="response-time",
            response_time_classes=True,
            response_time_initial_rate=5.0,
            response_time_min_rate=1.0,
        ),
        count=lambda reason, frame: shed.append(reason),
    )
    queue: StageQueue[Frame] = StageQueue("router", 1000)
    offered = FrameDecoder().receive_data(
        b"".join(
            encode_message(m)
            for m in (
                *(Message(random_guid(), 3, 0, Query(b"q%d" % n)) for n in range(10)),
                *(Message(random_guid(), 3, 0, Pong(6346, "192.0.2.1", 1, 1)) for _ in range(10)),
                *(Message(random_guid(), 3, 0, Ping()) for _ in range(10)),
            )
        )
    )
    kept = shedder.admit(1, offered, queue, now=0.0, from_leaf=True)
    assert sum(f.payload_type == MessageType.QUERY for f in kept) == 1  # a bucket of one
    assert sum(f.payload_type != MessageType.QUERY for f in kept) == 20
    assert shed == ["shed-admission"] * 9
    state = shedder.controller.state() if shedder.controller else None
    assert state is not None
    refused = {c.name: c.refused for c in state.classes}
    assert refused == {OTHERS: 0, LEAF_QUERIES: 9, QUERIES: 0}


def test_quality_is_lost_in_whole_hops_rounded_up() -> None:
    quality = QualityLevel(3, recovery=0.1, decrease_factor=1.2)
    cuts = []
    for _ in range(8):
        quality.degrade()
        cuts.append(quality.ttl_cut)
    assert cuts == [1, 1, 2, 2, 2, 2, 3, 3]
    assert quality.at_floor
    quality.restore(1.0)
    assert quality.ttl_cut == 3  # additive: back a step at a time
    for _ in range(10):
        quality.restore(1.0)
    assert (quality.level, quality.ttl_cut) == (1.0, 0)


def test_overload_degrades_first_and_refuses_only_once_quality_is_at_its_floor() -> None:
    control = controller(QualityLevel(2, recovery=0.5, decrease_factor=1.2))
    start = rates(control)
    now = 0.0
    cuts = []
    while control.ttl_cut < 2:
        now += 0.1
        update(control, OTHERS, 0.5, now)
        cuts.append(control.ttl_cut)
        assert rates(control) == start, "no rate is cut while quality can still be lowered"
    assert cuts == [1, 1, 1, 2]
    update(control, OTHERS, 0.5, now + 0.1)  # at the floor: now the lighter classes pay
    assert rates(control)[QUERIES] < start[QUERIES]
    state = control.state()
    assert state.ttl_cut == 2
    assert state.quality == pytest.approx(1 / 1.2**4)


def test_recovery_raises_a_refusing_class_first_then_restores_quality() -> None:
    control = controller(QualityLevel(2, recovery=0.5, decrease_factor=1.2))
    for n in range(5):  # quality to its floor, then one cut
        update(control, OTHERS, 0.5, now=n * 0.1)
    assert control.ttl_cut == 2
    cut_rate = rates(control)[QUERIES]
    assert control.admit(1000, now=1.0, name=QUERIES) < 1000  # queries are being refused
    update(control, QUERIES, 0.0, now=1.1)
    assert rates(control)[QUERIES] > cut_rate  # the refusing class got room first
    assert control.ttl_cut == 2
    update(control, QUERIES, 0.0, now=1.2)  # nothing refused since: quality comes back
    assert control.ttl_cut == 1
    update(control, QUERIES, 0.0, now=1.3)
    assert control.ttl_cut == 0


def test_quality_stays_down_while_another_class_is_still_refusing() -> None:
    control = controller(QualityLevel(2, recovery=0.5, decrease_factor=1.2))
    for n in range(5):  # quality to its floor, then the query classes cut
        update(control, OTHERS, 0.5, now=n * 0.1)
    assert control.admit(1000, now=1.0, name=QUERIES) < 1000  # queries are being refused
    update(control, OTHERS, 0.0, now=1.1)  # the heaviest class is fast again ...
    assert control.ttl_cut == 2  # ... but quality waits for the refusing class
    update(control, QUERIES, 0.0, now=1.2)  # the queries' own update: their rate first
    assert control.ttl_cut == 2
    update(control, OTHERS, 0.0, now=1.3)  # nothing refused since: now quality returns
    assert control.ttl_cut == 1


async def test_a_degraded_router_forwards_queries_with_less_ttl_and_counts_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = Network(shedding=SheddingConfig(policy="response-time", degrade_ttl_by=2))
    a, b, _ = net.links
    admission = net.router.admission
    assert admission is not None
    await net.send(a, Message(random_guid(), 7, 0, Query(b"full quality")))
    assert [f.ttl for f in b.sent()] == [6]
    admission.cut = 2  # as the controller sets it under overload
    await net.send(a, Message(random_guid(), 7, 0, Query(b"degraded")))
    await net.send(a, Message(random_guid(), 2, 3, Query(b"near its end")))
    # 7 - 1 - 2; the TTL 2 one is cut to its last hop, for leaves only, and there are none.
    assert [f.ttl for f in b.sent()] == [4]
    statistics = net.router.statistics()
    assert (statistics.degraded_queries, statistics.degraded_hops) == (2, 3)
