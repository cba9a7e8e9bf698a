"""Loopback test harness: scripted Gnutella peers and running daemons.

A :class:`Peer` is a real TCP client on 127.0.0.1 that does the 0.6 handshake with the
protocol package's own machines, then sends and receives raw frames, so a test can
check exactly what the daemon put on the wire.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path

import trio

from gnutella_router.config import Config, load_config
from gnutella_router.daemon import Daemon
from gnutella_router.net.connection import Connection
from gnutella_router.net.handshaking import next_handshake_event
from protocol.codec import encode_message
from protocol.compression import DeflateCompressor, DeflateDecompressor
from protocol.framing import Frame, FrameDecoder
from protocol.handshake import (
    HandshakeComplete,
    HandshakeRejected,
    HandshakeResponse,
    Initiator,
)
from protocol.messages import Message, Payload, Query, random_guid
from tests.support.waiting import wait_until

DEFAULT_HEADERS: tuple[tuple[str, str], ...] = (
    ("User-Agent", "test-peer/1.0"),
    ("X-Ultrapeer", "True"),
    ("Bye-Packet", "0.1"),
    ("GGEP", "0.5"),
)

_open_peers: list[Peer] = []
"""Peers opened while daemons run; :func:`running_daemons` closes them at its end."""


class PeerRefused(Exception):
    def __init__(self, rejection: HandshakeRejected) -> None:
        super().__init__(f"{rejection.status_code} {rejection.reason}")
        self.rejection = rejection


class Peer:
    """One scripted servent connected to a daemon."""

    def __init__(self, stream: trio.SocketStream, complete: HandshakeComplete, guid: bytes) -> None:
        self.stream = stream
        self.complete = complete
        self.guid = guid
        self.decoder = FrameDecoder()
        self.pending: list[Frame] = []
        self.compressor = DeflateCompressor() if complete.compress_outgoing else None
        self.decompressor = DeflateDecompressor() if complete.decompress_incoming else None
        self.closed = False
        if complete.trailing_data:
            self._take(complete.trailing_data)
        _open_peers.append(self)

    @classmethod
    async def connect(
        cls,
        address: tuple[str, int],
        *,
        headers: Sequence[tuple[str, str]] = DEFAULT_HEADERS,
        extra_headers: Sequence[tuple[str, str]] = (),
        deflate: bool = False,
        receive_buffer: int | None = None,
        guid: bytes | None = None,
        source: str | None = None,
    ) -> Peer:
        """Handshake with a daemon; ``receive_buffer`` shrinks SO_RCVBUF first, so a peer
        that stops reading backs the daemon up after a few kilobytes. ``guid`` is the
        servent GUID announced (random by default); ``source`` the loopback address to
        connect from (any of 127.0.0.0/8 on Linux), to stand for a host of its own."""
        guid = guid or random_guid()
        if receive_buffer is None and source is None:
            stream = await trio.open_tcp_stream(*address)
        else:
            stream = await open_stream(address, source=source, receive_buffer=receive_buffer)
        try:
            return await cls._handshake(stream, guid, headers, extra_headers, deflate)
        except BaseException:
            await _quiet_close(stream)
            raise

    @classmethod
    async def _handshake(
        cls,
        stream: trio.SocketStream,
        guid: bytes,
        headers: Sequence[tuple[str, str]],
        extra_headers: Sequence[tuple[str, str]],
        deflate: bool,
    ) -> Peer:
        initiator = Initiator()
        all_headers = [*headers, *extra_headers, ("GUID", guid.hex())]
        if deflate:
            all_headers.append(("Accept-Encoding", "deflate"))
        await stream.send_all(initiator.start(all_headers))
        event = await _next(stream, initiator)
        if isinstance(event, HandshakeRejected):
            raise PeerRefused(event)
        assert isinstance(event, HandshakeResponse)
        await stream.send_all(initiator.confirm(deflate=deflate))
        complete = await _next(stream, initiator)
        assert isinstance(complete, HandshakeComplete)
        return cls(stream, complete, guid)

    def _take(self, data: bytes) -> None:
        if self.decompressor is not None:
            self.decompressor.receive_data(data)
            while chunk := self.decompressor.read():
                self.pending.extend(self.decoder.receive_data(chunk))
        else:
            self.pending.extend(self.decoder.receive_data(data))

    async def send(self, *messages: Message | bytes) -> None:
        data = b"".join(m if isinstance(m, bytes) else encode_message(m) for m in messages)
        if self.compressor is not None:
            data = self.compressor.compress(data)
        await self.stream.send_all(data)

    async def receive(self, timeout: float = 3.0) -> Frame:
        """The next frame, waiting at most ``timeout`` seconds (fails the test after)."""
        with trio.fail_after(timeout):
            while not self.pending:
                data = await self.stream.receive_some(65536)
                if not data:
                    self.closed = True
                    raise EOFError("the daemon closed the connection")
                self._take(data)
        return self.pending.pop(0)

    async def receive_matching(
        self, predicate: Callable[[Frame], bool], timeout: float = 3.0
    ) -> Frame:
        """Skip frames until one matches (e.g. ignore our own pongs)."""
        with trio.fail_after(timeout):
            while True:
                frame = await self.receive(timeout)
                if predicate(frame):
                    return frame

    async def collect(self, duration: float) -> list[Frame]:
        """Everything that arrives within ``duration`` seconds."""
        frames = list(self.pending)
        self.pending.clear()
        with trio.move_on_after(duration):
            while True:
                data = await self.stream.receive_some(65536)
                if not data:
                    self.closed = True
                    break
                self._take(data)
                frames.extend(self.pending)
                self.pending.clear()
        return frames

    async def wait_closed(self, timeout: float = 3.0) -> list[Frame]:
        """Read until the daemon closes the connection; return what came before."""
        frames = list(self.pending)
        self.pending.clear()
        with trio.fail_after(timeout):
            while True:
                try:
                    data = await self.stream.receive_some(65536)
                except trio.BrokenResourceError:
                    break
                if not data:
                    break
                self._take(data)
                frames.extend(self.pending)
                self.pending.clear()
        self.closed = True
        return frames

    async def aclose(self) -> None:
        await _quiet_close(self.stream)


async def open_stream(
    address: tuple[str, int], *, source: str | None = None, receive_buffer: int | None = None
) -> trio.SocketStream:
    """A TCP connection to an IPv4 ``address``, from ``source`` if given."""
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
    try:
        if receive_buffer is not None:
            sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, receive_buffer)
        if source is not None:
            await sock.bind((source, 0))
        await sock.connect(address)
    except BaseException:
        sock.close()
        raise
    return trio.SocketStream(sock)


async def _quiet_close(stream: trio.SocketStream) -> None:
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        await stream.aclose()


async def _next(stream: trio.SocketStream, machine: Initiator) -> object:
    with trio.fail_after(5):
        return await next_handshake_event(stream, machine)


def daemon_config(state_dir: Path, overrides: Mapping[str, object] | None = None) -> Config:
    settings: dict[str, object] = {
        "node.listen": "127.0.0.1:0",
        "node.state_dir": str(state_dir),
        "catcher.min_connections": 0,
        "network.handshake_timeout": 2.0,
        "log.level": "warning",
    }
    settings.update(overrides or {})
    return load_config(None, settings)


@contextlib.asynccontextmanager
async def running_daemons(
    state_dir: Path, count: int = 1, overrides: Mapping[str, object] | None = None
) -> AsyncIterator[list[Daemon]]:
    """Start ``count`` daemons on loopback ports; stop them all (gracefully) at the end."""
    async with trio.open_nursery() as nursery:
        daemons = []
        for index in range(count):
            config = daemon_config(state_dir / f"node{index}", overrides)
            daemon = Daemon(config)
            await nursery.start(daemon.run)
            daemons.append(daemon)
        try:
            yield daemons
        finally:
            while _open_peers:
                await _open_peers.pop().aclose()
            for daemon in daemons:
                daemon.request_stop()
            with trio.fail_after(10):
                for daemon in daemons:
                    await daemon.stopped.wait()


def message(payload: Payload, *, ttl: int = 7, hops: int = 0, guid: bytes | None = None) -> Message:
    return Message(guid or random_guid(), ttl, hops, payload)


async def peers(daemon: Daemon, count: int, **kwargs: object) -> list[Peer]:
    connected = [await Peer.connect(daemon.address, **kwargs) for _ in range(count)]  # type: ignore[arg-type]
    await wait_until(lambda: len(daemon.server.connections) >= count)
    return connected


def connection_of(daemon: Daemon, peer: Peer) -> Connection:
    """The daemon's side of ``peer``'s connection."""
    local = peer.stream.socket.getsockname()
    for connection in daemon.server.connections.snapshot():
        if connection.peer == (local[0], local[1]):
            return connection
    raise AssertionError(f"no connection from {local}")


async def send_queries(daemon: Daemon, peer: Peer, count: int) -> list[bytes]:
    guids = []
    for index in range(count):
        query = message(Query(f"dump test {index}".encode()), ttl=3)
        await peer.send(query)
        guids.append(query.guid)
    await wait_until(lambda: all(g in daemon.router.query_routes for g in guids))
    return guids


async def recorded(daemon: Daemon, count: int, timeout: float = 5.0) -> None:
    """Wait until the daemon's recorder has ``count`` records."""
    assert daemon.recorder is not None
    with trio.fail_after(timeout):
        while daemon.recorder.records < count:
            await trio.sleep(0.01)
