"""SEDA's response-time controller: admit work at the rate that keeps p90 on target.

Theory of operation
-------------------
Backpressure keeps memory bounded but not latency: a router that can route 50 queries
a second and is offered 200 lets its queue, and every query's wait, grow until the
bound, and then keeps them there. The overload slides give SEDA's answer: measure the
stage's response times, and admit work at the door only at the rate that keeps their
90th percentile under a target; what is refused is dropped at once, never queued.

**One class** (the default). Samples are the router stage's response times (a batch's
oldest message, from its admission into the queue to the end of its handling: a
conservative sample). Every :attr:`samples_per_update` samples, or every
:attr:`interval` seconds if fewer came, the controller takes their 90th percentile and
adjusts the admission rate of a token bucket for queries: above the target, the rate is
divided by ``decrease_factor`` (1.2); below 0.9 x target, ``additive_increase`` x error
is added, the error being how far below the target, as a share of it, but only if the
bucket refused something since the last update; in between it stays. The condition is
ours, not the slides': without it the rate climbs without end while the load is light
(to some 1,300 queries/s in 15 s at 15 queries/s offered), and when the load then
steps up, the controller needs seconds of cuts before it admits less than everything
(measured with ``scripts/experiment_admission.py step``: a p90 of 1.9 s for 5 s after the
step). The rate stays within ``[min_rate, max_rate]``; the bucket holds at most
``burst_seconds`` of the rate (and one message), so bursts pass but a backlog cannot be
built through it. Everything but queries passes: replies keep flowing while queries,
the messages the paper's overload is made of, are shed.

**Classes** (the slides' multiclass admission controller). Each class (:data:`CLASSES`:
everything but queries, queries from leaves, queries from ultrapeers) has its own
bucket, rate and response-time samples (a sample belongs to the class of the batch's
oldest message), and a weight. When a class's p90 is above the target, the classes of
*lower* weight have their rates divided (the lowest class, having none below, is cut
itself); when it is below 0.9 x target, the class's own rate grows (if it was refusing) by
``additive_increase`` x error x its weight over the lowest weight. So the heaviest
class (by default everything but queries: pongs, hits, pushes, cheap and what makes the
network useful) is never refused while a lighter one is left to cut, and among the
rest the heavier recover faster. The heaviest class starts at ``max_rate``, the others
at ``initial_rate``.

**Degradation** (optional: :class:`QualityLevel`). Before refusing anything, the
controller lowers the quality of service: forwarded queries lose up to ``max_ttl_cut``
of their TTL (less reach: less work for every router downstream, and the query still
lives). An overloaded update first degrades (quality divided by ``decrease_factor``;
the TTL cut is the share of quality lost, rounded up, in whole hops); only once the cut
is at its most are rates divided. An update under 0.9 x target first raises the rate
of a class that was refusing, else, once no class refuses anything any more, restores
quality (additively): under a lasting overload the cut stays at its most and the
admission control works as it would without degradation.
What degradation does not do is make this router's own work cheaper: a query costs
the same here whatever TTL it leaves with, so when the overload is local the quality
reaches its floor within a few updates and admission control takes over, as the
slides' "enable the admission controller based on response time and quality" says.

Nothing here reads a clock: times are passed in, so the control law is tested on a
simulated clock.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from gnutella_router.control.token_bucket import TokenBucket
from protocol.constants import MessageType

OTHERS, LEAF_QUERIES, QUERIES = "others", "leaf_queries", "queries"
CLASSES = (OTHERS, LEAF_QUERIES, QUERIES)
"""The admission classes, in the order they are shown."""
_QUERY = int(MessageType.QUERY)


def admission_class(message_type: int, from_leaf: bool) -> str:
    """The class of a message: a query from a leaf, a query from an ultrapeer, or else."""
    if message_type != _QUERY:
        return OTHERS
    return LEAF_QUERIES if from_leaf else QUERIES


@dataclasses.dataclass(frozen=True, slots=True)
class ClassState:
    """One admission class, for dumps, metrics and the profiler."""

    name: str
    weight: float
    rate: float
    p90_seconds: float | None
    samples: int
    admitted: int
    refused: int


@dataclasses.dataclass(frozen=True, slots=True)
class ControllerState:
    """What the controller is doing, for dumps, metrics and the profiler."""

    target_seconds: float
    rate: float
    """Queries (from ultrapeers, with classes) admitted per second now."""
    p90_seconds: float | None
    """The 90th percentile of the last update's samples (None before the first)."""
    samples: int
    """Samples taken since start."""
    updates: int
    admitted: int
    refused: int
    classes: tuple[ClassState, ...] = ()
    """Each class (only one, ``queries``, unless classes are on)."""
    quality: float = 1.0
    """1 is full service; lower under degradation."""
    ttl_cut: int = 0
    """Hops taken off forwarded queries now."""


class QualityLevel:
    """Service quality under degradation: AIMD on a level in [0, 1], read as a TTL cut."""

    def __init__(self, max_ttl_cut: int, *, recovery: float, decrease_factor: float) -> None:
        if not 1 <= max_ttl_cut <= 15:
            raise ValueError("max_ttl_cut must be from 1 to 15")
        self.max_ttl_cut = max_ttl_cut
        self.recovery = recovery
        self.decrease_factor = decrease_factor
        self.level = 1.0

    @property
    def ttl_cut(self) -> int:
        """Whole hops taken off: the share of quality lost, rounded up."""
        return min(self.max_ttl_cut, math.ceil((1.0 - self.level) * self.max_ttl_cut - 1e-9))

    @property
    def at_floor(self) -> bool:
        return self.ttl_cut >= self.max_ttl_cut

    def degrade(self) -> None:
        self.level /= self.decrease_factor

    def restore(self, error: float) -> None:
        self.level = min(1.0, self.level + self.recovery * error)


