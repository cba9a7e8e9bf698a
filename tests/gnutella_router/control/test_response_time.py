"""The response-time controller's control law, on a simulated clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gnutella_router.config.sections import SheddingConfig
from gnutella_router.control.response_time import ResponseTimeController
from gnutella_router.control.shedding import Shedder
from gnutella_router.runtime.stage_queue import StageQueue
from protocol.codec import encode_message
from protocol.framing import Frame, FrameDecoder
from protocol.messages import Message, Ping, Query, random_guid


def controller(**overrides: Any) -> ResponseTimeController:
    settings: dict[str, Any] = {
        "initial_rate": 100.0,
        "min_rate": 5.0,
        "max_rate": 1000.0,
        "additive_increase": 20.0,
    }
    settings.update(overrides)
    return ResponseTimeController(0.1, samples_per_update=100, interval=1.0, **settings)


def test_a_p90_over_target_divides_the_rate_by_1_2() -> None:
    control = controller()
    for n in range(100):
        control.observe(0.5 if n >= 80 else 0.01, now=0.5)  # 20 % slow: p90 is slow
    assert control.p90 == 0.5
    assert control.rate == pytest.approx(100 / 1.2)


def test_a_p90_well_under_target_adds_in_proportion_to_the_error() -> None:
    control = controller()
    control.admit(1000, now=0.0)  # more is asked than the bucket lets in
    for _ in range(100):
        control.observe(0.05, now=0.5)  # half the target: error 0.5
    assert control.rate == pytest.approx(100 + 20 * 0.5)


def test_a_rate_that_refuses_nothing_is_not_raised() -> None:
    """No wind-up: under a light load the rate is not what limits, and raising it would
    only take the controller longer to cut when the load steps up."""
    control = controller()
    for second in range(1, 31):
        control.admit(1, now=float(second))  # one query a second: far under the rate
        for _ in range(100):
            control.observe(0.01, now=float(second))
    assert control.rate == 100


def test_near_the_target_the_rate_holds() -> None:
    control = controller()
    for _ in range(100):
        control.observe(0.095, now=0.5)
    assert control.rate == 100


def test_a_second_without_100_samples_still_updates() -> None:
    control = controller()
    control.observe(1.0, now=0.2)
    assert control.updates == 0
    control.observe(1.0, now=1.1)
    assert control.updates == 1
    assert control.rate < 100


def test_the_rate_stays_within_its_bounds() -> None:
    control = controller()
    for second in range(100):
        control.observe(9.0, now=float(second + 1))
    assert control.rate == 5.0
    for second in range(100, 1000):
        control.admit(100_000, now=float(second + 1))  # always more asked than let in
        control.observe(0.0, now=float(second + 1))
    assert control.rate == 1000.0


def test_the_bucket_admits_the_rate_and_a_short_burst() -> None:
    control = controller(initial_rate=50.0)
    granted = sum(control.admit(10, now=t / 100) for t in range(1000))  # 10 s, 1,000/s asked
    assert 495 <= granted <= 506  # 50/s, plus the 5 held at the start
    assert control.state().refused == 10_000 - granted


def test_it_converges_below_capacity_against_a_simulated_server() -> None:
    """A server of 50 queries/s behind the controller, offered 200/s: after a transient
    the admitted rate sits near capacity and the response times near the target."""
    control = controller(initial_rate=200.0, max_rate=100_000.0)
    queue_seconds = 0.0  # work waiting ahead of a new arrival
    late: list[float] = []
    step = 0.005
    for tick in range(int(30 / step)):
        now = tick * step
        queue_seconds = max(0.0, queue_seconds - step)
        admitted = control.admit(1, now)  # one query every 5 ms: 200/s offered
        if admitted:
            queue_seconds += 0.02
            response = queue_seconds
            control.observe(response, now + response)
            if now >= 20:
                late.append(response)
    late.sort()
    assert late[int(0.9 * len(late))] <= 0.3
    assert len(late) / 10 >= 15


def frames(*messages: Message) -> list[Frame]:
    return FrameDecoder().receive_data(b"".join(encode_message(m) for m in messages))


def test_the_shedder_admits_queries_through_the_bucket_and_everything_else_freely() -> None:
    shed: list[str] = []
    shedder = Shedder(
        SheddingConfig(
            policy="response-time",
            response_time_initial_rate=5.0,
            response_time_min_rate=1.0,
        ),
        count=lambda reason, frame: shed.append(reason),
    )
    assert shedder.controller is not None
    assert shedder.waits_at_bound
    queue: StageQueue[Frame] = StageQueue("router", 1000)
    offered = frames(
        *(Message(random_guid(), 3, 0, Query(b"q%d" % n)) for n in range(10)),
        *(Message(random_guid(), 3, 0, Ping()) for _ in range(10)),
    )
    kept = shedder.admit(1, offered, queue, now=0.0)
    assert sum(f.payload_type == 0x80 for f in kept) == 1  # the bucket holds one at first
    assert sum(f.payload_type == 0x00 for f in kept) == 10
    assert shed == ["shed-admission"] * 9


@pytest.mark.e2e
async def test_the_controllers_state_is_in_dumps_and_metrics(tmp_path: Path) -> None:
    from gnutella_router.observe.dumps import dump_stages
    from gnutella_router.observe.metrics import metrics_registry, render_metrics
    from tests.support.peers import running_daemons

    overrides = {"shedding.policy": "response-time", "shedding.response_time_target_ms": 50}
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        admission = dump_stages(daemon)["admission"]
        assert isinstance(admission, dict)
        assert admission["rate"] == 200.0
        assert admission["target_seconds"] == 0.05
        text = render_metrics(metrics_registry(daemon)).decode()
        assert "gnutella_admission_rate 200.0" in text
        assert "gnutella_admission_target_seconds 0.05" in text
