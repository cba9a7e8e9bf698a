"""A trivial router stand-in, for calibrating measurement tools.

It accepts peers with the 0.6 (or 0.4) handshake and copies every message it receives to
every other peer after a fixed delay, TTL and hops untouched: no routing tables, no
duplicate detection, no replies. Its latency is known by construction (the delay plus
loopback and scheduling), so a load client measured against it shows its own error, and
with no delay it shows the client's own ceiling.

Each peer's writes go through a bounded queue; a peer that falls too far behind is
dropped, so a stalled client cannot make the stand-in grow without bound either.
"""

from __future__ import annotations

import collections

import trio

from gnutella_router.net.handshaking import next_handshake_event
from protocol.errors import RemoteProtocolError
from protocol.framing import FrameDecoder
from protocol.handshake import Acceptor, ConnectRequest, HandshakeComplete

MAX_PENDING_BYTES = 8 * 1024 * 1024


class _EchoPeer:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.pending: collections.deque[tuple[float, bytes]] = collections.deque()
        self.pending_bytes = 0
        self.wakeup = trio.Event()
        self.dropped = False


class EchoRouter:
    """Copies each message to all other peers ``delay`` seconds after it arrived."""

    def __init__(self, delay: float = 0.0, host: str = "127.0.0.1", port: int = 0) -> None:
        self.delay = delay
        self.host = host
        self.port = port
        self.peers: list[_EchoPeer] = []
        self.address: tuple[str, int] = ("127.0.0.1", 0)
        self.messages = 0

    async def serve(
        self, *, task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        host, port = listeners[0].socket.getsockname()[:2]
        self.address = (str(host), int(port))
        task_status.started(self.address)
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        acceptor = Acceptor()
        try:
            with trio.fail_after(5):
                event = await next_handshake_event(stream, acceptor)
                assert isinstance(event, ConnectRequest)
                await stream.send_all(acceptor.accept([("X-Ultrapeer", "True")]))
                while not isinstance(event, HandshakeComplete):
                    event = await next_handshake_event(stream, acceptor)
        except (RemoteProtocolError, trio.TooSlowError, trio.BrokenResourceError, OSError):
            await stream.aclose()
            return
        peer = _EchoPeer(stream)
        self.peers.append(peer)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write, peer)
                await self._read(peer, event.trailing_data)
                nursery.cancel_scope.cancel()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, RemoteProtocolError):
            pass
        finally:
            self.peers.remove(peer)
            await stream.aclose()

    async def _read(self, peer: _EchoPeer, data: bytes) -> None:
        decoder = FrameDecoder()
        while True:
            if data:
                frames = decoder.receive_data(data)
                due = trio.current_time() + self.delay
                for frame in frames:
                    self.messages += 1
                    wire = frame.to_bytes()
                    for other in self.peers:
                        if other is not peer and not other.dropped:
                            other.pending.append((due, wire))
                            other.pending_bytes += len(wire)
                            if other.pending_bytes > MAX_PENDING_BYTES:
                                other.dropped = True
                                other.pending.clear()
                            other.wakeup.set()
            data = await peer.stream.receive_some(65536)
            if not data:
                return

    async def _write(self, peer: _EchoPeer) -> None:
        while not peer.dropped:
            if not peer.pending:
                peer.wakeup = trio.Event()
                await peer.wakeup.wait()
                continue
            due, _ = peer.pending[0]
            await trio.sleep_until(due)
            now = trio.current_time()
            batch = []
            while peer.pending and peer.pending[0][0] <= now:
                _, wire = peer.pending.popleft()
                peer.pending_bytes -= len(wire)
                batch.append(wire)
            await peer.stream.send_all(b"".join(batch))
        await peer.stream.aclose()
