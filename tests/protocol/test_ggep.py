"""GGEP codec: hand-made vectors from the spec, round trips, and hostile input.

Every expected byte string below is typed from the GGEP 0.51 document (flags layout,
length chunks, COBS) rather than produced by the code under test.
"""

from __future__ import annotations

import contextlib
import tracemalloc
import zlib
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.errors import LocalProtocolError, MalformedPayloadError
from protocol.ggep import (
    GGEP_MAGIC,
    MAX_EXTENSION_DATA,
    MAX_INFLATED_SIZE,
    GGEPBlock,
    GGEPExtension,
    UltrapeerSlots,
    VendorCode,
    build_ggep,
    cobs_decode,
    cobs_encode,
    daily_uptime,
    daily_uptime_extension,
    packed_hosts,
    packed_hosts_extension,
    parse_ggep,
    parse_ggep_exact,
    ultrapeer_slots,
    ultrapeer_slots_extension,
    vendor_code,
    vendor_code_extension,
)

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def block(*extensions: GGEPExtension) -> GGEPBlock:
    return GGEPBlock(tuple(extensions))


def assert_both_ways(wire: bytes, expected: GGEPBlock) -> None:
    assert parse_ggep(wire) == (expected, len(wire))
    assert build_ggep(expected) == wire


# ---------------------------------------------------------------------------------------
# Constants


def test_constants() -> None:
    assert GGEP_MAGIC == 0xC3
    assert MAX_EXTENSION_DATA == 262143  # 0xbfbf7f in the spec's boundary cases
    assert MAX_INFLATED_SIZE == 65536


# ---------------------------------------------------------------------------------------
# Known-answer vectors


def test_single_small_extension_du_3600() -> None:
    # flags 0x82 = last | ID length 2; "DU"; length 0x42 = last chunk, 2; 3600 = 0x0E10 LE.
    wire = bytes.fromhex("c3 82 4455 42 100e")
    parsed = parse_ggep_exact(wire)
    assert parsed == block(GGEPExtension("DU", b"\x10\x0e"))
    assert daily_uptime(parsed) == 3600
    assert build_ggep(parsed) == wire
    assert build_ggep(block(daily_uptime_extension(3600))) == wire


def test_multi_extension_last_bit_only_on_last() -> None:
    # "GUE" (flags 0x03, not last) with one byte, then "VC" (flags 0x82, last).
    wire = bytes.fromhex("c3 03 475545 41 01 82 5643 45 47544b47 12")
    expected = block(GGEPExtension("GUE", b"\x01"), GGEPExtension("VC", b"GTKG\x12"))
    assert_both_ways(wire, expected)
    parsed = parse_ggep_exact(wire)
    assert parsed.ids() == ("GUE", "VC")
    assert "VC" in parsed
    assert "UP" not in parsed
    assert 42 not in parsed
    assert parsed.get("GUE") == GGEPExtension("GUE", b"\x01")
    assert parsed.get("XX") is None
    assert vendor_code(parsed) == VendorCode("GTKG", 0x12)


def test_three_extensions_flags() -> None:
    wire = bytes.fromhex("c3 01 41 40 01 42 40 81 43 40")
    expected = block(GGEPExtension("A"), GGEPExtension("B"), GGEPExtension("C"))
    assert_both_ways(wire, expected)


@pytest.mark.parametrize(
    ("size", "length_bytes"),
    [
        (63, "7f"),
        (64, "8140"),
        (4095, "bf7f"),
        (4096, "818040"),
        (MAX_EXTENSION_DATA, "bfbf7f"),
    ],
)
def test_length_encoding_boundaries(size: int, length_bytes: str) -> None:
    data = bytes([0xAB]) * size
    wire = bytes.fromhex("c3 81 58" + length_bytes) + data
    assert_both_ways(wire, block(GGEPExtension("X", data)))


def test_zero_length_extension() -> None:
    wire = bytes.fromhex("c3 81 58 40")
    assert_both_ways(wire, block(GGEPExtension("X")))


