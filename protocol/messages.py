"""Typed records for every Gnutella 0.6 message.

These frozen dataclasses are what the rest of the system sees: construct ``Container``
objects never leave :mod:`protocol.spec`, and raw payload bytes only travel as opaque
blobs when a router forwards something it does not need to understand.

Text that peers send without a declared encoding (query strings, file names) is kept
as ``bytes``: a router must forward it unchanged, and decoding guesses belong to the
display layer (see the ``text`` properties). Bye reasons are UTF-8 by convention and are
kept as ``str``.
"""

from __future__ import annotations

import dataclasses
import enum
import os

from .constants import GUID_SIZE, MessageType
from .errors import MalformedPayloadError
from .ggep import GGEPBlock, parse_ggep

# ---------------------------------------------------------------------------------------
# GUIDs


def make_guid(entropy: bytes) -> bytes:
    """Turn 16 random bytes into a modern servent GUID.

    Byte 8 = 0xFF marks a "new" servent and byte 15 = 0 is reserved (spec section 2.2.1);
    old servents and crawlers use these marks to tell clients apart.
    """
    if len(entropy) != GUID_SIZE:
        raise ValueError(f"a GUID needs {GUID_SIZE} bytes of entropy, got {len(entropy)}")
    guid = bytearray(entropy)
    guid[8] = 0xFF
    guid[15] = 0x00
    return bytes(guid)


def random_guid() -> bytes:
    """A fresh modern GUID from the operating system's random source."""
    return make_guid(os.urandom(GUID_SIZE))


# ---------------------------------------------------------------------------------------
# Payload records


@dataclasses.dataclass(frozen=True, slots=True)
class Ping:
    """Empty, or carrying only a GGEP block (e.g. SCP asking for packed hosts)."""

    ggep: GGEPBlock | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Pong:
    """A host advertisement: where a servent listens and how much it shares."""

    port: int
    ip: str
    files: int = 0
    kbytes: int = 0
    ggep: GGEPBlock | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Bye:
    """Why a peer is closing; only sent to peers that announced ``Bye-Packet``."""

    code: int
    reason: str = ""
    headers: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Push:
    """Asks the servent ``servent_guid`` to connect out to ``ip:port`` (firewalled upload)."""

    servent_guid: bytes
    file_index: int
    ip: str
    port: int
    ggep: GGEPBlock | None = None


class QueryFlags(enum.IntFlag):
    """The modern meaning of a query's first two bytes, read big-endian.

    When bit 15 is clear the field is the legacy little-endian minimum speed, which
    gtk-gnutella treats as an "ancient query format" and drops.
    """

    MARKER = 0x8000
    FIREWALLED = 0x4000
    WANT_XML = 0x2000
    LEAF_GUIDED = 0x1000
    GGEP_H = 0x0800
    OUT_OF_BAND = 0x0400
    FIREWALL_TO_FIREWALL = 0x0200


@dataclasses.dataclass(frozen=True, slots=True)
class HugeExtension:
    """A HUGE ``urn:`` reference (e.g. ``urn:sha1:...``)."""

    urn: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class XmlExtension:
    """Rich metadata: XML (``<``) or its JSON-ish cousins (``{``)."""

    data: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class UnknownExtension:
    """Anything else between 0x1C separators; kept so it can be shown or forwarded."""

    data: bytes


Extension = HugeExtension | XmlExtension | UnknownExtension | GGEPBlock
"""One item of a query's or a hit result's extension area."""


@dataclasses.dataclass(frozen=True, slots=True)
class Query:
    """A search: the flags word, the search text, then optional extensions."""

    search: bytes
    flags: int = int(QueryFlags.MARKER)
    extensions: tuple[Extension, ...] = ()

    @property
    def is_modern(self) -> bool:
        """Bit 15 set: ``flags`` holds flags; clear: it holds a legacy minimum speed."""
        return bool(self.flags & QueryFlags.MARKER)

    @property
    def min_speed(self) -> int | None:
        """The legacy little-endian minimum speed, or None for a modern query."""
        if self.is_modern:
            return None
        return ((self.flags & 0xFF) << 8) | (self.flags >> 8)

    @property
    def text(self) -> str:
        """The search text for display (UTF-8, undecodable bytes replaced)."""
        return self.search.decode("utf-8", "replace")

    @classmethod
    def legacy(cls, search: bytes, min_speed: int = 0) -> Query:
        """A 0.4-style query whose first two bytes are a little-endian minimum speed.

        Speeds whose low byte has bit 7 set cannot be expressed: on the wire they read
        as a modern flags word.
        """
        if not 0 <= min_speed <= 0xFFFF or min_speed & 0x80:
            raise ValueError(f"minimum speed {min_speed} cannot be sent as a legacy query")
        flags = ((min_speed & 0xFF) << 8) | ((min_speed >> 8) & 0xFF)
        return cls(search=search, flags=flags)


