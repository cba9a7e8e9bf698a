"""Known-answer vectors for every Gnutella 0.6 message, typed by hand from the specification.

Every expected byte string below is written out field by field from the Gnutella 0.6
draft (header 2.2.1, ping 2.2.2, pong 2.2.3, query 2.2.5, query hit 2.2.6, push 2.2.8,
bye 2.2.9), the GGEP document, the QRP document and the vendor-message document, and
shaped after what gtk-gnutella 1.2.3 sent on loopback (lengths 7, 36, 19 and 90 below
are the lengths it used). None of them is produced by the code under test.

Byte order: every multi-byte integer is little-endian except IPv4 addresses (network
order) and a modern query's flags word, which the records keep as read big-endian.

Each payload vector is checked four ways: both parsers (the fast ``struct`` path and the
construct declaration) must yield the typed record, and both builders must give the
bytes back exactly.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import NamedTuple

import pytest

from protocol.codec import (
    build_payload,
    build_payload_spec,
    encode_message,
    parse_payload,
    parse_payload_spec,
)
from protocol.constants import MessageType
from protocol.errors import LocalProtocolError, MalformedPayloadError
from protocol.framing import Frame, FrameDecoder
from protocol.ggep import GGEPBlock, GGEPExtension
from protocol.header import decode_header, encode_header
from protocol.messages import (
    Bye,
    HugeExtension,
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
    QueryHitFlag,
    QueryHitResult,
    VendorMessage,
)


def ggep(*extensions: GGEPExtension) -> GGEPBlock:
    return GGEPBlock(tuple(extensions))


# A modern servent GUID (byte 8 = 0xFF, byte 15 = 0x00), seen as a ping's message id.
PING_GUID = bytes.fromhex("d54960d1ba5e97dbfff98d628a69c000")
# The servent GUID gtk-gnutella put at the end of its query hits.
GTKG_SERVENT = bytes.fromhex("142831024a0db6acd4bad81123a12da5")
# Another modern servent GUID, for the second node's hit.
OTHER_SERVENT = bytes.fromhex("5a1f0c3e9b7d4a62ff3c8e21d4b06700")

SHA1_EMPTY = b"urn:sha1:3I42H3S6NNFQ2MSVX7XZKYAYSCX5QBYJ"  # SHA-1 of the empty file
SHA1_ABC = b"urn:sha1:VGMT4NSHA2AWVOR6EVYXQUGCNSONBWE5"  # SHA-1 of "abc"


# ---------------------------------------------------------------------------------------
# Header (spec 2.2.1): GUID 16, payload type 1, TTL 1, hops 1, payload length 4 (LE)


class HeaderVector(NamedTuple):
    name: str
    wire: bytes
    guid: bytes
    payload_type: int
    ttl: int
    hops: int
    length: int


HEADER_PING = bytes.fromhex(
    "d54960d1ba5e97dbfff98d628a69c000"  # message GUID
    "00"  # payload type: ping
    "01"  # TTL 1
    "00"  # hops 0
    "00000000"  # payload length 0
)

HEADER_PONG = bytes.fromhex(
    "d54960d1ba5e97dbfff98d628a69c000"  # message GUID: the ping's
    "01"  # payload type: pong
    "01"  # TTL 1
    "00"  # hops 0
    "24000000"  # payload length 36, little-endian
)

HEADER_QUERY_HIT = bytes.fromhex(
    "d54960d1ba5e97dbfff98d628a69c000"  # message GUID: the query's
    "81"  # payload type: query hit
    "06"  # TTL 6
    "01"  # hops 1
    "90010000"  # payload length 400 = 0x0190, little-endian
)

HEADER_VECTORS = [
    HeaderVector("ping", HEADER_PING, PING_GUID, 0x00, 1, 0, 0),
    HeaderVector("pong-36", HEADER_PONG, PING_GUID, 0x01, 1, 0, 36),
    HeaderVector("query-hit-400", HEADER_QUERY_HIT, PING_GUID, 0x81, 6, 1, 400),
]
HEADER_PARAMS = [pytest.param(v, id=v.name) for v in HEADER_VECTORS]


@pytest.mark.parametrize("vector", HEADER_PARAMS)
def test_header_is_23_bytes(vector: HeaderVector) -> None:
    assert len(vector.wire) == 23


@pytest.mark.parametrize("vector", HEADER_PARAMS)
def test_decode_header(vector: HeaderVector) -> None:
    fields = (vector.guid, vector.payload_type, vector.ttl, vector.hops, vector.length)
    assert decode_header(vector.wire) == fields
    assert decode_header(b"\xff\xff\xff" + vector.wire, 3) == fields


@pytest.mark.parametrize("vector", HEADER_PARAMS)
def test_encode_header(vector: HeaderVector) -> None:
    encoded = encode_header(
        vector.guid, vector.payload_type, vector.ttl, vector.hops, vector.length
    )
    assert encoded == vector.wire


@pytest.mark.parametrize("vector", HEADER_PARAMS)
def test_framer_reads_header(vector: HeaderVector) -> None:
    payload = bytes(range(256)) * 2
    payload = payload[: vector.length]
    frames = FrameDecoder().receive_data(vector.wire + payload)
    assert len(frames) == 1
    frame = frames[0]
    assert frame.guid == vector.guid
    assert frame.payload_type == vector.payload_type
    assert frame.ttl == vector.ttl
    assert frame.hops == vector.hops
    assert frame.payload == payload
    assert frame.to_bytes() == vector.wire + payload


# ---------------------------------------------------------------------------------------
# Payloads


class Vector(NamedTuple):
    name: str
    message_type: int
    wire: bytes
    record: Payload
    length: int
    """The payload size worked out by hand (or seen on the wire), to catch typing slips."""


# Ping (2.2.2): empty ...
PING_EMPTY = b""

# ... or a GGEP block only; gtk-gnutella's ultrapeer pings carry SCP with one byte.
PING_SCP = bytes.fromhex(
    "c3"  # GGEP magic
    "83"  # flags: last extension (0x80) | ID length 3
    "534350"  # ID "SCP"
    "41"  # length: last chunk (0x40) | 1
    "01"  # SCP data
)

# Pong (2.2.3): port, IPv4, shared files, shared kilobytes.
PONG_PLAIN = bytes.fromhex(
    "da3f"  # port 16346 = 0x3FDA, LE
    "7f000001"  # IP 127.0.0.1, network order
    "03000000"  # 3 files, LE
    "08000000"  # 8 KB, LE
)

# The same pong with the GGEP block gtk-gnutella adds: 14 + 22 = 36 bytes.
PONG_GGEP = bytes.fromhex(
    "da3f"  # port 16346
    "7f000001"  # IP 127.0.0.1
    "03000000"  # 3 files
    "08000000"  # 8 KB
    "c3"  # GGEP magic (1 byte)
    "02 5643 45"  # VC: flags = ID length 2, "VC", length 5 (4 bytes)
    "47544b47 12"  # vendor "GTKG", version 1.2 (5 bytes)
    "02 5550 43"  # UP: flags = ID length 2, "UP", length 3 (4 bytes)
    "01 28 1f"  # UP version 1, 40 free leaf slots, 31 free ultrapeer slots (3 bytes)
    "82 4455 41"  # DU: flags = last | ID length 2, "DU", length 1 (4 bytes)
    "78"  # daily uptime 120 s (1 byte); block total 1 + 9 + 7 + 5 = 22
)

# Bye (2.2.9): code, reason, NUL.
BYE_SHUTDOWN = bytes.fromhex(
    "c800"  # code 200, LE
    "53657276656e742073687574646f776e"  # "Servent shutdown"
    "00"  # NUL
)

# Bye with a header line after the reason, as gtk-gnutella sends on a manual drop.
BYE_USER_REMOVAL = bytes.fromhex(
    "c900"  # code 201, LE
    "55736572206d616e75616c2072656d6f76616c"  # "User manual removal"
    "0d0a"  # CRLF
    "5365727665723a20"  # "Server: "
    "67746b2d676e7574656c6c612f312e322e3320"  # "gtk-gnutella/1.2.3 "
    "28323032342d30332d30333b20"  # "(2024-03-03; "
    "546f706c6573733b20"  # "Topless; "
    "4c696e7578207838365f363429"  # "Linux x86_64)"
    "0d0a"  # CRLF ending the header line
    "0d0a"  # CRLF: empty line ending the headers
    "00"  # NUL
)

# Push (2.2.8): servent GUID, file index, IPv4, port.
PUSH = bytes.fromhex(
    "142831024a0db6acd4bad81123a12da5"  # target servent GUID
    "02010000"  # file index 258 = 0x0102, LE
    "c0a80114"  # IP 192.168.1.20, network order
    "ca18"  # port 6346 = 0x18CA, LE
)

# Query (2.2.5): flags word, search text, NUL.
QUERY_MODERN = bytes.fromhex(
    "8000"  # flags 0x8000 (big-endian): the modern marker, nothing else
    "696e7465726f70"  # "interop"
    "00"  # NUL
)

QUERY_LEGACY_SPEED_0 = bytes.fromhex(
    "0000"  # legacy minimum speed 0 (gtk-gnutella drops this "ancient" form)
    "696e7465726f70"  # "interop"
    "00"  # NUL
)

QUERY_LEGACY_SPEED_64 = bytes.fromhex(
    "4000"  # legacy minimum speed 64 = 0x0040, LE; bit 15 of the BE word is clear
    "696e7465726f70"  # "interop"
    "00"  # NUL
)

QUERY_EXTENSIONS = bytes.fromhex(
    "a800"  # flags 0xA800: marker | want XML (0x2000) | GGEP "H" (0x0800)
    "696e7465726f70"  # "interop"
    "00"  # NUL ending the search text
    "75726e3a736861313a"  # HUGE "urn:sha1:"
    "33493432483353364e4e4651324d5356"  # "3I42H3S6NNFQ2MSV"
    "5837585a4b594159534358355142594a"  # "X7XZKYAYSCX5QBYJ"
    "1c"  # separator
    "c3"  # GGEP magic
    "82 4e50"  # last | ID length 2, "NP"
    "40"  # length 0: last chunk | 0
)

# Query hit (2.2.6), shaped like gtk-gnutella's: two results each carrying a SHA-1 and
# a GGEP "CT" (creation time), then the EQHD and the servent GUID. 213 bytes:
# 11 fixed + 84 + 83 per result + 19 EQHD + 16 GUID.
QUERY_HIT_GTKG = bytes.fromhex(
    "02"  # number of hits
    "da3f"  # port 16346
    "7f000001"  # IP 127.0.0.1
    "10000000"  # speed 16 kb/s
    # result 1 (8 + 24 + 41 + 1 + 9 + 1 = 84 bytes)
    "02000000"  # file index 2
    "25000000"  # file size 37
    "696e7465726f705f616c7068615f70726f62652e747874"  # "interop_alpha_probe.txt"
    "00"  # NUL ending the name
    "75726e3a736861313a"  # "urn:sha1:"
    "33493432483353364e4e4651324d5356"  # "3I42H3S6NNFQ2MSV"
    "5837585a4b594159534358355142594a"  # "X7XZKYAYSCX5QBYJ"
    "1c"  # separator
    "c3 82 4354 44"  # GGEP: last | ID length 2, "CT", length 4
    "80bde365"  # 1709424000 = 0x65E3BD80, LE
    "00"  # NUL ending the extension block
    # result 2 (8 + 23 + 41 + 1 + 9 + 1 = 83 bytes)
    "01000000"  # file index 1
    "00100000"  # file size 4096 = 0x1000
    "696e7465726f705f67616d6d615f646174612e62696e"  # "interop_gamma_data.bin"
    "00"  # NUL ending the name
    "75726e3a736861313a"  # "urn:sha1:"
    "56474d54344e534841324157564f5236"  # "VGMT4NSHA2AWVOR6"
    "45565958515547434e534f4e42574535"  # "EVYXQUGCNSONBWE5"
    "1c"  # separator
    "c3 82 4354 44"  # GGEP: last | ID length 2, "CT", length 4
    "010fe565"  # 1709510401 = 0x65E50F01, LE
    "00"  # NUL ending the extension block
    # EQHD (4 + 1 + 2 + 12 = 19 bytes)
    "47544b47"  # vendor code "GTKG"
    "02"  # open data size 2
    "2c"  # enabler byte: GGEP | have-uploaded | busy; push setter (bit 0) clear
    "21"  # setter byte: GGEP set; push enabler (bit 0) set
    "c3 85 47544b4756 44"  # private GGEP: last | ID length 5, "GTKGV", length 4
    "01020375"  # version bytes (shortened): 1, 2, 3, "u"
    "142831024a0db6acd4bad81123a12da5"  # servent GUID
)

# A hit with no EQHD at all: the results run straight into the servent GUID.
QUERY_HIT_BARE = bytes.fromhex(
    "01"  # number of hits
    "db3f"  # port 16347 = 0x3FDB
    "7f000001"  # IP 127.0.0.1
    "10000000"  # speed 16
    "01000000"  # file index 1
    "0b000000"  # file size 11
    "696e7465726f705f627261766f5f6f6e6c792e747874"  # "interop_bravo_only.txt"
    "00"  # NUL ending the name
    "00"  # empty extension block: its NUL (the "double NUL")
    "5a1f0c3e9b7d4a62ff3c8e21d4b06700"  # servent GUID
)

# Inside a result, a GGEP block may not contain NUL (spec 2.3.1): a creation time of
# 1709510400 = 0x65E50F00 (LE 00 0f e5 65) has to be COBS-encoded, as gtk-gnutella does.
# 48 bytes: 11 fixed + 8 + 2 (name) + 10 (GGEP) + 1 (NUL) + 16 GUID.
QUERY_HIT_COBS = bytes.fromhex(
    "01"  # number of hits
    "db3f 7f000001 10000000"  # port 16347, IP 127.0.0.1, speed 16
    "01000000 0b000000"  # file index 1, file size 11
    "61 00"  # name "a", NUL
    "c3"  # GGEP magic
    "c2 4354"  # flags: last | COBS (0x40) | ID length 2; "CT"
    "45"  # length 5: the COBS-encoded size
    "01"  # COBS code 1: empty run, then a NUL
    "04 0fe565"  # COBS code 4: three bytes, then the end
    "00"  # NUL ending the extension block: the only NUL in it
    "5a1f0c3e9b7d4a62ff3c8e21d4b06700"  # servent GUID
)

# QRP (0x30): RESET, variant 0.
QRP_RESET = bytes.fromhex(
    "00"  # variant: RESET
    "00400000"  # table length 16384 = 0x4000, LE
    "02"  # infinity 2
)

# QRP PATCH, variant 1, carrying a zlib stream made of one stored block of four
# zero bytes (eight 4-bit entries, all "no change").
QRP_PATCH = bytes.fromhex(
    "01"  # variant: PATCH
    "01"  # sequence number 1
    "01"  # sequence size 1
    "01"  # compressor 1: zlib
    "04"  # entry bits 4
    "7801"  # zlib header: deflate, 32 KiB window; 0x7801 % 31 == 0
    "01 0400 fbff"  # stored block, final; LEN 4; NLEN ~4
    "00000000"  # data
    "00040001"  # Adler-32: a = 1, b = 4, big-endian
)

# Vendor message (0x31): vendor, selector, version, body. Messages-Supported is vendor
# 0/0/0; its body is a count then (vendor, selector, version) triples.
VENDOR_MESSAGES_SUPPORTED = bytes.fromhex(
    "00000000"  # vendor: four NUL bytes
    "0000"  # selector 0
    "0000"  # version 0
    "0200"  # body: 2 entries, LE
    "42454152 0400 0100"  # "BEAR" selector 4 version 1
    "47544b47 0700 0100"  # "GTKG" selector 7 version 1
)

# The same layout under 0x32 (standard vendor message).
STANDARD_VENDOR = bytes.fromhex(
    "4c494d45"  # vendor "LIME"
    "1500"  # selector 21, LE
    "0200"  # version 2, LE
    "01"  # body
)

# HSEP (0xCD) is carried without being looked at: one triple of 64-bit LE counters.
HSEP = bytes.fromhex(
    "0100000000000000"  # nodes 1
    "0300000000000000"  # files 3
    "0800000000000000"  # KiB 8
)

# A type no servent defines is carried the same way.
UNKNOWN_TYPE = bytes.fromhex("deadbeef")


HIT_GTKG_RECORD = QueryHit(
    port=16346,
    ip="127.0.0.1",
    speed=16,
    results=(
        QueryHitResult(
            file_index=2,
            file_size=37,
            name=b"interop_alpha_probe.txt",
            extensions=(
                HugeExtension(SHA1_EMPTY),
                ggep(GGEPExtension("CT", (1709424000).to_bytes(4, "little"))),
            ),
        ),
        QueryHitResult(
            file_index=1,
            file_size=4096,
            name=b"interop_gamma_data.bin",
            extensions=(
                HugeExtension(SHA1_ABC),
                ggep(GGEPExtension("CT", (1709510401).to_bytes(4, "little"))),
            ),
        ),
    ),
    servent_guid=GTKG_SERVENT,
    descriptor=QueryHitDescriptor(
        vendor=b"GTKG",
        open_data=b"\x2c\x21",
        private_data=b"\xc3\x85GTKGV\x44\x01\x02\x03u",
    ),
)

PONG_GGEP_RECORD = Pong(
    port=16346,
    ip="127.0.0.1",
    files=3,
    kbytes=8,
    ggep=ggep(
        GGEPExtension("VC", b"GTKG\x12"),
        GGEPExtension("UP", b"\x01\x28\x1f"),
        GGEPExtension("DU", b"\x78"),
    ),
)

BYE_SHUTDOWN_RECORD = Bye(code=200, reason="Servent shutdown")

VECTORS = [
    Vector("ping-empty", 0x00, PING_EMPTY, Ping(), 0),
    Vector("ping-ggep-scp", 0x00, PING_SCP, Ping(ggep(GGEPExtension("SCP", b"\x01"))), 7),
    Vector("pong-plain", 0x01, PONG_PLAIN, Pong(16346, "127.0.0.1", 3, 8), 14),
    Vector("pong-ggep-vc-up-du", 0x01, PONG_GGEP, PONG_GGEP_RECORD, 36),
    Vector("bye-200", 0x02, BYE_SHUTDOWN, BYE_SHUTDOWN_RECORD, 19),
    Vector(
        "bye-201-with-header",
        0x02,
        BYE_USER_REMOVAL,
        Bye(
            code=201,
            reason="User manual removal",
            headers=(("Server", "gtk-gnutella/1.2.3 (2024-03-03; Topless; Linux x86_64)"),),
        ),
        90,
    ),
    Vector("push", 0x40, PUSH, Push(GTKG_SERVENT, 258, "192.168.1.20", 6346), 26),
    Vector("query-modern", 0x80, QUERY_MODERN, Query(b"interop", flags=0x8000), 10),
    Vector("query-legacy-speed-0", 0x80, QUERY_LEGACY_SPEED_0, Query(b"interop", flags=0), 10),
    Vector(
        "query-legacy-speed-64", 0x80, QUERY_LEGACY_SPEED_64, Query(b"interop", flags=0x4000), 10
    ),
    Vector(
        "query-huge-and-ggep",
        0x80,
        QUERY_EXTENSIONS,
        Query(
            b"interop",
            flags=0xA800,
            extensions=(HugeExtension(SHA1_EMPTY), ggep(GGEPExtension("NP"))),
        ),
        57,
    ),
    Vector("query-hit-gtkg", 0x81, QUERY_HIT_GTKG, HIT_GTKG_RECORD, 213),
    Vector(
        "query-hit-no-eqhd",
        0x81,
        QUERY_HIT_BARE,
        QueryHit(
            port=16347,
            ip="127.0.0.1",
            speed=16,
            results=(QueryHitResult(1, 11, b"interop_bravo_only.txt"),),
            servent_guid=OTHER_SERVENT,
        ),
        59,
    ),
    Vector(
        "query-hit-cobs-ggep",
        0x81,
        QUERY_HIT_COBS,
        QueryHit(
            port=16347,
            ip="127.0.0.1",
            speed=16,
            results=(
                QueryHitResult(
                    1,
                    11,
                    b"a",
                    (ggep(GGEPExtension("CT", (1709510400).to_bytes(4, "little"), cobs=True)),),
                ),
            ),
            servent_guid=OTHER_SERVENT,
        ),
        48,
    ),
    Vector("qrp-reset", 0x30, QRP_RESET, QrpReset(table_length=16384, infinity=2), 6),
    Vector(
        "qrp-patch",
        0x30,
        QRP_PATCH,
        QrpPatch(
            seq_no=1,
            seq_size=1,
            compressor=1,
            entry_bits=4,
            data=bytes.fromhex("7801 01 0400 fbff 00000000 00040001"),
        ),
        20,
    ),
    Vector(
        "vendor-messages-supported",
        0x31,
        VENDOR_MESSAGES_SUPPORTED,
        VendorMessage(
            vendor=b"\0\0\0\0",
            selector=0,
            version=0,
            body=b"\x02\x00BEAR\x04\x00\x01\x00GTKG\x07\x00\x01\x00",
        ),
        26,
    ),
    Vector(
        "standard-vendor-0x32",
        0x32,
        STANDARD_VENDOR,
        VendorMessage(vendor=b"LIME", selector=21, version=2, body=b"\x01", message_type=0x32),
        9,
    ),
    Vector(
        "hsep-opaque",
        0xCD,
        HSEP,
        OpaquePayload(0xCD, b"".join(n.to_bytes(8, "little") for n in (1, 3, 8))),
        24,
    ),
    Vector("unknown-type-opaque", 0x99, UNKNOWN_TYPE, OpaquePayload(0x99, b"\xde\xad\xbe\xef"), 4),
]
PARAMS = [pytest.param(v, id=v.name) for v in VECTORS]


@pytest.mark.parametrize("vector", PARAMS)
def test_vector_length(vector: Vector) -> None:
    assert len(vector.wire) == vector.length


@pytest.mark.parametrize("vector", PARAMS)
def test_parse_payload(vector: Vector) -> None:
    assert parse_payload(vector.message_type, vector.wire) == vector.record


@pytest.mark.parametrize("vector", PARAMS)
def test_parse_payload_spec(vector: Vector) -> None:
    assert parse_payload_spec(vector.message_type, vector.wire) == vector.record


@pytest.mark.parametrize("vector", PARAMS)
def test_build_payload(vector: Vector) -> None:
    assert build_payload(vector.record) == vector.wire


@pytest.mark.parametrize("vector", PARAMS)
def test_build_payload_spec(vector: Vector) -> None:
    assert build_payload_spec(vector.record) == vector.wire


# ---------------------------------------------------------------------------------------
# What the records say about the vectors


def test_query_flags_and_speeds() -> None:
    modern = parse_payload(MessageType.QUERY, QUERY_MODERN)
    assert isinstance(modern, Query)
    assert modern.is_modern
    assert modern.min_speed is None
    assert modern.text == "interop"

    legacy = parse_payload(MessageType.QUERY, QUERY_LEGACY_SPEED_0)
    assert legacy == Query.legacy(b"interop")
    assert isinstance(legacy, Query)
    assert not legacy.is_modern
    assert legacy.min_speed == 0

    slow = parse_payload(MessageType.QUERY, QUERY_LEGACY_SPEED_64)
    assert slow == Query.legacy(b"interop", 64)
    assert isinstance(slow, Query)
    assert not slow.is_modern
    assert slow.min_speed == 64

    extended = parse_payload(MessageType.QUERY, QUERY_EXTENSIONS)
    assert isinstance(extended, Query)
    assert extended.flags & QueryFlags.WANT_XML
    assert extended.flags & QueryFlags.GGEP_H
    assert not extended.flags & QueryFlags.OUT_OF_BAND


def test_gtkg_hit_descriptor_flags() -> None:
    hit = parse_payload(MessageType.QUERY_HIT, QUERY_HIT_GTKG)
    assert isinstance(hit, QueryHit)
    descriptor = hit.descriptor
    assert descriptor is not None
    # PUSH: enabled by bit 0 of the second byte (0x21), valued by the first (0x2c): clear.
    assert descriptor.flag(QueryHitFlag.PUSH) is False
    # The others: enabled by the first byte (0x2c), valued by the second (0x21).
    assert descriptor.flag(QueryHitFlag.BUSY) is False
    assert descriptor.flag(QueryHitFlag.UPLOADED) is False
    assert descriptor.flag(QueryHitFlag.GGEP) is True
    assert descriptor.flag(QueryHitFlag.SPEED_MEASURED) is None
    assert descriptor.flag(QueryHitFlag.BAD) is None
    assert descriptor.ggep == ggep(GGEPExtension("GTKGV", b"\x01\x02\x03u"))
    assert hit.servent_guid == GTKG_SERVENT


def test_descriptor_flags_swapped_bytes() -> None:
    # gtk-gnutella's bytes swapped, 0x21 0x2c: push is not enabled (bit 0 of the second
    # byte is clear), busy is not enabled (bit 2 of the first byte is clear), and GGEP is
    # enabled by the first byte and set in the second.
    swapped = QueryHitDescriptor(vendor=b"GTKG", open_data=b"\x21\x2c")
    assert swapped.flag(QueryHitFlag.PUSH) is None
    assert swapped.flag(QueryHitFlag.BUSY) is None
    assert swapped.flag(QueryHitFlag.GGEP) is True
    # A firewalled, busy servent, 0x05 0x05: the first byte sets push (bit 0) and enables
    # busy (bit 2); the second enables push and sets busy.
    firewalled = QueryHitDescriptor(vendor=b"LIME", open_data=b"\x05\x05")
    assert firewalled.flag(QueryHitFlag.PUSH) is True
    assert firewalled.flag(QueryHitFlag.BUSY) is True
    assert firewalled.ggep is None
    assert QueryHitDescriptor(vendor=b"GTKG").flag(QueryHitFlag.PUSH) is None


def test_bare_hit_has_no_descriptor() -> None:
    hit = parse_payload(MessageType.QUERY_HIT, QUERY_HIT_BARE)
    assert isinstance(hit, QueryHit)
    assert hit.descriptor is None
    assert hit.servent_guid == OTHER_SERVENT


def test_qrp_patch_data_is_the_zlib_stream_described() -> None:
    patch = parse_payload(MessageType.QRP, QRP_PATCH)
    assert isinstance(patch, QrpPatch)
    assert zlib.decompress(patch.data) == bytes(4)


def test_vendor_type_follows_the_header() -> None:
    as_vendor = parse_payload(MessageType.VENDOR, STANDARD_VENDOR)
    as_standard = parse_payload(MessageType.STANDARD_VENDOR, STANDARD_VENDOR)
    assert isinstance(as_vendor, VendorMessage)
    assert isinstance(as_standard, VendorMessage)
    assert as_vendor.message_type == 0x31
    assert as_standard.message_type == 0x32
    assert as_vendor != as_standard


# ---------------------------------------------------------------------------------------
# A whole stream: ping, its pong, then a bye, back to back


STREAM = bytes.fromhex(
    # ping
    "d54960d1ba5e97dbfff98d628a69c000"  # GUID
    "00 01 00"  # ping, TTL 1, hops 0
    "00000000"  # length 0
    # pong answering it
    "d54960d1ba5e97dbfff98d628a69c000"  # GUID: the ping's
    "01 01 00"  # pong, TTL 1, hops 0
    "24000000"  # length 36
    "da3f 7f000001 03000000 08000000"  # port 16346, 127.0.0.1, 3 files, 8 KB
    "c3"  # GGEP magic
    "02 5643 45 47544b47 12"  # VC "GTKG" 1.2
    "02 5550 43 01281f"  # UP 1, 40, 31
    "82 4455 41 78"  # DU 120 (last)
    # bye
    "000102030405060708ff0a0b0c0d0e00"  # GUID
    "02 01 00"  # bye, TTL 1, hops 0
    "13000000"  # length 19
    "c800 53657276656e742073687574646f776e 00"  # 200 "Servent shutdown" NUL
)

STREAM_MESSAGES = [
    Message(guid=PING_GUID, ttl=1, hops=0, payload=Ping()),
    Message(guid=PING_GUID, ttl=1, hops=0, payload=PONG_GGEP_RECORD),
    Message(
        guid=bytes.fromhex("000102030405060708ff0a0b0c0d0e00"),
        ttl=1,
        hops=0,
        payload=BYE_SHUTDOWN_RECORD,
    ),
]


def test_stream_length() -> None:
    assert len(STREAM) == (23 + 0) + (23 + 36) + (23 + 19)


def test_stream_decodes_in_one_piece() -> None:
    decoder = FrameDecoder()
    frames = decoder.receive_data(STREAM)
    assert [frame.message() for frame in frames] == STREAM_MESSAGES
    assert [frame.payload_type for frame in frames] == [0x00, 0x01, 0x02]
    assert decoder.buffered == 0
    assert decoder.receive_data(b"") == []


def test_stream_decodes_byte_by_byte() -> None:
    decoder = FrameDecoder()
    frames: list[Frame] = []
    for index in range(len(STREAM)):
        frames += decoder.receive_data(STREAM[index : index + 1])
    assert [frame.message() for frame in frames] == STREAM_MESSAGES


def test_stream_encodes() -> None:
    assert b"".join(encode_message(message) for message in STREAM_MESSAGES) == STREAM
    assert b"".join(Frame.from_message(m).to_bytes() for m in STREAM_MESSAGES) == STREAM


# ---------------------------------------------------------------------------------------
# Negative vectors: each must be refused by both parsers


class BadVector(NamedTuple):
    name: str
    message_type: int
    wire: bytes


BAD_VECTORS = [
    BadVector(
        "pong-13-bytes",
        0x01,
        bytes.fromhex(
            "da3f 7f000001 03000000"  # port, IP, files
            "080000"  # KB cut to 3 bytes
        ),
    ),
    BadVector(
        "pong-3-junk-bytes",
        0x01,
        bytes.fromhex(
            "da3f 7f000001 03000000 08000000"  # the 14 fixed bytes
            "000000"  # junk: not a GGEP block (no 0xC3)
        ),
    ),
    BadVector(
        "ping-junk",
        0x00,
        bytes.fromhex("00000000"),  # padding, not GGEP
    ),
    BadVector(
        "ping-ggep-then-stray-byte",
        0x00,
        bytes.fromhex(
            "c3 83 534350 41 01"  # GGEP block: SCP with one byte
            "00"  # stray byte after the block
        ),
    ),
    BadVector(
        "push-25-bytes",
        0x40,
        bytes.fromhex(
            "142831024a0db6acd4bad81123a12da5"  # servent GUID
            "02010000 c0a80114"  # file index, IP
            "ca"  # port cut to 1 byte
        ),
    ),
    BadVector(
        "query-no-nul",
        0x80,
        bytes.fromhex("8000 696e7465726f70"),  # flags, "interop", no NUL
    ),
    BadVector(
        "query-flags-only",
        0x80,
        bytes.fromhex("8000"),  # flags, then nothing
    ),
    BadVector(
        "query-hit-shorter-than-guid",
        0x81,
        bytes.fromhex(
            "00 da3f 7f000001 10000000"  # no hits, port, IP, speed
            "142831024a0db6acd4bad81123a12d"  # only 15 bytes of GUID
        ),
    ),
    BadVector(
        "query-hit-eqhd-3-bytes",
        0x81,
        bytes.fromhex(
            "00 da3f 7f000001 10000000"  # no hits, port, IP, speed
            "47544b"  # "GTK": shorter than vendor code + open data size
            "142831024a0db6acd4bad81123a12da5"  # servent GUID
        ),
    ),
    BadVector(
        "query-hit-open-data-overruns",
        0x81,
        bytes.fromhex(
            "00 da3f 7f000001 10000000"  # no hits, port, IP, speed
            "47544b47 04 2c21"  # open data size 4, but only 2 bytes before the GUID
            "142831024a0db6acd4bad81123a12da5"  # servent GUID
        ),
    ),
    BadVector(
        "query-hit-result-missing",
        0x81,
        bytes.fromhex(
            "02 da3f 7f000001 10000000"  # claims 2 hits
            "01000000 0b000000 6100 00"  # one result: "a", no extensions
            "142831024a0db6acd4bad81123a12da5"  # 16 bytes left: not a second result
        ),
    ),
    BadVector(
        "qrp-variant-7",
        0x30,
        bytes.fromhex("07 00400000 02"),  # variant 7 does not exist
    ),
    BadVector(
        "qrp-reset-trailing-byte",
        0x30,
        bytes.fromhex("00 00400000 02 00"),  # RESET is exactly 6 bytes
    ),
    BadVector(
        "qrp-reset-short",
        0x30,
        bytes.fromhex("00 004000"),  # table length cut to 3 bytes
    ),
    BadVector(
        "vendor-7-bytes",
        0x31,
        bytes.fromhex("00000000 0000 00"),  # version cut to 1 byte
    ),
    BadVector(
        "standard-vendor-7-bytes",
        0x32,
        bytes.fromhex("4c494d45 1500 02"),  # version cut to 1 byte
    ),
]
BAD_PARAMS = [pytest.param(v, id=v.name) for v in BAD_VECTORS]


@pytest.mark.parametrize("vector", BAD_PARAMS)
def test_parse_payload_rejects(vector: BadVector) -> None:
    with pytest.raises(MalformedPayloadError) as excinfo:
        parse_payload(vector.message_type, vector.wire)
    assert excinfo.value.message_type == vector.message_type


@pytest.mark.parametrize("vector", BAD_PARAMS)
def test_parse_payload_spec_rejects(vector: BadVector) -> None:
    with pytest.raises(MalformedPayloadError) as excinfo:
        parse_payload_spec(vector.message_type, vector.wire)
    assert excinfo.value.message_type == vector.message_type


@pytest.mark.parametrize("vector", BAD_PARAMS)
def test_bad_frame_leaves_stream_in_step(vector: BadVector) -> None:
    header = (
        PING_GUID
        + bytes((vector.message_type, 1, 0))  # the vector's type, TTL 1, hops 0
        + len(vector.wire).to_bytes(4, "little")
    )
    decoder = FrameDecoder()
    frames = decoder.receive_data(header + vector.wire + STREAM)
    assert len(frames) == 4
    with pytest.raises(MalformedPayloadError):
        frames[0].message()
    assert [frame.message() for frame in frames[1:]] == STREAM_MESSAGES


# ---------------------------------------------------------------------------------------
# Records the wire cannot carry: both builders must refuse them


BUILDERS = [
    pytest.param(build_payload, id="build_payload"),
    pytest.param(build_payload_spec, id="build_payload_spec"),
]


@pytest.mark.parametrize("build", BUILDERS)
def test_builders_refuse_nul_inside_a_result_extension_block(
    build: Callable[[Payload], bytes],
) -> None:
    # The same hit as QUERY_HIT_COBS with the creation time left raw: built as is, the
    # result's extension block would read c3 82 4354 44 00 0fe565 00, whose first NUL
    # ends the block for any servent that scans for it (spec 2.2.6: "the extensions
    # block itself MUST NOT contain any null bytes").
    raw_time = ggep(GGEPExtension("CT", (1709510400).to_bytes(4, "little")))
    record = QueryHit(
        port=16347,
        ip="127.0.0.1",
        speed=16,
        results=(QueryHitResult(1, 11, b"a", (raw_time,)),),
        servent_guid=OTHER_SERVENT,
    )
    with pytest.raises(LocalProtocolError):
        build(record)


GGEP_FIRST = [
    pytest.param(
        Query(b"interop", extensions=(ggep(GGEPExtension("NP")), HugeExtension(SHA1_EMPTY))),
        id="query",
    ),
    pytest.param(
        QueryHit(
            port=16347,
            ip="127.0.0.1",
            speed=16,
            results=(
                QueryHitResult(
                    1, 11, b"a", (ggep(GGEPExtension("CT", b"\x01")), HugeExtension(SHA1_EMPTY))
                ),
            ),
            servent_guid=OTHER_SERVENT,
        ),
        id="query-hit-result",
    ),
]


@pytest.mark.parametrize("build", BUILDERS)
@pytest.mark.parametrize("record", GGEP_FIRST)
def test_builders_refuse_ggep_before_huge(
    build: Callable[[Payload], bytes], record: Payload
) -> None:
    # Spec 2.2.5 and 2.2.6: GGEP data may hold 0x1C, so the GGEP block MUST come after
    # any HUGE and XML blocks.
    with pytest.raises(LocalProtocolError):
        build(record)


ZERO_PADDED_ADDRESSES = [
    pytest.param(Pong(16346, "127.000.000.001"), id="pong"),
    pytest.param(Push(GTKG_SERVENT, 258, "192.168.001.020", 6346), id="push"),
]


@pytest.mark.parametrize("build", BUILDERS)
@pytest.mark.parametrize("record", ZERO_PADDED_ADDRESSES)
def test_builders_agree_on_zero_padded_ipv4(
    build: Callable[[Payload], bytes], record: Payload
) -> None:
    # A leading zero reads as octal to inet_aton ("020" is 16), so such a dotted quad is
    # ambiguous; the declaration refuses it and the fast encoders must too.
    with pytest.raises(LocalProtocolError):
        build(record)