def test_cobs_encoded_extension() -> None:
    # 11 00 22 -> code 02 covers "11" then a NUL, final code 02 covers "22".
    # flags 0xC1 = last | COBS | ID length 1; length 4.
    wire = bytes.fromhex("c3 c1 58 44 02110222")
    assert_both_ways(wire, block(GGEPExtension("X", b"\x11\x00\x22", cobs=True)))


def test_deflated_extension() -> None:
    data = b"ultrapeer ultrapeer ultrapeer ultrapeer ultrapeer"
    deflated = zlib.compress(data)
    assert len(deflated) < 64
    # flags 0xA1 = last | deflate | ID length 1.
    wire = bytes.fromhex("c3 a1 58") + bytes([0x40 | len(deflated)]) + deflated
    assert_both_ways(wire, block(GGEPExtension("X", data, compressed=True)))


def test_deflated_then_cobs_extension() -> None:
    data = bytes(200)
    deflated = zlib.compress(data)
    # The deflated form has NULs, which is why a sender would stuff it. COBS it by hand:
    # each NUL-free segment (all far below 254 bytes) becomes its length + 1, then itself.
    assert b"\x00" in deflated
    assert len(deflated) < 60
    stuffed = b"".join(bytes([len(seg) + 1]) + seg for seg in deflated.split(b"\x00"))
    wire = bytes.fromhex("c3 e1 58") + bytes([0x40 | len(stuffed)]) + stuffed
    assert_both_ways(wire, block(GGEPExtension("X", data, compressed=True, cobs=True)))


def test_zero_length_with_flags_is_empty_data() -> None:
    # Nothing to decode: read as empty, the way gtk-gnutella does, not as an error.
    wire = bytes.fromhex("c3 e1 58 40")
    parsed = parse_ggep_exact(wire)
    assert parsed == block(GGEPExtension("X", b"", compressed=True, cobs=True))


def test_non_minimal_length_is_accepted() -> None:
    wire = bytes.fromhex("c3 81 58 8042 aabb")
    assert parse_ggep_exact(wire) == block(GGEPExtension("X", b"\xaa\xbb"))


def test_latin1_id_round_trip() -> None:
    wire = bytes.fromhex("c3 82 ff01 40")
    assert_both_ways(wire, block(GGEPExtension("\xff\x01")))


def test_duplicate_ids_get_returns_first() -> None:
    wire = bytes.fromhex("c3 01 58 41 01 81 58 41 02")
    parsed = parse_ggep_exact(wire)
    assert parsed.get("X") == GGEPExtension("X", b"\x01")
    assert parsed.ids() == ("X", "X")


def test_offset_and_trailing_bytes() -> None:
    ggep = bytes.fromhex("c3 82 4455 42 100e")
    buf = b"\x01\x02\x03\x04" + ggep + b"\x1cmore stuff"
    parsed, end = parse_ggep(buf, 4)
    assert end == 4 + len(ggep)
    assert buf[end:] == b"\x1cmore stuff"
    assert daily_uptime(parsed) == 3600
    # Two blocks back to back, as the spec allows in an extension area.
    second = bytes.fromhex("c3 81 58 40")
    first_block, mid = parse_ggep(ggep + second)
    second_block, end = parse_ggep(ggep + second, mid)
    assert (mid, end) == (len(ggep), len(ggep) + len(second))
    assert second_block == block(GGEPExtension("X"))
    assert first_block == parsed


@pytest.mark.parametrize("kind", [bytearray, memoryview])
def test_accepts_bytearray_and_memoryview(kind: type[bytearray] | type[memoryview]) -> None:
    wire = bytes.fromhex("c3 82 4455 42 100e")
    assert parse_ggep(kind(wire)) == (block(GGEPExtension("DU", b"\x10\x0e")), len(wire))
    assert daily_uptime(parse_ggep_exact(kind(wire))) == 3600


# ---------------------------------------------------------------------------------------
# COBS vectors


