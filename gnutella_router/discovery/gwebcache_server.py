"""The GWebCache service on the network: HTTP/1.1 over trio, one request per connection.

:class:`GWebCacheServer` accepts connections (at most ``max_connections`` at once; more
are answered 503 and closed), reads one request head with h11 (at most
:data:`MAX_HEAD_BYTES`, within :data:`REQUEST_SECONDS`), hands its target and the
client's address to the sans-IO :class:`~.gwebcache_service.GWebCacheService`, and
writes the answer as ``text/plain`` with ``Connection: close``, as caches answer.
Only GET is served. Every request is counted; a client that is slow, malformed or
gone costs its own connection and nothing else.
"""

from __future__ import annotations

import collections

import h11
import structlog
import trio

from gnutella_router.discovery.gwebcache_service import NAME, GWebCacheService
from gnutella_router.net.http_head import read_request_head

MAX_HEAD_BYTES = 8 * 1024
REQUEST_SECONDS = 10.0
MAX_CONNECTIONS = 256
READ_SIZE = 4096
LINGER_SECONDS = 1.0
LINGER_BYTES = 64 * 1024


class GWebCacheServer:
    """Serves one :class:`GWebCacheService` on the listeners it is given."""

    def __init__(
        self,
        service: GWebCacheService,
        *,
        max_connections: int = MAX_CONNECTIONS,
        log: structlog.typing.FilteringBoundLogger | None = None,
    ) -> None:
        self.service = service
        self.max_connections = max_connections
        self.log = log or structlog.get_logger("gwebcache")
        self.active = 0
        self.answered: collections.Counter[int] = collections.Counter()
        self.dropped: collections.Counter[str] = collections.Counter()

    async def serve(
        self,
        host: str,
        port: int,
        *,
        task_status: trio.TaskStatus[list[tuple[str, int]]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen on ``host:port`` (port 0 picks one) until cancelled; reports where."""
        listeners = await trio.open_tcp_listeners(port, host=host)
        where = [_address(listener.socket.getsockname()) for listener in listeners]
        task_status.started(where)
        await trio.serve_listeners(self.handle, listeners)

    async def handle(self, stream: trio.SocketStream) -> None:
        try:
            if self.active >= self.max_connections:
                self.dropped["busy"] += 1
                with trio.move_on_after(1.0):
                    await stream.send_all(_raw(503, b"busy; try again later\n"))
                return
            self.active += 1
            try:
                with trio.move_on_after(REQUEST_SECONDS) as scope:
                    await self._exchange(stream)
                if scope.cancelled_caught:
                    self.dropped["timeout"] += 1
            finally:
                self.active -= 1
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.dropped["io"] += 1
        finally:
            await trio.aclose_forcefully(stream)

    async def _exchange(self, stream: trio.SocketStream) -> None:
        client = _address(stream.socket.getpeername())[0]
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        try:
            request = await read_request_head(stream, conn, MAX_HEAD_BYTES)
        except h11.RemoteProtocolError as exc:
            await self._send(stream, conn, exc.error_status_hint, f"bad request: {exc}\n".encode())
            return
        if request is None:
            return
        if request.method != b"GET":
            await self._send(stream, conn, 405, b"only GET is served\n", allow=True)
            return
        target = request.target.decode("ascii", "replace")
        try:
            body = self.service.answer(target, client)
        except Exception:  # a fault in the core costs one answer, never the service
            self.log.exception("gwebcache request failed", client=client, target=target[:200])
            await self._send(stream, conn, 500, b"internal error\n")
            return
        self.log.debug("request", client=client, target=target[:200], bytes=len(body))
        await self._send(stream, conn, 200, body)

    async def _send(
        self,
        stream: trio.SocketStream,
        conn: h11.Connection,
        status: int,
        body: bytes,
        *,
        allow: bool = False,
    ) -> None:
        self.answered[status] += 1
        headers = [
            ("content-type", "text/plain; charset=utf-8"),
            ("content-length", str(len(body))),
            ("connection", "close"),
            ("server", NAME),
        ]
        if allow:
            headers.append(("allow", "GET"))
        if conn.our_state is not h11.SEND_RESPONSE:  # the head never arrived whole
            await stream.send_all(_raw(status, body))
            await _linger(stream)
            return
        data = conn.send(h11.Response(status_code=status, headers=headers))
        data += conn.send(h11.Data(data=body)) or b""
        data += conn.send(h11.EndOfMessage()) or b""
        await stream.send_all(data)
        if status != 200:
            await _linger(stream)


async def _linger(stream: trio.SocketStream) -> None:
    """After an error answer, read (briefly, boundedly) what the client still sends:
    closing with unread bytes would reset the connection and lose the answer."""
    with trio.move_on_after(LINGER_SECONDS):
        await stream.send_eof()
        drained = 0
        while drained < LINGER_BYTES:
            chunk = await stream.receive_some(READ_SIZE)
            if not chunk:
                return
            drained += len(chunk)


def _raw(status: int, body: bytes) -> bytes:
    reason = {400: "Bad Request", 405: "Method Not Allowed", 431: "Too Large", 503: "Busy"}
    head = (
        f"HTTP/1.1 {status} {reason.get(status, 'Error')}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def _address(name: object) -> tuple[str, int]:
    assert isinstance(name, tuple)
    return str(name[0]), int(name[1])
