"""A connection over an in-memory stream: what it tells the router, and how it ends."""

from __future__ import annotations

import socket
import zlib
from typing import Any

import structlog
import trio
import trio.testing

from gnutella_router.net.connection import Connection
from gnutella_router.net.deflate_pool import DeflatePool
from gnutella_router.net.outqueue import Verdict
from gnutella_router.net.threshold_queue import ThresholdQueue
from protocol.capabilities import Capabilities
from protocol.codec import encode_message
from protocol.framing import Frame, FrameDecoder
from protocol.messages import Bye, Message, Query, random_guid


def link_over(
    stream: trio.abc.Stream,
    role: str = "incoming",
    capabilities: Capabilities | None = None,
    **options: Any,
) -> Connection:
    """A connection over ``stream`` on the defaults the tests share; ``options`` are
    Connection's own (its queue, deflate either way, an abuse meter, a deflate pool...)."""
    settings: dict[str, Any] = {
        "outgoing": ThresholdQueue(),
        "compress_outgoing": False,
        "decompress_incoming": False,
        "trailing_data": b"",
        "max_payload": 65536,
        "log": structlog.get_logger("test"),
        **options,
    }
    return Connection(
        stream=stream,
        peer=("192.0.2.5", 6346),
        role=role,
        capabilities=capabilities or Capabilities(),
        **settings,
    )


def connection(stream: trio.abc.Stream, role: str, **capabilities: object) -> Connection:
    return link_over(stream, role, Capabilities(**capabilities))  # type: ignore[arg-type]


async def test_a_dialled_peer_listens_where_we_dialled_it() -> None:
    ours, _ = trio.testing.memory_stream_pair()
    assert connection(ours, "outgoing").listen_address == ("192.0.2.5", 6346)
    assert connection(ours, "incoming").listen_address is None
    announced = connection(ours, "incoming", listen_address=("198.51.100.1", 6348))
    assert announced.listen_address == ("198.51.100.1", 6348)


