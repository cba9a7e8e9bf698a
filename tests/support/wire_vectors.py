"""Known-answer vectors for every Gnutella 0.6 message, typed by hand from the specification.

Every expected byte string below is written out field by field from the Gnutella 0.6
draft (header 2.2.1, ping 2.2.2, pong 2.2.3, query 2.2.5, query hit 2.2.6, push 2.2.8,
bye 2.2.9), the GGEP document, the QRP document and the vendor-message document, and
shaped after what gtk-gnutella 1.2.3 sent on loopback (lengths 7, 36, 19 and 90 below
are the lengths it used). None of them is produced by the code under test.

Byte order: every multi-byte integer is little-endian except IPv4 addresses (network
order) and a modern query's flags word, which the records keep as read big-endian.

The vectors stand apart from the tests that check them (``tests/protocol/test_vectors.py``
and ``test_vectors_refused.py``), which share them: the bytes, their typed records and a
whole stream made of them.
"""

from __future__ import annotations

from typing import NamedTuple

import pytest

from protocol.ggep import GGEPBlock, GGEPExtension
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
    QueryHit,
    QueryHitDescriptor,
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
