"""Deflate link streams: interoperable with plain zlib, bounded when inflating."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.compression import DeflateCompressor, DeflateDecompressor
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
    decompressor = DeflateDecompressor(max_output=64 * 1024)
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
