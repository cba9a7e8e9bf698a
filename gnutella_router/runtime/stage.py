"""SEDA stages on trio: a bounded event queue, a batch handler, a resizable worker pool.

Theory of operation
-------------------
A stage owns a :class:`~.stage_queue.StageQueue`. Putting events on it is an explicit admission
decision: :meth:`StageQueue.admit` takes what fits under the queue's threshold and says
how much that was; the caller decides what happens to the rest, either shedding it (and
counting why) or applying backpressure (not reading its socket until
:meth:`StageQueue.wait_for_space` returns). Nothing ever blocks inside the queue, and
nothing grows past the threshold.

Workers are trio tasks. Each takes a batch of up to ``batch_size`` events and hands it
to the stage's handler; taking many events per wake-up is what keeps a stage hop cheap
(about 0.4 us an event batched against 7 us awaited one by one, measured on this
machine). Workers are also the stage's "threads" in the paper's sense: the handler runs
its blocking work (the injected per-query delay, any blocking lookup) through
:meth:`Stage.run_blocking`, which hands it to a real thread under a
:class:`trio.CapacityLimiter` sized like the pool. While one worker waits for its
thread, the others keep draining the queue; with one worker, everything behind a
blocked event waits, which is the paper's single-threaded router. The pool can be
resized while running (the thread governor does this), and shrinking only ever stops a
worker between batches.

After a batch a worker lets every other task run (two scheduler rounds, see
:meth:`Stage._work`) before it takes the next, so that the tasks its batch woke (the
connections' writers, the readers waiting for room) go on first. A stage may skip that
when it is safe (``may_continue``): under a flood, the rounds between batches were a
good part of a batch's cost. The skip is bounded: only while a whole batch more is
queued, and for at most :data:`RUN_BUDGET_SECONDS` since the worker last let the others
run; nobody admits meanwhile, so the queue only shrinks.

Routing state is touched only from the trio thread, so handlers need no locks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Generic, Protocol, TypeVar

import structlog
import trio

from gnutella_router.runtime.histogram import HistogramSnapshot, SecondsHistogram
from gnutella_router.runtime.meters import BatchMeter, StageMeter
from gnutella_router.runtime.stage_queue import QueueStatistics, StageQueue
from gnutella_router.snapshots import from_attributes

T = TypeVar("T")
R = TypeVar("R")

RUN_BUDGET_SECONDS = 0.001
"""How long a worker may go on taking batches without letting the other tasks run,
when its stage says it may (``may_continue``): about what the four batches of a full
router queue take to route at the defaults, so a timer or a handshake waits at most
about that much longer for its turn."""


@dataclasses.dataclass(frozen=True, slots=True)
class StageStatistics:
    """A stage at one instant: its queue, its pool and what the pool has done."""

    name: str
    queue: QueueStatistics
    pool_size: int
    """Workers the stage is set to run (the governor's knob)."""
    batch_size: int
    """Most events a worker takes per batch (the batching controller's knob)."""
    workers: int
    """Workers actually alive (differs from pool_size briefly while resizing)."""
    busy_workers: int
    blocking_in_progress: int
    """Handlers waiting on a thread right now."""
    batches: int
    events: int
    handler_errors: int
    """Batches lost to an unexpected exception in the handler (each one logged)."""
    idle_seconds: float
    """Since the last time any worker was busy (0 while one is)."""
    queue_wait: HistogramSnapshot
    """Per batch: how long its oldest event waited in the queue, in seconds."""
    service_time: HistogramSnapshot
    """Per batch: how long the handler took, blocking work included, in seconds."""
    busy_seconds: float = 0.0
    """Worker-seconds spent in finished batches (see :class:`StageMeter`)."""
    blocking_calls: int = 0
    thread_seconds: float = 0.0
    turn_wait_seconds: float = 0.0
    """Totals of the blocking calls (see :class:`StageMeter`): where the slow events' time goes."""
    batches_back_to_back: int = 0
    """Of ``batches``, those taken right after the one before, without letting the other
    tasks run first (see ``Stage``'s ``may_continue``): under a flood, most of them."""


class _Worker:
    __slots__ = ("busy", "cancel_scope", "retire")

    def __init__(self) -> None:
        self.busy = False
        self.retire = False
        self.cancel_scope = trio.CancelScope()


class StatisticsSource(Protocol):
    """Anything that can describe itself: stages, queues, servers, tables."""

    def statistics(self) -> object: ...


class Stage(Generic[T]):
    """A named queue, a batch handler, and a pool of workers that can be resized live."""

    def __init__(
        self,
        name: str,
        handler: Callable[[list[T]], Awaitable[int | None]],
        *,
        threshold: int,
        pool_size: int = 1,
        max_pool_size: int = 20,
        batch_size: int = 250,
        may_continue: Callable[[], bool] | None = None,
    ) -> None:
        """``may_continue``, when given, is asked after a batch while a whole batch more
        is queued: whether the worker may take it at once, before the tasks the batch
        woke have run (see the module). Without it, every batch is followed by the
        scheduler rounds."""
        if not 1 <= pool_size <= max_pool_size:
            raise ValueError(f"stage {name!r}: pool size must be within 1..{max_pool_size}")
        if batch_size < 1:
            raise ValueError(f"stage {name!r}: batch size must be at least 1")
        self.name = name
        self.queue: StageQueue[T] = StageQueue(name, threshold)
        self.handler = handler
        self.batch_size = batch_size
        self.may_continue = may_continue
        self.batches_back_to_back = 0
        """Batches taken right after the one before, without the scheduler rounds in
        between (see ``may_continue``)."""
        self.max_pool_size = max_pool_size
        self._pool_size = pool_size
        self._workers: list[_Worker] = []
        self._nursery: trio.Nursery | None = None
        self.limiter = trio.CapacityLimiter(pool_size)
        self._turn = trio.Lock()
        """Held by the worker running the non-blocking part of a batch (see _work)."""
        self.batches = 0
        self.events = 0
        self.handler_errors = 0
        self._peak_busy = 0
        self.log = structlog.get_logger("stage").bind(stage=name)
        self._busy = 0
        self._busy_seconds = 0.0
        """Worker-seconds spent in finished batches (see :class:`StageMeter`)."""
        self._idle_since = 0.0
        self._blocking = 0
        self._blocking_calls = 0
        self._thread_seconds = 0.0
        self._turn_wait_seconds = 0.0
        self.queue_wait = SecondsHistogram()
        self.service_time = SecondsHistogram()
        self.response_observer: Callable[[float, float, T], None] | None = None
        """Told each batch's response time (its oldest event, from admission to the end of
        its handling), the time and that event; the response-time controller listens here."""

    @property
    def pool_size(self) -> int:
        return self._pool_size

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the workers until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._idle_since = trio.current_time()
            for _ in range(self._pool_size):
                self._spawn()
            task_status.started()
            await trio.sleep_forever()

    def set_pool_size(self, size: int) -> int:
        """Grow or shrink the pool; returns the size actually set (clamped to the bounds).

        New workers start at once; surplus workers finish the batch in hand first.
        The thread limiter follows, so blocking work gets exactly one thread per worker.
        """
        size = max(1, min(self.max_pool_size, size))
        self._pool_size = size
        self.limiter.total_tokens = size
        if self._nursery is None:
            return size
        alive = [w for w in self._workers if not w.retire]
        while len(alive) < size:
            alive.append(self._spawn())
        surplus = len(alive) - size
        # Retire idle workers first: they are parked and can simply be cancelled.
        for worker in sorted(alive, key=lambda w: w.busy):
            if surplus <= 0:
                break
            worker.retire = True
            if not worker.busy:
                worker.cancel_scope.cancel()
            surplus -= 1
        return size

    def _spawn(self) -> _Worker:
        assert self._nursery is not None
        worker = _Worker()
        self._workers.append(worker)
        self._nursery.start_soon(self._work, worker, name=f"{self.name}-worker")
        return worker

    async def _work(self, worker: _Worker) -> None:
        queue = self.queue
        handler = self.handler
        turn = self._turn
        may_continue = self.may_continue
        yielded_at = trio.current_time()  # when the other tasks last had their turn
        try:
            with worker.cancel_scope:
                while not worker.retire:
                    if not queue:
                        await queue.wait_for_events()
                        yielded_at = trio.current_time()
                        continue
                    try:
                        # Without waiting when the turn is free: Lock.acquire() always
                        # yields, and a scheduler round per batch is latency for nothing.
                        turn.acquire_nowait()
                    except trio.WouldBlock:
                        await turn.acquire()
                    try:
                        admitted_at = queue.head_admitted_at()
                        batch = queue.take(self.batch_size)
                        if not batch:
                            continue
                        started = trio.current_time()
                        if admitted_at is not None:
                            self.queue_wait.observe(started - admitted_at)
                        handled: int | None = len(batch)
                        worker.busy = True
                        self._busy += 1
                        if self._busy > self._peak_busy:
                            self._peak_busy = self._busy
                        try:
                            handled = await handler(batch)
                        except Exception:
                            # A bug, not bad input (bad input is counted, never raised):
                            # lose this batch, say so loudly, keep the stage running.
                            self.handler_errors += 1
                            self.log.exception("stage handler failed", batch=len(batch))
                        finally:
                            worker.busy = False
                            self._busy -= 1
                            ended = trio.current_time()
                            self._busy_seconds += ended - started
                            self.service_time.observe(ended - started)
                            if self.response_observer is not None and admitted_at is not None:
                                self.response_observer(ended - admitted_at, ended, batch[0])
                            if not self._busy:
                                self._idle_since = ended
                        self.batches += 1
                        # A handler that handed events back says how many it handled
                        # (None: all of them); the rest are counted by whoever takes them.
                        self.events += len(batch) if handled is None else handled
                        if (
                            may_continue is not None
                            and len(queue) >= self.batch_size
                            and ended - yielded_at < RUN_BUDGET_SECONDS
                            and may_continue()
                        ):
                            # A whole batch is waiting and nothing the batch did needs
                            # another task first: take it without the rounds below.
                            self.batches_back_to_back += 1
                            continue
                        # Two schedule points, still holding the turn. trio runs each
                        # round of runnable tasks in a random order, so after a single
                        # yield a worker may run again before the connection writers
                        # its batch woke up; after the second, every task woken during
                        # the batch has run. With the turn held, no other worker slips
                        # a batch in meanwhile either: between two flushes a healthy
                        # peer's queue grows by at most one batch, whatever the pool
                        # size, which is what the slow-peer threshold relies on (the
                        # router skips a flush only where one batch more still fits).
                        await trio.lowlevel.checkpoint()
                        await trio.lowlevel.checkpoint()
                        yielded_at = trio.current_time()
                    finally:
                        # Cancelled while waiting on its thread, a worker may not have
                        # got the turn back (see run_blocking): release only if held.
                        if turn.statistics().owner is trio.lowlevel.current_task():
                            turn.release()
        finally:
            self._workers.remove(worker)

    async def run_blocking(self, function: Callable[..., R], *args: object) -> R:
        """Run blocking work in a thread, at most one per worker at a time.

        Called from the handler, while the worker holds the stage's turn: the turn is
        given up for the wait, so other workers route meanwhile, and taken back after.
        """
        async with self.turn_released():
            started = trio.current_time()
            try:
                return await trio.to_thread.run_sync(function, *args, limiter=self.limiter)
            finally:
                self._blocking_calls += 1
                self._thread_seconds += trio.current_time() - started

    @contextlib.asynccontextmanager
    async def turn_released(self) -> AsyncIterator[None]:
        """Give up the stage's turn while the handler waits on something, then take it back.

        For a handler whose event waits outside the trio thread (:meth:`run_blocking`),
        or, in tests, on trio's clock: the worker stays busy, and the other workers route
        meanwhile.
        """
        self._blocking += 1
        self._turn.release()
        try:
            yield
        finally:
            self._blocking -= 1
            waiting = trio.current_time()
            await self._turn.acquire()
            self._turn_wait_seconds += trio.current_time() - waiting

    def take_peak_busy(self) -> int:
        """Most workers busy at once (blocked in a thread included) since the last call.

        The governor reads this once per sample: a pool whose peak stays below its size
        for long enough has a worker it does not need, however evenly the idle workers
        share the light load between them.
        """
        peak, self._peak_busy = max(self._peak_busy, self._busy), self._busy
        return peak

    def meter(self, now: float) -> StageMeter:
        """The stage's totals at ``now`` (the current trio time), for the thread governor.

        Reading it takes the busy peak (:meth:`take_peak_busy`), so one controller
        should read it, once per sample.
        """
        return StageMeter(
            at=now,
            pool_size=self._pool_size,
            queue_length=len(self.queue),
            queue_threshold=self.queue.threshold,
            admitted=self.queue.admitted,
            first_admitted_at=self.queue.first_admitted_at,
            events=self.events,
            busy_seconds=self._busy_seconds,
            closed_seconds=self.queue.closed_seconds(now),
            peak_busy=self.take_peak_busy(),
            blocking_calls=self._blocking_calls,
            thread_seconds=self._thread_seconds,
            turn_wait_seconds=self._turn_wait_seconds,
        )

    def batch_meter(self, now: float) -> BatchMeter:
        """The stage's batch totals at ``now``, for the batching controller (no side effect)."""
        return BatchMeter(
            at=now,
            batch_size=self.batch_size,
            queue_length=len(self.queue),
            queue_threshold=self.queue.threshold,
            events=self.events,
            batches=self.batches,
            busy_seconds=self._busy_seconds,
        )

    def statistics(self) -> StageStatistics:
        idle = 0.0 if self._busy else max(0.0, _now() - self._idle_since)
        return from_attributes(
            StageStatistics,
            self,
            queue=self.queue.statistics(),
            workers=len(self._workers),
            busy_workers=self._busy,
            blocking_in_progress=self._blocking,
            idle_seconds=idle,
            queue_wait=self.queue_wait.snapshot(),
            service_time=self.service_time.snapshot(),
        )


def _now() -> float:
    try:
        return trio.current_time()
    except RuntimeError:
        return math.inf


class StageRegistry:
    """The stages (and other observable parts) of one daemon, by name.

    Per daemon rather than global, so several routers can run in one process (the
    multi-node tests do).
    """

    def __init__(self) -> None:
        self._entries: dict[str, StatisticsSource] = {}

    def register(self, name: str, source: StatisticsSource) -> None:
        if name in self._entries:
            raise ValueError(f"a stage named {name!r} is already registered")
        self._entries[name] = source

    def __getitem__(self, name: str) -> StatisticsSource:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def names(self) -> list[str]:
        return list(self._entries)

    def statistics(self) -> dict[str, object]:
        return {name: source.statistics() for name, source in self._entries.items()}
