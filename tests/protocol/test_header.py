"""The struct fast path for the header, held to the construct declaration."""

from __future__ import annotations

import struct

import pytest
from construct import ConstructError
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.constants import HEADER_SIZE
from protocol.errors import LocalProtocolError
from protocol.header import HEADER_FIELDS, HEADER_STRUCT, decode_header, encode_header
from protocol.spec import Header


def test_format_is_derived_from_the_declaration() -> None:
    assert HEADER_STRUCT.format == "<16sBBBL"
    assert HEADER_STRUCT.size == Header.sizeof() == HEADER_SIZE
    assert HEADER_FIELDS == ("guid", "payload_type", "ttl", "hops", "payload_length")


@given(st.binary(max_size=2 * HEADER_SIZE), st.integers(0, 8))
@settings(max_examples=500)
def test_decode_agrees_with_spec_on_any_bytes(data: bytes, offset: int) -> None:
    try:
        fast: tuple[object, ...] | None = decode_header(data, offset)
    except struct.error:
        fast = None
    try:
        parsed = Header.parse(data[offset:])
        spec: tuple[object, ...] | None = tuple(parsed[name] for name in HEADER_FIELDS)
    except ConstructError:
        spec = None
    assert fast == spec
    assert (fast is None) == (len(data) - offset < HEADER_SIZE)


field_values = st.integers(-2, 0x1_0000_0001)


@given(st.binary(min_size=14, max_size=18), field_values, field_values, field_values, field_values)
@settings(max_examples=500)
def test_encode_agrees_with_spec_on_any_values(
    guid: bytes, payload_type: int, ttl: int, hops: int, length: int
) -> None:
    try:
        fast: bytes | None = encode_header(guid, payload_type, ttl, hops, length)
    except LocalProtocolError:
        fast = None
    try:
        spec: bytes | None = Header.build(
            {
                "guid": guid,
                "payload_type": payload_type,
                "ttl": ttl,
                "hops": hops,
                "payload_length": length,
            }
        )
    except ConstructError:
        spec = None
    assert fast == spec


def test_known_header() -> None:
    guid = bytes.fromhex("00112233445566778899aabbccddeeff")
    wire = guid + bytes.fromhex("80 07 00 0a000000")
    assert decode_header(wire) == (guid, 0x80, 7, 0, 10)
    assert encode_header(guid, 0x80, 7, 0, 10) == wire


def test_encode_rejects_wrong_guid_size() -> None:
    with pytest.raises(LocalProtocolError, match="16 bytes"):
        encode_header(b"x" * 15, 0, 1, 0, 0)


def test_the_field_offsets_are_where_an_encoded_header_puts_them() -> None:
    from protocol.header import HOPS_OFFSET, PAYLOAD_OFFSET, TTL_OFFSET, TYPE_OFFSET, encode_header

    data = encode_header(bytes(range(16)), 0x80, 5, 9, 3) + b"abc"
    assert (data[TYPE_OFFSET], data[TTL_OFFSET], data[HOPS_OFFSET]) == (0x80, 5, 9)
    assert data[PAYLOAD_OFFSET:] == b"abc"
    assert (TYPE_OFFSET, TTL_OFFSET, HOPS_OFFSET, PAYLOAD_OFFSET) == (16, 17, 18, 23)
