"""Arrival processes: when synthetic messages are due.

Theory of operation
-------------------
Every process here is *open loop*: it produces a schedule of send times, offsets in
seconds from the start of a run, that is fixed before the run begins and never looks at
the system under test. A closed-loop source (send the next message when the last one is
answered) slows down exactly when the router does, so it can never push a router past
its capacity and it hides the queueing delay it causes. The SEDA experiments are about
what happens *beyond* capacity (the Gnutella router's latency and queue growth as the
offered load rises, SOSP'01 Fig. 14, quals proposal Figs. 15 and 16), which only an
open-loop source can show. A sender that falls behind its schedule must still charge
each message from the moment it was due; that is the load client's business.

The processes:

* :class:`ConstantRate`: evenly spaced messages, the simplest "N packets per second"
  offered load (the x axis of SOSP'01 Fig. 14, 100 to 1000 packets/s).
* :class:`Poisson`: exponential gaps at a mean rate, the usual model of many
  independent users; it has the short-term burstiness an evenly spaced source lacks.
* :class:`Bursts`: ``n`` messages at once every ``d`` seconds. This is the load model of
  the quals proposal (section 5.2.2: "bursts of n packets with an inter-burst delay of
  d"; n = 10 with d from 100 ms down to 10 ms), and it stresses queues harder than the
  same mean rate spread out.
* :class:`Schedule`: a sequence of steps of given duration and rate, constant (or
  Poisson) within a step, or linearly ramped between successive rates. Ramps and steps
  make one run sweep the offered load, e.g. 100 to 1000 messages/s, to find where
  latency turns up; the quals trace (section 5.2.1) also notes that live traffic is
  "extremely bursty", which step changes imitate at a coarse scale.

Their command-line forms (``constant:1000``, ``steps:10s@100,10s@1000``...) are read
by :mod:`traffic_models.arrival_text`.

Every process is deterministic: the same parameters (and seed) give the same times on
every call to :meth:`ArrivalProcess.times`, which restarts its random source each time.

Implementation: :meth:`~ArrivalProcess.times` is a generator, so a run at 30,000
messages/s for an hour never holds its schedule in memory, and each time costs a few
arithmetic operations. Schedules work in "cumulative expected count" space: the k-th
message of a deterministic schedule is due where the integral of the rate reaches k,
and a Poisson schedule places unit-rate exponential gaps in that space (the
time-rescaling construction of an inhomogeneous Poisson process). Inverting the
integral of a linear rate is one square root, so ramps cost no more than steps and no
thinning (drawing and discarding) is needed.
"""

from __future__ import annotations

import abc
import itertools
import math
import random
from collections.abc import Iterator, Sequence

__all__ = [
    "ArrivalProcess",
    "Bursts",
    "ConstantRate",
    "Poisson",
    "Schedule",
]


def check_rate(rate: float, what: str = "rate") -> float:
    """``rate`` as a float, or ValueError unless it is finite and not negative."""
    value = float(rate)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be a finite number >= 0 messages/s, got {rate!r}")
    return value


def _check_duration(duration: float) -> float:
    value = float(duration)
    if math.isnan(value) or value < 0:
        raise ValueError(f"duration must be >= 0 seconds, got {duration!r}")
    return value


class ArrivalProcess(abc.ABC):
    """When messages are due: offsets in seconds from the start of a run."""

    __slots__ = ()

    @abc.abstractmethod
    def times(self, duration: float) -> Iterator[float]:
        """Every offset due in ``[0, duration)``, non-decreasing.

        Lazily produced; equal offsets mean messages due at the same instant (a burst).
        Calling again starts over and yields the same offsets.
        """

    @abc.abstractmethod
    def expected_rate(self, at: float) -> float:
        """The rate (messages/s) the process aims for at offset ``at``; 0 before the start.

        For bursts this is the mean rate, size / interval.
        """

    @abc.abstractmethod
    def expected_count(self, duration: float) -> float:
        """The integral of :meth:`expected_rate` over ``[0, duration)``: what a report
        compares the count actually sent against."""


