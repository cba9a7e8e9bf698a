"""SEDA's response-time controller: admit queries at the rate that keeps p90 on target.

Theory of operation
-------------------
Backpressure keeps memory bounded but not latency: a router that can route 50 queries
a second and is offered 200 lets its queue, and every query's wait, grow until the
bound, and then keeps them there. The overload slides give SEDA's answer: measure the
stage's response times, and admit work at the door only at the rate that keeps their
90th percentile under a target; what is refused is dropped at once, never queued.

The controller here follows the slides. Samples are the router stage's response times
(a batch's oldest message, from its admission into the queue to the end of its
handling: a conservative sample). Every :attr:`samples_per_update` samples, or every
:attr:`interval` seconds if fewer came, it takes their 90th percentile and adjusts the
admission rate of a token bucket: above the target, the rate is divided by
``decrease_factor`` (1.2); below 0.9 x target, ``additive_increase`` x error is added,
the error being how far below the target, as a share of it; in between it stays. The
rate stays within ``[min_rate, max_rate]``; the bucket holds at most ``burst_seconds``
of the rate (and one message), so bursts pass but a backlog cannot be built through it.

It governs queries only, the messages the paper's overload is made of: pings, pongs,
hits, pushes and the rest pass, so replies keep flowing while queries are shed. Nothing
here reads a clock: times are passed in, so the control law is tested on a simulated
clock.
"""

from __future__ import annotations

import dataclasses

from gnutella_router.control.token_bucket import TokenBucket


@dataclasses.dataclass(frozen=True, slots=True)
class ControllerState:
    """What the controller is doing, for dumps, metrics and the profiler."""

    target_seconds: float
    rate: float
    """Queries admitted per second now."""
    p90_seconds: float | None
    """The 90th percentile of the last update's samples (None before the first)."""
    samples: int
    """Samples taken since start."""
    updates: int
    admitted: int
    refused: int


class ResponseTimeController:
    """AIMD on a token bucket, driven by the 90th percentile of response times."""

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
    ) -> None:
        if not 0 < min_rate <= initial_rate <= max_rate:
            raise ValueError("rates must satisfy 0 < min_rate <= initial_rate <= max_rate")
        if decrease_factor <= 1:
            raise ValueError("decrease_factor must be above 1")
        self.target = target
        self.rate = initial_rate
        self.min_rate = min_rate
        self.max_rate = max_rate
        self.additive_increase = additive_increase
        self.decrease_factor = decrease_factor
        self.samples_per_update = samples_per_update
        self.interval = interval
        self.burst_seconds = burst_seconds
        self._window: list[float] = []
        self._updated_at = now
        self.bucket = TokenBucket(initial_rate, self._burst(), now)
        self.p90: float | None = None
        self.samples = 0
        self.updates = 0
        self.admitted = 0
        self.refused = 0

    def _burst(self) -> float:
        return max(1.0, self.rate * self.burst_seconds)

    def admit(self, wanted: int, now: float) -> int:
        """How many of ``wanted`` queries may enter now (the rest are to be shed)."""
        granted = self.bucket.take(wanted, now)
        self.admitted += granted
        self.refused += wanted - granted
        return granted

    def observe(self, seconds: float, now: float) -> None:
        """One response-time sample; may adjust the rate."""
        self._window.append(seconds)
        self.samples += 1
        if len(self._window) >= self.samples_per_update or now - self._updated_at >= self.interval:
            self._update(now)

    def _update(self, now: float) -> None:
        window = sorted(self._window)
        self._window = []
        self._updated_at = now
        self.updates += 1
        p90 = window[max(0, -(-len(window) * 9 // 10) - 1)]  # the ceil(0.9 n)-th sample
        self.p90 = p90
        if p90 > self.target:
            self.rate = max(self.min_rate, self.rate / self.decrease_factor)
        elif p90 < 0.9 * self.target:
            error = (self.target - p90) / self.target
            self.rate = min(self.max_rate, self.rate + self.additive_increase * error)
        self.bucket.rate = self.rate
        self.bucket.burst = self._burst()

    def state(self) -> ControllerState:
        return ControllerState(
            target_seconds=self.target,
            rate=self.rate,
            p90_seconds=self.p90,
            samples=self.samples,
            updates=self.updates,
            admitted=self.admitted,
            refused=self.refused,
        )
