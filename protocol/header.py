"""The 23-byte header as a ``struct`` codec derived from the construct declaration.

Every message crosses this code, so it cannot afford construct (about 10 us per parse
here against 0.1 us for ``struct``). Instead of writing the format a second time, the
``struct`` format string is read off :data:`protocol.spec.Header` when this module is
imported: a change to the declaration changes the fast path with it, and a declaration
the fast path cannot express fails loudly at import. Property tests hold the two to the
same values and the same accept/reject decisions on arbitrary input.
"""

from __future__ import annotations

import struct
from typing import Any

from construct import Bytes, FormatField

from .constants import GUID_SIZE, HEADER_SIZE
from .errors import LocalProtocolError
from .spec import Header

HEADER_FIELDS: tuple[str, ...] = tuple(str(sc.name) for sc in Header.subcons)
"""Field names in wire order: guid, payload_type, ttl, hops, payload_length."""


def _struct_format(spec: Any) -> str:
    """Translate a Struct of ``Bytes`` and ``FormatField`` members to one format string."""
    codes: list[str] = []
    byte_order: str | None = None
    for member in spec.subcons:
        field = member.subcon
        if isinstance(field, Bytes) and isinstance(field.length, int):
            codes.append(f"{field.length}s")
        elif isinstance(field, FormatField):
            order, code = field.fmtstr[0], field.fmtstr[1:]
            if code in ("B", "b"):
                codes.append(code)  # one byte: byte order does not apply
                continue
            if byte_order not in (None, order):
                raise TypeError("the header mixes byte orders; struct cannot express it")
            byte_order = order
            codes.append(code)
        else:
            raise TypeError(f"header field {member.name!r} has no struct equivalent")
    return (byte_order or "<") + "".join(codes)


HEADER_STRUCT = struct.Struct(_struct_format(Header))
if HEADER_STRUCT.size != Header.sizeof() or HEADER_STRUCT.size != HEADER_SIZE:
    raise ImportError(
        f"header fast path is {HEADER_STRUCT.size} bytes, the declaration "
        f"{Header.sizeof()}, the protocol {HEADER_SIZE}"
    )

_unpack_from = HEADER_STRUCT.unpack_from
_pack = HEADER_STRUCT.pack


def decode_header(
    data: bytes | bytearray | memoryview, offset: int = 0
) -> tuple[bytes, int, int, int, int]:
    """Return (guid, payload_type, ttl, hops, payload_length) from ``data[offset:]``.

    Raises:
        struct.error: fewer than 23 bytes are available (callers check first; the
            framer never calls this on a short buffer).
    """
    fields: tuple[bytes, int, int, int, int] = _unpack_from(data, offset)
    return fields


def encode_header(
    guid: bytes, payload_type: int, ttl: int, hops: int, payload_length: int
) -> bytes:
    """Serialise header fields.

    Raises:
        LocalProtocolError: a GUID that is not 16 bytes or a field out of its range.
    """
    if len(guid) != GUID_SIZE:
        raise LocalProtocolError(f"a GUID is {GUID_SIZE} bytes, not {len(guid)}")
    try:
        return _pack(guid, payload_type, ttl, hops, payload_length)
    except struct.error as exc:
        raise LocalProtocolError(f"header field out of range: {exc}") from exc


def _field_offsets() -> dict[str, int]:
    """Each header field's byte offset in an encoded message, read off the declaration."""
    offsets: dict[str, int] = {}
    at = 0
    for member in Header.subcons:
        offsets[str(member.name)] = at
        at += member.sizeof()
    return offsets


_OFFSETS = _field_offsets()
TYPE_OFFSET: int = _OFFSETS["payload_type"]
"""Where the payload type's byte sits in an encoded message (16: after the GUID)."""
TTL_OFFSET: int = _OFFSETS["ttl"]
"""Where the TTL byte sits (17)."""
HOPS_OFFSET: int = _OFFSETS["hops"]
"""Where the hops byte sits (18)."""
PAYLOAD_OFFSET: int = HEADER_STRUCT.size
"""Where the payload begins (23). The router reads these bytes of the messages it sends
on, instead of decoding them again: these names are the one place that says where."""


def with_ttl(message: bytes, ttl: int) -> bytes:
    """An encoded message with its TTL byte replaced (a copy; the rest untouched)."""
    return message[:TTL_OFFSET] + bytes((ttl,)) + message[TTL_OFFSET + 1 :]
