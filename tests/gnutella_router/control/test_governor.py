"""The thread governor sizes the router's pool to its load, and shrinks it when the load goes.

Most tests drive the governor against :class:`FluidStage`, a stage reduced to its rates
(events arrive at λ per second, each holds a worker for S seconds), so that a minute
of load takes milliseconds and every number is known. One test runs the real
:class:`Stage` on trio's autojump clock; the old queue-threshold rule keeps its own
tests on the real stage, stepped by hand.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import trio
import trio.testing

from gnutella_router.config import ConfigError, load_config
from gnutella_router.config.sections import GovernorConfig
from gnutella_router.control.governor import GovernorSample, ThreadGovernor
from gnutella_router.lab.traffic.load import LoadSettings, run_load
from gnutella_router.runtime.meters import StageMeter
from gnutella_router.runtime.stage import Stage
from tests.support.peers import running_daemons
from traffic_models.arrivals import ConstantRate
from traffic_models.generator import TrafficGenerator
from traffic_models.mix import MessageMix

TICK = 0.01
"""The fluid stage's time step, in seconds."""


@dataclasses.dataclass
class FluidStage:
    """A stage as a fluid: ``arrival`` events per second, each holding a worker ``service``
    seconds, a queue bounded at ``bound``. What finds the queue full waits outside it,
    uncounted, as backpressure leaves it in the peers' sockets. ``cpu`` caps the workers
    that make progress at once (a stage whose bottleneck is the processor)."""

    arrival: float
    service: float
    bound: int = 1000
    cpu: float = math.inf
    pool: int = 1
    now: float = 0.0
    queue: float = 0.0
    outside: float = 0.0
    admitted: float = 0.0
    events: float = 0.0
    busy: float = 0.0
    closed: float = 0.0
    peak: int = 0
    first: float | None = None

    @property
    def pool_size(self) -> int:
        return self.pool

    def set_pool_size(self, size: int) -> int:
        self.pool = max(1, min(20, size))
        return self.pool

    def meter(self, now: float) -> StageMeter:
        peak, self.peak = self.peak, 0
        return StageMeter(
            at=now,
            pool_size=self.pool,
            queue_length=round(self.queue),
            queue_threshold=self.bound,
            admitted=round(self.admitted),
            first_admitted_at=self.first,
            events=round(self.events),
            busy_seconds=self.busy,
            closed_seconds=self.closed,
            peak_busy=peak,
        )

    def run(self, seconds: float) -> None:
        for _ in range(round(seconds / TICK)):
            self.now = round(self.now + TICK, 6)
            served = min(self.queue, min(self.pool, self.cpu) / self.service * TICK)
            self.queue -= served
            self.events += served
            self.busy += served * self.service
            self.peak = max(self.peak, math.ceil(served * self.service / TICK - 1e-9))
            self.outside += self.arrival * TICK
            moved = min(self.outside, self.bound - self.queue)
            if moved and self.first is None:
                self.first = round(self.now - TICK, 6)  # the tick's arrivals began with it
            self.outside -= moved
            self.queue += moved
            self.admitted += moved
            if self.outside > 1e-9:
                self.closed += TICK


@dataclasses.dataclass
class ScriptedStage:
    """A stage whose meter reads what the test says happened."""

    pool: int = 1
    at: float = 0.0
    queue: int = 0
    admitted: int = 0
    events: int = 0
    busy: float = 0.0

    @property
    def pool_size(self) -> int:
        return self.pool

    def set_pool_size(self, size: int) -> int:
        self.pool = size
        return size

    def advance(
        self, seconds: float, *, arrivals: float, handled: float, service: float, queue: int
    ) -> None:
        """``seconds`` more of ``arrivals`` and ``handled`` events per second, each holding
        a worker ``service`` seconds, leaving ``queue`` events waiting."""
        self.at += seconds
        self.admitted += round(arrivals * seconds)
        self.events += round(handled * seconds)
        self.busy += handled * seconds * service
        self.queue = queue

    def meter(self, now: float) -> StageMeter:
        return StageMeter(
            at=now,
            pool_size=self.pool,
            queue_length=self.queue,
            queue_threshold=1000,
            admitted=self.admitted,
            first_admitted_at=0.0 if self.admitted else None,
            events=self.events,
            busy_seconds=self.busy,
            closed_seconds=0.0,
            peak_busy=self.pool,
        )


