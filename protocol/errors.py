"""The one error hierarchy of the wire format.

Every failure a peer can cause is a :class:`RemoteProtocolError` carrying the Bye code a
connection would answer with, in the manner of h11's ``error_status_hint``. Failures we
cause ourselves (building a message that cannot exist on the wire) are
:class:`LocalProtocolError`. Nothing else may escape the ``protocol`` package on any
input: parsers translate construct, struct, zlib and Unicode errors at their boundary.

``resynchronisable`` tells the I/O layer whether the byte stream is still usable: a
payload that does not parse as its type leaves the framer in step with the stream, while
an impossible length field does not, and the connection has to go.
"""

from __future__ import annotations

from .constants import ByeCode


class GnutellaError(Exception):
    """Root of everything this package raises on purpose."""


class ProtocolError(GnutellaError):
    """A violation of the Gnutella wire format, by either side."""

    bye_code: ByeCode = ByeCode.INTERNAL_ERROR

    def __init__(self, message: str, *, bye_code: ByeCode | None = None) -> None:
        super().__init__(message)
        if bye_code is not None:
            self.bye_code = bye_code

    @property
    def reason(self) -> str:
        """The human-readable part, suitable for a Bye's text."""
        return str(self.args[0]) if self.args else type(self).__name__


class RemoteProtocolError(ProtocolError):
    """The peer sent something we cannot accept."""

    bye_code = ByeCode.INVALID_PAYLOAD
    resynchronisable: bool = True


class LocalProtocolError(ProtocolError):
    """We were asked to produce something that is not valid Gnutella."""

    bye_code = ByeCode.INTERNAL_ERROR


class MalformedPayloadError(RemoteProtocolError):
    """A payload does not parse as its declared type; the stream is still in sync.

    The message is dropped and counted; the connection may carry on.
    """

    bye_code = ByeCode.INVALID_PAYLOAD
    resynchronisable = True

    def __init__(
        self, message: str, *, message_type: int | None = None, bye_code: ByeCode | None = None
    ) -> None:
        super().__init__(message, bye_code=bye_code)
        self.message_type = message_type


class TruncatedStreamError(RemoteProtocolError):
    """The stream ended in the middle of a message."""

    bye_code = ByeCode.PROTOCOL_DESYNC
    resynchronisable = False

    def __init__(self, leftover: int) -> None:
        super().__init__(f"the stream ended with {leftover} bytes of an incomplete message")
        self.leftover = leftover


class StreamBrokenError(RemoteProtocolError):
    """A decoder is used after it failed for good (h11's ERROR state)."""

    bye_code = ByeCode.PROTOCOL_DESYNC
    resynchronisable = False


class CompressionError(RemoteProtocolError):
    """A deflated link stream is corrupt; the link cannot continue.

    (A corrupt deflated GGEP extension is only a malformed payload: the stream stays
    in sync, so it raises :class:`MalformedPayloadError` instead.)
    """

    bye_code = ByeCode.INVALID_PAYLOAD
    resynchronisable = False


class DeflateRatioError(CompressionError):
    """A deflated link stream inflates far past what Gnutella traffic compresses to: a
    decompression bomb, costing the receiver a thousand times what it cost the sender."""


class HandshakeError(RemoteProtocolError):
    """The connection handshake failed; no Gnutella message was exchanged yet.

    ``status_code`` is the handshake status we should answer with (an acceptor) when the
    failure is the peer's, e.g. 400 for garbage or 413 for an oversized header block.
    """

    bye_code = ByeCode.PROTOCOL_NOT_SUPPORTED
    resynchronisable = False

    def __init__(self, message: str, *, status_code: int = 400) -> None:
        super().__init__(message)
        self.status_code = status_code
