"""The thread governor: the router stage's pool sized to its load (SEDA's pool controller).

Theory of operation
-------------------
Every ``interval`` seconds the governor reads the router stage's meter
(:meth:`~gnutella_router.runtime.stage.Stage.meter`): the events admitted to its queue,
the events handled, the worker-seconds spent handling them (a worker waiting for its
thread, e.g. in the injected per-query delay, counts as busy), how long the queue was
closed to arrivals, its length now and the most workers busy at once. From the
difference with the previous reading it changes the pool by at most one thread, by one
of two rules (``sizing``).

``littles-law`` (the default). By Little's law, the workers a stage keeps busy on average
are its arrival rate times the time each event holds a worker: ``load = λ x S``. The
governor measures S as busy worker-seconds per event handled and λ as events admitted
per second, and keeps ``ceil(load x (1 + headroom))`` workers (at least the initial
pool, at most ``max_threads``), growing one thread per sample:

* Why not the queue length. SEDA's original rule (below) adds a thread at every sample
  that finds the queue long. But the backlog a sample sees was built before the last
  addition, and only the pool's spare capacity works it off, over several samples;
  each of them still sees the backlog and adds another thread. At 1000 msgs/s with the
  paper's mix and 20 ms per query it grew the pool to 5 where the load keeps 3 busy.
  The load does not contain the backlog, so sizing by it does not add threads while an
  addition is still taking effect.
* Arrivals hide behind a closed queue. While the queue is full (or a reader waits for
  room) the router stops reading (backpressure): the backlog waits in the peers'
  sockets, where the router cannot count it, and the queue admits only what the
  workers take, so its admissions measure the pool, not the load. A sample whose queue
  was closed for more than half of it therefore keeps the arrival rate last measured;
  one closed for less measures it over the open part (its admissions, less the takes
  that refilled the queue while it was closed, over the time it was open), and from
  the first arrival on, since the router waits for its peers before any load comes.
* A backlog that cannot drain. With exactly ``load`` workers the pool's capacity equals
  the arrival rate: 3 workers at 20 ms a query handle 150 queries/s, all of 1000
  msgs/s x 15 % queries, so a backlog built while the pool was smaller stays for good.
  While the queue is at ``threshold`` or more (or was closed for most of the sample)
  and is not falling, the governor lends one more thread, a backlog thread, at once if
  the pool has less than a quarter of a worker to spare (``pool - load``: too little
  to wait for, and within the noise of the measured load). With more to spare, the
  backlog should be draining: it first waits, from the last change, twice the time that
  spare capacity needs to work off the backlog it sees (twice, because what waits in
  the sockets is not in the queue length). A backlog thread is given back as soon as
  the queue is under a tenth of ``threshold``. The same wait covers an arrival rate that
  rose while the queue was closed and so could not be measured: the pool then grows a
  thread at a time, each after the previous one had the time to show its effect.
* A backlog that comes back. A load a hair over a whole number (3.01 workers: within
  ``TOLERANCE``, so 3 are needed) builds a backlog slowly; a backlog thread drains it and
  goes back, and the backlog builds again, minutes later: the pool would flap. So when a
  backlog needs a thread again at no less than the load at which the last one went back,
  the thread is the load's (a "relapse"), kept like any other until the load falls.
* Never while falling: no thread is added while the queue is falling, since the last
  change is still working it off.
* Shrinking: when no sample within ``idle_timeout`` needed the pool, one thread is
  removed and the idle timeout starts again. A sample needs the pool while there is a
  backlog (or a backlog thread), or while its load (with the headroom) would leave one
  worker fewer less than a tenth of a worker to spare, so that a load hovering around a
  whole number does not make the pool flap.

S as measured includes what the blocking work costs beyond its own duration (the
hand-off to a thread and back, waiting for the stage's turn, the events routed in the
same batch), so a real load is rarely a whole number. In the paper's experiment on this
router the measured load is a little over 3 workers, and the governor keeps 4. The
paper's 3 is the load with nothing to spare: 3 workers blocked 20 ms per query handle
exactly 150 queries/s, so any cost beyond the 20 ms (and the randomness of the arrivals)
makes a pool of 3 fall behind for good (docs/experiments.md, "The governor at Little's
law", has the measured split of a query's time).

``queue-threshold`` (SEDA's original rule, kept for comparison):

* queue length at or over ``threshold`` and fewer than ``max_threads`` workers: add one.
* no sample within the last ``idle_timeout`` seconds had every worker busy, and the pool
  is above its initial size: remove one. A worker the load never needed for that long
  is idle, however the scheduler spread the light work among the workers.

Both rules: the thrashing guard (optional). If throughput did not rise in the sample
after an addition made for a backlog, the addition did not help (the bottleneck is
elsewhere, such as the CPU itself), so the pool goes back to the best size seen (or one
thread fewer, if that is smaller) and is not grown again until the queue drains. An
addition made with no backlog is not judged: throughput then follows the arrivals, not
the pool.

Each change is logged with what caused it and counted; :meth:`ThreadGovernor.statistics`
keeps a bounded history for the profiler and dumps.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Protocol

from gnutella_router.config.sections import GovernorConfig, GovernorSizing
from gnutella_router.control.sampling import SampledController
from gnutella_router.runtime.meters import StageMeter

MEASURING_SHARE = 0.5
"""A sample measures the arrival rate when its queue was open to arrivals for at least
this share of it; otherwise its admissions were mostly refills of a closed queue."""
SHORTEST_SAMPLE = 0.01
"""Seconds: a shorter sample measures no rates (one event would be a rate of hundreds)."""
LEND_MARGIN = 0.25
"""Workers to spare below which a backlog gets its thread at once. With less, the spare
capacity would take long to work a backlog off (1000 events of 3 ms: 12 s at a quarter
of a worker), and whether there is any at all is within the noise of the measured load
(about a tenth of a worker per sample in the paper's experiment)."""
GONE_SHARE = 0.1
"""A backlog is gone under this share of ``threshold``: its backlog threads go back."""
FALLING_SHARE = 0.05
"""The queue is falling when it is shorter than at the previous sample by this share of
``threshold`` (at least one event): less is noise."""
SHRINK_MARGIN = 0.1
"""Workers to spare in the smaller pool before one is removed (hysteresis)."""
TOLERANCE = 0.02
RELAPSE_SHARE = 0.05
"""A backlog that needs a thread again at a load no more than this share under the one at
which its last backlog thread went back is the same load: the thread stays (a relapse)."""
"""A load this close above a whole number of workers is that number: one event more or
less in a sample must not buy a worker (if such a pool falls behind, the backlog rule
lends it one)."""


class GovernedStage(Protocol):
    """What the governor needs of a stage (:class:`~gnutella_router.runtime.stage.Stage`)."""

    @property
    def pool_size(self) -> int: ...

    def meter(self, now: float) -> StageMeter: ...

    def set_pool_size(self, size: int) -> int: ...


@dataclasses.dataclass(frozen=True, slots=True)
class GovernorSample:
    at: float
    queue_length: int
    pool_size: int
    """After the action."""
    rate: float
    """Events handled per second since the previous sample."""
    peak_busy: int
    action: str
    """"", "added", "removed" or "reverted"."""
    reason: str
    """Why: "load", "backlog", "relapse", "backlog gone", "idle", "queue" or "no gain" ("" with
    no action)."""
    arrival_rate: float
    """Events arriving per second, as last measured (littles-law)."""
    measured: bool
    """Whether this sample measured the arrival rate (its queue was open long enough)."""
    service_ms: float
    """Worker time per event handled, as last measured, in milliseconds."""
    load: float
    """arrival_rate x service time: workers the arrivals keep busy."""
    needed: int
    """Workers the load needs with the headroom (littles-law), backlog threads excluded."""
    backlog_threads: int
    """Threads lent for a backlog, included in pool_size."""
    thread_ms: float = 0.0
    """Milliseconds a blocking call waited on its thread in this sample, on average (the
    work plus the hand-off); 0 with none."""
    turn_wait_ms: float = 0.0
    """Milliseconds it then waited for the stage's turn, on average; 0 with none."""


@dataclasses.dataclass(frozen=True, slots=True)
class GovernorStatistics:
    enabled: bool
    sizing: GovernorSizing
    pool_size: int
    initial_pool_size: int
    max_threads: int
    threshold: int
    interval: float
    headroom: float
    arrival_rate: float
    service_time_ms: float
    load: float
    needed: int
    backlog_threads: int
    added: int
    removed: int
    reverted: int
    best_pool_size: int
    best_rate: float
    recent: tuple[GovernorSample, ...]
    """The last samples, oldest first (at most 60)."""


class ThreadGovernor(SampledController[GovernedStage, GovernorConfig, GovernorSample]):
    """Grows and shrinks a stage's worker pool from its load, or from its queue length."""

    logger_name = "governor"

    def _set_up(self) -> None:
        stage = self.stage
        self.initial_pool_size = stage.pool_size
        self.added = 0
        self.removed = 0
        self.reverted = 0
        self.best_pool_size = stage.pool_size
        self.best_rate = 0.0
        self.arrival_rate = 0.0
        self.service_time = 0.0
        """Seconds of worker time per event; 0 until events have been handled."""
        self.load = 0.0
        self.needed = stage.pool_size
        self.backlog_threads = 0
        self._last = stage.meter(0.0)
        """The previous reading; :meth:`serve` takes a fresh one at its start."""
        self._previous_length = 0
        """The previous sample's queue length (its bound if it was closed for most of it)."""
        self._changed_at = 0.0
        self._needed_at = 0.0
        """The last sample that needed every worker of the pool (littles-law)."""
        self._last_full_at = 0.0
        """The last sample that had every worker busy (queue-threshold)."""
        self._rate = 0.0
        """Throughput over the sample being taken (events handled per second)."""
        self._rate_before_add: float | None = None
        self._held = False
        self._returned_load: float | None = None
        """The load when a backlog thread last went back (littles-law), for relapses."""

    def _start(self, now: float) -> None:
        self._last = self.stage.meter(now)
        self._changed_at = self._needed_at = self._last_full_at = now

    def step(self, now: float) -> GovernorSample:
        """One sample and at most one change of the pool (separate for tests)."""
        config = self.config
        meter = self.stage.meter(now)
        last, self._last = self._last, meter
        elapsed = max(1e-9, meter.at - last.at)
        handled = meter.events - last.events
        rate = self._rate = handled / elapsed
        pool = meter.pool_size
        calls = meter.blocking_calls - last.blocking_calls
        thread_ms = turn_wait_ms = 0.0
        if calls > 0:
            thread_ms = (meter.thread_seconds - last.thread_seconds) / calls * 1000.0
            turn_wait_ms = (meter.turn_wait_seconds - last.turn_wait_seconds) / calls * 1000.0
        if handled > 0 and elapsed >= SHORTEST_SAMPLE:
            self.service_time = max(0.0, meter.busy_seconds - last.busy_seconds) / handled
        closed = min(elapsed, max(0.0, meter.closed_seconds - last.closed_seconds))
        # Arrivals are measured from the first one: before it, there was no load to measure
        # (the router was waiting for its peers), and counting that time would spread the
        # first sample's arrivals thin.
        window = elapsed
        if not last.admitted and meter.first_admitted_at is not None:
            window = min(elapsed, max(closed, meter.at - meter.first_admitted_at))
        measured = window >= SHORTEST_SAMPLE and window - closed >= window * MEASURING_SHARE
        if measured:
            admitted = meter.admitted - last.admitted
            # While closed, the queue admitted what its workers took: leave those out.
            took = handled / window * closed
            self.arrival_rate = max(0.0, admitted - took) / (window - closed)
        self.load = self.arrival_rate * self.service_time
        wanted = math.ceil(self.load * (1.0 + config.headroom) - TOLERANCE)
        self.needed = max(self.initial_pool_size, min(config.max_threads, wanted))
        length = meter.queue_length
        closed_most = closed * 2 > elapsed
        # A closed queue holds its bound, whatever a worker had just taken from it.
        effective = max(length, meter.queue_threshold) if closed_most else length
        margin = max(1.0, config.threshold * FALLING_SHARE)
        falling = not closed_most and length + margin <= self._previous_length
        self._previous_length = effective
        if meter.peak_busy >= pool:
            self._last_full_at = now
        if rate > self.best_rate and pool >= self.best_pool_size:
            self.best_rate = rate
            self.best_pool_size = pool
        action, reason = self._judge_addition(now, rate, length)
        if not action:
            if config.sizing == "littles-law":
                action, reason = self._by_load(now, pool, length, closed_most, falling, effective)
            else:
                action, reason = self._by_queue(now, pool, length)
        sample = GovernorSample(
            at=now,
            queue_length=length,
            pool_size=self.stage.pool_size,
            rate=rate,
            peak_busy=meter.peak_busy,
            action=action,
            reason=reason,
            arrival_rate=self.arrival_rate,
            measured=measured,
            service_ms=self.service_time * 1000.0,
            load=self.load,
            needed=self.needed,
            backlog_threads=self.backlog_threads,
            thread_ms=thread_ms,
            turn_wait_ms=turn_wait_ms,
        )
        self.samples.append(sample)
        return sample

    def _judge_addition(self, now: float, rate: float, length: int) -> tuple[str, str]:
        """The thrashing guard: undo an addition for a backlog that did not raise throughput."""
        before, self._rate_before_add = self._rate_before_add, None
        if not length:
            self._held = False
        if before is None or not self.config.thrashing_guard:
            return "", ""
        if rate > before * 1.05 or not length:
            return "", ""
        pool = self.stage.pool_size
        self._held = True
        size = self.stage.set_pool_size(min(self.best_pool_size, pool - 1))
        self.backlog_threads = min(self.backlog_threads, max(0, size - self.needed))
        self._changed_at = now
        self.reverted += 1
        self.log.info(
            "governor reverted",
            pool=size,
            queue_length=length,
            rate=round(rate, 1),
            rate_before=round(before, 1),
        )
        return "reverted", "no gain"

    def _by_load(
        self, now: float, pool: int, length: int, closed_most: bool, falling: bool, effective: int
    ) -> tuple[str, str]:
        """The littles-law rule (see the module's docstring)."""
        config = self.config
        gone = config.threshold * GONE_SHARE
        backlog = length >= config.threshold or (closed_most and length > gone)
        # Backlog threads the load has come to need are the load's now.
        self.backlog_threads = min(self.backlog_threads, max(0, pool - self.needed))
        tight = self.load * (1.0 + config.headroom) + SHRINK_MARGIN > pool - 1
        if backlog or tight or self.backlog_threads:
            self._needed_at = now
        if self.backlog_threads and not backlog and length <= gone:
            self.backlog_threads -= 1
            self._returned_load = self.load
            return self._change(now, pool - 1, length, "removed", "backlog gone")
        if self._held or falling or pool >= config.max_threads:
            pass
        elif self.needed > pool:
            return self._change(now, pool + 1, length, "added", "load", judge=backlog)
        elif backlog and now - self._changed_at >= self._drain_wait(pool, effective):
            returned, self._returned_load = self._returned_load, None
            if returned is not None and self.load >= returned * (1.0 - RELAPSE_SHARE):
                return self._change(now, pool + 1, length, "added", "relapse", judge=True)
            self.backlog_threads += 1
            return self._change(now, pool + 1, length, "added", "backlog", judge=True)
        if pool > self.initial_pool_size and now - self._needed_at >= config.idle_timeout:
            self._needed_at = now  # one removal per idle period
            return self._change(now, pool - 1, length, "removed", "idle")
        return "", ""

    def _drain_wait(self, pool: int, backlog: int) -> float:
        """How long the pool's spare capacity should take to work ``backlog`` off, twice
        over (the part of it waiting outside the queue is not counted); 0 when the pool
        has too little to spare for that to be worth waiting (:data:`LEND_MARGIN`)."""
        spare_workers = pool - self.load
        if self.service_time <= 0 or spare_workers < LEND_MARGIN:
            return 0.0
        return 2.0 * backlog * self.service_time / spare_workers

    def _by_queue(self, now: float, pool: int, length: int) -> tuple[str, str]:
        """The queue-threshold rule (see the module's docstring)."""
        config = self.config
        if length >= config.threshold and pool < config.max_threads and not self._held:
            return self._change(now, pool + 1, length, "added", "queue", judge=True)
        if pool > self.initial_pool_size and now - self._last_full_at >= config.idle_timeout:
            self._last_full_at = now  # one removal per idle period
            return self._change(now, pool - 1, length, "removed", "idle")
        return "", ""

    def _change(
        self,
        now: float,
        size: int,
        length: int,
        action: str,
        reason: str,
        *,
        judge: bool = False,
    ) -> tuple[str, str]:
        size = self.stage.set_pool_size(size)
        self._changed_at = now
        if action == "added":
            self.added += 1
            if judge:  # the thrashing guard compares the next sample's rate with this one
                self._rate_before_add = self._rate
        else:
            self.removed += 1
        self.log.info(
            "governor added a thread" if action == "added" else "governor removed a thread",
            reason=reason,
            pool=size,
            queue_length=length,
            load=round(self.load, 2),
            needed=self.needed,
            arrival_rate=round(self.arrival_rate, 1),
            service_ms=round(self.service_time * 1000.0, 3),
        )
        return action, reason

    def statistics(self) -> GovernorStatistics:
        config = self.config
        return GovernorStatistics(
            enabled=config.enabled,
            sizing=config.sizing,
            pool_size=self.stage.pool_size,
            initial_pool_size=self.initial_pool_size,
            max_threads=config.max_threads,
            threshold=config.threshold,
            interval=config.interval,
            headroom=config.headroom,
            arrival_rate=self.arrival_rate,
            service_time_ms=self.service_time * 1000.0,
            load=self.load,
            needed=self.needed,
            backlog_threads=self.backlog_threads,
            added=self.added,
            removed=self.removed,
            reverted=self.reverted,
            best_pool_size=self.best_pool_size,
            best_rate=self.best_rate,
            recent=self.recent(),
        )
