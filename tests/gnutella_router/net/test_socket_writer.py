"""A link's socket writer, driven as the outbox drives it, over real sockets: writes
made at once or left to a writer task, deflates run in a pool's batch, a writer's
failure, the Bye after a partial write and a queue verdict that ends the link."""

from __future__ import annotations

import contextlib
import socket
import zlib
from collections.abc import AsyncIterator

import trio
import trio.testing

from gnutella_router.net.connection import Connection
from gnutella_router.net.deflate_pool import DeflatePool
from gnutella_router.net.outqueue import Verdict
from gnutella_router.net.threshold_queue import ThresholdQueue
from protocol.framing import FrameDecoder
from protocol.messages import Bye
from tests.gnutella_router.net.test_connection import (
    _ignore,
    _received,
    connection,
    link_over,
    queries,
    queue_all,
)


def deflating(stream: trio.abc.Stream, pool: DeflatePool | None) -> Connection:
    return link_over(stream, compress_outgoing=True, deflate_pool=pool)


async def test_a_batch_defers_the_direct_writes_of_deflating_links_to_its_end() -> None:
    """Inside a pool's batch, flush takes the queued messages but writes nothing until the
    batch ends; then each link's peer inflates exactly what was queued, in order, and a
    second flush in the same batch leaves newer messages for the next write."""
    pool = DeflatePool(1)
    pairs = [socket.socketpair() for _ in range(2)]
    for _, theirs in pairs:
        theirs.setblocking(False)
    links = [
        deflating(trio.SocketStream(trio.socket.from_stdlib_socket(ours)), pool)
        for ours, _ in pairs
    ]
    inflaters = [zlib.decompressobj() for _ in links]
    try:
        async with trio.open_nursery() as nursery:
            for link in links:
                nursery.start_soon(link.run, _ignore)
            await trio.testing.wait_all_tasks_blocked()
            first = [queries(1000, f"link {n} search".encode()) for n in range(len(links))]
            later = queries(2, b"after the first flush")
            with pool.batch():
                for link, batch in zip(links, first, strict=True):
                    assert link.outgoing.offer_bulk(batch, sum(map(len, batch)))
                    link.writer.flush()
                assert links[0].outgoing.offer_bulk(later, sum(map(len, later)))
                links[0].writer.flush()  # its write is already waiting for the batch's end
                assert all(_received(theirs) == b"" for _, theirs in pairs)
            for (_, theirs), inflate, batch in zip(pairs, inflaters, first, strict=True):
                assert inflate.decompress(_received(theirs)) == b"".join(batch)
            await trio.testing.wait_all_tasks_blocked()  # the writer sends the later ones
            assert inflaters[0].decompress(_received(pairs[0][1])) == b"".join(later)
            nursery.cancel_scope.cancel()
    finally:
        pool.close()
        for ours, theirs in pairs:
            ours.close()
            theirs.close()


async def test_outside_a_batch_a_deflating_link_writes_at_once() -> None:
    pool = DeflatePool(1)
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    link = deflating(trio.SocketStream(trio.socket.from_stdlib_socket(ours)), pool)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(link.run, _ignore)
            await trio.testing.wait_all_tasks_blocked()
            batch = queries(3, b"x")
            assert link.outgoing.offer_bulk(batch, sum(map(len, batch)))
            link.writer.flush()
            assert zlib.decompressobj().decompress(_received(theirs)) == b"".join(batch)
            nursery.cancel_scope.cancel()
    finally:
        pool.close()
        ours.close()
        theirs.close()


@contextlib.asynccontextmanager
async def lagging_link() -> AsyncIterator[tuple[Connection, socket.socket]]:
    """A running link whose socket buffers little (4 KiB), so that a large write lags,
    and the peer's end of it."""
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    theirs.setblocking(False)
    link = connection(trio.SocketStream(trio.socket.from_stdlib_socket(ours)), "incoming")
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(link.run, _ignore)
            await trio.testing.wait_all_tasks_blocked()
            yield link, theirs
            nursery.cancel_scope.cancel()
    finally:
        ours.close()
        theirs.close()


async def read_until(theirs: socket.socket, size: int) -> bytes:
    """What the peer reads until it has ``size`` bytes (the link's writer task sending
    the rest meanwhile)."""
    got = b""
    with trio.fail_after(10):
        while len(got) < size:
            got += _received(theirs)
            await trio.sleep(0.001)
    await trio.testing.wait_all_tasks_blocked()
    return got