def governor_for(stage: FluidStage | ScriptedStage, **settings: object) -> ThreadGovernor:
    config = GovernorConfig(**{"enabled": True, **settings})  # type: ignore[arg-type]
    return ThreadGovernor(stage, config)


def drive(stage: FluidStage, governor: ThreadGovernor, seconds: float) -> list[GovernorSample]:
    """Run the fluid for ``seconds``, the governor sampling every interval."""
    samples = []
    for _ in range(round(seconds / governor.config.interval)):
        stage.run(governor.config.interval)
        samples.append(governor.step(stage.now))
    return samples


def changes(samples: list[GovernorSample]) -> list[tuple[float, str, str, int]]:
    return [(s.at, s.action, s.reason, s.pool_size) for s in samples if s.action]


# --- littles-law: the default ------------------------------------------------------------


def test_littles_law_is_the_default_rule() -> None:
    assert GovernorConfig().sizing == "littles-law"
    assert load_config(None, {"governor.sizing": "queue-threshold"}).governor.sizing == (
        "queue-threshold"
    )
    with pytest.raises(ConfigError, match=r"governor\.sizing"):
        load_config(None, {"governor.sizing": "guess"})
    with pytest.raises(ConfigError, match=r"governor\.headroom"):
        load_config(None, {"governor.headroom": -0.5})


def test_150_events_a_second_at_20_ms_settle_at_3_threads() -> None:
    """Little's law: 150/s x 20 ms = 3 workers. The backlog built while the pool was
    smaller would never drain with exactly 3 (their capacity is the arrival rate), so a
    fourth is lent for it and given back once it is gone."""
    stage = FluidStage(arrival=150, service=0.020)
    governor = governor_for(stage, threshold=250)
    samples = drive(stage, governor, 120)
    assert changes(samples) == [
        (2.0, "added", "load", 2),
        (4.0, "added", "load", 3),
        (6.0, "added", "backlog", 4),  # the queue stood at 300 events, not falling
        (12.0, "removed", "backlog gone", 3),
    ]
    assert samples[-1].needed == 3
    assert samples[-1].load == pytest.approx(3.0)
    assert stage.queue < 25  # the backlog is gone, not just ignored
    assert governor.added == 3
    assert governor.removed == 1


def test_behind_a_full_queue_the_papers_load_settles_at_3_without_overshoot() -> None:
    """The paper's Fig. 14 as a fluid: 1000 msgs/s, 15 % queries at 20 ms (3 ms a message
    on average), a queue of 1000 that fills in 1.5 s and then holds the arrivals back in
    the sockets. The queue-threshold rule went to 5 here (next test)."""
    stage = FluidStage(arrival=1000, service=0.003)
    governor = governor_for(stage)
    samples = drive(stage, governor, 60)
    assert samples[0].measured  # the queue was open for 1.5 s of the first 2
    assert samples[0].arrival_rate == pytest.approx(1000, rel=0.02)
    assert not samples[1].measured  # full: admissions only follow the workers
    assert changes(samples) == [
        (2.0, "added", "load", 2),
        (4.0, "added", "load", 3),
        (6.0, "added", "backlog", 4),  # capacity = arrivals: the backlog would stay
        (12.0, "removed", "backlog gone", 3),
    ]
    assert max(s.pool_size for s in samples) == 4
    assert stage.outside == 0
    assert stage.queue <= 1000 * TICK  # one tick's arrivals


