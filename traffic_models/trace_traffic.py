"""A recorded trace as load: the same schedule interface as the synthetic generator.

The load client takes anything with ``schedule(duration)``; this one plays a trace's
records at their recorded offsets (divided by ``speed``), ``loops`` times (once unless
asked), and never more than the duration allows. :attr:`TraceTraffic.length` is how long
that takes, which is the run's natural duration. GUIDs are restamped by the load client
anyway, so loops never look like duplicates to the router.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from .generator import Scheduled
from .trace import TraceRecord, read_trace


class TraceTraffic:
    """Replays ``path`` as an open-loop schedule."""

    def __init__(self, path: Path, *, speed: float = 1.0, loops: int = 1) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        if loops < 1:
            raise ValueError("loops must be at least 1")
        self.loops = loops
        self.records: list[TraceRecord] = list(read_trace(path))
        if not self.records:
            raise ValueError(f"{path}: the trace holds no messages")
        self.speed = speed
        self.span = (self.records[-1].at - self.records[0].at) / speed

    @property
    def period(self) -> float:
        """Seconds from one pass's start to the next's: a pass restarts just after the
        last record."""
        return self.span + 1e-3

    @property
    def length(self) -> float:
        """Seconds that ``loops`` passes take: everything is due before this."""
        return self.period * self.loops

    def schedule(self, duration: float) -> Iterator[Scheduled]:
        origin = self.records[0].at
        period = self.period
        base = 0.0
        for _ in range(self.loops):
            if base >= duration:
                return
            for record in self.records:
                at = base + (record.at - origin) / self.speed
                if at >= duration:
                    return
                yield Scheduled(at, record.payload_type, record.guid, record.wire())
            base += period
