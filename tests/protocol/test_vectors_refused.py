"""Negative vectors and records the wire cannot carry: each broken payload must be
refused by both parsers (and leave a stream in step), and each impossible record by both
builders, alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import pytest

from protocol.codec import (
    build_payload,
    build_payload_spec,
    parse_payload,
    parse_payload_spec,
)
from protocol.errors import LocalProtocolError, MalformedPayloadError
from protocol.framing import FrameDecoder
from protocol.ggep import GGEPExtension
from protocol.messages import (
    HugeExtension,
    Payload,
    Pong,
    Push,
    Query,
    QueryHit,
    QueryHitResult,
)
from tests.support.wire_vectors import (
    GTKG_SERVENT,
    OTHER_SERVENT,
    PING_GUID,
    SHA1_EMPTY,
    STREAM,
    STREAM_MESSAGES,
    ggep,
)


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
