"""Stage histograms: the buckets Prometheus reads, and the queue's admission marks."""

from __future__ import annotations

import trio
import trio.testing

from gnutella_router.runtime.histogram import BUCKETS, SecondsHistogram
from gnutella_router.runtime.stage import Stage
from gnutella_router.runtime.stage_queue import StageQueue


def test_observations_land_in_cumulative_buckets() -> None:
    histogram = SecondsHistogram()
    for seconds in (0.000_005, 0.000_01, 0.003, 0.003, 42.0):
        histogram.observe(seconds)
    snapshot = histogram.snapshot()
    cumulative = dict(snapshot.buckets)
    assert cumulative[0.000_01] == 2  # a bound is inclusive, as Prometheus' "le"
    assert cumulative[0.002_5] == 2
    assert cumulative[0.005] == 4
    assert cumulative[10.0] == 4
    assert cumulative[float("inf")] == snapshot.count == 5
    assert snapshot.sum == sum((0.000_005, 0.000_01, 0.003, 0.003, 42.0))
    assert len(snapshot.buckets) == len(BUCKETS) + 1
    assert snapshot.quantile(0.5) == 0.005


async def test_the_queue_knows_when_its_head_was_admitted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    queue: StageQueue[int] = StageQueue("q", threshold=100)
    assert queue.head_admitted_at() is None
    queue.admit([1, 2, 3])
    first = trio.current_time()
    await trio.sleep(1)
    queue.admit([4, 5])
    assert queue.head_admitted_at() == first
    assert queue.take(2) == [1, 2]
    assert queue.head_admitted_at() == first  # 3 came in with the first run
    assert queue.take(1) == [3]
    assert queue.head_admitted_at() == first + 1
    queue.requeue([3])
    assert queue.head_admitted_at() == first  # handed back, it keeps its admission time
    assert queue.take(10) == [3, 4, 5]
    assert queue.head_admitted_at() is None
    assert len(queue._marks) == 0  # marks never outlive their events


async def test_a_stage_times_the_wait_and_the_handling_of_each_batch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def slow_handler(batch: list[int]) -> None:
        await trio.sleep(0.2)

    stage: Stage[int] = Stage("s", slow_handler, threshold=100, batch_size=2)
    async with trio.open_nursery() as nursery:
        stage.queue.admit([1, 2, 3, 4])
        await nursery.start(stage.serve)
        while stage.events < 4:
            await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    statistics = stage.statistics()
    assert statistics.service_time.count == 2
    assert abs(statistics.service_time.sum - 0.4) < 1e-6
    # The second batch waited behind the first one's 0.2 s of handling.
    assert statistics.queue_wait.count == 2
    assert abs(statistics.queue_wait.sum - 0.2) < 1e-6
