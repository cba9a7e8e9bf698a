"""What the server stage reports: its counters at one instant, and the reasons it counts.

Kept apart from :mod:`.server` so that observers (metrics, the admin pages, dumps) can
name what they show without the stage's tasks and sockets.
"""

from __future__ import annotations

import dataclasses

from gnutella_router.net.connection import Connection


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


def traffic_of(connection: Connection) -> dict[str, int]:
    return {name: getattr(connection, name) for name in TRAFFIC}
