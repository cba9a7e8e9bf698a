"""The ``trace`` model calibrated to the SEDA papers' 37-hour Gnutella trace.

Theory of operation
-------------------
What the papers report of their trace, every number there is:

* SOSP'01 section 5.2.1: "During one 37-hour run, the router processed 24.8 million
  packets (with an average of 179 packets/sec) and received 72,396 connections from
  other hosts on the network, with an average of 12 simultaneous connections at any
  given time." (24.8 million over 37 hours is 186 a second, so the run was somewhat
  longer than 37 hours, or the count rounded; we take the stated average, 179.)
* Both papers: "We have measured the average packet size of Gnutella messages to be
  approximately 32 bytes; a packet rate of just 115 packets per second can saturate a
  28.8-kilobit modem link."
* Quals proposal section 5.2.1 and its Fig. 13 (packets per interval by type over the 37
  hours): "pong messages comprise the majority of network traffic, totalling more than
  50% of all packets. It also shows that network traffic is extremely bursty and does
  not appear to follow clear diurnal patterns." Fig. 13's axes run to 250 intervals
  (37 hours are 222 ten-minute intervals) and 180,000 packets per interval.

Nothing else (no other type share, no size distribution, no burst statistic) is given,
so the rest of the model is our assumption, stated here and in docs/experiments.md:

* **Rate.** :class:`TraceArrivals`, a Poisson process whose rate is the target mean
  times a product of independent log-normal factors, one per time scale (10 minutes, 1
  minute, 10 s, 1 s), each held for its scale's window and with mean one. That is a
  multiplicative cascade: bursts inside bursts, so the traffic stays bursty however it
  is aggregated, unlike a Poisson source whose counts smooth out as ``1/sqrt(n)``. There
  is no daily cycle ("no clear diurnal patterns"). The spreads are chosen so that the
  10-minute totals over 37 hours stay under Fig. 13's axis top (180,000 packets, 1.68
  times the mean interval), while a second can carry twenty times the mean rate.
* **Shares.** Pongs 55 % (over half, as reported); pings 25 %, queries 12 %, query hits
  6.5 %, pushes 1.5 % are ours, ordered as Fig. 13's legend lists them and chosen, with
  the generator's message contents, to give the reported mean size.
* **Size.** "Packet size" is read as the payload length (what the header's length field
  says, without the 23-byte header). Read as whole messages, 32 bytes is below what the
  reported shares allow: a pong is 37 bytes on the wire even without extensions, a ping
  23, so a traffic of more than half pongs averages more than 30 bytes with no queries
  or query hits in it at all. The generator's contents are today's (pongs with GGEP,
  queries with the 0.6 flags, hits with an EQHD), not 2001's, because the router is
  tested against today's servents; their payloads average 32 bytes with these shares.

Everything here is deterministic: a window's factor is a hash of (seed, scale, window
index) turned into a normal deviate, so :meth:`TraceArrivals.expected_rate` can say the
rate at any instant without replaying the run, and two calls to
:meth:`TraceArrivals.times` give the same arrivals.
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from collections.abc import Iterator, Sequence

from .arrivals import ArrivalProcess
from .mix import TRACE_LIKE_MIX, MessageMix

__all__ = [
    "PAPER_TRACE",
    "TRACE_MIX",
    "TRACE_SCALES",
    "PaperTrace",
    "TraceArrivals",
    "dispersion",
]


@dataclasses.dataclass(frozen=True, slots=True)
class PaperTrace:
    """What the papers report of their 37-hour trace."""

    hours: float = 37.0
    mean_rate: float = 179.0
    """Packets/s (SOSP'01 5.2.1)."""
    packets: float = 24.8e6
    connections: int = 72_396
    simultaneous_connections: float = 12.0
    pong_share_above: float = 0.5
    """Pongs are "more than 50% of all packets" (proposal 5.2.1)."""
    mean_packet_bytes: float = 32.0
    """Read as the mean payload length (see the module docstring)."""
    interval_axis_top: int = 180_000
    """Fig. 13's y-axis top, packets per (ten-minute) interval."""


PAPER_TRACE = PaperTrace()

TRACE_MIX: MessageMix = TRACE_LIKE_MIX
"""The ``trace`` mix: pongs over half, as reported; the other shares are assumptions
(module docstring)."""

TRACE_SCALES: tuple[tuple[float, float], ...] = (
    (600.0, 0.15),
    (60.0, 0.3),
    (10.0, 0.45),
    (1.0, 0.6),
)
"""(window in seconds, spread of the log of the rate factor) per time scale, coarsest
first; the finest window is the one inside which arrivals are Poisson."""

_MASK = (1 << 64) - 1
_UNIT = 1.0 / (1 << 53)
_NORMAL = statistics.NormalDist()


def _mix64(value: int) -> int:
    """SplitMix64's finaliser: a cheap, well-spread hash of a 64-bit integer."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK
    return value ^ (value >> 31)


class TraceArrivals(ArrivalProcess):
    """Poisson arrivals at ``mean_rate`` modulated by a log-normal cascade (``scales``).

    The rate in the finest window containing ``t`` is ``mean_rate`` times, for each
    scale, ``exp(sigma * z - sigma**2 / 2)`` with ``z`` a standard normal deviate drawn
    for the window of that scale containing ``t``; every factor has mean one, so the
    long-run mean is ``mean_rate``.
    """

    __slots__ = ("_finest", "mean_rate", "scales", "seed")

    def __init__(
        self,
        mean_rate: float = PAPER_TRACE.mean_rate,
        *,
        scales: Sequence[tuple[float, float]] = TRACE_SCALES,
        seed: int = 0,
    ) -> None:
        rate = float(mean_rate)
        if not math.isfinite(rate) or rate <= 0:
            raise ValueError(f"mean rate must be a finite number > 0 messages/s, got {mean_rate!r}")
        if not scales:
            raise ValueError("a cascade needs at least one (window, sigma) scale")
        checked = []
        for window, sigma in scales:
            window, sigma = float(window), float(sigma)
            if not math.isfinite(window) or window <= 0 or not 0 <= sigma <= 3:
                raise ValueError(f"scale ({window!r}, {sigma!r}): window > 0 s, 0 <= sigma <= 3")
            checked.append((window, sigma))
        self.mean_rate = rate
        self.scales = tuple(sorted(checked, reverse=True))
        self.seed = seed
        self._finest = self.scales[-1][0]

    def _factor(self, level: int, index: int) -> float:
        sigma = self.scales[level][1]
        if sigma == 0:
            return 1.0
        key = _mix64(_mix64(_mix64(self.seed & _MASK) ^ level) ^ (index & _MASK))
        uniform = ((key >> 11) + 0.5) * _UNIT
        return math.exp(sigma * _NORMAL.inv_cdf(uniform) - sigma * sigma / 2)

    def expected_rate(self, at: float) -> float:
        if at < 0:
            return 0.0
        rate = self.mean_rate
        for level, (window, _) in enumerate(self.scales):
            rate *= self._factor(level, int(at // window))
        return rate

    def _window_rates(self, duration: float) -> Iterator[tuple[float, float]]:
        """(start, rate) of every finest window that begins before ``duration``."""
        finest = self._finest
        for index in range(math.ceil(duration / finest)):
            start = index * finest
            yield start, self.expected_rate(start)

    def expected_count(self, duration: float) -> float:
        if math.isnan(duration) or duration < 0:
            raise ValueError(f"duration must be >= 0 seconds, got {duration!r}")
        finest = self._finest
        return math.fsum(
            rate * min(finest, duration - start) for start, rate in self._window_rates(duration)
        )

    def times(self, duration: float) -> Iterator[float]:
        if math.isnan(duration) or duration < 0:
            raise ValueError(f"duration must be >= 0 seconds, got {duration!r}")
        gap = random.Random(self.seed).expovariate
        finest = self._finest
        for start, rate in self._window_rates(duration):
            end = min(start + finest, duration)
            # Memoryless: a fresh gap at each window's start is still a Poisson process.
            at = start + gap(rate)
            while at < end:
                yield at
                at += gap(rate)

    def __repr__(self) -> str:
        scales = ", ".join(f"({w:g}, {s:g})" for w, s in self.scales)
        return f"TraceArrivals({self.mean_rate:g}, scales=[{scales}], seed={self.seed})"


def dispersion(counts: Sequence[int]) -> float:
    """Index of dispersion of per-interval counts, variance over mean: 1 for Poisson
    counts at any interval, growing with the interval for traffic bursty across scales."""
    mean = statistics.fmean(counts)
    return statistics.pvariance(counts, mu=mean) / mean if mean > 0 else 0.0