async def test_frames_read_before_the_end_are_handled_before_the_close(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The peer writes a query and a Bye and hangs up: the connection stays open until
    the router has reported both frames done, then it closes."""
    ours, theirs = trio.testing.memory_stream_pair()
    link = connection(ours, "incoming", bye_packet=True)
    handed: list[Frame] = []

    async def deliver(_: Connection, frames: list[Frame]) -> None:
        handed.extend(frames)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(link.run, deliver)
        query = Message(random_guid(), 3, 0, Query(b"last"))
        bye = Message(random_guid(), 1, 0, Bye(200, "bye"))
        await theirs.send_all(encode_message(query) + encode_message(bye))
        await theirs.aclose()
        await trio.sleep(1.0)
        assert len(handed) == 2
        assert not link.closing  # the router has not finished with them yet
        link.frames_done(1)
        await trio.sleep(1.0)
        assert not link.closing
        link.received_bye(200, "bye")  # the router handles the Bye ...
        link.frames_done(1)
        await trio.sleep(1.0)
    assert link.closing
    assert link.close_reason == "peer said Bye 200: bye"
    assert link.session.bye_code_received == 200


async def test_a_router_that_never_reports_does_not_keep_a_dead_peer_open(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from gnutella_router.net.connection import DRAIN_SECONDS

    ours, theirs = trio.testing.memory_stream_pair()
    link = connection(ours, "incoming")

    async def deliver(_: Connection, frames: list[Frame]) -> None:
        pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(link.run, deliver)
        await theirs.send_all(encode_message(Message(random_guid(), 3, 0, Query(b"q"))))
        await theirs.aclose()
        await trio.sleep(DRAIN_SECONDS - 0.5)
        assert not link.closing
        await trio.sleep(1.0)
        assert link.closing
    assert link.close_reason == "peer closed the connection"


def deflating(stream: trio.abc.Stream, pool: DeflatePool | None) -> Connection:
    return link_over(stream, compress_outgoing=True, deflate_pool=pool)


def queries(count: int, text: bytes) -> list[bytes]:
    return [encode_message(Message(random_guid(), 3, 0, Query(text))) for _ in range(count)]


async def _ignore(_: Connection, frames: list[Frame]) -> None:
    pass


def _received(sock: socket.socket) -> bytes:
    try:
        return sock.recv(1 << 20)
    except BlockingIOError:
        return b""


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
            first = [queries(200, f"link {n} search".encode()) for n in range(len(links))]
            later = queries(2, b"after the first flush")
            with pool.batch():
                for link, batch in zip(links, first, strict=True):
                    assert link.outgoing.offer_bulk(batch, sum(map(len, batch)))
                    link.flush()
                assert links[0].outgoing.offer_bulk(later, sum(map(len, later)))
                links[0].flush()  # its write is already waiting for the batch's end
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
            link.flush()
            assert zlib.decompressobj().decompress(_received(theirs)) == b"".join(batch)
            nursery.cancel_scope.cancel()
    finally:
        pool.close()
        ours.close()
        theirs.close()


def queue_all(link: Connection, datas: list[bytes]) -> None:
    assert link.outgoing.offer_bulk(datas, sum(map(len, datas)))


async def test_the_writer_is_busy_only_while_the_socket_has_not_taken_a_write() -> None:
    """The router may route its next batch before the writers run only while no writer
    is busy: after a write the socket took whole, none is; after one it took in part,
    the writer holds the rest until the peer has read enough."""
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    theirs.setblocking(False)
    link = connection(trio.SocketStream(trio.socket.from_stdlib_socket(ours)), "incoming")
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(link.run, _ignore)
            await trio.testing.wait_all_tasks_blocked()
            assert not link.writer_busy  # parked with nothing to write
            small = queries(3, b"x")
            queue_all(link, small)
            link.flush()
            assert not link.writer_busy  # the socket took it whole
            assert _received(theirs) == b"".join(small)
            big = queries(400, b"y" * 500)  # far more than the socket buffers
            queue_all(link, big)
            link.flush()
            assert link.writer_busy
            got = b""
            with trio.fail_after(10):
                while len(got) < len(b"".join(big)):
                    got += _received(theirs)
                    await trio.sleep(0.001)
            await trio.testing.wait_all_tasks_blocked()
            assert got == b"".join(big)
            assert not link.writer_busy  # all written: parked again
            nursery.cancel_scope.cancel()
    finally:
        ours.close()
        theirs.close()


def writer_tasks() -> list[trio.lowlevel.Task]:
    """The writer tasks of the links run by the calling test's innermost nursery, and
    every task those links started in nurseries of their own."""
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
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    theirs.setblocking(False)
    link = connection(trio.SocketStream(trio.socket.from_stdlib_socket(ours)), "incoming")
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(link.run, _ignore)
            await trio.testing.wait_all_tasks_blocked()
            assert writer_tasks() == []
            queue_all(link, queries(3, b"x"))
            link.flush()
            await trio.testing.wait_all_tasks_blocked()
            assert writer_tasks() == []
            big = queries(400, b"y" * 500)
            queue_all(link, big)
            link.flush()
            await trio.testing.wait_all_tasks_blocked()
            assert len(writer_tasks()) == 1
            got = b""
            with trio.fail_after(10):
                while len(got) < len(b"".join(big)) + 3 * len(queries(1, b"x")[0]):
                    got += _received(theirs)
                    await trio.sleep(0.001)
            await trio.testing.wait_all_tasks_blocked()
            assert writer_tasks() == []
            nursery.cancel_scope.cancel()
    finally:
        ours.close()
        theirs.close()


async def test_an_idle_deflating_link_holds_no_zlib_state(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Deflate negotiated both ways: no inflater before the peer sends, no deflater for
    small writes, one for a large write, dropped after two housekeeping checks without
    writes; the peer's one inflater reads all of it."""
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    link = link_over(
        trio.SocketStream(trio.socket.from_stdlib_socket(ours)),
        compress_outgoing=True,
        decompress_incoming=True,
    )
    compressor, decompressor = link.session.compressor, link.session._decompressor
    assert compressor is not None
    assert decompressor is not None
    inflate = zlib.decompressobj()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(link.run, _ignore)
            await trio.testing.wait_all_tasks_blocked()
            for batch, holds in (
                (queries(2, b"hello"), False),
                (queries(100, b"a larger write"), True),
                (queries(2, b"quiet again"), False),
            ):
                queue_all(link, batch)
                link.flush()
                assert inflate.decompress(_received(theirs)) == b"".join(batch)
                assert compressor.holds_state == holds
                for _ in range(2):
                    await trio.sleep(1.0)
                    link.check(trio.current_time())
                assert not compressor.holds_state
            assert not decompressor.holds_state
            nursery.cancel_scope.cancel()
    finally:
        ours.close()
        theirs.close()


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
            link.flush()
    assert [str(exc) for exc in raised] == ["a bug"]
    assert link.closing
    assert link.close_reason == "cancelled"


async def test_a_deflate_bomb_closes_the_link_as_an_offence(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A deflated stream that inflates past its ratio cap is a decompression bomb: the
    link ends with a kick, whatever the frames inside were."""
    from gnutella_router.control.abuse import AbuseMeter, Offence
    from protocol.compression import RATIO_GRACE

    ours, theirs = trio.testing.memory_stream_pair()
    link = link_over(ours, decompress_incoming=True, abuse=lambda: AbuseMeter({}, 10.0))
    handed: list[Frame] = []

    async def deliver(delivered_by: Connection, frames: list[Frame]) -> None:
        handed.extend(frames)
        delivered_by.frames_done(len(frames))

    # Pings of TTL 0 and hops 0 with empty payloads: nothing but zeros, inflating ~1000:1.
    zeros = bytes(4 * RATIO_GRACE)
    deflater = zlib.compressobj(9)
    bomb = deflater.compress(zeros) + deflater.flush(zlib.Z_SYNC_FLUSH)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(link.run, deliver)
        await theirs.send_all(bomb)
        await trio.sleep(1.0)
        nursery.cancel_scope.cancel()
    assert link.closing
    assert link.session.kick is not None
    assert link.session.kick.offence is Offence.DEFLATE_RATIO
    assert len(handed) * 23 <= 2 * RATIO_GRACE  # cut off soon after the grace


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
            link.flush()
            assert link.writer_busy  # the socket took part of it
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


async def test_a_dead_peer_closes_as_soon_as_the_router_has_finished_its_frames(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    link = connection(ours, "incoming")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(link.run, _ignore)
        await theirs.send_all(encode_message(Message(random_guid(), 3, 0, Query(b"q"))))
        await theirs.aclose()
        await trio.sleep(1.0)
        assert not link.closing
        link.frames_done(1)
        await trio.sleep(0.1)
        assert link.closing  # at once, not after DRAIN_SECONDS
    assert link.close_reason == "peer closed the connection"


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
            link.act_on(verdicts[-1])
    assert link.close_reason == queue.close_reason