def test_a_load_just_over_3_settles_at_4_and_adds_nothing_while_the_backlog_drains() -> None:
    """3.05 ms a message: 4 workers; their spare capacity works the backlog off (the part in
    the sockets too), so no thread is lent and none added behind the full queue."""
    stage = FluidStage(arrival=1000, service=0.00305)
    governor = governor_for(stage)
    samples = drive(stage, governor, 60)
    assert changes(samples) == [
        (2.0, "added", "load", 2),
        (4.0, "added", "load", 3),
        (6.0, "added", "load", 4),
    ]
    full_for = [s.at for s in samples if not s.measured]
    assert max(full_for) > 8.0  # the queue stayed full after the last addition ...
    assert stage.outside == 0  # ... and drained without another
    assert stage.queue <= 1000 * TICK


def test_steps_up_and_down_settle_without_overshoot_or_flapping() -> None:
    """100 -> 1000 -> 400 -> 100 msgs/s of the paper's mix (3 ms a message on average):
    0.3, 3, 1.2 and 0.3 workers. Up, the pool takes the load's 3 plus one thread lent for
    the backlog built on the way, given back once it is gone; down, it follows the load
    one thread per idle timeout, and nothing is added on the way down."""
    stage = FluidStage(arrival=100, service=0.003)
    governor = governor_for(stage, idle_timeout=5.0)
    low = drive(stage, governor, 20)
    stage.arrival = 1000
    high = drive(stage, governor, 50)
    stage.arrival = 400
    middle = drive(stage, governor, 50)
    stage.arrival = 100
    end = drive(stage, governor, 40)
    assert not changes(low)
    assert max(s.pool_size for s in high) == 4  # 3 for the load, 1 lent for the backlog
    assert high[-1].pool_size == 3
    assert [s.reason for s in high if s.action] == ["load", "load", "backlog", "backlog gone"]
    assert middle[-1].pool_size == 2  # ceil(1.2)
    assert {s.action for s in middle if s.action} == {"removed"}
    assert end[-1].pool_size == 1
    assert {s.action for s in end if s.action} == {"removed"}
    # Settled: no change in the last 20 s of any step.
    for step in (high, middle, end):
        assert not [s for s in step if s.action and s.at > step[-1].at - 20]
    assert stage.queue <= 1000 * TICK


def test_a_backlog_is_seen_before_the_queue_is_full() -> None:
    """A load a hair over the pool's capacity (3.0075 workers against 3: within the
    tolerance, so 3 are needed) builds its backlog slowly; with the threshold (100) below
    the queue's bound (1000) it is seen while the queue is still open."""
    seen = {}
    for threshold in (100, 999):
        stage = FluidStage(arrival=150, service=0.02005, pool=3)
        governor = governor_for(stage, threshold=threshold)
        governor.initial_pool_size = 1  # started from 1, already grown to 3
        seen[threshold] = [s for s in drive(stage, governor, 300) if s.action]
    assert [(s.reason, s.pool_size, s.measured) for s in seen[100][:1]] == [("backlog", 4, True)]
    assert seen[100][0].queue_length < 200
    assert not seen[999]  # at the bound the backlog of 5 minutes is not even seen


def test_a_backlog_that_comes_back_keeps_its_thread() -> None:
    """The backlog thread goes back once the backlog is gone; when the same load builds it
    again, the thread stays (a relapse), instead of coming and going every few minutes."""
    stage = FluidStage(arrival=150, service=0.02005, pool=3)
    governor = governor_for(stage, threshold=100)
    governor.initial_pool_size = 1
    samples = drive(stage, governor, 1200)
    assert [(s.reason, s.pool_size) for s in samples if s.action] == [
        ("backlog", 4),
        ("backlog gone", 3),
        ("relapse", 4),
    ]
    assert samples[-1].pool_size == 4
    assert stage.queue < 10


def test_the_samples_split_a_blocking_call_into_thread_time_and_turn_wait() -> None:
    stage = ScriptedStage(pool=3)
    governor = governor_for(stage)
    stage.advance(2.0, arrivals=150, handled=150, service=0.0205, queue=0)
    meter = stage.meter(2.0)
    stage.meter = lambda now: dataclasses.replace(  # type: ignore[method-assign]
        meter, blocking_calls=300, thread_seconds=300 * 0.0202, turn_wait_seconds=300 * 0.0003
    )
    sample = governor.step(2.0)
    assert sample.thread_ms == pytest.approx(20.2)
    assert sample.turn_wait_ms == pytest.approx(0.3)
    assert sample.service_ms == pytest.approx(20.5)


