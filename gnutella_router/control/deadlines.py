"""Read deadlines of a handshaken connection: the idle peer, and the message left half-sent.

Theory of operation
-------------------
A handshake is bounded by ``network.handshake_timeout`` from the moment the connection
is accepted (a peer that sends half a header line and nothing more is dropped then), and
a dial by ``catcher.dial_timeout``. After the handshake, without these deadlines, a
connection that stays silent, or that sends part of a message and nothing more, would
hold its slot for ever. Two deadlines end such connections:

* **Idle** (``network.idle_timeout``, 180 s by default, gtk-gnutella's "activity
  timeout" for connected peers): no byte at all from the peer for that long. The
  router pings every neighbour at least every 30 s (the catcher's keep-alive ping, TTL
  1), which a live peer answers with a pong, so a live peer is never idle that long.
  The peer is sent Bye 405 ("activity timeout") and closed; it did nothing wrong, so it
  is not banned.
* **Partial message** (``network.partial_message_timeout``, 60 s by default): the framer
  holds part of a message (a header, or a payload not yet whole) and no message has
  been completed for that long, however many bytes dribbled in meanwhile. Even a 64 KiB
  message at 1.1 KiB/s is whole within it. A peer that holds a message back that long
  is a slowloris, not a slow link: it is sent Bye 405 and closed, and counted as an
  offence (``partial-message``), which bans it for ``abuse.ban_seconds`` when kicks are
  on.

Both deadlines judge the peer, never us: while the router has not finished with frames
the peer sent (the reader waits for room in the router's queue, and does not read, so
the peer's bytes wait in the kernel), the clocks are reset. A peer that trickles whole
messages (a ping a minute) is served: what it costs is what any quiet peer costs.

A :class:`ReadWatch` per connection is checked about once a second (more often when a
deadline is shorter than 4 s) with the connection's counters; it keeps the counters'
last values and when they changed, so nothing is paid per read, and a deadline is late
by at most one check.

Nothing here does I/O or reads a clock: times are passed in.
"""

from __future__ import annotations

import enum


class Deadline(enum.StrEnum):
    """Which read deadline ended a connection."""

    IDLE = "idle"
    PARTIAL_MESSAGE = "partial-message"


MAX_CHECK_INTERVAL = 1.0
CHECKS_PER_DEADLINE = 4
"""A deadline is checked at least this many times over its length (when it is short)."""


def check_interval(*deadlines: float) -> float:
    """How often connections must be checked for deadlines of these lengths (0: off)."""
    return min(
        [MAX_CHECK_INTERVAL, *(d / CHECKS_PER_DEADLINE for d in deadlines if d > 0)],
    )


class ReadWatch:
    """The two read deadlines of one connection (see the module docstring)."""

    __slots__ = ("_bytes", "_heard_at", "_messages", "_partial_since", "idle", "partial")

    def __init__(self, now: float, *, idle: float, partial: float) -> None:
        self.idle = idle
        """Seconds without a byte before :attr:`Deadline.IDLE`; 0: never."""
        self.partial = partial
        """Seconds with part of a message held and none completed before
        :attr:`Deadline.PARTIAL_MESSAGE`; 0: never."""
        self._heard_at = now
        self._bytes = 0
        self._messages = 0
        self._partial_since: float | None = None

    def check(
        self,
        now: float,
        *,
        bytes_in: int,
        messages_in: int,
        partial_bytes: int,
        unfinished: int,
    ) -> Deadline | None:
        """The deadline the connection has passed at ``now``, if any.

        ``bytes_in`` and ``messages_in`` are the connection's totals so far,
        ``partial_bytes`` what its framer holds of a message not yet whole, and
        ``unfinished`` how many of its frames the router has not finished with.
        """
        if bytes_in != self._bytes:
            self._bytes = bytes_in
            self._heard_at = now
        if messages_in != self._messages:
            self._messages = messages_in
            self._partial_since = None
        if unfinished:  # we are behind, not the peer
            self._heard_at = now
            self._partial_since = None
            return None
        if not partial_bytes:
            self._partial_since = None
        elif self._partial_since is None:
            self._partial_since = now
        elif self.partial and now - self._partial_since >= self.partial:
            return Deadline.PARTIAL_MESSAGE
        if self.idle and now - self._heard_at >= self.idle:
            return Deadline.IDLE
        return None
