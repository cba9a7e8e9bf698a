"""A connection over an in-memory stream: what it tells the router, and how it ends."""

from __future__ import annotations

import structlog
import trio
import trio.testing

from gnutella_router.net.connection import Connection
from gnutella_router.net.threshold_queue import ThresholdQueue
from protocol.capabilities import Capabilities
from protocol.codec import encode_message
from protocol.framing import Frame
from protocol.messages import Bye, Message, Query, random_guid


def connection(stream: trio.abc.Stream, role: str, **capabilities: object) -> Connection:
    return Connection(
        stream=stream,
        peer=("192.0.2.5", 6346),
        role=role,
        capabilities=Capabilities(**capabilities),  # type: ignore[arg-type]
        outgoing=ThresholdQueue(),
        compress_outgoing=False,
        decompress_incoming=False,
        trailing_data=b"",
        max_payload=65536,
        log=structlog.get_logger("test"),
    )


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
    assert link.bye_code_received == 200


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
