"""The thread governor: the router stage's pool follows its queue (SEDA's pool controller).

Theory of operation
-------------------
Every ``interval`` seconds the governor samples the router stage: its queue length,
how many events it handled since the last sample (the throughput), and the most workers
that were busy at once (a worker waiting for its thread, e.g. in the injected per-query
delay, counts as busy). Then, as in the SEDA paper's controller:

* queue length at or over ``threshold`` and fewer than ``max_threads`` workers: add one.
  The queue only gets that long when the workers cannot keep up.
* no sample within the last ``idle_timeout`` seconds had every worker busy, and the
  pool is above its initial size: remove one. A worker the load never needed for that
  long is idle, however the scheduler spread the light work among the workers.
* thrashing guard (optional): if throughput did not rise in the sample after an
  addition, the addition did not help (the bottleneck is elsewhere, such as the CPU
  itself), so the pool goes back to the best size seen and is not grown again until
  the queue drains.

Each change is logged with the queue length and the rate that caused it, and counted;
:meth:`ThreadGovernor.statistics` keeps a bounded history for the profiler and dumps.
By Little's law the pool the paper's experiment needs is rate x query share x delay:
1000 msgs/s x 15 % x 20 ms = 3 workers.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import structlog
import trio

from gnutella_router.config import GovernorConfig
from gnutella_router.runtime.stage import Stage

HISTORY = 600
"""Samples kept for statistics and plots (20 minutes at the default interval)."""


@dataclasses.dataclass(frozen=True, slots=True)
class GovernorSample:
    at: float
    queue_length: int
    pool_size: int
    rate: float
    """Events handled per second since the previous sample."""
    peak_busy: int
    action: str
    """"", "added", "removed" or "reverted"."""


@dataclasses.dataclass(frozen=True, slots=True)
class GovernorStatistics:
    enabled: bool
    pool_size: int
    initial_pool_size: int
    max_threads: int
    threshold: int
    interval: float
    added: int
    removed: int
    reverted: int
    best_pool_size: int
    best_rate: float
    recent: tuple[GovernorSample, ...]
    """The last samples, oldest first (at most 60)."""


class ThreadGovernor:
    """Grows and shrinks a stage's worker pool from its queue length and its use."""

    def __init__(
        self,
        stage: Stage[Any],
        config: GovernorConfig,
        *,
        log: structlog.typing.FilteringBoundLogger | None = None,
    ) -> None:
        self.stage = stage
        self.config = config
        self.log = log or structlog.get_logger("governor")
        self.initial_pool_size = stage.pool_size
        self.samples: collections.deque[GovernorSample] = collections.deque(maxlen=HISTORY)
        self.added = 0
        self.removed = 0
        self.reverted = 0
        self.best_pool_size = stage.pool_size
        self.best_rate = 0.0
        self._last_events = stage.events
        self._last_at: float | None = None
        self._last_full_at: float = 0.0
        self._rate_before_add: float | None = None
        self._held = False

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Sample and act every ``interval`` seconds, until cancelled."""
        self._last_at = trio.current_time()
        self._last_full_at = self._last_at
        task_status.started()
        while True:
            await trio.sleep(self.config.interval)
            self.step(trio.current_time())

    def step(self, now: float) -> GovernorSample:
        """One sample and at most one change of the pool (separate for tests)."""
        stage = self.stage
        last = self._last_at if self._last_at is not None else now
        elapsed = max(1e-9, now - last)
        events = stage.events
        rate = (events - self._last_events) / elapsed
        self._last_events = events
        self._last_at = now
        queue_length = len(stage.queue)
        pool = stage.pool_size
        peak = stage.take_peak_busy()
        if peak >= pool:
            self._last_full_at = now
        if rate > self.best_rate and pool >= self.best_pool_size:
            self.best_rate = rate
            self.best_pool_size = pool
        action = self._decide(now, queue_length, pool, rate)
        sample = GovernorSample(now, queue_length, stage.pool_size, rate, peak, action)
        self.samples.append(sample)
        return sample

    def _decide(self, now: float, queue_length: int, pool: int, rate: float) -> str:
        config = self.config
        if self._rate_before_add is not None:
            before, self._rate_before_add = self._rate_before_add, None
            if config.thrashing_guard and rate <= before * 1.05 and queue_length:
                self._held = True
                self.stage.set_pool_size(self.best_pool_size)
                self.reverted += 1
                self.log.info(
                    "governor reverted",
                    pool=self.stage.pool_size,
                    queue_length=queue_length,
                    rate=round(rate, 1),
                    rate_before=round(before, 1),
                )
                return "reverted"
        if not queue_length:
            self._held = False
        if queue_length >= config.threshold and pool < config.max_threads and not self._held:
            self.stage.set_pool_size(pool + 1)
            self.added += 1
            self._rate_before_add = rate
            self.log.info(
                "governor added a thread",
                pool=self.stage.pool_size,
                queue_length=queue_length,
                rate=round(rate, 1),
            )
            return "added"
        if pool > self.initial_pool_size and now - self._last_full_at >= config.idle_timeout:
            self.stage.set_pool_size(pool - 1)
            self.removed += 1
            self._last_full_at = now  # one removal per idle period
            self.log.info(
                "governor removed an idle thread",
                pool=self.stage.pool_size,
                queue_length=queue_length,
                rate=round(rate, 1),
            )
            return "removed"
        return ""

    def statistics(self) -> GovernorStatistics:
        config = self.config
        return GovernorStatistics(
            enabled=config.enabled,
            pool_size=self.stage.pool_size,
            initial_pool_size=self.initial_pool_size,
            max_threads=config.max_threads,
            threshold=config.threshold,
            interval=config.interval,
            added=self.added,
            removed=self.removed,
            reverted=self.reverted,
            best_pool_size=self.best_pool_size,
            best_rate=self.best_rate,
            recent=tuple(list(self.samples)[-60:]),
        )