async def test_the_writer_is_busy_only_while_the_socket_has_not_taken_a_write() -> None:
    """The router may route its next batch before the writers run only while no writer
    is busy: after a write the socket took whole, none is; after one it took in part,
    the writer holds the rest until the peer has read enough."""
    async with lagging_link() as (link, theirs):
        assert not link.writer.busy  # parked with nothing to write
        small = queries(3, b"x")
        queue_all(link, small)
        link.writer.flush()
        assert not link.writer.busy  # the socket took it whole
        assert _received(theirs) == b"".join(small)
        big = queries(400, b"y" * 500)  # far more than the socket buffers
        queue_all(link, big)
        link.writer.flush()
        assert link.writer.busy
        assert await read_until(theirs, len(b"".join(big))) == b"".join(big)
        assert not link.writer.busy  # all written: parked again


def writer_tasks() -> list[trio.lowlevel.Task]:
    """The writer tasks of the links run by the calling task's innermost nursery (a
    :func:`lagging_link`'s), and every task those links started in nurseries of their
    own."""
    test_nursery = trio.lowlevel.current_task().child_nurseries[-1]
    return [
        *(task for task in test_nursery.child_tasks if task.name.endswith("._write_loop")),
        *(
            task
            for run in test_nursery.child_tasks
            for nursery in run.child_nurseries
            for task in nursery.child_tasks
        ),
    ]


async def test_a_link_has_a_writer_task_only_while_the_socket_lags() -> None:
    """An idle link is its reader alone; a write the socket takes whole starts no task;
    one it takes in part starts a writer, which ends once everything is written."""
    async with lagging_link() as (link, theirs):
        assert writer_tasks() == []
        queue_all(link, queries(3, b"x"))
        link.writer.flush()
        await trio.testing.wait_all_tasks_blocked()
        assert writer_tasks() == []
        big = queries(400, b"y" * 500)
        queue_all(link, big)
        link.writer.flush()
        await trio.testing.wait_all_tasks_blocked()
        assert len(writer_tasks()) == 1
        await read_until(theirs, len(b"".join(big)) + 3 * len(queries(1, b"x")[0]))
        assert writer_tasks() == []


class BrokenQueue(ThresholdQueue):
    """A queue whose take fails, as a bug in the writer's path would."""

    __slots__ = ()

    def take(self, max_bytes: int = 65536) -> list[bytes]:
        raise RuntimeError("a bug")


async def test_a_failing_writer_fails_its_link_as_a_nursery_would() -> None:
    """The writer runs beside the reader, not under it: its failure still ends the
    reader, and the link's run raises it for the server to report."""
    ours, _theirs = trio.testing.memory_stream_pair()
    link = link_over(ours, outgoing=BrokenQueue())
    raised: list[Exception] = []

    async def run() -> None:
        try:
            await link.run(_ignore)
        except RuntimeError as exc:
            raised.append(exc)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await trio.testing.wait_all_tasks_blocked()
            queue_all(link, queries(1, b"x"))
            link.writer.flush()
    assert [str(exc) for exc in raised] == ["a bug"]
    assert link.closing
    assert link.close_reason == "cancelled"


async def test_a_bye_follows_the_rest_of_a_write_the_socket_took_in_part() -> None:
    """Closing with a Bye while the socket has taken only part of a write: the peer
    reads the whole write, then the Bye (what was still queued is dropped), never a Bye
    inside a message."""
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    theirs.setblocking(False)
    link = connection(
        trio.SocketStream(trio.socket.from_stdlib_socket(ours)), "incoming", bye_packet=True
    )
    big = queries(400, b"y" * 500)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(link.run, _ignore)
            await trio.testing.wait_all_tasks_blocked()
            queue_all(link, big)
            link.writer.flush()
            assert link.writer.busy  # the socket took part of it
            link.close("shutting down", bye_code=200)
            got = b""
            with trio.fail_after(10):
                while True:  # until the link, its Bye written, closes the socket
                    try:
                        chunk = theirs.recv(1 << 20)
                    except BlockingIOError:
                        await trio.sleep(0.001)
                        continue
                    if not chunk:
                        break
                    got += chunk
        frames = FrameDecoder().receive_data(got)
        written = len(frames) - 1  # the first write; the queue behind it was dropped
        assert written > 0
        assert [frame.to_bytes() for frame in frames[:-1]] == big[:written]
        bye = frames[-1].message().payload
        assert isinstance(bye, Bye)
        assert bye.code == 200
    finally:
        ours.close()
        theirs.close()


async def test_a_queue_verdict_that_ends_the_peer_ends_its_tasks() -> None:
    ours, _theirs = trio.testing.memory_stream_pair()
    queue = ThresholdQueue(max_messages=2)
    link = link_over(ours, outgoing=queue)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(link.run, _ignore)
            await trio.testing.wait_all_tasks_blocked()
            verdicts = [queue.offer(data, 3, 0, 0.0) for data in queries(3, b"x")]
            assert verdicts[-1] is Verdict.CLOSE
            link.writer.act_on(verdicts[-1])
    assert link.close_reason == queue.close_reason