def test_the_queue_threshold_rule_overshoots_behind_a_full_queue() -> None:
    """Why the default changed: each sample while the backlog drains adds a thread."""
    stage = FluidStage(arrival=1000, service=0.003)
    governor = governor_for(stage, sizing="queue-threshold")
    samples = drive(stage, governor, 12)
    assert [s.pool_size for s in samples if s.action == "added"] == [2, 3, 4, 5]


def test_the_arrivals_are_measured_from_the_first_one() -> None:
    """A router waits for its peers before any load comes: the first sample measures the
    arrival rate over the time since the first arrival, not since the governor began."""
    stage = FluidStage(arrival=0, service=0.003)
    governor = governor_for(stage)
    stage.run(0.5)
    stage.arrival = 1000
    samples = drive(stage, governor, 2.0)
    assert samples[0].measured
    assert samples[0].arrival_rate == pytest.approx(1000, rel=0.01)  # not 750


def test_a_pool_with_little_to_spare_gets_a_backlog_thread_at_once() -> None:
    """A load of 2.9 workers on 3: the spare tenth of a worker would take a minute to work
    the backlog off, so a thread is lent at once; with 2.7 (0.3 to spare, some 15 s), the
    governor waits, and the backlog drains without one."""
    stage = FluidStage(arrival=1000, service=0.0029)
    samples = drive(stage, governor_for(stage), 60)
    assert changes(samples) == [
        (2.0, "added", "load", 2),
        (4.0, "added", "load", 3),
        (6.0, "added", "backlog", 4),
        (12.0, "removed", "backlog gone", 3),
    ]
    stage = FluidStage(arrival=1000, service=0.0027)
    samples = drive(stage, governor_for(stage), 60)
    assert changes(samples) == [(2.0, "added", "load", 2), (4.0, "added", "load", 3)]
    assert next(s.queue_length for s in samples if s.at == 14.0) > 500  # a backlog, long
    assert stage.outside == 0
    assert stage.queue <= 1000 * TICK  # drained by the spare capacity alone


def test_a_thread_is_never_added_while_the_queue_is_falling() -> None:
    """200/s at 20 ms is 4 workers' load, but while the queue falls the pool is keeping
    up (the last change is still working a backlog off): nothing is added until it
    stops falling."""
    stage = ScriptedStage()
    governor = governor_for(stage, threshold=1000)
    stage.advance(2.0, arrivals=200, handled=50, service=0.020, queue=900)
    assert governor.step(stage.at).action == "added"
    stage.advance(2.0, arrivals=200, handled=250, service=0.020, queue=700)  # falling
    sample = governor.step(stage.at)
    assert (sample.needed, sample.pool_size, sample.action) == (4, 2, "")
    stage.advance(2.0, arrivals=200, handled=200, service=0.020, queue=690)  # by less than 5 %
    assert governor.step(stage.at).action == "added"


def test_the_pool_shrinks_one_thread_per_idle_timeout_when_the_load_drops() -> None:
    stage = FluidStage(arrival=150, service=0.020)
    governor = governor_for(stage, threshold=250, idle_timeout=5.0)
    drive(stage, governor, 60)
    assert stage.pool == 3
    stage.arrival = 40  # 0.8 of a worker
    samples = drive(stage, governor, 30)
    removed = [(s.at, s.pool_size) for s in samples if s.action == "removed"]
    assert [pool for _, pool in removed] == [2, 1]
    assert all(s.reason == "idle" for s in samples if s.action)
    assert removed[1][0] - removed[0][0] >= 5.0  # one at a time
    assert removed[0][0] - 60 >= 5.0  # only after the load has been lower for long enough
    assert governor.added == 3  # nothing added on the way down


