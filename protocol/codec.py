"""Payload bytes <-> typed records, fast where the router needs speed.

:mod:`protocol.spec` declares every payload and can parse and build all of them; it is
the oracle. The routed types a servent sees most (ping, pong, push, query) also have
hand-written ``struct`` decoders and encoders here, about ten times faster. Property
tests hold them to the declaration: the same records, the same bytes, and the same
accept/reject decision on any input, including garbage.

Every failure on input is a :class:`~protocol.errors.MalformedPayloadError` (the framer
stays in sync, the message is dropped and counted); every failure on output is a
:class:`~protocol.errors.LocalProtocolError`. Nothing else escapes.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Any

from construct import ConstructError

from .constants import GUID_SIZE, MessageType, message_type_name
from .errors import LocalProtocolError, MalformedPayloadError, ProtocolError
from .extensions import parse_extension_area
from .ggep import GGEPBlock, build_ggep, parse_ggep_exact
from .header import encode_header
from .ipv4 import pack_ipv4, unpack_ipv4
from .messages import (
    Message,
    OpaquePayload,
    Payload,
    Ping,
    Pong,
    Push,
    Query,
    payload_type_of,
)
from .spec import payload_spec

_PARSE_FAILURES = (ConstructError, ValueError, IndexError, TypeError, OverflowError, struct.error)
_BUILD_FAILURES = (
    ConstructError,
    ValueError,
    TypeError,
    OverflowError,
    struct.error,
    zlib.error,
    AttributeError,
)


# ---------------------------------------------------------------------------------------
# The declaration, with errors translated


def parse_payload_spec(message_type: int, payload: bytes) -> Payload:
    """Parse with the construct declaration (slow, authoritative)."""
    try:
        record: Payload = payload_spec(message_type).parse(payload, message_type=message_type)
    except MalformedPayloadError as exc:
        if exc.message_type is None:
            exc.message_type = message_type
        raise
    except ProtocolError as exc:
        raise MalformedPayloadError(exc.reason, message_type=message_type) from exc
    except _PARSE_FAILURES as exc:
        raise MalformedPayloadError(
            f"{_type_name(message_type)} payload does not parse: {exc}",
            message_type=message_type,
        ) from exc
    return record


def build_payload_spec(payload: Payload) -> bytes:
    """Build with the construct declaration (slow, authoritative)."""
    message_type = payload_type_of(payload)
    try:
        return payload_spec(message_type).build(payload, message_type=message_type)
    except LocalProtocolError:
        raise
    except ProtocolError as exc:
        raise LocalProtocolError(exc.reason) from exc
    except _BUILD_FAILURES as exc:
        raise LocalProtocolError(f"cannot build {payload!r}: {exc}") from exc


# ---------------------------------------------------------------------------------------
# Fast decoders: same results as the declaration, without construct's per-field cost

_PONG_FIXED = struct.Struct("<H4sII")
_PUSH_FIXED = struct.Struct("<16sI4sH")
_FLAGS = struct.Struct(">H")


def _trailing_ggep(payload: bytes, start: int) -> GGEPBlock | None:
    if len(payload) == start:
        return None
    return parse_ggep_exact(payload[start:])


def _decode_ping(payload: bytes) -> Ping:
    return Ping(_trailing_ggep(payload, 0)) if payload else Ping()


def _decode_pong(payload: bytes) -> Pong:
    if len(payload) < _PONG_FIXED.size:
        raise MalformedPayloadError(
            f"pong of {len(payload)} bytes is shorter than 14", message_type=MessageType.PONG
        )
    port, ip, files, kbytes = _PONG_FIXED.unpack_from(payload)
    return Pong(port, unpack_ipv4(ip), files, kbytes, _trailing_ggep(payload, _PONG_FIXED.size))


def _decode_push(payload: bytes) -> Push:
    if len(payload) < _PUSH_FIXED.size:
        raise MalformedPayloadError(
            f"push of {len(payload)} bytes is shorter than 26", message_type=MessageType.PUSH
        )
    guid, index, ip, port = _PUSH_FIXED.unpack_from(payload)
    return Push(guid, index, unpack_ipv4(ip), port, _trailing_ggep(payload, _PUSH_FIXED.size))


def _decode_query(payload: bytes) -> Query:
    nul = payload.find(b"\x00", 2)
    if len(payload) < 3 or nul < 0:
        raise MalformedPayloadError(
            "query has no NUL-terminated search text", message_type=MessageType.QUERY
        )
    (flags,) = _FLAGS.unpack_from(payload)
    if nul + 1 == len(payload):
        return Query(payload[2:nul], flags)
    extensions, _ = parse_extension_area(
        payload, nul + 1, len(payload), nul_terminated=False, message_type=MessageType.QUERY
    )
    return Query(payload[2:nul], flags, extensions)


_FAST_DECODERS: dict[int, Callable[[bytes], Payload]] = {
    MessageType.PING: _decode_ping,
    MessageType.PONG: _decode_pong,
    MessageType.PUSH: _decode_push,
    MessageType.QUERY: _decode_query,
}


def parse_payload(message_type: int, payload: bytes) -> Payload:
    """Parse a payload of the given header type into its record.

    Raises:
        MalformedPayloadError: the payload is not a valid instance of its type.
    """
    decoder = _FAST_DECODERS.get(message_type)
    if decoder is None:
        return parse_payload_spec(message_type, payload)
    try:
        return decoder(payload)
    except MalformedPayloadError as exc:
        if exc.message_type is None:
            exc.message_type = message_type
        raise


# ---------------------------------------------------------------------------------------
# Fast encoders


def _ggep_tail(block: GGEPBlock | None) -> bytes:
    return b"" if block is None else build_ggep(block)


def _encode_ping(payload: Any) -> bytes:
    return _ggep_tail(payload.ggep)


def _encode_pong(payload: Any) -> bytes:
    ip = pack_ipv4(payload.ip)
    return _PONG_FIXED.pack(payload.port, ip, payload.files, payload.kbytes) + _ggep_tail(
        payload.ggep
    )


def _encode_push(payload: Any) -> bytes:
    if len(payload.servent_guid) != GUID_SIZE:
        raise LocalProtocolError("a push's servent GUID is 16 bytes")
    ip = pack_ipv4(payload.ip)
    fixed = _PUSH_FIXED.pack(payload.servent_guid, payload.file_index, ip, payload.port)
    return fixed + _ggep_tail(payload.ggep)


def _encode_query(payload: Any) -> bytes:
    if not payload.extensions:
        search: bytes = payload.search
        if b"\x00" in search:
            raise LocalProtocolError("a query's search text may not contain NUL")
        return _FLAGS.pack(payload.flags) + search + b"\x00"
    return build_payload_spec(payload)


_FAST_ENCODERS: dict[type, Callable[[Any], bytes]] = {
    Ping: _encode_ping,
    Pong: _encode_pong,
    Push: _encode_push,
    Query: _encode_query,
}


def build_payload(payload: Payload) -> bytes:
    """Serialise a payload record.

    Raises:
        LocalProtocolError: the record holds something the wire cannot carry.
    """
    encoder = _FAST_ENCODERS.get(type(payload))
    if encoder is None:
        if isinstance(payload, OpaquePayload):
            return bytes(payload.data)
        return build_payload_spec(payload)
    try:
        return encoder(payload)
    except LocalProtocolError:
        raise
    except ProtocolError as exc:
        raise LocalProtocolError(exc.reason) from exc
    except _BUILD_FAILURES as exc:
        raise LocalProtocolError(f"cannot build {payload!r}: {exc}") from exc


# ---------------------------------------------------------------------------------------
# Whole messages


def encode_message(message: Message) -> bytes:
    """Header and payload, ready for the wire."""
    payload = build_payload(message.payload)
    return (
        encode_header(message.guid, message.payload_type, message.ttl, message.hops, len(payload))
        + payload
    )


def decode_message(guid: bytes, payload_type: int, ttl: int, hops: int, payload: bytes) -> Message:
    """A :class:`Message` from header fields and payload bytes (see :class:`Frame`)."""
    return Message(guid, ttl, hops, parse_payload(payload_type, payload))


def _type_name(message_type: int) -> str:
    """The label used in error messages (``query hit``, ``type 0x7f``)."""
    name = message_type_name(message_type)
    return f"type {name}" if name.startswith("0x") else name.replace("_", " ")
