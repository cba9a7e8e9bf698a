"""Cutting a Gnutella byte stream into messages.

Theory of operation: bytes arrive in arbitrary pieces; :meth:`FrameDecoder.receive_data`
appends them and returns every message now complete, as a batch of :class:`Frame`
objects (header fields plus the raw payload). Only the header is decoded here: a router
forwards most payloads without looking inside, and parses the rest on demand with
:meth:`Frame.message`.

Two kinds of bad input, two outcomes:

* A payload that does not parse as its type raises
  :class:`~protocol.errors.MalformedPayloadError` from :meth:`Frame.message`. The frame
  boundaries were never in doubt, so the decoder is unaffected and the next message
  decodes normally.
* A length field over the configured maximum raises
  :class:`FrameTooLargeError` from :meth:`FrameDecoder.receive_data`.
  The length is the only way to find the next header, so the stream is lost: the
  decoder refuses further input. The frames decoded before the bad header in the same
  call are not lost; they travel on the exception (``frames``).

Memory is bounded by the maximum payload: the length is checked as soon as a header is
complete, before any of its payload is buffered.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from mypy_extensions import i64

from .codec import decode_message, encode_message
from .constants import DEFAULT_MAX_PAYLOAD, HEADER_SIZE, ByeCode
from .errors import RemoteProtocolError, StreamBrokenError, TruncatedStreamError
from .header import HEADER_STRUCT
from .messages import Message, Payload

_unpack_header: Final = HEADER_STRUCT.unpack_from

_COMPILED: Final = not __file__.endswith(".py")
"""Whether this module runs compiled by mypyc (``hatch_build.py``). The decoder reads a
header's fields one index at a time when compiled, and with one ``struct`` call when
interpreted: each spelling is the fast one for one of the two, by well over a third
(``scripts/bench_protocol.py`` times the decoder as installed)."""


class Frame:
    """One message as it crossed the wire: header fields and undecoded payload bytes.

    ``source`` is the caller's number for the stream the frame came from, whatever its
    :class:`FrameDecoder` was given (a router's connection id), so frames can travel
    between stages without being wrapped. It takes no part in equality.
    """

    __slots__ = ("guid", "hops", "payload", "payload_type", "source", "ttl")

    def __init__(
        self,
        guid: bytes,
        payload_type: int,
        ttl: int,
        hops: int,
        payload: bytes,
        source: int = 0,
    ) -> None:
        self.guid = guid
        self.payload_type = payload_type
        self.ttl = ttl
        self.hops = hops
        self.payload = payload
        self.source = source

    def message(self) -> Message:
        """Decode the payload into a typed :class:`~protocol.messages.Message`.

        Raises:
            MalformedPayloadError: the payload is not valid for its type; the stream
                this frame came from is still in sync.
        """
        return decode_message(self.guid, self.payload_type, self.ttl, self.hops, self.payload)

    def payload_record(self) -> Payload:
        """Just the typed payload (see :meth:`message`)."""
        return self.message().payload

    def to_bytes(self) -> bytes:
        """The frame exactly as it would be sent: header then payload."""
        return (
            HEADER_STRUCT.pack(self.guid, self.payload_type, self.ttl, self.hops, len(self.payload))
            + self.payload
        )

    @classmethod
    def from_message(cls, message: Message) -> Frame:
        data = encode_message(message)
        return cls(
            message.guid, message.payload_type, message.ttl, message.hops, data[HEADER_SIZE:]
        )

    def _key(self) -> tuple[bytes, int, int, int, bytes]:
        return (self.guid, self.payload_type, self.ttl, self.hops, self.payload)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Frame):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"Frame(guid={self.guid.hex()}, type=0x{self.payload_type:02x}, ttl={self.ttl}, "
            f"hops={self.hops}, payload={len(self.payload)} bytes)"
        )


class FrameTooLargeError(RemoteProtocolError):
    """A header announced a payload over the configured maximum.

    Declared here rather than in :mod:`protocol.errors` because it carries the frames
    decoded before the bad header, and errors must not depend on framing.

    The length field is the only way to find the next message on a Gnutella stream, so
    once it is untrustworthy the stream cannot be resynchronised: close the connection.

    Its Bye code and ``resynchronisable`` are set on the instance, not in the class
    body: compiled by mypyc (``hatch_build.py``), a subclass of an interpreted exception
    loses class-body overrides of its base's attributes.
    """

    def __init__(self, announced_length: int, maximum: int, frames: Sequence[Frame] = ()) -> None:
        super().__init__(
            f"payload length {announced_length} exceeds the maximum of {maximum} bytes; "
            "the stream cannot be resynchronised",
            bye_code=ByeCode.MESSAGE_TOO_LARGE,
        )
        self.resynchronisable = False
        self.announced_length = announced_length
        self.maximum = maximum
        self.frames: tuple[Frame, ...] = tuple(frames)
        """Whole messages that preceded the bad header in the same input: still valid."""


class FrameDecoder:
    """Incremental framer: feed any chunking, get whole messages in batches."""

    __slots__ = ("_ended", "_failure", "_needed", "_pending", "max_payload", "source")

    def __init__(self, max_payload: int = DEFAULT_MAX_PAYLOAD, *, source: int = 0) -> None:
        """``source`` is given to every frame this decoder produces (see :class:`Frame`)."""
        if max_payload < 0:
            raise ValueError("max_payload must not be negative")
        self.max_payload = max_payload
        self.source = source
        self._pending = bytearray()
        self._needed = HEADER_SIZE
        self._failure: FrameTooLargeError | TruncatedStreamError | None = None
        self._ended = False

    @property
    def buffered(self) -> int:
        """Bytes held while waiting for the rest of a message."""
        return len(self._pending)

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Add bytes; return the messages they complete, in stream order.

        ``b""`` signals the end of the stream: it returns nothing, or raises
        :class:`~protocol.errors.TruncatedStreamError` if a message was cut off.

        Partial input waits in a ``bytearray`` and is not looked at again until the
        message it belongs to can be complete, so a peer dripping a large message a byte
        at a time costs linear, not quadratic, work.

        Raises:
            FrameTooLargeError: a header announced an oversized payload; frames decoded
                before it in this call are on the exception's ``frames``.
            StreamBrokenError: called again after either error, or after the end.
        """
        if self._failure is not None or self._ended:
            raise StreamBrokenError(
                "the stream already failed or ended; no more data can be framed"
            ) from self._failure
        if not data:
            self._ended = True
            if self._pending:
                self._failure = TruncatedStreamError(len(self._pending))
                raise self._failure
            return []
        pending = self._pending
        if pending:
            pending += data
            if len(pending) < self._needed:
                return []
            buffer = bytes(pending)
        else:
            buffer = data if isinstance(data, bytes) else bytes(data)
        # Machine integers once compiled (plain ints interpreted): the offsets' arithmetic
        # is then plain C, with no check for ints too large for a machine word.
        available: i64 = len(buffer)
        limit: i64 = self.max_payload
        source = self.source
        frames: list[Frame] = []
        position: i64 = 0
        needed: i64 = HEADER_SIZE
        by_index = _COMPILED
        length: i64
        while available - position >= HEADER_SIZE:
            if by_index:
                # Compiled, each index is a read from the buffer into a machine integer;
                # the struct call below would build a tuple and five objects.
                length = (
                    buffer[position + 19]
                    | buffer[position + 20] << 8
                    | buffer[position + 21] << 16
                    | buffer[position + 22] << 24
                )
                guid = buffer[position : position + 16]
                payload_type = buffer[position + 16]
                ttl = buffer[position + 17]
                hops = buffer[position + 18]
            else:
                guid, payload_type, ttl, hops, length = _unpack_header(buffer, position)
            if length > limit:
                self._pending = bytearray()
                self._failure = FrameTooLargeError(length, limit, frames)
                raise self._failure
            start = position + HEADER_SIZE
            end = start + length
            if end > available:
                needed = end - position
                break
            # A list's append by name, not bound to a local: compiled, that is a call of
            # the list primitive, where a bound method would be a generic call.
            frames.append(Frame(guid, payload_type, ttl, hops, buffer[start:end], source))
            position = end
        if position < available:
            self._pending = bytearray(buffer[position:])
        elif pending:
            self._pending = bytearray()
        self._needed = needed
        return frames
