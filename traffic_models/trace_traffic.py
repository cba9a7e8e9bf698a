"""A recorded trace as load: the same schedule interface as the synthetic generator.

The load client takes anything with ``schedule(duration)``; this one plays a trace's
records at their recorded offsets (divided by ``speed``), looping the trace as often
as the duration asks. GUIDs are restamped by the load client anyway, so loops never
look like duplicates to the router.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from .generator import Scheduled
from .trace import TraceRecord, read_trace


class TraceTraffic:
    """Replays ``path`` as an open-loop schedule."""

    def __init__(self, path: Path, *, speed: float = 1.0) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.records: list[TraceRecord] = list(read_trace(path))
        if not self.records:
            raise ValueError(f"{path}: the trace holds no messages")
        self.speed = speed
        self.span = (self.records[-1].at - self.records[0].at) / speed

    def schedule(self, duration: float) -> Iterator[Scheduled]:
        origin = self.records[0].at
        period = self.span + 1e-3  # a loop restarts just after the last record
        base = 0.0
        while base < duration:
            for record in self.records:
                at = base + (record.at - origin) / self.speed
                if at >= duration:
                    return
                yield Scheduled(at, record.payload_type, record.guid, record.wire())
            base += period
