"""The GWebCache service on the network: HTTP/1.1 over trio, one request per connection.

:class:`GWebCacheServer` accepts connections, reads one request head with h11 (at most
:data:`MAX_HEAD_BYTES`), hands its target and the client's address to the sans-IO
:class:`~.gwebcache_service.GWebCacheService`, and writes the answer as ``text/plain``
with ``Connection: close``, as caches answer. Only GET is served.

A cache is a public service, and a connection that sends nothing still holds a slot. So
at most ``max_connections`` are served at once and at most ``connections_per_address``
from one client address (IPv6: one /64; clients in the service's trusted networks are
exempt): more are answered 503 and closed at once. A client has ``idle_seconds`` to
send each piece of its request and ``request_seconds`` for all of it. Without these,
300 idle connections from one address kept every honest client out. Every request and
refusal is counted, and refusals are logged at most once every 10 s per kind. A client
that is slow, malformed or gone costs its own connection and nothing else.
"""

from __future__ import annotations

import collections

import h11
import structlog
import trio

from gnutella_router.control.abuse import in_networks
from gnutella_router.discovery.gwebcache_service import NAME, GWebCacheService, client_key
from gnutella_router.logs import RateLimitedWarnings
from gnutella_router.net.http_head import read_request_head

MAX_HEAD_BYTES = 8 * 1024
REQUEST_SECONDS = 10.0
IDLE_SECONDS = 5.0
MAX_CONNECTIONS = 256
CONNECTIONS_PER_ADDRESS = 4
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
        connections_per_address: int = CONNECTIONS_PER_ADDRESS,
        idle_seconds: float = IDLE_SECONDS,
        request_seconds: float = REQUEST_SECONDS,
        log: structlog.typing.FilteringBoundLogger | None = None,
    ) -> None:
        if not (max_connections >= 1 and connections_per_address >= 1):
            raise ValueError("max_connections and connections_per_address must be 1 or more")
        if not (idle_seconds > 0 and request_seconds > 0):
            raise ValueError("idle_seconds and request_seconds must be positive")
        self.service = service
        self.max_connections = max_connections
        self.connections_per_address = connections_per_address
        self.idle_seconds = idle_seconds
        self.request_seconds = request_seconds
        self.log = log or structlog.get_logger("gwebcache")
        self.warnings = RateLimitedWarnings(self.log)
        self.active = 0
        self.per_address: collections.Counter[str] = collections.Counter()
        """Connections being served, by client (:func:`client_key`); untrusted only."""
        self.answered: collections.Counter[int] = collections.Counter()
        self.dropped: collections.Counter[str] = collections.Counter()
        """Connections ended without an answer, or refused: ``busy`` (every slot
        taken), ``address-busy`` (the client's address has all its slots), ``idle``,
        ``timeout`` and ``io``."""

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
            client = _address(stream.socket.getpeername())[0]
            trusted = in_networks(client, self.service.trusted_networks)
            key = None if trusted else client_key(client)
            refusal = None
            if self.active >= self.max_connections:
                refusal = "busy"
            elif key is not None and self.per_address[key] >= self.connections_per_address:
                refusal = "address-busy"
            if refusal is not None:
                await self._refuse(stream, refusal, client)
                return
            self.active += 1
            if key is not None:
                self.per_address[key] += 1
            try:
                with trio.move_on_after(self.request_seconds) as scope:
                    await self._exchange(stream, client)
                if scope.cancelled_caught:
                    self.dropped["timeout"] += 1
            finally:
                self.active -= 1
                if key is not None:
                    self.per_address[key] -= 1
                    if not self.per_address[key]:
                        del self.per_address[key]
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.dropped["io"] += 1
        finally:
            await trio.aclose_forcefully(stream)

    async def _refuse(self, stream: trio.SocketStream, refusal: str, client: str) -> None:
        self.dropped[refusal] += 1
        self.warnings.warn(
            refusal,
            "gwebcache busy"
            if refusal == "busy"
            else "gwebcache: too many connections from one address",
            client=client,
            active=self.active,
        )
        text = b"busy; try again later\n" if refusal == "busy" else b"too many connections\n"
        with trio.move_on_after(1.0):
            await stream.send_all(_raw(503, text))

    async def _exchange(self, stream: trio.SocketStream, client: str) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        try:
            request = await read_request_head(stream, conn, MAX_HEAD_BYTES, idle=self.idle_seconds)
        except trio.TooSlowError:
            self.dropped["idle"] += 1
            return
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
