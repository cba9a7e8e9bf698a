"""The deflate pool: a batch's deflates run side by side, and their outputs come back in
order to the links that deferred them."""

from __future__ import annotations

import os
import threading
import zlib
from collections.abc import Callable

import pytest

from gnutella_router.net.deflate_pool import DeflatePool, parallel_bytes
from protocol.compression import DEFAULT_DEFLATE_LEVEL, DeflateCompressor


class _Meeting(DeflateCompressor):
    """A compressor that will not finish until another one has started: two of them can
    only both finish when they run at the same time, on different threads."""

    def __init__(self, barrier: threading.Barrier, threads: set[int]) -> None:
        super().__init__()
        self.barrier = barrier
        self.threads = threads

    def compress(self, data: bytes | bytearray | memoryview) -> bytes:
        self.threads.add(threading.get_ident())
        self.barrier.wait()
        return super().compress(data)


WORTH = parallel_bytes(DEFAULT_DEFLATE_LEVEL)
"""A write large enough that two of them go to the threads at the default level."""


def _chunk(size: int) -> bytes:
    return os.urandom(size // 2).hex().encode()


def _into(outputs: list[tuple[int, bytes]], index: int) -> Callable[[bytes | Exception], None]:
    """A link's ``then`` that notes its output under ``index``."""

    def written(out: bytes | Exception) -> None:
        assert isinstance(out, bytes), out
        outputs.append((index, out))

    return written


@pytest.mark.parametrize(
    ("level", "chunk", "parallel"), [(6, 4096, 1), (1, 4096, 0), (1, 32768, 1)]
)
def test_what_is_worth_the_threads_depends_on_the_level(
    level: int, chunk: int, parallel: int
) -> None:
    """At level 1 zlib is fast enough that a batch the threads pay for at level 6 is
    deflated in place; a larger one still goes side by side."""
    pool = DeflatePool(1, level)
    outputs: list[tuple[int, bytes]] = []
    data = [_chunk(chunk), _chunk(chunk)]
    try:
        with pool.batch():
            for index, piece in enumerate(data):
                assert pool.defer(DeflateCompressor(level), piece, _into(outputs, index))
    finally:
        pool.close()
    assert [zlib.decompressobj().decompress(out) for _, out in outputs] == data
    assert pool.batches_parallel == parallel


def test_a_large_batch_is_deflated_on_two_threads_at_once() -> None:
    pool = DeflatePool(1)
    barrier = threading.Barrier(2, timeout=10)
    threads: set[int] = set()
    data = [_chunk(WORTH), _chunk(WORTH)]
    outputs: list[tuple[int, bytes]] = []
    try:
        with pool.batch():
            for index, chunk in enumerate(data):
                deferred = pool.defer(
                    _Meeting(barrier, threads),
                    chunk,
                    _into(outputs, index),
                )
                assert deferred
            assert outputs == []  # nothing is deflated before the batch ends
    finally:
        pool.close()
    assert len(threads) == 2
    assert threading.get_ident() in threads  # the caller's thread takes its share
    assert [index for index, _ in outputs] == [0, 1]
    assert [zlib.decompressobj().decompress(out) for _, out in outputs] == data
    assert (pool.batches_parallel, pool.jobs_parallel) == (1, 2)


def test_every_job_is_done_once_in_the_order_it_was_deferred() -> None:
    pool = DeflatePool(2)
    compressors = [DeflateCompressor() for _ in range(7)]
    data = [_chunk(4096 + 512 * n) for n in range(7)]
    outputs: list[tuple[int, bytes]] = []
    try:
        for _ in range(3):  # the same streams through several batches
            outputs.clear()
            with pool.batch():
                for index, (compressor, chunk) in enumerate(zip(compressors, data, strict=True)):
                    pool.defer(compressor, chunk, _into(outputs, index))
            assert [index for index, _ in outputs] == list(range(7))
    finally:
        pool.close()
    assert all(c.bytes_in == 3 * len(d) for c, d in zip(compressors, data, strict=True))


def test_a_small_batch_is_deflated_in_place() -> None:
    pool = DeflatePool(1)
    main = threading.get_ident()
    seen: list[int] = []

    class Noting(DeflateCompressor):
        def compress(self, data: bytes | bytearray | memoryview) -> bytes:
            seen.append(threading.get_ident())
            return super().compress(data)

    try:
        with pool.batch():
            for _ in range(3):
                pool.defer(Noting(), b"a few messages", lambda out: None)
    finally:
        pool.close()
    assert seen == [main] * 3
    assert pool.batches_parallel == 0


def test_outside_a_batch_nothing_is_deferred() -> None:
    pool = DeflatePool(1)
    try:
        assert not pool.defer(DeflateCompressor(), b"data", lambda out: None)
        with pool.batch():
            pass
        assert not pool.defer(DeflateCompressor(), b"data", lambda out: None)
    finally:
        pool.close()


def test_a_failing_deflate_is_given_to_its_link_and_the_others_still_written() -> None:
    """One link's broken stream does not leave the other links' writes undone."""
    pool = DeflatePool(1)
    outputs: dict[str, bytes | Exception] = {}

    class Broken(DeflateCompressor):
        def compress(self, data: bytes | bytearray | memoryview) -> bytes:
            raise zlib.error("broken stream")

    good = _chunk(WORTH)
    try:
        with pool.batch():
            pool.defer(Broken(), _chunk(WORTH), lambda out: outputs.update(bad=out))
            pool.defer(DeflateCompressor(), good, lambda out: outputs.update(good=out))
    finally:
        pool.close()
    assert isinstance(outputs["bad"], zlib.error)
    written = outputs["good"]
    assert isinstance(written, bytes)
    assert zlib.decompressobj().decompress(written) == good


def test_a_pool_needs_a_thread() -> None:
    with pytest.raises(ValueError, match="at least one thread"):
        DeflatePool(0)
