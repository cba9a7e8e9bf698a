"""The messages between a test network's controller and a host process (:mod:`.host`).

A message is one line of JSON (an object), then, when the object has a ``length``, that
many bytes of body (an admin page, which is JSON already and is passed on as it is, not
parsed and written again). Commands go to the host on its standard input; replies
(``{"id": N, ...}``, the answer to command N) and events (``{"event": ...}``) come back
on its standard output. Lines and bodies are bounded, so a confused peer cannot make
either side hold more than :data:`MAX_LINE` or :data:`MAX_BODY` bytes at once.
"""

from __future__ import annotations

import json
from typing import Any

import trio

MAX_LINE = 64 * 1024
MAX_BODY = 512 * 1024 * 1024
"""A whole node's dump with full route tables is the largest body (tens of MB)."""
READ_SIZE = 64 * 1024


class WireError(Exception):
    """The other side sent something that is not a message, or hung up mid-message."""


def encode(header: dict[str, Any], body: bytes = b"") -> bytes:
    """One message: the header as a JSON line (with ``length`` when there is a body)."""
    if body:
        header = {**header, "length": len(body)}
    return json.dumps(header, separators=(",", ":")).encode() + b"\n" + body


class MessageReader:
    """Reads messages off a byte stream, one at a time."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = bytearray()

    async def _more(self) -> bool:
        data = await self._stream.receive_some(READ_SIZE)
        if not data:
            return False
        self._buffer += data
        return True

    async def next(self) -> tuple[dict[str, Any], bytes] | None:
        """The next message's header and body; ``None`` at a clean end of stream.

        Raises:
            WireError: a line over :data:`MAX_LINE`, a header that is no JSON object, a
                body over :data:`MAX_BODY`, or an end of stream inside a message.
        """
        while (end := self._buffer.find(b"\n")) < 0:
            if len(self._buffer) > MAX_LINE:
                raise WireError(f"a header line longer than {MAX_LINE} bytes")
            if not await self._more():
                if self._buffer:
                    raise WireError("the stream ended inside a header line")
                return None
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        try:
            header = json.loads(line)
        except ValueError as exc:
            raise WireError(f"a header that is not JSON: {exc}") from None
        if not isinstance(header, dict):
            raise WireError("a header that is not a JSON object")
        length = header.get("length", 0)
        if not isinstance(length, int) or not 0 <= length <= MAX_BODY:
            raise WireError(f"a body length of {length!r}")
        while len(self._buffer) < length:
            if not await self._more():
                raise WireError("the stream ended inside a body")
        body = bytes(self._buffer[:length])
        del self._buffer[:length]
        return header, body