@pytest.mark.parametrize(
    ("plain", "encoded"),
    [
        (b"", b"\x01"),
        (b"\x00", b"\x01\x01"),
        (b"\x00\x00", b"\x01\x01\x01"),
        (b"\x11\x22\x00\x33", b"\x03\x11\x22\x02\x33"),
        (b"\x11\x22\x33\x44", b"\x05\x11\x22\x33\x44"),
        (b"\x11\x00\x00\x00", b"\x02\x11\x01\x01\x01"),
        # A full 254-byte block carries no trailing code (the gtk-gnutella flavour).
        (b"\x01" * 254, b"\xff" + b"\x01" * 254),
        (b"\x01" * 254 + b"\x00", b"\xff" + b"\x01" * 254 + b"\x01\x01"),
        (b"\x01" * 255, b"\xff" + b"\x01" * 254 + b"\x02\x01"),
        (b"\x00" + b"\x01" * 254, b"\x01\xff" + b"\x01" * 254),
    ],
)
def test_cobs_vectors(plain: bytes, encoded: bytes) -> None:
    assert cobs_encode(plain) == encoded
    assert cobs_decode(encoded) == plain


@pytest.mark.parametrize(
    "bad",
    [
        b"",  # no encoder produces nothing
        b"\x00",
        b"\x02\x11\x00",
        b"\x03\x11",  # code runs past the end
        b"\xff\x01",
    ],
)
def test_cobs_decode_rejects(bad: bytes) -> None:
    with pytest.raises(MalformedPayloadError):
        cobs_decode(bad)


_runs = st.integers(min_value=250, max_value=600).map(lambda n: b"\x5a" * n)
_cobs_input = st.lists(
    st.one_of(st.binary(max_size=40), _runs, st.just(b"\x00"), st.just(b"\x00\x00")),
    max_size=6,
).map(b"".join)


@FAST
@given(_cobs_input)
def test_cobs_round_trip(data: bytes) -> None:
    encoded = cobs_encode(data)
    assert b"\x00" not in encoded
    assert len(encoded) <= len(data) + len(data) // 254 + 1
    assert cobs_decode(encoded) == data


@FAST
@given(st.binary(max_size=600))
def test_cobs_decode_only_raises_malformed(data: bytes) -> None:
    with contextlib.suppress(MalformedPayloadError):
        cobs_decode(data)


# ---------------------------------------------------------------------------------------
# Accessors on hand-made bytes


def test_vendor_code_gtkg() -> None:
    parsed = parse_ggep_exact(bytes.fromhex("c3 82 5643 45 47544b47 12"))
    vc = vendor_code(parsed)
    assert vc == VendorCode("GTKG", 0x12)
    assert vc is not None
    assert (vc.major, vc.minor) == (1, 2)
    assert vendor_code_extension("GTKG", 0x12) == GGEPExtension("VC", b"GTKG\x12")


def test_packed_hosts_two() -> None:
    # 192.168.0.1:6346 then 10.0.0.2:6347; ports little-endian (6346 = 0x18CA).
    wire = bytes.fromhex("c3 83 495050 4c c0a80001 ca18 0a000002 cb18")
    parsed = parse_ggep_exact(wire)
    hosts = (("192.168.0.1", 6346), ("10.0.0.2", 6347))
    assert packed_hosts(parsed) == hosts
    assert packed_hosts(parsed, "PUSH") is None
    assert build_ggep(block(packed_hosts_extension(hosts))) == wire


def test_packed_hosts_other_id_and_empty() -> None:
    parsed = parse_ggep_exact(bytes.fromhex("c3 84 50555348 46 7f000001 0100"))
    assert packed_hosts(parsed, "PUSH") == (("127.0.0.1", 1),)
    assert packed_hosts(parse_ggep_exact(bytes.fromhex("c3 83 495050 40"))) == ()


def test_ultrapeer_slots() -> None:
    wire = bytes.fromhex("c3 82 5550 43 01 2d 04")
    parsed = parse_ggep_exact(wire)
    assert ultrapeer_slots(parsed) == UltrapeerSlots(version=1, leaf_slots=45, ultrapeer_slots=4)
    assert build_ggep(block(ultrapeer_slots_extension(1, 45, 4))) == wire