class ConstantRate(ArrivalProcess):
    """``rate`` messages/s, evenly spaced, the first at offset 0."""

    __slots__ = ("rate",)

    def __init__(self, rate: float) -> None:
        self.rate = check_rate(rate)

    def times(self, duration: float) -> Iterator[float]:
        duration = _check_duration(duration)
        rate = self.rate
        if rate <= 0:
            return
        # k / rate rather than a running sum: no drift however long the run.
        for k in itertools.count():
            at = k / rate
            if at >= duration:
                return
            yield at

    def expected_rate(self, at: float) -> float:
        return self.rate if at >= 0 else 0.0

    def expected_count(self, duration: float) -> float:
        return self.rate * _check_duration(duration)

    def __repr__(self) -> str:
        return f"ConstantRate({self.rate:g})"


class Poisson(ArrivalProcess):
    """A Poisson process: independent exponential gaps with mean ``1 / rate``."""

    __slots__ = ("rate", "seed")

    def __init__(self, rate: float, seed: int = 0) -> None:
        self.rate = check_rate(rate)
        self.seed = seed

    def times(self, duration: float) -> Iterator[float]:
        duration = _check_duration(duration)
        rate = self.rate
        if rate <= 0:
            return
        gap = random.Random(self.seed).expovariate
        at = gap(rate)
        while at < duration:
            yield at
            at += gap(rate)

    def expected_rate(self, at: float) -> float:
        return self.rate if at >= 0 else 0.0

    def expected_count(self, duration: float) -> float:
        return self.rate * _check_duration(duration)

    def __repr__(self) -> str:
        return f"Poisson({self.rate:g}, seed={self.seed})"


class Bursts(ArrivalProcess):
    """``size`` messages at the same instant every ``interval`` seconds, from offset 0.

    The quals proposal's load client (section 5.2.2) with n = ``size`` and d =
    ``interval``: ``Bursts(10, 0.010)`` is its heaviest setting, 1000 messages/s.
    """

    __slots__ = ("interval", "size")

    def __init__(self, size: int, interval: float) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"burst size must be a whole number >= 1, got {size!r}")
        interval = float(interval)
        if not math.isfinite(interval) or interval <= 0:
            raise ValueError(f"burst interval must be > 0 seconds, got {interval!r}")
        self.size = size
        self.interval = interval

    def times(self, duration: float) -> Iterator[float]:
        duration = _check_duration(duration)
        size, interval = self.size, self.interval
        for k in itertools.count():
            at = k * interval
            if at >= duration:
                return
            yield from itertools.repeat(at, size)

    def expected_rate(self, at: float) -> float:
        return self.size / self.interval if at >= 0 else 0.0

    def expected_count(self, duration: float) -> float:
        return self.size / self.interval * _check_duration(duration)

    def __repr__(self) -> str:
        return f"Bursts({self.size}, {self.interval:g})"


class _Segment:
    """A stretch of a schedule where the rate is ``rate + slope * (t - start)``."""

    __slots__ = ("count_before", "end", "length", "rate", "slope", "start")

    def __init__(
        self, start: float, length: float, rate: float, slope: float, before: float
    ) -> None:
        self.start = start
        self.length = length
        self.end = start + length
        self.rate = rate
        self.slope = slope
        self.count_before = before

    def count_within(self, length: float) -> float:
        """Expected messages in the first ``length`` seconds of the segment."""
        length = min(length, self.length)
        if length <= 0:
            return 0.0
        return self.rate * length + 0.5 * self.slope * length * length

    @property
    def count_after(self) -> float:
        if math.isinf(self.length):
            return math.inf if self.rate > 0 else self.count_before
        return self.count_before + self.count_within(self.length)


