"""The stage's meter, which the thread governor samples: busy time and closed time."""

from __future__ import annotations

import trio
import trio.testing

from gnutella_router.runtime.stage import Stage
from gnutella_router.runtime.stage_queue import StageQueue


async def test_the_queue_counts_the_time_it_was_closed_to_arrivals(
    autojump_clock: trio.testing.MockClock,
) -> None:
    queue: StageQueue[int] = StageQueue("q", threshold=3)
    start = trio.current_time()
    queue.admit([1, 2])
    await trio.sleep(1)
    assert queue.closed_seconds(trio.current_time()) == 0.0  # room left: open
    queue.admit([3])
    await trio.sleep(1)
    assert queue.closed_seconds(trio.current_time()) == 1.0  # full
    queue.take(1)  # room, and nobody was waiting for it: open again
    await trio.sleep(1)
    assert queue.closed_seconds(start + 3) == 1.0

    async def producer() -> None:
        await queue.wait_for_space()
        queue.admit([5])

    queue.admit([4])  # full again at 3 s
    async with trio.open_nursery() as nursery:
        nursery.start_soon(producer)
        await trio.sleep(1)
        queue.take(2)  # room at 4 s, but the producer waiting has not taken it yet
        assert queue.closed_seconds(start + 4) == 2.0
        assert queue.closed_seconds(start + 4.5) == 2.5  # still closed until it runs
    # The producer took its room at 4 s and left one place: open from then on.
    assert len(queue) == 2
    await trio.sleep(2)
    assert queue.closed_seconds(trio.current_time()) == 2.0


async def test_the_meter_counts_the_worker_seconds_of_finished_batches(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stage: Stage[int]

    async def slow(batch: list[int]) -> None:
        async with stage.turn_released():  # as a blocking call would
            await trio.sleep(1.0)

    stage = Stage("s", slow, threshold=100, pool_size=2, batch_size=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(stage.serve)
        start = trio.current_time()
        first = stage.meter(start)
        assert first.first_admitted_at is None
        await trio.sleep(1.0)
        stage.queue.admit([1, 2, 3])
        await trio.sleep(0.5)
        half = stage.meter(trio.current_time())
        assert half.busy_seconds == first.busy_seconds  # the batches in hand are not done
        assert (half.admitted, half.events, half.peak_busy) == (3, 0, 2)
        assert half.first_admitted_at == start + 1.0  # the arrivals began then
        await trio.sleep(1.0)
        one = stage.meter(trio.current_time())
        assert one.busy_seconds - first.busy_seconds == 2.0  # two events of 1 s each
        assert (one.events, one.peak_busy) == (2, 2)
        await trio.sleep(1.0)
        done = stage.meter(trio.current_time())
        nursery.cancel_scope.cancel()
    assert done.busy_seconds - first.busy_seconds == 3.0  # three events of 1 s each
    assert (done.events, done.queue_length, done.pool_size) == (3, 0, 2)
    assert done.closed_seconds == 0.0
