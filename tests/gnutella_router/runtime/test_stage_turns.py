"""When a stage's worker lets the other tasks run between batches, and when it may not."""

from __future__ import annotations

import trio
import trio.testing

from gnutella_router.runtime.stage import RUN_BUDGET_SECONDS, Stage


async def _run(
    clock: trio.testing.MockClock,
    *,
    may_continue: bool | None,
    events: int,
    batch_size: int = 10,
    seconds_a_batch: float = 0.0,
) -> tuple[list[str], int]:
    """Route ``events`` queued at once; return what ran, in order (``batch`` for each
    batch the worker handled, ``other`` each time the test's own task had its turn), and
    the batches the stage counted as taken back to back."""
    ran: list[str] = []

    async def handler(batch: list[int]) -> None:
        ran.append("batch")
        clock.jump(seconds_a_batch)

    stage: Stage[int] = Stage(
        "s",
        handler,
        threshold=1000,
        batch_size=batch_size,
        may_continue=None if may_continue is None else (lambda: may_continue),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(stage.serve)
        stage.queue.admit(list(range(events)))
        while stage.queue or stage.batches * batch_size < events:
            ran.append("other")
            await trio.lowlevel.checkpoint()
        nursery.cancel_scope.cancel()
    # Only the turns between batches matter: drop the test's turns before the first.
    return ran[ran.index("batch") :], stage.statistics().batches_back_to_back


def _runs_of_batches(ran: list[str]) -> list[int]:
    """How many batches ran back to back, each time."""
    runs: list[int] = []
    count = 0
    for what in ran:
        if what == "batch":
            count += 1
        elif count:
            runs.append(count)
            count = 0
    if count:
        runs.append(count)
    return runs


async def test_unless_the_stage_may_continue_every_batch_lets_the_other_tasks_run(
    mock_clock: trio.testing.MockClock,
) -> None:
    ran, back_to_back = await _run(mock_clock, may_continue=None, events=40)
    assert (_runs_of_batches(ran), back_to_back) == ([1, 1, 1, 1], 0)
    ran, back_to_back = await _run(mock_clock, may_continue=False, events=40)
    assert (_runs_of_batches(ran), back_to_back) == ([1, 1, 1, 1], 0)


async def test_when_it_may_continue_a_full_queue_is_routed_back_to_back(
    mock_clock: trio.testing.MockClock,
) -> None:
    """Nobody admits while the worker goes on, so it stops once less than a whole batch
    is left: 45 events in batches of 10 are four batches in a row, then the last five
    after the other tasks have run."""
    ran, back_to_back = await _run(mock_clock, may_continue=True, events=45)
    assert (_runs_of_batches(ran), back_to_back) == ([4, 1], 3)


async def test_the_worker_lets_the_others_run_once_its_budget_is_spent(
    mock_clock: trio.testing.MockClock,
) -> None:
    """Time stands still but for the batches, each 0.4 of the budget: after the third
    the budget is spent, so the others run, and the count starts again."""
    ran, back_to_back = await _run(
        mock_clock, may_continue=True, events=60, seconds_a_batch=RUN_BUDGET_SECONDS * 0.4
    )
    assert (_runs_of_batches(ran), back_to_back) == ([3, 3], 4)
