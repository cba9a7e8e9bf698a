"""What a replay sent and what came back of it, timed; sans-IO, fed ``now``.

:mod:`.replay` hands every record it sends to :meth:`Timing.sent` and every frame its
peers read to :meth:`Timing.arrived`; the book says how long copies took to reach the
other peers (``one-hop``), how many came twice, and how long replies took to come back
(``target-reply``, ``round-trip``). Its memory is bounded by :data:`TIMING_WINDOW` and
:data:`MAX_TIMED`.
"""

from __future__ import annotations

from collections.abc import Sequence

from protocol.constants import MessageType
from protocol.framing import Frame
from traffic_models.latency import LatencyBook

BROADCAST_TYPES = frozenset({int(MessageType.PING), int(MessageType.QUERY)})
REPLY_TYPES = frozenset({int(MessageType.PONG), int(MessageType.QUERY_HIT)})
TIMING_WINDOW = 30.0
"""Seconds a sent ping or query is remembered, to time what comes back for it."""
MAX_TIMED = 1_000_000
"""Most pings and queries remembered at once; beyond, new ones are sent untimed."""


class Timing:
    """What the replay sent and what came back of it (see :mod:`.replay`).

    Bounded: a sent ping or query is forgotten after :data:`TIMING_WINDOW` seconds, and
    at most :data:`MAX_TIMED` are remembered; keys are GUID plus type.
    """

    def __init__(self, window: float = TIMING_WINDOW, most: int = MAX_TIMED) -> None:
        self.window = window
        self.most = most
        self.book = LatencyBook()
        self._sent: dict[bytes, list[int]] = {}
        """key -> [stamp (ns on trio's clock), sending peer, bitmask of peers reached]."""
        self.copies = [0] * 256
        self.duplicates = [0] * 256
        self.replies = [0] * 256
        self.untimed = 0
        self.last_arrival = 0.0

    def sent(self, wire: bytes, peer: int, now: float) -> None:
        """A record handed to ``peer`` at ``now``: remembered if it is a ping or query."""
        message_type = wire[16]
        if message_type not in BROADCAST_TYPES:
            return
        self._expire(now)
        if len(self._sent) >= self.most:
            self.untimed += 1
            return
        self._sent[wire[:17]] = [int(now * 1e9), peer, 0]

    def _expire(self, now: float) -> None:
        oldest = int((now - self.window) * 1e9)
        sent = self._sent
        while sent:
            key = next(iter(sent))
            if sent[key][0] >= oldest:
                return
            del sent[key]

    def arrived(self, frames: Sequence[Frame], peer: int, now: float) -> None:
        """Frames read by ``peer`` at ``now``: time what is ours."""
        at = int(now * 1e9)
        for frame in frames:
            message_type = frame.payload_type
            if message_type in BROADCAST_TYPES:
                entry = self._sent.get(frame.guid + bytes((message_type,)))
                if entry is None or entry[1] == peer:
                    continue
                self.last_arrival = now
                bit = 1 << peer
                if entry[2] & bit:
                    self.duplicates[message_type] += 1
                    continue
                entry[2] |= bit
                self.copies[message_type] += 1
                self.book.record("one-hop", message_type, at - entry[0])
            elif message_type in REPLY_TYPES:
                request = (
                    MessageType.PING if message_type == MessageType.PONG else MessageType.QUERY
                )
                entry = self._sent.get(frame.guid + bytes((request,)))
                if entry is None or entry[1] != peer:
                    continue
                self.last_arrival = now
                self.replies[message_type] += 1
                kind = "target-reply" if frame.hops == 0 else "round-trip"
                self.book.record(kind, message_type, at - entry[0])
