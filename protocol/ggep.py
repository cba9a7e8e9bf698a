"""GGEP, the Gnutella Generic Extension Protocol: one codec for the blocks every message
type may carry.

A block is the magic byte 0xC3 followed by extensions. Each extension is a flags byte
(last / COBS / deflate / reserved / ID length), an ID of 1-15 non-NUL bytes, a length in
one to three 6-bit chunks, and the data. The sender deflates first and COBS-encodes
second, so the announced length is that of the data as sent; we undo the two steps in
the opposite order.

Why it is shaped this way:

* A router reads only a handful of extensions (DU, IPP, UP, VC) but must forward whole
  messages untouched, so the parser yields plain values (:class:`GGEPExtension` holds the
  *logical* data plus the two flags) and never interprets an ID it does not know.
  Typed accessors sit on top and are asked for explicitly.
* Pongs arrive by the thousand, so parsing works on slices of one ``bytes`` object; the
  only byte-at-a-time loops are the 1-3 length bytes and the per-block walk of COBS.
* Everything a peer sends is hostile until proven otherwise. Each way a block can be
  wrong becomes :class:`~protocol.errors.MalformedPayloadError` (the surrounding message
  is dropped, the stream stays in step); inflation is capped at
  :data:`MAX_INFLATED_SIZE` per extension so a few hundred bytes cannot claim megabytes.
* Zero-length data is empty whatever its flags say, as gtk-gnutella reads it: there is
  nothing to decode and no reason to drop the message for it.
* Building is strict instead: something that cannot be put on the wire is our bug and
  raises :class:`~protocol.errors.LocalProtocolError`.

IDs are decoded as latin-1 so that any byte except NUL survives a parse/build round trip;
in practice they are short ASCII mnemonics.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import struct
import zlib
from collections.abc import Iterable

from .errors import LocalProtocolError, MalformedPayloadError

__all__ = [
    "GGEP_MAGIC",
    "MAX_EXTENSION_DATA",
    "MAX_ID_LENGTH",
    "MAX_INFLATED_SIZE",
    "GGEPBlock",
    "GGEPExtension",
    "UltrapeerSlots",
    "VendorCode",
    "build_ggep",
    "cobs_decode",
    "cobs_encode",
    "daily_uptime",
    "daily_uptime_extension",
    "packed_hosts",
    "packed_hosts_extension",
    "parse_ggep",
    "parse_ggep_exact",
    "ultrapeer_slots",
    "ultrapeer_slots_extension",
    "vendor_code",
    "vendor_code_extension",
]

GGEP_MAGIC: int = 0xC3

MAX_ID_LENGTH = 15
"""The ID length lives in the low nibble of the flags byte, and zero is not allowed."""

MAX_EXTENSION_DATA: int = (1 << 18) - 1
"""Three length chunks of six bits each."""

MAX_INFLATED_SIZE: int = 64 * 1024
"""No message may exceed 64 KiB anyway, so no honest extension inflates past this."""

_FLAG_LAST = 0x80
_FLAG_COBS = 0x40
_FLAG_DEFLATE = 0x20
_FLAG_RESERVED = 0x10
_FLAG_ID_LENGTH = 0x0F

_LEN_MORE = 0x80
_LEN_LAST = 0x40
_LEN_CONTROL = _LEN_MORE | _LEN_LAST
_LEN_VALUE = 0x3F
_MAX_LENGTH_BYTES = 3

_COBS_FULL_BLOCK = 254
"""A code byte of 0xFF covers 254 data bytes and implies no NUL after them."""


@dataclasses.dataclass(frozen=True, slots=True)
class GGEPExtension:
    """One extension, with its data as the application means it.

    The flags are kept so that a parsed block can be rebuilt in the form the peer chose
    (some servents COBS-encode everything that ends up in a query hit, where NULs would
    terminate the record).
    """

    id: str
    data: bytes = b""
    compressed: bool = False
    cobs: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class GGEPBlock:
    """An ordered run of extensions; order is kept because the spec asks readers to
    process extensions in the order they appear, and duplicates are possible."""

    extensions: tuple[GGEPExtension, ...]

    def get(self, ext_id: str) -> GGEPExtension | None:
        """The first extension with that ID: first wins, as in gtk-gnutella."""
        for ext in self.extensions:
            if ext.id == ext_id:
                return ext
        return None

    def __contains__(self, ext_id: object) -> bool:
        return any(ext.id == ext_id for ext in self.extensions)

    def ids(self) -> tuple[str, ...]:
        """For logging and statistics on which extensions peers actually send."""
        return tuple(ext.id for ext in self.extensions)


# ---------------------------------------------------------------------------------------
# COBS (Consistent Overhead Byte Stuffing)


def cobs_encode(data: bytes) -> bytes:
    """Escape every NUL, at a cost of at most one byte per 254.

    This is the gtk-gnutella flavour: the final code byte is left out when the data ends
    with a full 254-byte block, since the decoder can tell no NUL follows it.
    """
    out = bytearray()
    segments = bytes(data).split(b"\x00")
    last = len(segments) - 1
    for index, segment in enumerate(segments):
        size = len(segment)
        start = 0
        while size - start >= _COBS_FULL_BLOCK:
            out.append(0xFF)
            out += segment[start : start + _COBS_FULL_BLOCK]
            start += _COBS_FULL_BLOCK
        if index == last and size and start == size:
            break
        out.append(size - start + 1)
        out += segment[start:]
    return bytes(out)


def cobs_decode(data: bytes) -> bytes:
    """Undo :func:`cobs_encode`; raises :class:`MalformedPayloadError` on bytes no
    encoder could have produced (a NUL, a code running past the end, nothing at all)."""
    buf = bytes(data)
    size = len(buf)
    if not size:
        raise MalformedPayloadError("COBS data is empty")
    if b"\x00" in buf:
        raise MalformedPayloadError("COBS data contains a NUL byte")
    out = bytearray()
    pos = 0
    code = 0
    while pos < size:
        code = buf[pos]
        end = pos + code
        if end > size:
            raise MalformedPayloadError("COBS code byte runs past the end of the data")
        out += buf[pos + 1 : end]
        if code != 0xFF:
            out.append(0)
        pos = end
    if code != 0xFF:
        # Every block but a full one ends in a NUL; the very last one is implicit.
        del out[-1]
    return bytes(out)


# ---------------------------------------------------------------------------------------
# Deflate


def _inflate(data: bytes, ext_id: str) -> bytes:
    # Ask for one byte more than allowed: getting it is the proof of a bomb, and the
    # allocation stays bounded whatever the stream claims.
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, MAX_INFLATED_SIZE + 1)
    except zlib.error as exc:
        raise MalformedPayloadError(f"GGEP {ext_id!r}: corrupt deflate data ({exc})") from exc
    if len(out) > MAX_INFLATED_SIZE:
        raise MalformedPayloadError(
            f"GGEP {ext_id!r}: inflates past {MAX_INFLATED_SIZE} bytes; refused"
        )
    if not inflater.eof:
        raise MalformedPayloadError(f"GGEP {ext_id!r}: deflate stream is truncated")
    # Bytes after the end of the stream are ignored, as zlib-based readers
    # (gtk-gnutella's included) stop at the stream end and never look at them.
    return out


# ---------------------------------------------------------------------------------------
# Parsing


def _read_length(buf: bytes, pos: int, size: int, ext_id: str) -> tuple[int, int]:
    """Decode a 1-3 byte GGEP length at ``pos``; return it and the offset after it."""
    length = 0
    for _ in range(_MAX_LENGTH_BYTES):
        if pos >= size:
            raise MalformedPayloadError(f"GGEP {ext_id!r}: truncated inside its length")
        chunk = buf[pos]
        pos += 1
        length = (length << 6) | (chunk & _LEN_VALUE)
        control = chunk & _LEN_CONTROL
        if control == _LEN_LAST:
            return length, pos
        if control != _LEN_MORE:
            raise MalformedPayloadError(
                f"GGEP {ext_id!r}: length byte 0x{chunk:02X} must set exactly one "
                "of the 'more' and 'last' bits"
            )
    raise MalformedPayloadError(f"GGEP {ext_id!r}: length uses more than 3 bytes")


def parse_ggep(data: bytes | bytearray | memoryview, offset: int = 0) -> tuple[GGEPBlock, int]:
    """Parse one block starting at ``data[offset]`` (which must be 0xC3); return it and
    the offset just past it.

    The end offset is what lets callers carry on with whatever follows the block (a 0x1C
    separator and legacy extensions in queries and hits, more blocks, a servent GUID).
    """
    buf = data if isinstance(data, bytes) else bytes(data)
    size = len(buf)
    if offset < 0 or offset >= size:
        raise MalformedPayloadError("no GGEP block at the given offset")
    if buf[offset] != GGEP_MAGIC:
        raise MalformedPayloadError(f"bad GGEP magic 0x{buf[offset]:02X}")
    pos = offset + 1
    extensions: list[GGEPExtension] = []
    while True:
        if pos >= size:
            raise MalformedPayloadError("GGEP block truncated: extension header expected")
        flags = buf[pos]
        pos += 1
        if flags & _FLAG_RESERVED:
            raise MalformedPayloadError("GGEP extension has the reserved flag bit set")
        id_length = flags & _FLAG_ID_LENGTH
        if not id_length:
            raise MalformedPayloadError("GGEP extension has a zero-length ID")
        id_end = pos + id_length
        if id_end > size:
            raise MalformedPayloadError("GGEP block truncated inside an extension ID")
        raw_id = buf[pos:id_end]
        if b"\x00" in raw_id:
            raise MalformedPayloadError("GGEP extension ID contains a NUL byte")
        ext_id = raw_id.decode("latin-1")
        pos = id_end

        if pos < size and buf[pos] & _LEN_CONTROL == _LEN_LAST:
            # Almost every extension a router sees is under 64 bytes: one length byte.
            length = buf[pos] & _LEN_VALUE
            pos += 1
        else:
            length, pos = _read_length(buf, pos, size, ext_id)

        data_end = pos + length
        if data_end > size:
            raise MalformedPayloadError(
                f"GGEP {ext_id!r}: announces {length} data bytes, {size - pos} remain"
            )
        payload = buf[pos:data_end]
        pos = data_end

        cobs = bool(flags & _FLAG_COBS)
        compressed = bool(flags & _FLAG_DEFLATE)
        if payload:
            if cobs:
                try:
                    payload = cobs_decode(payload)
                except MalformedPayloadError as exc:
                    raise MalformedPayloadError(f"GGEP {ext_id!r}: {exc.reason}") from exc
            if compressed and payload:
                payload = _inflate(payload, ext_id)
        extensions.append(GGEPExtension(ext_id, payload, compressed, cobs))
        if flags & _FLAG_LAST:
            return GGEPBlock(tuple(extensions)), pos


def parse_ggep_exact(data: bytes | bytearray | memoryview) -> GGEPBlock:
    """For payloads that are a GGEP block and nothing else (a ping's), where stray bytes
    after the block mean the sender got the framing wrong."""
    block, end = parse_ggep(data)
    if end != len(data):
        raise MalformedPayloadError(f"{len(data) - end} stray bytes after the GGEP block")
    return block


# ---------------------------------------------------------------------------------------
# Building


def _encode_id(ext_id: str) -> bytes:
    try:
        raw = ext_id.encode("latin-1")
    except UnicodeEncodeError as exc:
        raise LocalProtocolError(f"GGEP ID {ext_id!r} is not latin-1") from exc
    if not 1 <= len(raw) <= MAX_ID_LENGTH:
        raise LocalProtocolError(f"GGEP ID {ext_id!r} must be 1-{MAX_ID_LENGTH} bytes long")
    if b"\x00" in raw:
        raise LocalProtocolError(f"GGEP ID {ext_id!r} contains a NUL")
    return raw


def _encode_length(length: int) -> bytes:
    if length <= _LEN_VALUE:
        return bytes((_LEN_LAST | length,))
    if length < 1 << 12:
        return bytes((_LEN_MORE | length >> 6, _LEN_LAST | (length & _LEN_VALUE)))
    return bytes(
        (
            _LEN_MORE | length >> 12,
            _LEN_MORE | ((length >> 6) & _LEN_VALUE),
            _LEN_LAST | (length & _LEN_VALUE),
        )
    )


def build_ggep(block: GGEPBlock) -> bytes:
    """Serialise ``block``; the flags of each extension say whether to deflate and
    COBS-encode it, so a parsed block is rebuilt the way its sender shaped it."""
    extensions = block.extensions
    if not extensions:
        raise LocalProtocolError("a GGEP block needs at least one extension")
    out = bytearray((GGEP_MAGIC,))
    last = len(extensions) - 1
    for index, ext in enumerate(extensions):
        raw_id = _encode_id(ext.id)
        payload = bytes(ext.data)
        flags = len(raw_id)
        if ext.compressed:
            payload = zlib.compress(payload)
            flags |= _FLAG_DEFLATE
        if ext.cobs:
            payload = cobs_encode(payload)
            flags |= _FLAG_COBS
        if len(payload) > MAX_EXTENSION_DATA:
            raise LocalProtocolError(
                f"GGEP {ext.id!r}: {len(payload)} bytes on the wire, "
                f"the length field holds at most {MAX_EXTENSION_DATA}"
            )
        if index == last:
            flags |= _FLAG_LAST
        out.append(flags)
        out += raw_id
        out += _encode_length(len(payload))
        out += payload
    return bytes(out)


# ---------------------------------------------------------------------------------------
# The extensions a router reads


def _require_byte(name: str, value: int) -> None:
    if not 0 <= value <= 0xFF:
        raise LocalProtocolError(f"{name} must fit in one byte, got {value}")


def daily_uptime(block: GGEPBlock) -> int | None:
    """ "DU": average seconds per day the servent is up, which pong caches use to prefer
    stable hosts. Little-endian, 1-4 bytes."""
    ext = block.get("DU")
    if ext is None:
        return None
    if not 1 <= len(ext.data) <= 4:
        raise MalformedPayloadError(f"GGEP 'DU' must be 1-4 bytes, got {len(ext.data)}")
    return int.from_bytes(ext.data, "little")


def daily_uptime_extension(seconds: int) -> GGEPExtension:
    """Shortest encoding, but never empty: readers reject a zero-length DU."""
    if not 0 <= seconds <= 0xFFFFFFFF:
        raise LocalProtocolError(f"daily uptime {seconds} does not fit in 32 bits")
    width = max(1, (seconds.bit_length() + 7) // 8)
    return GGEPExtension("DU", seconds.to_bytes(width, "little"))


_HOST = struct.Struct("<4BH")


def packed_hosts(block: GGEPBlock, ext_id: str = "IPP") -> tuple[tuple[str, int], ...] | None:
    """ "IPP" (and the same layout under other IDs, e.g. "PUSH" proxies): addresses to try
    next, 6 bytes each, IPv4 in network order then a little-endian port."""
    ext = block.get(ext_id)
    if ext is None:
        return None
    if len(ext.data) % _HOST.size:
        raise MalformedPayloadError(
            f"GGEP {ext_id!r} length {len(ext.data)} is not a multiple of {_HOST.size}"
        )
    return tuple((f"{a}.{b}.{c}.{d}", port) for a, b, c, d, port in _HOST.iter_unpack(ext.data))


def packed_hosts_extension(hosts: Iterable[tuple[str, int]], ext_id: str = "IPP") -> GGEPExtension:
    """Hosts as (dotted quad, port); anything else is our mistake, not a peer's."""
    _encode_id(ext_id)
    out = bytearray()
    for host, port in hosts:
        try:
            packed = ipaddress.IPv4Address(host).packed
        except ValueError as exc:
            raise LocalProtocolError(f"{host!r} is not an IPv4 address") from exc
        if not 0 <= port <= 0xFFFF:
            raise LocalProtocolError(f"port {port} out of range")
        out += packed
        out += port.to_bytes(2, "little")
    return GGEPExtension(ext_id, bytes(out))


@dataclasses.dataclass(frozen=True, slots=True)
class UltrapeerSlots:
    """What "UP" tells a host looking for a connection: whether it is worth dialling."""

    version: int
    leaf_slots: int
    ultrapeer_slots: int


def ultrapeer_slots(block: GGEPBlock) -> UltrapeerSlots | None:
    """ "UP": ultrapeer protocol version, free leaf slots, free ultrapeer slots.

    Bytes past the third are ignored, as gtk-gnutella does, so that a longer future
    version of the extension does not make us drop the pong.
    """
    ext = block.get("UP")
    if ext is None:
        return None
    data = ext.data
    if len(data) < 3:
        raise MalformedPayloadError(f"GGEP 'UP' needs 3 bytes, got {len(data)}")
    return UltrapeerSlots(data[0], data[1], data[2])


def ultrapeer_slots_extension(version: int, leaf_slots: int, ultrapeer_slots: int) -> GGEPExtension:
    """Arguments in wire order, as in :class:`UltrapeerSlots`."""
    _require_byte("UP version", version)
    _require_byte("free leaf slots", leaf_slots)
    _require_byte("free ultrapeer slots", ultrapeer_slots)
    return GGEPExtension("UP", bytes((version, leaf_slots, ultrapeer_slots)))


@dataclasses.dataclass(frozen=True, slots=True)
class VendorCode:
    """ "VC": who the servent is, without waiting for a handshake.

    ``version`` is kept raw because only the convention (major in the high nibble, minor
    in the low one) is shared, not a guarantee.
    """

    vendor: str
    version: int

    @property
    def major(self) -> int:
        return self.version >> 4

    @property
    def minor(self) -> int:
        return self.version & 0x0F


def vendor_code(block: GGEPBlock) -> VendorCode | None:
    """Four vendor bytes (normally ASCII, decoded as latin-1 so nothing is lost) and a
    version byte; extra bytes are ignored for the same reason as in "UP"."""
    ext = block.get("VC")
    if ext is None:
        return None
    data = ext.data
    if len(data) < 5:
        raise MalformedPayloadError(f"GGEP 'VC' needs 5 bytes, got {len(data)}")
    return VendorCode(data[:4].decode("latin-1"), data[4])


def vendor_code_extension(vendor: str, version: int) -> GGEPExtension:
    """``vendor`` is the 4-letter code (e.g. "GTKG"); ``version`` the raw byte."""
    try:
        raw = vendor.encode("latin-1")
    except UnicodeEncodeError as exc:
        raise LocalProtocolError(f"vendor code {vendor!r} is not latin-1") from exc
    if len(raw) != 4:
        raise LocalProtocolError(f"vendor code {vendor!r} must be 4 bytes")
    _require_byte("vendor version", version)
    return GGEPExtension("VC", raw + bytes((version,)))
