"""What the server stage reports: its counters at one instant, and the reasons it counts.

Kept apart from :mod:`.server` so that observers (metrics, the admin pages, dumps) can
name what they show without the stage's tasks and sockets.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable
from typing import Any

from gnutella_router.net.session import PeerSession


@dataclasses.dataclass(frozen=True, slots=True)
class ServerStatistics:
    listening: tuple[str, ...]
    connections: int
    incoming: int
    outgoing: int
    handshakes_in_progress: int
    accepted: int
    completed: dict[str, int]
    """Completed handshakes by role."""
    refused: dict[str, int]
    """Connection attempts turned away or failed before the first message, by reason."""
    closed: int
    failed_connections: int
    """Connections ended by an unexpected exception in their tasks (each one logged)."""
    bytes_in: int
    """Bytes read from peers since start (after the handshake, before inflating),
    closed connections included: it only rises."""
    bytes_out: int
    """Bytes written to peers since start, closed connections included."""
    messages_in: int
    messages_out: int
    outgoing_dropped: dict[str, int]
    """Messages the outgoing queues dropped since start, by reason, closed connections
    included: it only rises."""
    kicked: dict[str, int]
    """Peers disconnected for abuse, by offence."""
    timed_out: dict[str, int]
    """Connections closed by a read deadline, by deadline (``idle``, ``partial-message``)."""
    evicted: int
    """Connections closed to give their slot to a peer from a rarer network."""
    bans: int
    """Bans in force or not yet found expired."""
    deflate_parallel_writes: int
    """Writes deflated side by side with others of their batch (network.deflate_threads)."""


INCOMING_REFUSAL_REASONS = (
    "accept-error",
    "rate-limited",
    "handshake-timeout",
    "handshake-error",
    "handshake-io",
    "connected-to-self",
    "temporarily-banned",
    "held-by-the-operator",
    "offline",
    "already-connected",
    "too-many-connections",
    "too-many-leaves",
    "peer-declined",
)
"""Why an incoming connection is turned away (the keys of ``refused``)."""
DIAL_FAILURE_REASONS = ("dial-timeout", "dial-handshake-error", "dial-failed")
"""Why a connection we dial does not come up (also keys of ``refused``)."""


TRAFFIC = ("bytes_in", "bytes_out", "messages_in", "messages_out")
"""A connection's traffic counters, summed over all connections in the statistics."""


def traffic_of(session: PeerSession) -> dict[str, int]:
    return {name: getattr(session, name) for name in TRAFFIC}


class TrafficTotals:
    """The traffic of the connections that ended, which the statistics' totals add to
    the live ones', so that they only rise."""

    __slots__ = ("_dropped", "_traffic")

    def __init__(self) -> None:
        self._traffic: collections.Counter[str] = collections.Counter()
        """Bytes and messages each way."""
        self._dropped: collections.Counter[str] = collections.Counter()
        """What their outgoing queues dropped, by reason."""

    def ended(self, session: PeerSession, now: float) -> None:
        """Count a connection that has ended."""
        self._traffic.update(traffic_of(session))
        self._dropped.update(session.outgoing_statistics(now).dropped)

    def with_live(self, live: Iterable[PeerSession], now: float) -> dict[str, Any]:
        """The totals of the ended connections and ``live`` ones, as
        :class:`ServerStatistics` fields."""
        traffic = collections.Counter(self._traffic)
        dropped = collections.Counter(self._dropped)
        for session in live:
            traffic.update(traffic_of(session))
            dropped.update(session.outgoing_statistics(now).dropped)
        return {**{name: traffic[name] for name in TRAFFIC}, "outgoing_dropped": dict(dropped)}