class Schedule(ArrivalProcess):
    """A piecewise rate: ``steps`` is ``[(duration_s, rate), ...]`` in order.

    Without ``ramp`` each step holds its rate for its duration. With ``ramp`` the rates
    are the values at the *start* of each step and the rate moves linearly from one to
    the next across the step; the last step has nothing to move towards and holds its
    rate. So ``Schedule([(30, 100), (0, 1000)], ramp=True)`` climbs from 100 to 1000
    messages/s over 30 s; a zero-length step is how a ramp ends on a rate, or how the
    rate jumps in the middle of a ramped schedule.

    After the last step the last rate carries on, so asking for more time than
    :attr:`total_duration` extends the final plateau instead of going quiet.

    Without ``seed`` messages are spaced deterministically (the k-th is due where the
    expected count reaches k, the first at 0). With ``seed`` they form an
    inhomogeneous Poisson process with the same rate.
    """

    __slots__ = ("_segments", "ramp", "seed", "steps", "total_duration")

    def __init__(
        self,
        steps: Sequence[tuple[float, float]],
        *,
        ramp: bool = False,
        seed: int | None = None,
    ) -> None:
        if not steps:
            raise ValueError("a schedule needs at least one (duration, rate) step")
        checked: list[tuple[float, float]] = []
        for index, step in enumerate(steps):
            try:
                length, rate = step
            except (TypeError, ValueError):
                raise ValueError(
                    f"step {index + 1} must be (duration_s, rate), got {step!r}"
                ) from None
            length = float(length)
            if not math.isfinite(length) or length < 0:
                raise ValueError(f"step {index + 1}: duration must be >= 0 s, got {length!r}")
            checked.append((length, check_rate(rate, f"step {index + 1}: rate")))
        self.steps: tuple[tuple[float, float], ...] = tuple(checked)
        self.ramp = ramp
        self.seed = seed
        self.total_duration = math.fsum(length for length, _ in checked)
        self._segments = self._build_segments()

    def _build_segments(self) -> tuple[_Segment, ...]:
        segments: list[_Segment] = []
        start = 0.0
        before = 0.0
        steps = self.steps
        for index, (length, rate) in enumerate(steps):
            if length <= 0:
                continue
            slope = 0.0
            if self.ramp and index + 1 < len(steps):
                slope = (steps[index + 1][1] - rate) / length
                if not math.isfinite(slope):
                    # A step too short for its slope to be represented carries no
                    # messages worth speaking of; hold its start rate instead.
                    slope = 0.0
            segment = _Segment(start, length, rate, slope, before)
            segments.append(segment)
            before = segment.count_after
            start = segment.end
        segments.append(_Segment(start, math.inf, steps[-1][1], 0.0, before))
        return tuple(segments)

    def _segment_at(self, at: float) -> _Segment:
        for segment in self._segments:
            if at < segment.end:
                return segment
        return self._segments[-1]

    def expected_rate(self, at: float) -> float:
        if at < 0:
            return 0.0
        segment = self._segment_at(at)
        return max(0.0, segment.rate + segment.slope * (at - segment.start))

    def expected_count(self, duration: float) -> float:
        duration = _check_duration(duration)
        segment = self._segment_at(duration)
        if duration <= segment.start:
            return segment.count_before
        return segment.count_before + segment.count_within(duration - segment.start)

    def _targets(self) -> Iterator[float]:
        """Points in expected-count space where messages fall."""
        if self.seed is None:
            return itertools.count(0.0)
        return itertools.accumulate(_exponential_gaps(self.seed))

    def times(self, duration: float) -> Iterator[float]:
        duration = _check_duration(duration)
        targets = self._targets()
        target = next(targets)
        sqrt = math.sqrt
        for segment in self._segments:
            if segment.start >= duration:
                return
            limit = segment.count_after
            base = segment.count_before
            start, rate, slope = segment.start, segment.rate, segment.slope
            if slope == 0.0:
                if rate <= 0:
                    continue
                while target < limit:
                    at = start + (target - base) / rate
                    if at >= duration:
                        return
                    yield at
                    target = next(targets)
            else:
                # Solve rate*s + slope*s^2/2 = x for s >= 0, in the form that stays
                # accurate when slope is tiny and needs no special case for rate = 0.
                twice_slope = 2.0 * slope
                rate_squared = rate * rate
                while target < limit:
                    x = target - base
                    root = sqrt(max(0.0, rate_squared + twice_slope * x))
                    offset = 2.0 * x / (rate + root) if x > 0 else 0.0
                    at = min(start + offset, segment.end)
                    if at >= duration:
                        return
                    yield at
                    target = next(targets)

    def __repr__(self) -> str:
        steps = ", ".join(f"({length:g}, {rate:g})" for length, rate in self.steps)
        return f"Schedule([{steps}], ramp={self.ramp}, seed={self.seed})"


def _exponential_gaps(seed: int) -> Iterator[float]:
    gap = random.Random(seed).expovariate
    while True:
        yield gap(1.0)


# ---------------------------------------------------------------------------------------
# The command-line forms
