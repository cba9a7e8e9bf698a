"""Deflate link streams: interoperable with plain zlib, bounded when inflating."""

from __future__ import annotations

import random
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.compression import (
    DEFAULT_DEFLATE_LEVEL,
    STORED_UP_TO,
    DeflateCompressor,
    DeflateDecompressor,
    zlib_header,
)
from protocol.errors import CompressionError


def drain(decompressor: DeflateDecompressor) -> bytes:
    out = b""
    while chunk := decompressor.read():
        assert len(chunk) <= decompressor.max_output
        out += chunk
    assert not decompressor.has_pending
    return out


@given(st.lists(st.binary(max_size=300), max_size=10), st.integers(1, 64))
@settings(max_examples=200)
def test_every_write_is_readable_at_once(writes: list[bytes], max_output: int) -> None:
    compressor = DeflateCompressor()
    decompressor = DeflateDecompressor(max_output=max_output)
    for data in writes:
        decompressor.receive_data(compressor.compress(data))
        assert drain(decompressor) == data


@given(st.binary(max_size=2000), st.lists(st.integers(0, 3000), max_size=10))
@settings(max_examples=100)
def test_reads_plain_zlib_in_any_chunking(data: bytes, cuts: list[int]) -> None:
    wire = zlib.compress(data)
    points = [*sorted({c % (len(wire) + 1) for c in cuts}), len(wire)]
    decompressor = DeflateDecompressor(max_output=100)
    out, last = b"", 0
    for point in points:
        decompressor.receive_data(wire[last:point])
        out += drain(decompressor)
        last = point
    assert out == data


def test_output_is_plain_zlib_with_sync_flush() -> None:
    compressor = DeflateCompressor()
    first = compressor.compress(b"hello ")
    assert first.endswith(b"\x00\x00\xff\xff")
    reference = zlib.decompressobj()
    assert reference.decompress(first) == b"hello "
    assert reference.decompress(compressor.compress(b"world")) == b"world"
    assert compressor.bytes_in == 11
    assert compressor.ratio > 0


def test_a_bomb_is_inflated_in_bounded_pieces() -> None:
    bomb = zlib.compress(b"\x00" * (20 * 1024 * 1024), 9)
    assert len(bomb) < 30_000
    decompressor = DeflateDecompressor(max_output=64 * 1024, max_ratio=0)  # no cap here
    decompressor.receive_data(bomb)
    first = decompressor.read()
    assert len(first) == 64 * 1024
    assert decompressor.has_pending
    total = len(first)
    while chunk := decompressor.read():
        total += len(chunk)
    assert total == 20 * 1024 * 1024


def test_corrupt_stream_raises_compression_error() -> None:
    decompressor = DeflateDecompressor()
    # 0xff opens a final block of the reserved type 11, which no inflater accepts.
    decompressor.receive_data(b"\x78\x9c\xff\xff\xff\xff")
    with pytest.raises(CompressionError) as info:
        drain(decompressor)
    assert not info.value.resynchronisable


def test_data_after_a_finished_stream_is_refused() -> None:
    decompressor = DeflateDecompressor()
    decompressor.receive_data(zlib.compress(b"done") + b"extra")
    with pytest.raises(CompressionError, match="after the end"):
        drain(decompressor)


@pytest.mark.parametrize("level", range(-1, 10))
def test_the_header_is_the_one_zlib_writes(level: int) -> None:
    assert zlib_header(level) == zlib.compressobj(level).flush()[:2]


@given(st.lists(st.binary(min_size=STORED_UP_TO + 1, max_size=4000), min_size=1, max_size=6))
@settings(max_examples=50)
def test_a_deflated_stream_is_zlibs_own_byte_for_byte(writes: list[bytes]) -> None:
    """Header written here, raw deflate behind it: what zlib's wrapper would send, at
    the default level and at others (the header's level hint included)."""
    for level in (DEFAULT_DEFLATE_LEVEL, 3, 6, 9):
        compressor = DeflateCompressor(level)
        reference = zlib.compressobj(level)
        for data in writes:
            assert compressor.compress(data) == reference.compress(data) + reference.flush(
                zlib.Z_SYNC_FLUSH
            )


WRITE_SIZES = st.sampled_from([0, 1, 100, STORED_UP_TO, STORED_UP_TO + 1, 5000, 70_000])


@given(st.lists(st.tuples(WRITE_SIZES, st.integers(0, 2), st.randoms()), min_size=1, max_size=12))
@settings(max_examples=150)
def test_one_zlib_stream_through_stored_writes_and_released_deflaters(
    steps: list[tuple[int, int, random.Random]],
) -> None:
    """Whatever mix of small writes, large ones and idle periods (0, 1 or 2 checks),
    a plain zlib inflater reads every write as soon as it arrives, each ending as a
    sync flush does; a deflater is held only from a large write to the second check
    without writes."""
    compressor = DeflateCompressor()
    peer = zlib.decompressobj()
    for size, idle_checks, rnd in steps:
        data = bytes(rnd.choice(b"gnutella query hit ") for _ in range(size))
        held_before = compressor.holds_state
        wire = compressor.compress(data)
        assert wire.endswith(b"\x00\x00\xff\xff")
        assert peer.decompress(wire) == data
        assert compressor.holds_state == (held_before or size > STORED_UP_TO)
        for _ in range(idle_checks):
            compressor.release_if_idle()
        if idle_checks == 2:
            assert not compressor.holds_state
    assert not peer.eof


def test_an_inflater_is_made_only_when_data_arrives() -> None:
    decompressor = DeflateDecompressor()
    decompressor.receive_data(b"")
    assert decompressor.read() == b""
    assert not decompressor.holds_state
    decompressor.receive_data(zlib.compress(b"first"))
    assert decompressor.holds_state
    assert drain(decompressor) == b"first"


def test_a_stream_inflating_past_its_ratio_is_refused_as_a_bomb() -> None:
    import zlib

    import pytest

    from protocol.compression import RATIO_GRACE, DeflateDecompressor
    from protocol.errors import DeflateRatioError

    deflater = zlib.compressobj(9)
    bomb = deflater.compress(bytes(4 * RATIO_GRACE)) + deflater.flush(zlib.Z_SYNC_FLUSH)
    inflater = DeflateDecompressor()
    inflater.receive_data(bomb)
    with pytest.raises(DeflateRatioError):
        drain(inflater)
    assert inflater.bytes_out > RATIO_GRACE


def test_gnutella_traffic_inflates_well_within_the_ratio() -> None:
    import os
    import zlib

    from protocol.codec import encode_message
    from protocol.compression import RATIO_GRACE, DeflateDecompressor
    from protocol.messages import Message, Query

    traffic = b"".join(
        encode_message(Message(os.urandom(16), 3, 1, Query(b"jazz %d" % (n % 50))))
        for n in range(3 * RATIO_GRACE // 30)
    )
    deflater = zlib.compressobj(9)
    stream = deflater.compress(traffic) + deflater.flush(zlib.Z_SYNC_FLUSH)
    inflater = DeflateDecompressor()
    inflater.receive_data(stream)
    got = b""
    while chunk := inflater.read():
        got += chunk
    assert got == traffic
