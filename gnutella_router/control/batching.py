"""The batching controller: the router stage's batch size, as small as throughput allows.

Theory of operation
-------------------
A stage worker takes up to ``batch_size`` events per wake-up (SEDA's batching factor).
Large batches amortise the per-batch cost (the wake-up, the stage's turn, the two
schedule points after each batch); small ones let the other tasks (the connection
writers, the other stages) run sooner, so a message waits behind fewer others and a
burst from one batch lands on a peer's queue in smaller pieces. The controller looks
for the smallest batch that keeps the stage's throughput, as in SEDA (SOSP'01, 3.2).

What it measures, and why. A router stage's output rate normally just follows its
arrivals: with no backlog, each wake-up finds only the few events that arrived since the
last, every batch is smaller than the limit, and the limit changes nothing; its output
rate says nothing about the batch size. So the controller judges a batch size only by
*bound* samples: ones that started and ended with a backlog in the queue and whose
batches were on average at least ``BOUND_FILL`` of the limit. Over such a sample the
stage was saturated and limited by its batches, so its output rate (events handled per
second) is its capacity at that batch size. The per-batch handling cost (worker-seconds
per batch) is kept for the record but not judged by: it leaves out the per-batch cost
outside the handler, which is exactly what a smaller batch adds.

The law, every ``interval`` seconds (:meth:`BatchingController.step`, sans-IO):

* Collapse: two bound samples running at the current batch whose output rate is under
  ``1 - 2 x tolerance`` of the reference put the batch back at its maximum
  (``router.batch_size``): more was lost than a small increase can be trusted to win
  back. One such sample is not enough: a saturated router's output rate varies from
  one sample to the next by several per cent by itself (the other processes on the
  machine, its own garbage collection; about +-10 % between 1 s samples measured in
  docs/experiments.md), so a single sample would reset the batch now and then for
  nothing. The search then starts again from the top, but goes no lower than one
  increase above the batch that collapsed (the *floor*): otherwise it walks down to
  the same batch, collapses again, and swings between the two for as long as the load
  lasts.
* Sudden drop: a sample not bound by the batch (the stage caught up with its queue)
  whose output rate is under ``drop_share`` of its moving average (over the last
  ``window`` samples) resets the batch to its maximum and the floor to ``min_batch``:
  the measurements made at the small batch were for another load, and the search starts
  again from the top. A bound sample's output rate is the stage's capacity, not its
  load: a fall in it is judged as a collapse, not a drop in load.
* Holding: once ``window`` bound samples have been taken at the current batch, their
  mean output rate is compared with the reference (the best mean measured at a larger
  batch since the last reset). Within ``tolerance`` of it (or with no reference yet),
  throughput holds: the batch is multiplied by ``decrease`` (at least one smaller,
  never under the floor).
* Degrading: below ``1 - tolerance`` of the reference, the batch grows by ``increase``
  of the maximum (a small amount) and the controller settles: it decreases no further
  until a reset, but still grows if throughput keeps degrading.
* Samples that are not bound measure nothing about the batch and change nothing.

Never worse than the fixed default under overload. An overloaded stage is the one whose
samples are bound (with backpressure its queue sits at its threshold), and the first
batch it judges is the maximum, the fixed default: that measurement is the reference,
and no smaller batch is kept whose throughput falls more than ``tolerance`` below it (a
latency behind a full queue of the queue length over the throughput, so no more than
that share worse either). A queue being full is not itself a reason to go back to the
maximum: under backpressure that is the normal state of a saturated stage, where the
search matters most.

Each change is logged with its reason and counted; a bounded history of samples is kept
for dumps, /metrics and the profiler.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Protocol

from gnutella_router.config.sections import BatchingConfig
from gnutella_router.control.sampling import SampledController
from gnutella_router.runtime.meters import BatchMeter

BOUND_FILL = 0.9
"""A sample whose batches averaged at least this share of the limit was bound by it."""
SHORTEST_SAMPLE = 0.01
"""Seconds: a shorter sample measures no rate."""
COLLAPSE_SAMPLES = 2
"""Bound samples running, each far under the reference, that make a collapse."""


class BatchedStage(Protocol):
    """What the controller needs of a stage (:class:`~gnutella_router.runtime.stage.Stage`)."""

    batch_size: int

    def batch_meter(self, now: float) -> BatchMeter: ...


@dataclasses.dataclass(frozen=True, slots=True)
class BatchingSample:
    at: float
    batch_size: int
    """After the action."""
    rate: float
    """Events handled per second over the sample."""
    mean_batch: float
    """Events per batch over the sample (0 with no batch)."""
    batch_cost_ms: float
    """Handler time per batch over the sample, in milliseconds."""
    queue_length: int
    bound: bool
    """Whether the sample was saturated and bound by the batch size (see the module)."""
    action: str
    """"", "decreased", "increased" or "reset"."""
    reason: str
    """"holds", "degraded", "load drop" or "collapse" ("" with no action)."""


@dataclasses.dataclass(frozen=True, slots=True)
class BatchingStatistics:
    enabled: bool
    batch_size: int
    min_batch: int
    max_batch: int
    interval: float
    rate: float
    """Moving average of the output rate (events/s) over the last ``window`` samples."""
    measured_rate: float
    """Mean output rate of the bound samples at the current batch (0: none yet)."""
    reference_rate: float
    """Best mean output rate measured at a larger batch since the last reset."""
    floor: int
    """The smallest batch the search may choose: ``min_batch``, or above one that collapsed."""
    settled: bool
    decreased: int
    increased: int
    resets: int
    recent: tuple[BatchingSample, ...]
    """The last samples, oldest first (at most 60)."""


class BatchingController(SampledController[BatchedStage, BatchingConfig, BatchingSample]):
    """Adapts a stage's ``batch_size`` between ``min_batch`` and its initial value."""

    logger_name = "batching"

    def _set_up(self) -> None:
        stage = self.stage
        config = self.config
        self.max_batch = stage.batch_size
        self.min_batch = min(config.min_batch, self.max_batch)
        self.decreased = 0
        self.increased = 0
        self.resets = 0
        self.settled = False
        self.reference_rate = 0.0
        self.floor = self.min_batch
        """No decrease goes under this: raised above a batch that collapsed (see the module)."""
        self._low = 0
        """Bound samples running at the current batch far under the reference."""
        self._rates: collections.deque[float] = collections.deque(maxlen=config.window)
        """The last samples' output rates, for the moving average."""
        self._bound_rates: list[float] = []
        """Output rates of the bound samples at the current batch size (at most ``window``)."""
        self._last = stage.batch_meter(0.0)

    @property
    def rate(self) -> float:
        return sum(self._rates) / len(self._rates) if self._rates else 0.0

    def _start(self, now: float) -> None:
        self._last = self.stage.batch_meter(now)

    def step(self, now: float) -> BatchingSample:
        """One sample and at most one change of the batch size (separate for tests)."""
        config = self.config
        meter = self.stage.batch_meter(now)
        last, self._last = self._last, meter
        elapsed = meter.at - last.at
        handled = meter.events - last.events
        batches = meter.batches - last.batches
        batch = self.stage.batch_size
        rate = handled / elapsed if elapsed >= SHORTEST_SAMPLE else 0.0
        mean_batch = handled / batches if batches else 0.0
        cost = (meter.busy_seconds - last.busy_seconds) / batches if batches else 0.0
        bound = (
            elapsed >= SHORTEST_SAMPLE
            and last.queue_length > 0
            and meter.queue_length > 0
            and mean_batch >= BOUND_FILL * batch
        )
        average = self.rate
        full = len(self._rates) == self._rates.maxlen
        self._rates.append(rate)
        action = reason = ""
        low = (
            bound
            and self.reference_rate > 0
            and batch < self.max_batch
            and rate < (1 - 2 * config.tolerance) * self.reference_rate
        )
        self._low = self._low + 1 if low else 0
        if self._low >= COLLAPSE_SAMPLES:
            action, reason = "reset", "collapse"
        elif not bound and full and average > 0 and rate < config.drop_share * average:
            # Also at the largest batch, when a floor or a settled search would stop
            # the next load from being searched afresh.
            if batch < self.max_batch or self.settled or self.floor > self.min_batch:
                action, reason = "reset", "load drop"
        elif bound:
            self._bound_rates.append(rate)
            if len(self._bound_rates) >= config.window:
                measured = sum(self._bound_rates) / len(self._bound_rates)
                reference = self.reference_rate
                if reference and measured < (1 - config.tolerance) * reference:
                    if batch < self.max_batch:
                        action, reason = "increased", "degraded"
                    self.settled = True
                elif not self.settled and batch > self.floor:
                    action, reason = "decreased", "holds"
                    self.reference_rate = max(reference, measured)
                else:
                    self._bound_rates.clear()  # settled: keep judging fresh samples
        if action:
            self._apply(action, reason, batch, rate)
        sample = BatchingSample(
            at=now,
            batch_size=self.stage.batch_size,
            rate=rate,
            mean_batch=mean_batch,
            batch_cost_ms=cost * 1000,
            queue_length=meter.queue_length,
            bound=bound,
            action=action,
            reason=reason,
        )
        self.samples.append(sample)
        return sample

    def _apply(self, action: str, reason: str, batch: int, rate: float) -> None:
        config = self.config
        step = max(1, round(config.increase * self.max_batch))
        if action == "reset":
            new = self.max_batch
            # After a collapse, the next search stops above the batch that collapsed;
            # a new load (a sudden drop) is searched afresh.
            self.floor = (
                min(self.max_batch, batch + step) if reason == "collapse" else self.min_batch
            )
            self.resets += 1
            self.settled = False
            self.reference_rate = 0.0
            self._rates.clear()
        elif action == "decreased":
            new = max(self.floor, min(batch - 1, math.floor(batch * config.decrease)))
            self.decreased += 1
        else:
            new = min(self.max_batch, batch + step)
            self.increased += 1
        self._bound_rates.clear()
        self._low = 0
        self.stage.batch_size = new
        self.log.info(
            "batch size changed",
            action=action,
            reason=reason,
            batch_size=new,
            previous=batch,
            rate=round(rate, 1),
            reference_rate=round(self.reference_rate, 1),
        )

    def statistics(self) -> BatchingStatistics:
        bound = self._bound_rates
        return BatchingStatistics(
            enabled=True,
            batch_size=self.stage.batch_size,
            min_batch=self.min_batch,
            max_batch=self.max_batch,
            interval=self.config.interval,
            rate=self.rate,
            measured_rate=sum(bound) / len(bound) if bound else 0.0,
            reference_rate=self.reference_rate,
            floor=self.floor,
            settled=self.settled,
            decreased=self.decreased,
            increased=self.increased,
            resets=self.resets,
            recent=self.recent(),
        )
