"""A token bucket: ``rate`` messages a second pass, bursts of up to ``burst``.

The per-connection rate limit of :mod:`.shedding` and the admission of
:mod:`.response_time` both meter with it; the controller changes ``rate`` and ``burst``
as it goes, and the bucket takes them from its next refill.
"""

from __future__ import annotations


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up."""

    __slots__ = ("burst", "rate", "stamp", "tokens")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.stamp = now

    def take(self, wanted: int, now: float) -> int:
        """How many of ``wanted`` messages may pass now."""
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        granted = min(wanted, int(self.tokens))
        self.tokens -= granted
        return granted
