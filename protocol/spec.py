"""The normative declaration of the Gnutella 0.6 wire format, in construct.

This module is the reviewable spec: every field of every message, in order, with its
width and byte order. Parsing with it yields the typed records of
:mod:`protocol.messages`; building takes them. Construct ``Container`` objects never
leave this module.

Hot paths do not run it: :mod:`protocol.header` derives a ``struct`` codec for the
23-byte header from :data:`Header` and :mod:`protocol.codec` has hand-written decoders
for the payloads routed most often. Both are tested against this declaration, which
stays the oracle. Construct is used uncompiled here: compiled parsers skip length checks
and must not see untrusted bytes.

Byte order: everything is little-endian except IPv4 addresses (network order) and a
modern query's flags word (read big-endian so its marker bit 15 is the first byte's top
bit).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from construct import (
    Adapter,
    Array,
    Bytes,
    Construct,
    Container,
    GreedyBytes,
    Int8ul,
    Int16ub,
    Int16ul,
    Int32ul,
    Struct,
    Switch,
    Terminated,
    stream_read_entire,
    stream_seek,
    stream_tell,
    stream_write,
    this,
)

from .constants import GUID_SIZE, MessageType
from .errors import LocalProtocolError, MalformedPayloadError
from .extensions import build_extension_area, parse_extension_area
from .ggep import GGEPBlock, build_ggep, parse_ggep_exact
from .ipv4 import pack_ipv4, unpack_ipv4
from .messages import (
    Bye,
    Extension,
    OpaquePayload,
    Ping,
    Pong,
    Push,
    QrpPatch,
    QrpReset,
    Query,
    QueryHit,
    QueryHitDescriptor,
    QueryHitResult,
    VendorMessage,
)

if TYPE_CHECKING:
    _AdapterBase = Adapter[Any, Any, Any, Any]
    _ConstructBase = Construct[Any, Any]
else:  # construct's classes are not subscriptable at run time
    _AdapterBase = Adapter
    _ConstructBase = Construct

# ---------------------------------------------------------------------------------------
# The header

Header = Struct(
    "guid" / Bytes(GUID_SIZE),
    "payload_type" / Int8ul,
    "ttl" / Int8ul,
    "hops" / Int8ul,
    "payload_length" / Int32ul,
)
"""Every message starts with these 23 bytes; the length is the only resync point."""


# ---------------------------------------------------------------------------------------
# Field types shared by several payloads


class _IPv4Adapter(_AdapterBase):
    """Four bytes in network order, shown as a dotted quad."""

    def _decode(self, obj: bytes, context: Any, path: str) -> str:
        return unpack_ipv4(obj)

    def _encode(self, obj: str, context: Any, path: str) -> bytes:
        return pack_ipv4(obj)


IPv4 = _IPv4Adapter(Bytes(4))


class _NulTerminatedBytes(_ConstructBase):
    """Bytes up to a NUL, which is consumed and not part of the value.

    construct's ``NullTerminated`` reads one byte per call; this finds the NUL in one
    pass over the rest of the stream, which matters for a query's search text.
    """

    def _parse(self, stream: Any, context: Any, path: str) -> bytes:
        start = stream_tell(stream, path)
        rest = stream_read_entire(stream, path)
        end = rest.find(b"\x00")
        if end < 0:
            raise MalformedPayloadError("a NUL-terminated string has no NUL")
        stream_seek(stream, start + end + 1, 0, path)
        return rest[:end]

    def _build(self, obj: bytes, stream: Any, context: Any, path: str) -> int:
        if b"\x00" in obj:
            raise LocalProtocolError("a NUL-terminated string may not contain NUL")
        stream_write(stream, bytes(obj) + b"\x00", len(obj) + 1, path)
        return len(obj) + 1


NulTerminatedBytes = _NulTerminatedBytes()


class _TrailingGGEP(_ConstructBase):
    """An optional GGEP block that must fill the rest of the payload exactly.

    gtk-gnutella drops pings, pongs and pushes with trailing bytes that are not valid
    GGEP, and so do we: the fixed part has a fixed size.
    """

    def _parse(self, stream: Any, context: Any, path: str) -> GGEPBlock | None:
        rest = stream_read_entire(stream, path)
        if not rest:
            return None
        return parse_ggep_exact(rest)

    def _build(self, obj: GGEPBlock | None, stream: Any, context: Any, path: str) -> int:
        if obj is None:
            return 0
        data = build_ggep(obj)
        stream_write(stream, data, len(data), path)
        return len(data)


TrailingGGEP = _TrailingGGEP()


class _ExtensionArea(_ConstructBase):
    """0x1C-separated HUGE/XML/GGEP items (see :mod:`protocol.extensions`)."""

    def __init__(self, *, nul_terminated: bool, message_type: int) -> None:
        super().__init__()
        self.nul_terminated = nul_terminated
        self.message_type = message_type

    def _parse(self, stream: Any, context: Any, path: str) -> tuple[Extension, ...]:
        start = stream_tell(stream, path)
        rest = stream_read_entire(stream, path)
        items, used = parse_extension_area(
            rest,
            0,
            len(rest),
            nul_terminated=self.nul_terminated,
            message_type=self.message_type,
        )
        stream_seek(stream, start + used, 0, path)
        return items

    def _build(self, obj: tuple[Extension, ...], stream: Any, context: Any, path: str) -> int:
        data = build_extension_area(obj, nul_terminated=self.nul_terminated)
        stream_write(stream, data, len(data), path)
        return len(data)


class _RecordAdapter(_AdapterBase):
    """Maps a ``Struct`` onto a frozen dataclass whose field names match its fields."""

    def __init__(
        self,
        subcon: Construct[Any, Any],
        record: type,
        *,
        extra: Callable[[Any], Mapping[str, Any]] | None = None,
    ) -> None:
        super().__init__(subcon)
        self.record = record
        self.fields = tuple(f.name for f in dataclasses.fields(record))
        self.extra = extra

    def _decode(self, obj: Any, context: Any, path: str) -> Any:
        values = {name: obj[name] for name in self.fields if name in obj}
        if self.extra is not None:
            values.update(self.extra(context))
        return self.record(**values)

    def _encode(self, obj: Any, context: Any, path: str) -> Any:
        if not isinstance(obj, self.record):
            raise LocalProtocolError(f"expected a {self.record.__name__}, got {obj!r}")
        return {name: getattr(obj, name) for name in self.fields}


def _message_type_param(default: int) -> Callable[[Any], Mapping[str, Any]]:
    """Records such as vendor messages carry the header type they arrived under."""

    def extra(context: Any) -> Mapping[str, Any]:
        params = context.get("_params", context)
        return {"message_type": params.get("message_type", default)}

    return extra


# ---------------------------------------------------------------------------------------
# Payloads

PingPayload = _RecordAdapter(Struct("ggep" / TrailingGGEP), Ping)
"""Empty, or a GGEP block only (never junk: old servents' padding is rejected)."""

PongPayload = _RecordAdapter(
    Struct(
        "port" / Int16ul,
        "ip" / IPv4,
        "files" / Int32ul,
        "kbytes" / Int32ul,
        "ggep" / TrailingGGEP,
    ),
    Pong,
)
"""14 bytes and an optional GGEP block (DU, UP, VC, IPP...)."""

PushPayload = _RecordAdapter(
    Struct(
        "servent_guid" / Bytes(GUID_SIZE),
        "file_index" / Int32ul,
        "ip" / IPv4,
        "port" / Int16ul,
        "ggep" / TrailingGGEP,
    ),
    Push,
)
"""26 bytes and an optional GGEP block; routed by ``servent_guid``."""


class _ByeTextAdapter(_AdapterBase):
    """A reason line, optional HTTP-style header lines, a NUL.

    Parsing is lenient (a missing NUL, bare LF, header lines without a colon are
    tolerated) because a Bye is the last thing a peer says and must never be the
    reason we fail; building is strict so that what we send parses back identically.
    """

    def _decode(
        self, obj: bytes, context: Any, path: str
    ) -> tuple[str, tuple[tuple[str, str], ...]]:
        nul = obj.find(b"\x00")
        text = (obj if nul < 0 else obj[:nul]).decode("utf-8", "replace")
        lines = text.replace("\r\n", "\n").split("\n")
        headers: list[tuple[str, str]] = []
        for line in lines[1:]:
            if not line:
                break
            name, colon, value = line.partition(":")
            if colon and name.strip():
                headers.append((name.strip(), value.strip()))
        return lines[0], tuple(headers)

    def _encode(self, obj: Any, context: Any, path: str) -> bytes:
        reason: str = obj[0]
        headers: tuple[tuple[str, str], ...] = obj[1]
        _check_bye_text(reason, "reason")
        text = reason
        if headers:
            for name, value in headers:
                _check_bye_text(name, "header name")
                _check_bye_text(value, "header value")
                if not name or ":" in name:
                    raise LocalProtocolError(f"invalid Bye header name {name!r}")
            text += "\r\n" + "".join(f"{n}: {v}\r\n" for n, v in headers) + "\r\n"
        return text.encode("utf-8") + b"\x00"


def _check_bye_text(value: str, what: str) -> None:
    if any(c in value for c in "\r\n\x00") or value != value.strip():
        raise LocalProtocolError(
            f"a Bye {what} may not contain CR, LF or NUL or surrounding spaces: {value!r}"
        )
    if any("\ud800" <= c <= "\udfff" for c in value):
        raise LocalProtocolError(f"a Bye {what} must be encodable as UTF-8: {value!r}")


class _ByeAdapter(_AdapterBase):
    def _decode(self, obj: Any, context: Any, path: str) -> Bye:
        reason, headers = obj.text
        return Bye(code=obj.code, reason=reason, headers=headers)

    def _encode(self, obj: Bye, context: Any, path: str) -> Any:
        if not isinstance(obj, Bye):
            raise LocalProtocolError(f"expected a Bye, got {obj!r}")
        return {"code": obj.code, "text": (obj.reason, obj.headers)}


ByePayload = _ByeAdapter(Struct("code" / Int16ul, "text" / _ByeTextAdapter(GreedyBytes)))
"""Code, reason, optional header lines, NUL. Only valid with TTL 1 and hops 0."""

QueryPayload = _RecordAdapter(
    Struct(
        "flags" / Int16ub,
        "search" / NulTerminatedBytes,
        "extensions" / _ExtensionArea(nul_terminated=False, message_type=MessageType.QUERY),
    ),
    Query,
)
"""Flags word (big-endian; a legacy minimum speed when bit 15 is clear), text, extensions."""

QueryHitResultEntry = _RecordAdapter(
    Struct(
        "file_index" / Int32ul,
        "file_size" / Int32ul,
        "name" / NulTerminatedBytes,
        "extensions" / _ExtensionArea(nul_terminated=True, message_type=MessageType.QUERY_HIT),
    ),
    QueryHitResult,
)


class _QueryHitTrailerAdapter(_AdapterBase):
    """Optional EQHD (vendor, open-data length, open data, private data), then the GUID.

    The EQHD has no length of its own: it is whatever lies between the last result and
    the final 16 bytes.
    """

    def _decode(self, obj: bytes, context: Any, path: str) -> Any:
        if len(obj) < GUID_SIZE:
            raise MalformedPayloadError(
                "query hit too short for its servent GUID", message_type=MessageType.QUERY_HIT
            )
        descriptor_bytes, servent_guid = obj[:-GUID_SIZE], obj[-GUID_SIZE:]
        descriptor: QueryHitDescriptor | None = None
        if descriptor_bytes:
            if len(descriptor_bytes) < 5:
                raise MalformedPayloadError(
                    "query hit descriptor shorter than its 5-byte minimum",
                    message_type=MessageType.QUERY_HIT,
                )
            open_size = descriptor_bytes[4]
            if 5 + open_size > len(descriptor_bytes):
                raise MalformedPayloadError(
                    "query hit descriptor open data runs past its end",
                    message_type=MessageType.QUERY_HIT,
                )
            descriptor = QueryHitDescriptor(
                vendor=descriptor_bytes[:4],
                open_data=descriptor_bytes[5 : 5 + open_size],
                private_data=descriptor_bytes[5 + open_size :],
            )
        return Container(descriptor=descriptor, servent_guid=servent_guid)

    def _encode(self, obj: Any, context: Any, path: str) -> bytes:
        descriptor: QueryHitDescriptor | None = obj["descriptor"]
        servent_guid: bytes = obj["servent_guid"]
        if len(servent_guid) != GUID_SIZE:
            raise LocalProtocolError("a servent GUID is 16 bytes")
        if descriptor is None:
            return bytes(servent_guid)
        if len(descriptor.vendor) != 4:
            raise LocalProtocolError("a query hit vendor code is 4 bytes")
        if len(descriptor.open_data) > 255:
            raise LocalProtocolError("query hit open data is at most 255 bytes")
        return (
            bytes(descriptor.vendor)
            + bytes([len(descriptor.open_data)])
            + bytes(descriptor.open_data)
            + bytes(descriptor.private_data)
            + bytes(servent_guid)
        )


class _QueryHitAdapter(_AdapterBase):
    def _decode(self, obj: Any, context: Any, path: str) -> QueryHit:
        return QueryHit(
            port=obj.port,
            ip=obj.ip,
            speed=obj.speed,
            results=tuple(obj.results),
            servent_guid=obj.trailer.servent_guid,
            descriptor=obj.trailer.descriptor,
        )

    def _encode(self, obj: QueryHit, context: Any, path: str) -> Any:
        if not isinstance(obj, QueryHit):
            raise LocalProtocolError(f"expected a QueryHit, got {obj!r}")
        return {
            "count": len(obj.results),
            "port": obj.port,
            "ip": obj.ip,
            "speed": obj.speed,
            "results": list(obj.results),
            "trailer": {"descriptor": obj.descriptor, "servent_guid": obj.servent_guid},
        }


QueryHitPayload = _QueryHitAdapter(
    Struct(
        "count" / Int8ul,
        "port" / Int16ul,
        "ip" / IPv4,
        "speed" / Int32ul,
        "results" / Array(this.count, QueryHitResultEntry),
        "trailer" / _QueryHitTrailerAdapter(GreedyBytes),
    )
)
"""Results, an optional EQHD trailer, and the responding servent's GUID (last 16 bytes)."""

_QrpResetBody = _RecordAdapter(
    Struct("table_length" / Int32ul, "infinity" / Int8ul, Terminated), QrpReset
)
_QrpPatchBody = _RecordAdapter(
    Struct(
        "seq_no" / Int8ul,
        "seq_size" / Int8ul,
        "compressor" / Int8ul,
        "entry_bits" / Int8ul,
        "data" / GreedyBytes,
    ),
    QrpPatch,
)


class _QrpAdapter(_AdapterBase):
    def _decode(self, obj: Any, context: Any, path: str) -> QrpReset | QrpPatch:
        body: QrpReset | QrpPatch = obj.body
        return body

    def _encode(self, obj: QrpReset | QrpPatch, context: Any, path: str) -> Any:
        if isinstance(obj, QrpReset):
            return {"variant": 0, "body": obj}
        if isinstance(obj, QrpPatch):
            return {"variant": 1, "body": obj}
        raise LocalProtocolError(f"expected a QRP record, got {obj!r}")


class _Reject(_ConstructBase):
    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def _parse(self, stream: Any, context: Any, path: str) -> Any:
        raise MalformedPayloadError(self.message, message_type=MessageType.QRP)

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> int:
        raise LocalProtocolError(self.message)


QrpPayload = _QrpAdapter(
    Struct(
        "variant" / Int8ul,
        "body"
        / Switch(
            this.variant,
            {0: _QrpResetBody, 1: _QrpPatchBody},
            default=_Reject("unknown QRP variant"),
        ),
    )
)
"""Variant 0 RESET (table length, infinity) or 1 PATCH (sequence, compressor, bits, data)."""

VendorPayload = _RecordAdapter(
    Struct(
        "vendor" / Bytes(4),
        "selector" / Int16ul,
        "version" / Int16ul,
        "body" / GreedyBytes,
    ),
    VendorMessage,
    extra=_message_type_param(MessageType.VENDOR),
)
"""Vendor id (4 ASCII bytes, case-sensitive), selector, version, vendor-defined body."""

OpaquePayloadSpec = _RecordAdapter(
    Struct("data" / GreedyBytes), OpaquePayload, extra=_message_type_param(0)
)
"""Any other type: carried byte for byte."""

PAYLOADS: Mapping[int, Construct[Any, Any]] = {
    MessageType.PING: PingPayload,
    MessageType.PONG: PongPayload,
    MessageType.BYE: ByePayload,
    MessageType.PUSH: PushPayload,
    MessageType.QUERY: QueryPayload,
    MessageType.QUERY_HIT: QueryHitPayload,
    MessageType.QRP: QrpPayload,
    MessageType.VENDOR: VendorPayload,
    MessageType.STANDARD_VENDOR: VendorPayload,
}
"""The declaration for each payload type; a type not listed is an :class:`OpaquePayload`."""


def payload_spec(message_type: int) -> Construct[Any, Any]:
    return PAYLOADS.get(message_type, OpaquePayloadSpec)
