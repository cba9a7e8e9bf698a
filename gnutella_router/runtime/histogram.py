"""Fixed-bucket histograms of seconds, cheap enough for a stage's per-batch path.

A stage records two times per batch (how long its oldest event waited in the queue, and
how long the handler took), tens of thousands of times a second at full load. A
Prometheus client histogram would do, but it takes a lock per observation and belongs to
a process-wide registry; this one is a list of plain integers the stage owns, read on
the trio thread when ``/metrics`` is scraped, and exported there as a Prometheus
histogram with the same buckets. Memory is constant: one integer per bucket.
"""

from __future__ import annotations

import bisect
import dataclasses

BUCKETS: tuple[float, ...] = (
    0.000_01,
    0.000_025,
    0.000_05,
    0.000_1,
    0.000_25,
    0.000_5,
    0.001,
    0.002_5,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Upper bounds, in seconds: 10 us to 10 s, about three to a decade. Anything longer
falls in the implicit ``+Inf`` bucket."""


@dataclasses.dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """A histogram at one instant, as Prometheus reads one."""

    buckets: tuple[tuple[float, int], ...]
    """(upper bound, observations at or below it), cumulative; the last bound is inf."""
    count: int
    sum: float

    def quantile(self, q: float) -> float | None:
        """The upper bound of the bucket holding the ``q`` quantile (None when empty)."""
        if not self.count:
            return None
        rank = q * self.count
        for bound, cumulative in self.buckets:
            if cumulative >= rank:
                return bound
        return self.buckets[-1][0]


class SecondsHistogram:
    """Counts observations of seconds into :data:`BUCKETS`."""

    __slots__ = ("_counts", "count", "sum")

    def __init__(self) -> None:
        self._counts = [0] * (len(BUCKETS) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self._counts[bisect.bisect_left(BUCKETS, seconds)] += 1
        self.count += 1
        self.sum += seconds

    def snapshot(self) -> HistogramSnapshot:
        cumulative = 0
        buckets = []
        for bound, count in zip((*BUCKETS, float("inf")), self._counts, strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        return HistogramSnapshot(tuple(buckets), self.count, self.sum)