def test_a_load_just_under_a_whole_number_keeps_its_thread() -> None:
    """Hysteresis: a load of 2.95 keeps a pool of 4 (shrinking would leave 3 workers with
    less than a tenth of one spare); 2.85 does not."""
    for service, pool in ((0.0295, 4), (0.0285, 3)):
        stage = FluidStage(arrival=100, service=service, pool=4)
        governor = governor_for(stage, idle_timeout=5.0)
        governor.initial_pool_size = 1
        drive(stage, governor, 60)
        assert stage.pool == pool, service


def test_headroom_sizes_for_spare_capacity() -> None:
    stage = FluidStage(arrival=150, service=0.020)
    governor = governor_for(stage, headroom=0.25)
    samples = drive(stage, governor, 30)
    assert samples[-1].needed == 4  # ceil(3 x 1.25)
    assert stage.pool == 4
    assert governor.backlog_threads == 0


def test_the_thrashing_guard_undoes_an_addition_that_did_not_raise_throughput() -> None:
    """A stage bound by its processor: Little's law asks for 3 workers, but a second one
    handles nothing more, so it goes back and the pool is held until the queue drains."""
    stage = FluidStage(arrival=1000, service=0.003, cpu=1)
    governor = governor_for(stage, thrashing_guard=True)
    samples = drive(stage, governor, 30)
    assert [(s.action, s.pool_size) for s in samples if s.action] == [
        ("added", 2),
        ("reverted", 1),
    ]
    assert samples[-1].needed == 3
    assert stage.queue > 900
    # Without the guard, the pool grows and handles no more.
    stage = FluidStage(arrival=1000, service=0.003, cpu=1)
    governor = governor_for(stage)
    drive(stage, governor, 30)
    assert stage.pool >= 3


def test_an_addition_without_a_backlog_is_not_judged_by_the_guard() -> None:
    """With no backlog, throughput follows the arrivals, not the pool: the guard judges
    only additions made for a backlog."""
    for queue, reverted in ((5, False), (1000, True)):
        stage = ScriptedStage()
        governor = governor_for(stage, thrashing_guard=True, headroom=0.25)
        stage.advance(2.0, arrivals=100, handled=100, service=0.009, queue=queue)
        assert governor.step(stage.at).reason == "load"  # 0.9 x 1.25 needs 2
        stage.advance(2.0, arrivals=100, handled=100, service=0.009, queue=queue)
        assert (governor.step(stage.at).action == "reverted") is reverted


