"""The Gnutella 0.6 wire format, without I/O.

Bytes in, typed records and events out; records in, bytes out; typed errors for
everything a peer can get wrong. Nothing here touches a socket, a clock, a thread or a
logger, so every rule can be tested synchronously and exhaustively.

Modules, from the bottom up: :mod:`~protocol.constants`, :mod:`~protocol.errors`,
:mod:`~protocol.ggep`, :mod:`~protocol.messages` (typed records), :mod:`~protocol.spec`
(the construct declaration, the normative spec), :mod:`~protocol.header` (the
``struct`` fast path derived from it), :mod:`~protocol.codec` (payload parse/build),
:mod:`~protocol.framing` (stream to frames), :mod:`~protocol.compression` (deflate
links), :mod:`~protocol.vendor` (the introductory vendor messages and Hops Flow),
:mod:`~protocol.qrp` (query routing tables: the hash, tables, receiving them),
:mod:`~protocol.headers` and :mod:`~protocol.handshake` (the connection handshake).
"""

from .codec import build_payload, decode_message, encode_message, parse_payload
from .compression import DeflateCompressor, DeflateDecompressor
from .constants import DEFAULT_MAX_PAYLOAD, HEADER_SIZE, ByeCode, MessageType
from .errors import (
    CompressionError,
    GnutellaError,
    HandshakeError,
    LocalProtocolError,
    MalformedPayloadError,
    ProtocolError,
    RemoteProtocolError,
    StreamBrokenError,
    TruncatedStreamError,
)
from .framing import Frame, FrameDecoder, FrameTooLargeError
from .ggep import GGEPBlock, GGEPExtension
from .handshake import (
    Acceptor,
    Capabilities,
    ConnectRequest,
    HandshakeComplete,
    HandshakeRejected,
    HandshakeResponse,
    Initiator,
    router_headers,
)
from .header import decode_header, encode_header
from .headers import HandshakeLimits, HeaderBlock
from .messages import (
    Bye,
    Message,
    OpaquePayload,
    Payload,
    Ping,
    Pong,
    Push,
    QrpPatch,
    QrpReset,
    Query,
    QueryFlags,
    QueryHit,
    QueryHitDescriptor,
    QueryHitResult,
    VendorMessage,
    make_guid,
    random_guid,
)

__all__ = [
    "DEFAULT_MAX_PAYLOAD",
    "HEADER_SIZE",
    "Acceptor",
    "Bye",
    "ByeCode",
    "Capabilities",
    "CompressionError",
    "ConnectRequest",
    "DeflateCompressor",
    "DeflateDecompressor",
    "Frame",
    "FrameDecoder",
    "FrameTooLargeError",
    "GGEPBlock",
    "GGEPExtension",
    "GnutellaError",
    "HandshakeComplete",
    "HandshakeError",
    "HandshakeLimits",
    "HandshakeRejected",
    "HandshakeResponse",
    "HeaderBlock",
    "Initiator",
    "LocalProtocolError",
    "MalformedPayloadError",
    "Message",
    "MessageType",
    "OpaquePayload",
    "Payload",
    "Ping",
    "Pong",
    "ProtocolError",
    "Push",
    "QrpPatch",
    "QrpReset",
    "Query",
    "QueryFlags",
    "QueryHit",
    "QueryHitDescriptor",
    "QueryHitResult",
    "RemoteProtocolError",
    "StreamBrokenError",
    "TruncatedStreamError",
    "VendorMessage",
    "build_payload",
    "decode_header",
    "decode_message",
    "encode_header",
    "encode_message",
    "make_guid",
    "parse_payload",
    "random_guid",
    "router_headers",
]
