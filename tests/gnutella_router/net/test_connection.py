"""A connection over an in-memory stream: what it tells the router, and how it ends."""

from __future__ import annotations

import socket
import zlib
from typing import Any

import structlog
import trio
import trio.testing

from gnutella_router.net.connection import Connection
from gnutella_router.net.threshold_queue import ThresholdQueue
from protocol.capabilities import Capabilities
from protocol.codec import encode_message
from protocol.framing import Frame
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


def queries(count: int, text: bytes) -> list[bytes]:
    return [encode_message(Message(random_guid(), 3, 0, Query(text))) for _ in range(count)]


async def _ignore(_: Connection, frames: list[Frame]) -> None:
    pass


def _received(sock: socket.socket) -> bytes:
    try:
        return sock.recv(1 << 20)
    except BlockingIOError:
        return b""


def queue_all(link: Connection, datas: list[bytes]) -> None:
    assert link.outgoing.offer_bulk(datas, sum(map(len, datas)))


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
                link.writer.flush()
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
