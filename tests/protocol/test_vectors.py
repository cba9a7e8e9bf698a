"""Known-answer tests for every Gnutella 0.6 message, against the vectors typed by hand
from the specification in ``tests/support/wire_vectors.py`` (where and how each was
written is told there; none is produced by the code under test).

Each payload vector is checked four ways: both parsers (the fast ``struct`` path and the
construct declaration) must yield the typed record, and both builders must give the
bytes back exactly. Headers are checked both ways and through the framer, and a whole
stream is decoded in one piece and byte by byte. The vectors each parser must refuse
are in ``test_vectors_refused.py``.
"""

from __future__ import annotations

import zlib

import pytest

from protocol.codec import (
    build_payload,
    build_payload_spec,
    encode_message,
    parse_payload,
    parse_payload_spec,
)
from protocol.constants import MessageType
from protocol.framing import Frame, FrameDecoder
from protocol.ggep import GGEPExtension
from protocol.header import decode_header, encode_header
from protocol.messages import (
    QrpPatch,
    Query,
    QueryFlags,
    QueryHit,
    QueryHitDescriptor,
    QueryHitFlag,
    VendorMessage,
)
from tests.support.wire_vectors import (
    GTKG_SERVENT,
    HEADER_PARAMS,
    OTHER_SERVENT,
    PARAMS,
    QRP_PATCH,
    QUERY_EXTENSIONS,
    QUERY_HIT_BARE,
    QUERY_HIT_GTKG,
    QUERY_LEGACY_SPEED_0,
    QUERY_LEGACY_SPEED_64,
    QUERY_MODERN,
    STANDARD_VENDOR,
    STREAM,
    STREAM_MESSAGES,
    HeaderVector,
    Vector,
    ggep,
)


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