@dataclasses.dataclass(frozen=True, slots=True)
class QueryHitResult:
    """One file in a query hit."""

    file_index: int
    file_size: int
    name: bytes
    extensions: tuple[Extension, ...] = ()

    @property
    def text(self) -> str:
        return self.name.decode("utf-8", "replace")


class QueryHitFlag(enum.IntFlag):
    """Bits of the EQHD open-data flag bytes.

    For every flag but PUSH the first byte says the flag is meaningful and the second
    holds its value; PUSH is the other way round (a historical accident all servents
    reproduce).
    """

    PUSH = 0x01
    BAD = 0x02
    BUSY = 0x04
    UPLOADED = 0x08
    SPEED_MEASURED = 0x10
    GGEP = 0x20


@dataclasses.dataclass(frozen=True, slots=True)
class QueryHitDescriptor:
    """The Extended Query Hit Descriptor (EQHD) between the results and the servent GUID."""

    vendor: bytes
    open_data: bytes = b""
    private_data: bytes = b""

    def flag(self, flag: QueryHitFlag) -> bool | None:
        """The flag's value, or None when the servent did not say."""
        if len(self.open_data) < 2:
            return None
        first, second = self.open_data[0], self.open_data[1]
        enabler, setter = (second, first) if flag is QueryHitFlag.PUSH else (first, second)
        if not enabler & flag:
            return None
        return bool(setter & flag)

    @property
    def ggep(self) -> GGEPBlock | None:
        """The GGEP block in the private area, when the GGEP flag announces one.

        LimeWire may place other bytes before it, so the block is looked for at its
        first magic byte; an unparsable block counts as absent rather than failing the
        whole hit.
        """
        if not self.flag(QueryHitFlag.GGEP):
            return None
        start = self.private_data.find(b"\xc3")
        if start < 0:
            return None
        try:
            block, _ = parse_ggep(self.private_data, start)
        except MalformedPayloadError:
            return None
        return block


@dataclasses.dataclass(frozen=True, slots=True)
class QueryHit:
    """Results for a query, routed back along the query's path.

    ``servent_guid`` (the last 16 bytes on the wire) is what pushes are routed by.
    """

    port: int
    ip: str
    speed: int
    results: tuple[QueryHitResult, ...]
    servent_guid: bytes
    descriptor: QueryHitDescriptor | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class QrpReset:
    """Query Routing Protocol: start a new table of ``table_length`` slots."""

    table_length: int
    infinity: int


@dataclasses.dataclass(frozen=True, slots=True)
class QrpPatch:
    """Query Routing Protocol: one piece of a (possibly compressed) table patch."""

    seq_no: int
    seq_size: int
    compressor: int
    entry_bits: int
    data: bytes = b""


@dataclasses.dataclass(frozen=True, slots=True)
class VendorMessage:
    """A vendor message (0x31) or standard vendor message (0x32); hop-by-hop only."""

    vendor: bytes
    selector: int
    version: int
    body: bytes = b""
    message_type: int = MessageType.VENDOR


@dataclasses.dataclass(frozen=True, slots=True)
class OpaquePayload:
    """A payload of a type we route or drop without looking inside (RUDP, DHT, HSEP...)."""

    message_type: int
    data: bytes = b""


Payload = (
    Ping
    | Pong
    | Bye
    | Push
    | Query
    | QueryHit
    | QrpReset
    | QrpPatch
    | VendorMessage
    | OpaquePayload
)

_FIXED_TYPES: dict[type, int] = {
    Ping: MessageType.PING,
    Pong: MessageType.PONG,
    Bye: MessageType.BYE,
    Push: MessageType.PUSH,
    Query: MessageType.QUERY,
    QueryHit: MessageType.QUERY_HIT,
    QrpReset: MessageType.QRP,
    QrpPatch: MessageType.QRP,
}


def payload_type_of(payload: Payload) -> int:
    """The header type code a payload record travels under."""
    if isinstance(payload, VendorMessage | OpaquePayload):
        return payload.message_type
    return _FIXED_TYPES[type(payload)]


@dataclasses.dataclass(frozen=True, slots=True)
class Message:
    """A whole message: the routing header fields and a typed payload."""

    guid: bytes
    ttl: int
    hops: int
    payload: Payload

    @property
    def payload_type(self) -> int:
        return payload_type_of(self.payload)