@pytest.mark.parametrize(
    ("seconds", "data"),
    [
        (0, b"\x00"),
        (255, b"\xff"),
        (256, b"\x00\x01"),
        (3600, b"\x10\x0e"),
        (2**32 - 1, b"\xff" * 4),
    ],
)
def test_daily_uptime_minimal_encoding(seconds: int, data: bytes) -> None:
    ext = daily_uptime_extension(seconds)
    assert ext == GGEPExtension("DU", data)
    assert daily_uptime(block(ext)) == seconds


def test_daily_uptime_non_minimal_accepted() -> None:
    assert daily_uptime(block(GGEPExtension("DU", b"\x10\x0e\x00\x00"))) == 3600


def test_accessors_absent() -> None:
    parsed = block(GGEPExtension("X"))
    assert daily_uptime(parsed) is None
    assert packed_hosts(parsed) is None
    assert ultrapeer_slots(parsed) is None
    assert vendor_code(parsed) is None


def test_accessors_ignore_trailing_bytes_of_up_and_vc() -> None:
    assert ultrapeer_slots(block(GGEPExtension("UP", b"\x01\x02\x03\x04"))) == UltrapeerSlots(
        1, 2, 3
    )
    assert vendor_code(block(GGEPExtension("VC", b"LIME\x45xx"))) == VendorCode("LIME", 0x45)


@pytest.mark.parametrize(
    ("ext", "accessor"),
    [
        (GGEPExtension("DU", b""), daily_uptime),
        (GGEPExtension("DU", b"\x01\x02\x03\x04\x05"), daily_uptime),
        (GGEPExtension("IPP", b"\x01\x02\x03\x04\x05\x06\x07"), packed_hosts),
        (GGEPExtension("IPP", b"\x01\x02\x03\x04\x05"), packed_hosts),
        (GGEPExtension("UP", b"\x01\x02"), ultrapeer_slots),
        (GGEPExtension("VC", b"GTKG"), vendor_code),
        (GGEPExtension("VC", b""), vendor_code),
    ],
)
def test_accessors_malformed(ext: GGEPExtension, accessor: Callable[[GGEPBlock], object]) -> None:
    with pytest.raises(MalformedPayloadError):
        accessor(block(ext))


@pytest.mark.parametrize(
    "make",
    [
        lambda: daily_uptime_extension(-1),
        lambda: daily_uptime_extension(2**32),
        lambda: packed_hosts_extension([("300.1.1.1", 1)]),
        lambda: packed_hosts_extension([("::1", 1)]),
        lambda: packed_hosts_extension([("1.2.3.4", 65536)]),
        lambda: packed_hosts_extension([("1.2.3.4", -1)]),
        lambda: packed_hosts_extension([], ext_id=""),
        lambda: ultrapeer_slots_extension(256, 0, 0),
        lambda: ultrapeer_slots_extension(0, -1, 0),
        lambda: ultrapeer_slots_extension(0, 0, 256),
        lambda: vendor_code_extension("GTK", 1),
        lambda: vendor_code_extension("GTKGX", 1),
        lambda: vendor_code_extension("GTK€", 1),
        lambda: vendor_code_extension("GTKG", 256),
    ],
)
def test_accessor_builders_reject(make: Callable[[], object]) -> None:
    with pytest.raises(LocalProtocolError):
        make()


@FAST
@given(
    st.lists(st.tuples(st.ip_addresses(v=4).map(str), st.integers(0, 0xFFFF)), max_size=20).map(
        tuple
    )
)
def test_packed_hosts_round_trip(hosts: tuple[tuple[str, int], ...]) -> None:
    wire = build_ggep(block(packed_hosts_extension(hosts)))
    assert packed_hosts(parse_ggep_exact(wire)) == hosts


