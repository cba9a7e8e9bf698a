"""Where a pong's host listens, read without parsing the whole pong.

A router reads every pong that crosses it for the address it names (for its pong cache
and host cache) and must tell a malformed one from a good one, but a whole parse of a
pong with its GGEP block costs several microseconds, many times what routing it does.
The first 14 bytes of a pong are fixed (port, IPv4 address, files, kilobytes) and any
14 bytes are a valid head, so whether a pong parses depends on what follows them only:
its GGEP block. Pongs repeat the same few blocks (a servent's vendor code, its uptime
in days, its free slots), so :class:`PongAddresses` parses each distinct block once,
with the real parser, and remembers the answer (a bounded number of them); the address
is read off the head directly. The answer is exactly what :func:`~.codec.parse_payload`
would give.
"""

from __future__ import annotations

from .codec import parse_payload
from .constants import MessageType
from .errors import MalformedPayloadError
from .ipv4 import unpack_ipv4

PONG_HEAD = 14
"""Port (2), IPv4 address (4), files (4) and kilobytes (4)."""


class PongAddresses:
    """Reads pongs' addresses; remembers which GGEP blocks parse (see the module)."""

    __slots__ = ("_kept", "_tails")

    def __init__(self, kept: int = 4096) -> None:
        self._kept = kept
        self._tails: dict[bytes, bool] = {}

    def read(self, payload: bytes) -> tuple[str, int] | None:
        """``(ip, port)`` of a pong's payload, or None when it does not parse."""
        if len(payload) < PONG_HEAD:
            return None
        tail = payload[PONG_HEAD:]
        if tail:
            parses = self._tails.get(tail)
            if parses is None:
                try:
                    parse_payload(MessageType.PONG, bytes(PONG_HEAD) + tail)
                    parses = True
                except MalformedPayloadError:
                    parses = False
                if len(self._tails) >= self._kept:
                    self._tails.clear()
                self._tails[tail] = parses
            if not parses:
                return None
        return unpack_ipv4(payload[2:6]), payload[0] | payload[1] << 8
