"""Deflating one router batch's writes on every core at once.

Theory of operation
-------------------
A link that negotiated deflate compresses each write with zlib, and under a flood that
can cost more than routing does: with GUIDs as random as a real network's, about 0.8 µs
per 30-byte message and deflated link at level 6 (a third of that at level 1) on the
machine the benchmarks run on, where
routing the message costs about 1.4 µs. At the end of a router batch each link's queued
messages go out in one direct write
(:meth:`~gnutella_router.net.socket_writer.SocketWriter.flush`), so a broadcast batch ends
with one deflate per neighbour, one after another on the trio thread.

zlib releases the GIL while it compresses, so those deflates can run side by side.
Inside :meth:`DeflatePool.batch` a link's flush hands its joined bytes here
(:meth:`DeflatePool.defer`) instead of deflating them; when the block ends, the trio
thread and the pool's worker threads take the jobs from one list until none is left,
and then each link writes its own output, in the order the links were flushed. The trio
thread waits for the last job before it routes again. That keeps everything the
single-threaded flush guaranteed: each link's deflate stream is used by one thread at a
time and its output written in order; the router still routes no faster than the links
are deflated, so a deflate that falls behind slows the reading of peers (backpressure)
instead of growing the outgoing queues until the slow-peer policy closes healthy peers;
and no link's queue is left waiting for a thread while the router moves on.

Small batches are deflated in place: handing a job to a thread costs tens of
microseconds, more than deflating a few messages, and at level 1 (the default) more
than deflating a few hundred (:func:`parallel_bytes`). Outside a batch (a message the router
originates on its own) nothing is deferred.
"""

from __future__ import annotations

import contextlib
import threading
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

from protocol.compression import DEFAULT_DEFLATE_LEVEL, DeflateCompressor

PARALLEL_BYTES = 4 * 1024
"""A batch's writes are deflated side by side only when they hold at least this many
bytes in all (about 100 µs of zlib at level 6 with random GUIDs); smaller ones, in
place."""
PARALLEL_BYTES_FAST = 32 * 1024
"""The same at level 1, about three times as fast on such traffic: measured side by
side (``scripts/bench_deflate.py``, ``scripts/bench_matrix.py``), a batch of less goes
faster deflated in place than handed to a thread and back."""


def parallel_bytes(level: int) -> int:
    """The least a batch's writes hold for them to be deflated side by side at ``level``."""
    return PARALLEL_BYTES_FAST if level <= 1 else PARALLEL_BYTES


Written = Callable[[bytes | Exception], None]
"""What a link does with its deflated bytes (write them), or with the error that left
its deflate stream unusable (close)."""


class DeflatePool:
    """Worker threads that deflate the links' writes of a router batch beside the trio
    thread (see the module)."""

    def __init__(self, threads: int, level: int = DEFAULT_DEFLATE_LEVEL) -> None:
        """``level``: zlib's level the links deflate at, which sets how large a batch
        must be to be worth the threads (:func:`parallel_bytes`)."""
        if threads < 1:
            raise ValueError("a deflate pool needs at least one thread")
        self.threads = threads
        self.parallel_bytes = parallel_bytes(level)
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="deflate")
        self._jobs: list[tuple[DeflateCompressor, bytes, Written]] | None = None
        self.batches_parallel = 0
        """Batches whose deflates ran side by side."""
        self.jobs_parallel = 0
        """Writes deflated in those batches (by any thread)."""

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Collect the deflates of the links flushed in the block; run them at its end."""
        self.begin_batch()
        try:
            yield
        finally:
            self.end_batch()

    def begin_batch(self) -> None:
        """:meth:`batch` without the context manager, for the router's end of every batch
        (a generator-based context per batch is measurable under a flood): every
        ``begin_batch`` must be followed by ``end_batch``, in a ``finally``."""
        self._jobs = []

    def end_batch(self) -> None:
        """Run the deflates collected since :meth:`begin_batch`."""
        jobs, self._jobs = self._jobs, None
        if jobs:
            self._run(jobs)

    def defer(self, compressor: DeflateCompressor, data: bytes, then: Written) -> bool:
        """Deflate ``data`` with ``compressor`` at the end of the batch and give the result
        to ``then``; ``False`` outside a batch, when the caller deflates it itself."""
        jobs = self._jobs
        if jobs is None:
            return False
        jobs.append((compressor, data, then))
        return True

    def _run(self, jobs: list[tuple[DeflateCompressor, bytes, Written]]) -> None:
        if len(jobs) < 2 or sum(len(data) for _, data, _ in jobs) < self.parallel_bytes:
            for compressor, data, then in jobs:
                then(_deflated(compressor, data))
            return
        results: list[bytes | Exception] = [b""] * len(jobs)
        remaining = iter(range(len(jobs)))
        lock = threading.Lock()

        def drain() -> None:
            while True:
                with lock:
                    index = next(remaining, None)
                if index is None:
                    return
                compressor, data, _ = jobs[index]
                results[index] = _deflated(compressor, data)

        helpers = [self._executor.submit(drain) for _ in range(min(self.threads, len(jobs) - 1))]
        drain()
        for helper in helpers:
            helper.result()
        self.batches_parallel += 1
        self.jobs_parallel += len(jobs)
        for (_, _, then), output in zip(jobs, results, strict=True):
            then(output)

    def close(self) -> None:
        """Stop the worker threads (after any job in progress)."""
        self._executor.shutdown(wait=True)


def _deflated(compressor: DeflateCompressor, data: bytes) -> bytes | Exception:
    """The deflated bytes, or the error: one link's broken stream must not leave the
    other links' writes of the batch undone."""
    try:
        return compressor.compress(data)
    except (zlib.error, MemoryError) as exc:
        return exc