@dataclasses.dataclass(slots=True)
class _Class:
    name: str
    weight: float
    rate: float
    bucket: TokenBucket
    updated_at: float
    window: list[float] = dataclasses.field(default_factory=list)
    p90: float | None = None
    samples: int = 0
    admitted: int = 0
    refused: int = 0
    refused_at_update: int = 0


class ResponseTimeController:
    """AIMD on token buckets, driven by the 90th percentile of response times."""

    def __init__(
        self,
        target: float,
        *,
        initial_rate: float,
        min_rate: float,
        max_rate: float,
        additive_increase: float,
        decrease_factor: float = 1.2,
        samples_per_update: int = 100,
        interval: float = 1.0,
        burst_seconds: float = 0.1,
        now: float = 0.0,
        weights: Sequence[tuple[str, float]] = ((QUERIES, 1.0),),
        quality: QualityLevel | None = None,
    ) -> None:
        if not 0 < min_rate <= initial_rate <= max_rate:
            raise ValueError("rates must satisfy 0 < min_rate <= initial_rate <= max_rate")
        if decrease_factor <= 1:
            raise ValueError("decrease_factor must be above 1")
        if not weights or any(weight <= 0 for _, weight in weights):
            raise ValueError("every class needs a positive weight")
        self.target = target
        self.min_rate = min_rate
        self.max_rate = max_rate
        self.additive_increase = additive_increase
        self.decrease_factor = decrease_factor
        self.samples_per_update = samples_per_update
        self.interval = interval
        self.burst_seconds = burst_seconds
        self.quality = quality
        heaviest = max(weight for _, weight in weights)
        self.lightest = min(weight for _, weight in weights)
        self.classes: dict[str, _Class] = {}
        for name, weight in weights:
            # Alone, a class starts where it is told; among classes, the heaviest (never
            # cut while a lighter one is left) starts unrestricted.
            rate = max_rate if len(weights) > 1 and weight == heaviest else initial_rate
            self.classes[name] = _Class(
                name, weight, rate, TokenBucket(rate, self._burst(rate), now), now
            )
        self.first = next(iter(self.classes.values()))
        self.p90: float | None = None
        self.samples = 0
        self.updates = 0
        self.cut = 0
        """The quality's TTL cut, kept as a plain number: the router reads it per query."""
        self._refused_at_update = 0

    @property
    def rate(self) -> float:
        """The rate of queries from ultrapeers (the only class, without classes)."""
        return self.classes.get(QUERIES, self.first).rate

    @property
    def ttl_cut(self) -> int:
        """Hops to take off forwarded queries now (0 without degradation)."""
        return self.cut

    def _burst(self, rate: float) -> float:
        return max(1.0, rate * self.burst_seconds)

    def admit(self, wanted: int, now: float, name: str = QUERIES) -> int:
        """How many of ``wanted`` messages of class ``name`` may enter now (the rest are
        to be shed); a class not controlled passes whole."""
        klass = self.classes.get(name)
        if klass is None:
            return wanted
        granted = klass.bucket.take(wanted, now)
        klass.admitted += granted
        klass.refused += wanted - granted
        return granted

    def observe(self, seconds: float, now: float, name: str | None = None) -> None:
        """One response-time sample (of class ``name``; None or an unknown class: the
        first class, all there is without classes); may adjust the rates."""
        klass = self.classes.get(name, self.first) if name is not None else self.first
        klass.window.append(seconds)
        klass.samples += 1
        self.samples += 1
        if len(klass.window) >= self.samples_per_update or now - klass.updated_at >= self.interval:
            self._update(klass, now)

    def _update(self, klass: _Class, now: float) -> None:
        window = sorted(klass.window)
        klass.window = []
        klass.updated_at = now
        self.updates += 1
        p90 = window[max(0, -(-len(window) * 9 // 10) - 1)]  # the ceil(0.9 n)-th sample
        klass.p90 = self.p90 = p90
        refusing = klass.refused > klass.refused_at_update
        klass.refused_at_update = klass.refused
        refused = sum(c.refused for c in self.classes.values())
        any_refusing, self._refused_at_update = refused > self._refused_at_update, refused
        quality = self.quality
        if p90 > self.target:
            if quality is not None and not quality.at_floor:
                quality.degrade()
                self.cut = quality.ttl_cut
                return
            lighter = [c for c in self.classes.values() if c.weight < klass.weight]
            for cut in lighter or [klass]:
                self._set_rate(cut, cut.rate / self.decrease_factor)
        elif p90 < 0.9 * self.target:
            error = (self.target - p90) / self.target
            if refusing:
                step = self.additive_increase * error * klass.weight / self.lightest
                self._set_rate(klass, klass.rate + step)
            elif quality is not None and quality.level < 1.0 and not any_refusing:
                quality.restore(error)
                self.cut = quality.ttl_cut

    def _set_rate(self, klass: _Class, rate: float) -> None:
        klass.rate = min(self.max_rate, max(self.min_rate, rate))
        klass.bucket.rate = klass.rate
        klass.bucket.burst = self._burst(klass.rate)

    def state(self) -> ControllerState:
        classes = tuple(
            ClassState(c.name, c.weight, c.rate, c.p90, c.samples, c.admitted, c.refused)
            for c in self.classes.values()
        )
        return ControllerState(
            target_seconds=self.target,
            rate=self.rate,
            p90_seconds=self.p90,
            samples=self.samples,
            updates=self.updates,
            admitted=sum(c.admitted for c in classes),
            refused=sum(c.refused for c in classes),
            classes=classes,
            quality=1.0 if self.quality is None else self.quality.level,
            ttl_cut=self.ttl_cut,
        )