@FAST
@given(st.integers(0, 2**32 - 1))
def test_daily_uptime_round_trip(seconds: int) -> None:
    ext = daily_uptime_extension(seconds)
    assert len(ext.data) == max(1, (seconds.bit_length() + 7) // 8)
    assert daily_uptime(parse_ggep_exact(build_ggep(block(ext)))) == seconds


# ---------------------------------------------------------------------------------------
# Malformed blocks


@pytest.mark.parametrize(
    "wire",
    [
        pytest.param("", id="empty"),
        pytest.param("c2 81 58 40", id="bad-magic"),
        pytest.param("c3", id="magic-only-no-extensions"),
        pytest.param("c3 82 44", id="truncated-id"),
        pytest.param("c3 81 58", id="truncated-before-length"),
        pytest.param("c3 81 58 81", id="truncated-inside-length"),
        pytest.param("c3 81 58 45 0102", id="data-past-end"),
        pytest.param("c3 01 58 40", id="non-last-then-end"),
        pytest.param("c3 91 58 40", id="reserved-bit"),
        pytest.param("c3 80 40", id="zero-length-id"),
        pytest.param("c3 82 4400 40", id="nul-in-id"),
        pytest.param("c3 81 58 c0 41 00", id="length-both-bits"),
        pytest.param("c3 81 58 00 41 00", id="length-neither-bit"),
        pytest.param("c3 81 58 80 00 40", id="length-second-byte-neither-bit"),
        pytest.param("c3 81 58 808080 40", id="four-length-bytes"),
        pytest.param("c3 c1 58 42 0100", id="cobs-with-nul"),
        pytest.param("c3 c1 58 41 05", id="cobs-code-past-end"),
        pytest.param("c3 a1 58 43 010203", id="corrupt-zlib"),
        pytest.param("c3 e1 58 42 0201", id="cobs-ok-zlib-corrupt"),
    ],
)
def test_malformed(wire: str) -> None:
    with pytest.raises(MalformedPayloadError):
        parse_ggep(bytes.fromhex(wire))
    with pytest.raises(MalformedPayloadError):
        parse_ggep_exact(bytes.fromhex(wire))


def test_truncated_zlib_stream() -> None:
    deflated = zlib.compress(b"some data that is long enough " * 3)[:-3]
    wire = bytes.fromhex("c3 a1 58") + bytes([0x40 | len(deflated)]) + deflated
    with pytest.raises(MalformedPayloadError):
        parse_ggep(wire)


def test_bytes_after_the_deflate_stream_are_ignored() -> None:
    deflated = zlib.compress(b"abc") + b"\x01\x02"
    wire = bytes.fromhex("c3 a1 58") + bytes([0x40 | len(deflated)]) + deflated
    assert parse_ggep_exact(wire) == block(GGEPExtension("X", b"abc", compressed=True))


def test_trailing_bytes_rejected_by_exact() -> None:
    wire = bytes.fromhex("c3 81 58 40")
    with pytest.raises(MalformedPayloadError):
        parse_ggep_exact(wire + b"\x00")
    assert parse_ggep(wire + b"\x00") == (block(GGEPExtension("X")), len(wire))


@pytest.mark.parametrize("offset", [-1, -4, 4, 5, 100])
def test_offset_out_of_range(offset: int) -> None:
    # A negative offset must not wrap around to the magic byte at the end.
    with pytest.raises(MalformedPayloadError):
        parse_ggep(bytes.fromhex("81 58 40 c3"), offset)


def test_inflate_bomb_refused_without_inflating_it() -> None:
    bomb = zlib.compress(bytes(1 << 20))
    wire = bytes.fromhex("c3 a1 58") + bytes((0x80 | len(bomb) >> 6, 0x40 | len(bomb) & 0x3F))
    wire += bomb
    assert 64 <= len(bomb) < 4096
    tracemalloc.start()
    try:
        with pytest.raises(MalformedPayloadError, match="inflates past"):
            parse_ggep(wire)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * MAX_INFLATED_SIZE


def test_inflated_size_exactly_at_the_limit_is_accepted() -> None:
    data = bytes(MAX_INFLATED_SIZE)
    wire = build_ggep(block(GGEPExtension("X", data, compressed=True)))
    assert parse_ggep_exact(wire).extensions[0].data == data
    wire = build_ggep(block(GGEPExtension("X", data + b"\x00", compressed=True)))
    with pytest.raises(MalformedPayloadError):
        parse_ggep_exact(wire)


# ---------------------------------------------------------------------------------------
# Invalid builds


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(GGEPBlock(()), id="no-extensions"),
        pytest.param(block(GGEPExtension("")), id="empty-id"),
        pytest.param(block(GGEPExtension("X" * 16)), id="id-too-long"),
        pytest.param(block(GGEPExtension("A\x00")), id="nul-in-id"),
        pytest.param(block(GGEPExtension("€")), id="id-not-latin1"),
        pytest.param(block(GGEPExtension("X", bytes(MAX_EXTENSION_DATA + 1))), id="too-long"),
        pytest.param(
            block(GGEPExtension("X", b"\x01" * MAX_EXTENSION_DATA, cobs=True)),
            id="too-long-after-cobs",
        ),
        pytest.param(block(GGEPExtension("A"), GGEPExtension("B" * 16)), id="second-extension-bad"),
    ],
)
def test_invalid_build(bad: GGEPBlock) -> None:
    with pytest.raises(LocalProtocolError):
        build_ggep(bad)