async def test_a_real_stage_at_150_events_a_second_and_20_ms_settles_at_3(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The real stage and its meter: each event holds its worker 20 ms of trio time with
    the turn given up, as the router's query delay does in a thread."""
    stage: Stage[int] = Stage("test", _nothing, threshold=1000, max_pool_size=20, batch_size=50)

    async def handle(batch: list[int]) -> int:
        stage.queue.requeue(batch[1:])  # one event per worker, like a delayed query
        async with stage.turn_released():
            await trio.sleep(0.020)
        return 1

    stage.handler = handle
    config = GovernorConfig(enabled=True, threshold=250)
    governor = ThreadGovernor(stage, config)

    async def arrivals() -> None:
        started = trio.current_time()
        for n in range(150 * 90):
            await trio.sleep_until(started + n / 150)
            if not stage.queue.admit_one(n):
                await stage.queue.wait_for_space()
                stage.queue.admit_one(n)

    async with trio.open_nursery() as nursery:
        await nursery.start(stage.serve)
        await nursery.start(governor.serve)
        await arrivals()
        nursery.cancel_scope.cancel()
    samples = list(governor.samples)
    assert [(s.reason, s.pool_size) for s in samples if s.action] == [
        ("load", 2),
        ("load", 3),
        ("backlog", 4),
        ("backlog gone", 3),
    ]
    assert samples[-1].service_ms == pytest.approx(20.0, rel=0.02)
    assert samples[-1].arrival_rate == pytest.approx(150, rel=0.01)
    assert samples[-1].queue_length < 25


# --- the queue-threshold rule (SEDA's original) --------------------------------------------


async def _nothing(batch: list[int]) -> None:
    return None


def governed(**settings: object) -> tuple[Stage[int], ThreadGovernor]:
    stage: Stage[int] = Stage("test", _nothing, threshold=100, max_pool_size=20)
    config = GovernorConfig(
        **{"enabled": True, "sizing": "queue-threshold", "threshold": 10, "idle_timeout": 5.0}
        | settings  # type: ignore[arg-type]
    )
    return stage, ThreadGovernor(stage, config)


def test_a_long_queue_adds_a_thread_up_to_the_maximum() -> None:
    stage, governor = governed(max_threads=3)
    stage.queue.admit(list(range(10)))
    assert governor.step(1.0).action == "added"
    assert stage.pool_size == 2
    assert stage.limiter.total_tokens == 2
    governor.step(2.0)
    assert stage.pool_size == 3
    assert governor.step(3.0).action == ""  # at the maximum
    assert governor.added == 2


def test_a_short_queue_adds_nothing() -> None:
    stage, governor = governed()
    stage.queue.admit(list(range(9)))
    assert governor.step(1.0).action == ""
    assert stage.pool_size == 1


def test_an_unneeded_thread_is_removed_after_the_idle_timeout() -> None:
    stage, governor = governed(idle_timeout=5.0)
    stage.queue.admit(list(range(10)))
    governor.step(1.0)
    stage.queue.take(100)
    assert stage.pool_size == 2
    governor._last_full_at = 1.0
    assert governor.step(4.0).action == ""  # idle, but not for long enough
    assert governor.step(6.5).action == "removed"
    assert stage.pool_size == 1
    assert governor.step(20.0).action == ""  # never below the initial size


def test_the_thrashing_guard_undoes_an_addition_that_did_not_help() -> None:
    stage, governor = governed(thrashing_guard=True)
    stage.queue.admit(list(range(50)))
    governor.step(1.0)
    assert stage.pool_size == 2
    sample = governor.step(2.0)  # no events handled: throughput did not rise
    assert sample.action == "reverted"
    assert stage.pool_size == 1
    assert governor.step(3.0).action == ""  # held until the queue drains


def test_the_governor_threshold_must_be_reachable() -> None:
    with pytest.raises(ConfigError, match=r"governor\.threshold"):
        load_config(
            None,
            {"governor.enabled": True, "governor.threshold": 5000, "router.queue_threshold": 1000},
        )


def test_the_governor_threshold_is_its_own_and_below_the_queue_bound() -> None:
    """At the queue's bound the router stops reading: a threshold equal to it would mean
    "full", so it must stay below; the defaults are 100 (the paper's thread controller)
    and 1000."""
    config = load_config(None, {"governor.enabled": True})
    assert (config.governor.threshold, config.router.queue_threshold) == (100, 1000)
    with pytest.raises(ConfigError, match=r"governor\.threshold.*below router\.queue_threshold"):
        load_config(
            None,
            {"governor.enabled": True, "governor.threshold": 500, "router.queue_threshold": 500},
        )
    bigger = load_config(None, {"governor.enabled": True, "router.queue_threshold": 5000})
    assert bigger.governor.threshold == 100  # the one does not follow the other


@pytest.mark.e2e
async def test_the_pool_grows_under_the_papers_query_delay(tmp_path: Path) -> None:
    overrides = {
        "router.query_delay_ms": 20,
        "router.queue_threshold": 200,
        "router.batch_size": 50,
        "governor.enabled": True,
        "governor.interval": 0.2,
        "governor.threshold": 100,
        "governor.max_threads": 8,
    }
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        half_queries = MessageMix("half", {0x00: 0.5, 0x80: 0.5})
        traffic = TrafficGenerator(mix=half_queries, arrivals=ConstantRate(300), seed=3)
        settings = LoadSettings(target=daemon.address, peers=3, duration=4.0, drain=1.0)
        report = await run_load(settings, traffic)
        governor = daemon.governor
        assert governor is not None
        # 300 msgs/s x 50 % queries x 20 ms = 3 busy threads by Little's law.
        assert governor.added >= 2
        assert max(s.pool_size for s in governor.samples) >= 3
        assert 2.5 < governor.load < 4.5
        assert report.received == report.expected  # backpressure: nothing lost
