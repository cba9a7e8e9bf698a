"""The batching controller's law, on a simulated stage and clock (no I/O, no sleeps).

The fake stage models a saturated router: with a backlog, it handles
``1 / (per_event + per_batch / batch)`` events a second, so a batch too small spends its
time on per-batch overhead and throughput falls; without one, it handles the arrivals.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from gnutella_router.config.sections import BatchingConfig, RouterConfig
from gnutella_router.control.batching import BatchingController
from gnutella_router.lab.traffic.load import LoadSettings, run_load
from gnutella_router.observe.dumps import dump_stages
from gnutella_router.observe.metrics import metrics_registry, render_metrics
from gnutella_router.runtime.meters import BatchMeter
from tests.support.peers import running_daemons
from traffic_models.arrivals import ConstantRate
from traffic_models.generator import TrafficGenerator
from traffic_models.mix import PAPER_MIX

INTERVAL = 1.0


class FakeStage:
    def __init__(self, batch_size: int = 250, threshold: int = 1000) -> None:
        self.batch_size = batch_size
        self.threshold = threshold
        self.queue_length = 0
        self.events = 0
        self.batches = 0
        self.busy = 0.0
        self.now = 0.0

    def batch_meter(self, now: float) -> BatchMeter:
        return BatchMeter(
            at=now,
            batch_size=self.batch_size,
            queue_length=self.queue_length,
            queue_threshold=self.threshold,
            events=self.events,
            batches=self.batches,
            busy_seconds=self.busy,
        )

    def run(
        self,
        *,
        arrivals: float,
        per_event: float = 20e-6,
        per_batch: float = 2e-3,
        scale: float = 1.0,
        cliff: float = 0,
    ) -> None:
        """One interval: a backlog (``arrivals`` over capacity) or the arrivals handled.

        ``scale`` multiplies the capacity for this interval (noise, a disturbance);
        under a batch of ``cliff`` the capacity is halved.
        """
        batch = self.batch_size
        capacity = scale / (per_event + per_batch / batch) * (0.5 if batch < cliff else 1.0)
        if arrivals >= capacity:
            handled = capacity * INTERVAL
            self.queue_length = 100  # a standing backlog, under any overload share used
            size = batch
        else:
            handled = arrivals * INTERVAL
            self.queue_length = 0
            size = max(1, batch // 10)
        self.events += round(handled)
        self.batches += max(1, round(handled / size))
        self.busy += handled * per_event
        self.now += INTERVAL


def controller(stage: FakeStage, **overrides: object) -> BatchingController:
    config = BatchingConfig(**overrides)  # type: ignore[arg-type]
    return BatchingController(stage, config)


def drive(stage: FakeStage, ctl: BatchingController, samples: int, **run: float) -> None:
    for _ in range(samples):
        stage.run(**run)
        ctl.step(stage.now)


def test_decreases_while_throughput_holds() -> None:
    # No per-batch cost: throughput is the same at every batch size, so it shrinks to the floor.
    stage = FakeStage()
    ctl = controller(stage)
    # The first sample began with an empty queue, so is not bound; then `window` (3) are.
    drive(stage, ctl, 3, arrivals=1e9, per_batch=0.0)
    assert stage.batch_size == 250
    drive(stage, ctl, 1, arrivals=1e9, per_batch=0.0)
    assert stage.batch_size == 200
    drive(stage, ctl, 200, arrivals=1e9, per_batch=0.0)
    assert stage.batch_size == ctl.min_batch == 8
    assert ctl.decreased > 0
    assert ctl.increased == 0


def test_increases_a_little_when_throughput_degrades_then_settles() -> None:
    # 20 us an event and 2 ms a batch: at 250, 8 % of the time is per-batch cost; each
    # decrease costs more, and the 5 % tolerance is crossed at around 160.
    stage = FakeStage()
    ctl = controller(stage)
    drive(stage, ctl, 60, arrivals=1e9)
    assert ctl.increased >= 1
    assert ctl.settled
    settled = stage.batch_size
    assert 100 < settled < 250
    # The step is a tenth of the maximum: 25.
    increases = [s for s in ctl.samples if s.action == "increased"]
    decreases = [s for s in ctl.samples if s.action == "decreased"]
    assert increases[0].batch_size - decreases[-1].batch_size == 25
    # Settled: no further decrease while the load stays.
    drive(stage, ctl, 30, arrivals=1e9)
    assert stage.batch_size >= settled
    assert not any(s.action == "decreased" for s in list(ctl.samples)[-30:])


def test_resets_to_maximum_on_a_sudden_drop() -> None:
    stage = FakeStage()
    ctl = controller(stage)
    drive(stage, ctl, 30, arrivals=1e9, per_batch=0.0)
    assert stage.batch_size < 250
    stage.run(arrivals=1000)  # capacity is 50 000/s; a fiftieth of it now
    sample = ctl.step(stage.now)
    assert (sample.action, sample.reason) == ("reset", "load drop")
    assert stage.batch_size == 250
    assert ctl.resets == 1
    assert not ctl.settled
    assert ctl.reference_rate == 0.0


def test_light_load_changes_nothing() -> None:
    # Not bound by the batch: its size is not judged either way.
    stage = FakeStage()
    ctl = controller(stage)
    drive(stage, ctl, 50, arrivals=2000)
    assert stage.batch_size == 250
    assert not any(s.bound for s in ctl.samples)
    assert ctl.decreased == ctl.increased == ctl.resets == 0


def test_a_collapse_under_a_backlog_puts_the_maximum_back_at_once() -> None:
    stage = FakeStage()
    ctl = controller(stage)
    drive(stage, ctl, 25, arrivals=1e9, per_batch=0.0)
    while ctl.samples[-1].action != "decreased":  # a window starts at the new batch
        drive(stage, ctl, 1, arrivals=1e9, per_batch=0.0)
    assert stage.batch_size < 100
    # Each batch now costs 20 ms: at the small batch, throughput falls far below the
    # reference, more than twice the tolerance, for two samples running.
    stage.run(arrivals=1e9, per_batch=20e-3)
    assert ctl.step(stage.now).action == ""
    stage.run(arrivals=1e9, per_batch=20e-3)
    sample = ctl.step(stage.now)
    assert (sample.action, sample.reason) == ("reset", "collapse")
    assert stage.batch_size == 250
    assert ctl.reference_rate == 0.0


def test_a_full_queue_alone_does_not_stop_the_search() -> None:
    # Under backpressure a saturated stage's queue sits at its threshold.
    stage = FakeStage()
    ctl = controller(stage)
    for _ in range(30):
        stage.run(arrivals=1e9, per_batch=0.0)
        stage.queue_length = stage.threshold
        ctl.step(stage.now)
    assert stage.batch_size < 100
    assert ctl.resets == 0


def test_bounds() -> None:
    stage = FakeStage(batch_size=10)
    ctl = controller(stage, min_batch=8)
    drive(stage, ctl, 100, arrivals=1e9, per_batch=0.0)
    assert stage.batch_size == 8  # never under min_batch, at least one less each time
    # The increase never passes the maximum.
    stage = FakeStage(batch_size=20)
    ctl = controller(stage, min_batch=1, increase=1.0)
    drive(stage, ctl, 100, arrivals=1e9)
    assert all(1 <= s.batch_size <= 20 for s in ctl.samples)
    # A maximum under min_batch: the maximum is the floor.
    assert controller(FakeStage(batch_size=4)).min_batch == 4


def test_statistics_show_the_state() -> None:
    stage = FakeStage()
    ctl = controller(stage)
    drive(stage, ctl, 10, arrivals=1e9, per_batch=0.0)
    stats = ctl.statistics()
    assert stats.batch_size == stage.batch_size
    assert stats.max_batch == 250
    assert stats.reference_rate == pytest.approx(50_000, rel=0.01)
    assert stats.recent[-1].bound
    assert stats.decreased == ctl.decreased >= 2


@pytest.mark.e2e
async def test_a_real_router_resets_its_batch_when_the_load_stops(tmp_path: Path) -> None:
    """Through a real router on loopback: the controller samples the live stage, its
    state shows in the stages dump and /metrics, and when the load stops it puts a
    smaller batch (as left by an earlier search) back to router.batch_size."""
    overrides = {"batching.interval": 0.2, "batching.window": 3}
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        batching = daemon.batching
        assert batching is not None
        stage = daemon.router.stage
        largest = RouterConfig().batch_size
        assert batching.max_batch == stage.batch_size == largest
        traffic = TrafficGenerator(mix=PAPER_MIX, arrivals=ConstantRate(2000), seed=5)
        settings = LoadSettings(target=daemon.address, peers=3, duration=2.0, drain=0.5)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_load, settings, traffic)
            await trio.sleep(1.5)
            # A light load finds no batch full: nothing was judged, nothing changed.
            assert batching.decreased == batching.increased == batching.resets == 0
            assert batching.rate > 500
            stage.batch_size = 40
        await trio.sleep(1.0)  # the load has stopped: a sudden drop
        assert stage.batch_size == largest
        assert [(s.action, s.reason) for s in batching.samples if s.action] == [
            ("reset", "load drop")
        ]
        dump = dump_stages(daemon)
        state = dump["batching"]
        assert isinstance(state, dict)
        assert state["batch_size"] == largest
        assert state["resets"] == 1
        metrics = render_metrics(metrics_registry(daemon)).decode()
        assert 'gnutella_batching_changes_total{action="reset"} 1.0' in metrics
        assert f'gnutella_stage_batch_size{{stage="router"}} {largest:.1f}' in metrics


@pytest.mark.e2e
async def test_off_the_batch_stays_fixed(tmp_path: Path) -> None:
    overrides = {"batching.enabled": False, "router.batch_size": 100}
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        assert daemon.batching is None
        assert daemon.router.stage.batch_size == 100
        assert dump_stages(daemon)["batching"] is None


def test_one_low_sample_is_not_a_collapse() -> None:
    # A saturated router's output rate varies by several per cent from one 1 s sample to
    # the next by itself (other processes, its own garbage collection); one sample under
    # twice the tolerance, where the batch does not matter, is noise, not a collapse.
    stage = FakeStage()
    ctl = controller(stage)
    drive(stage, ctl, 4, arrivals=1e9, per_batch=0.0)
    assert stage.batch_size == 200
    stage.run(arrivals=1e9, per_batch=0.0, scale=0.88)
    assert ctl.step(stage.now).action == ""
    drive(stage, ctl, 2, arrivals=1e9, per_batch=0.0)
    assert stage.batch_size == 160  # the window's mean held: the search went on
    assert ctl.resets == 0


def test_a_collapse_lasting_two_samples_resets_the_batch() -> None:
    stage = FakeStage()
    ctl = controller(stage)
    drive(stage, ctl, 4, arrivals=1e9, per_batch=0.0)
    for expected in ("", "reset"):
        stage.run(arrivals=1e9, per_batch=0.0, scale=0.7)
        assert ctl.step(stage.now).action == expected
    assert stage.batch_size == 250
    assert ctl.samples[-1].reason == "collapse"


def test_no_search_back_down_to_a_batch_that_collapsed() -> None:
    # Throughput holds down to a batch of 150 and halves under it. After the collapse at
    # 128 the search starts again from the top, but stops above 128: it does not swing
    # between 250 and the cliff for as long as the load lasts.
    stage = FakeStage()
    ctl = controller(stage)
    drive(stage, ctl, 200, arrivals=1e9, per_batch=0.0, cliff=150)
    collapses = [s for s in ctl.samples if s.reason == "collapse"]
    assert len(collapses) == 1
    assert ctl.resets == 1
    assert ctl.floor == 128 + 25
    assert all(s.batch_size >= ctl.floor for s in list(ctl.samples)[-100:])
    assert stage.batch_size == ctl.floor
    # A sudden drop in load starts a new search, free of the old floor.
    stage.run(arrivals=1000)
    assert ctl.step(stage.now).reason == "load drop"
    assert ctl.floor == ctl.min_batch


def test_a_drop_in_load_clears_a_floor_left_at_the_largest_batch() -> None:
    # A collapse at 225 leaves the floor at 250: no search for the rest of that load.
    # When the load drops, the next one is searched afresh.
    stage = FakeStage()
    ctl = controller(stage)
    drive(stage, ctl, 4, arrivals=1e9, per_batch=0.0)
    assert stage.batch_size == 200
    drive(stage, ctl, 3, arrivals=1e9, per_batch=0.0, scale=0.93)  # degraded: 225
    assert stage.batch_size == 225
    drive(stage, ctl, 2, arrivals=1e9, per_batch=0.0, scale=0.7)
    assert (ctl.samples[-1].reason, stage.batch_size, ctl.floor) == ("collapse", 250, 250)
    drive(stage, ctl, 10, arrivals=1e9, per_batch=0.0)
    assert stage.batch_size == 250  # held above the batch that collapsed
    drive(stage, ctl, 1, arrivals=1000)
    assert ctl.samples[-1].reason == "load drop"
    assert ctl.floor == ctl.min_batch
    drive(stage, ctl, 6, arrivals=1e9, per_batch=0.0)
    assert stage.batch_size < 250