def test_id_of_fifteen_bytes_is_fine() -> None:
    wire = build_ggep(block(GGEPExtension("X" * 15)))
    assert wire == bytes.fromhex("c3 8f") + b"X" * 15 + b"\x40"


# ---------------------------------------------------------------------------------------
# Round trips and robustness

_ids = st.text(alphabet=st.characters(min_codepoint=1, max_codepoint=255), min_size=1, max_size=15)
_data = st.one_of(
    st.binary(max_size=80),
    _runs,
    st.integers(60, 5000).map(lambda n: bytes(range(256)) * (n // 256) + bytes(n % 256)),
)
_extensions = st.builds(GGEPExtension, _ids, _data, st.booleans(), st.booleans())
_blocks = st.lists(_extensions, min_size=1, max_size=5).map(lambda exts: GGEPBlock(tuple(exts)))


@FAST
@given(_blocks)
def test_build_parse_round_trip(original: GGEPBlock) -> None:
    wire = build_ggep(original)
    parsed, end = parse_ggep(wire)
    assert end == len(wire)
    assert parsed == original
    assert build_ggep(parsed) == wire
    # Only the last extension announces itself as last.
    assert parse_ggep_exact(wire) == original


@FAST
@given(_blocks, st.binary(max_size=8), st.binary(max_size=8))
def test_round_trip_inside_a_larger_buffer(
    original: GGEPBlock, prefix: bytes, suffix: bytes
) -> None:
    wire = build_ggep(original)
    parsed, end = parse_ggep(prefix + wire + suffix, len(prefix))
    assert parsed == original
    assert end == len(prefix) + len(wire)


def _parse_or_malformed(data: bytes) -> None:
    try:
        _, end = parse_ggep(data)
    except MalformedPayloadError:
        pass
    else:
        assert 0 < end <= len(data)
    with contextlib.suppress(MalformedPayloadError):
        parse_ggep_exact(data)


@FAST
@given(st.binary(max_size=200))
def test_arbitrary_bytes(data: bytes) -> None:
    _parse_or_malformed(data)


@FAST
@given(st.binary(max_size=200))
def test_arbitrary_bytes_after_magic(data: bytes) -> None:
    _parse_or_malformed(bytes((GGEP_MAGIC,)) + data)


@FAST
@given(_blocks, st.data())
def test_mutated_valid_blocks(original: GGEPBlock, data: st.DataObject) -> None:
    wire = bytearray(build_ggep(original))
    for _ in range(data.draw(st.integers(1, 3))):
        index = data.draw(st.integers(0, len(wire) - 1))
        wire[index] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(wire)))
    _parse_or_malformed(bytes(wire[:cut]))
    _parse_or_malformed(bytes(wire))
