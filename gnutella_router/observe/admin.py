"""The admin interface: the daemon's insides as JSON over HTTP, and dump files.

Theory of operation
-------------------
A small HTTP/1.1 server on trio and h11, started by the daemon in its nursery. One
request per connection (every response says ``Connection: close``), GET only:

=====================================  ================================================
``/routes[?table=&guid=&limit=]``      route tables (:func:`~.dumps.dump_routes`)
``/connections``                       live connections (:func:`~.dumps.dump_connections`)
``/stages``                            stage queues, pools, governor (:func:`~.dumps.dump_stages`)
``/stats``                             router, server and catcher counters
``/holds``                             links the operator holds down, offline or not
``/dump[?limit=]``                     all of the above with identity and configuration
``/metrics``                           Prometheus text exposition (:mod:`.metrics`)
``/healthz``                           ``{"status": "ok", ...}`` while the daemon runs
``/``                                  the list of endpoints
=====================================  ================================================

Responses are JSON (``/metrics`` excepted), errors too: ``{"error": "..."}``.

Everything is bounded, because an admin port must not become a way to hurt the router:
a request head is at most :data:`MAX_HEAD_BYTES` (431 beyond), a connection has
:data:`REQUEST_TIMEOUT` seconds to send its request and take the response, at most
:data:`MAX_CONNECTIONS` are served at once and :data:`MAX_PER_ADDRESS` from one client
address (503 beyond, without reading), and a route dump shows at most
:data:`MAX_ROUTE_LIMIT` entries per table. When every slot is taken, a newcomer takes
the slot of the connection that has been sending its request head the longest (it gets
nothing): clients that open connections and send half a request cannot lock the
operator out for the length of the deadline.

Dumps are snapshots taken on the trio thread between router batches, never live views.
The route dumps (``/routes``, ``/dump``) can be large, so they are streamed: the
snapshot is taken when the response starts, and the JSON is made a slice at a time,
with the router running between slices, and sent in chunks as it is made
(:mod:`.dump_stream`). Such a response has no deadline as a whole, but each chunk must
be taken within :data:`REQUEST_TIMEOUT`. Only one is made at a time: the others wait
their turn, up to :data:`REQUEST_TIMEOUT` (then 503).

Access, in this order (see :class:`~gnutella_router.config.AdminConfig`):

1. a request from a non-loopback address is refused with 403 unless
   ``admin.allow_remote`` is set, whatever address the socket listens on;
2. when ``admin.token`` is set (which ``allow_remote`` requires), every request, from
   loopback too, must carry ``Authorization: Bearer TOKEN``, or gets 401; except a GET
   of one of ``admin.open_pages`` (``/metrics`` and ``/healthz`` unless told
   otherwise), so that a Prometheus scraper and a health check, which have no secret
   to send, keep working when a token is set for control. POSTs always need the token.

The SIGUSR1 dump, made in slices the same way, is written to a file by
:func:`~gnutella_router.observe.dump_files.write_dump_file`. The HTTP side (replies,
strict parameters, h11) is :mod:`.admin_http`.
"""

from __future__ import annotations

import collections
import dataclasses
import hmac
import http
import math
from collections.abc import Callable, Sequence

import h11
import trio

from gnutella_router.addresses import is_loopback_host
from gnutella_router.net.connection import format_address
from gnutella_router.net.http_head import read_request_head
from gnutella_router.net.listening import open_listeners
from gnutella_router.net.streams import sockname
from gnutella_router.observe.admin_control import (
    CONTROL_ENDPOINTS,
    MAX_BODY_BYTES,
    ControlError,
    handle_control,
)
from gnutella_router.observe.admin_http import (
    MAX_ROUTE_LIMIT,
    BadRequest,
    Reply,
    StreamedReply,
    allow_params,
    encode_response,
    json_reply,
    offset_param,
    parse_guid,
    parse_target,
    raw_response,
    read_body,
    route_limit,
    streamed_headers,
)
from gnutella_router.observe.dump_stream import (
    JsonDocument,
    JsonStyle,
    full_dump_document,
    routes_document,
    write_json,
)
from gnutella_router.observe.dumps import (
    ROUTE_TABLES,
    dump_connections,
    dump_qrp,
    dump_stages,
    dump_stats,
    node_identity,
    snapshot_routes,
)
from gnutella_router.observe.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from gnutella_router.observe.metrics import metrics_registry, render_metrics
from gnutella_router.observe.view import RouterControl, RouterView

__all__ = [
    "MAX_CONNECTIONS",
    "MAX_HEAD_BYTES",
    "MAX_ROUTE_LIMIT",
    "REQUEST_TIMEOUT",
    "AdminServer",
    "AdminStatistics",
    "Reply",
    "StreamedReply",
    "serve_admin",
]

MAX_HEAD_BYTES = 8192
"""Largest request line plus headers accepted."""
REQUEST_TIMEOUT = 10.0
"""Seconds a connection has to send its request and take the response; for a streamed
response (a route dump), to take each chunk of it."""
MAX_CONNECTIONS = 16
"""Admin connections served at once; more are answered 503 and closed."""
MAX_PER_ADDRESS = 4
"""Admin connections one client address may hold at once; more are answered 503."""

ENDPOINTS = {
    "/routes": "route tables; ?table=ping|query|push &guid=HEX &limit=N &offset=N",
    "/connections": "live connections: peer, capabilities, queues, counters",
    "/qrp": "QRP tables of leaves and ultrapeers; ?keyword=WORD: who would get it",
    "/stages": "stage queues, worker pools and the thread governor",
    "/stats": "router counters by type and drop reason, server, catcher, link emulation",
    "/holds": "peers held down by the operator (POST /peers/hold), and whether offline",
    "/dump": "everything above, with identity and configuration; ?limit=N",
    "/metrics": "Prometheus text exposition",
    "/profile": "the profiler's samples (404 when it is off); ?format=json|csv",
    "/healthz": "liveness",
    **{f"POST {path}": what for path, what in CONTROL_ENDPOINTS.items()},
}


@dataclasses.dataclass(frozen=True, slots=True)
class AdminStatistics:
    listening: tuple[str, ...]
    active: int
    """Connections being served now."""
    requests: dict[str, int]
    """Requests answered, by status code."""
    refused: dict[str, int]
    """Connections dropped before a response: ``busy``, ``timeout``, ``io``."""


class AdminServer:
    """Serves one daemon's admin interface; see the module notes for what and how."""

    def __init__(
        self,
        daemon: RouterView,
        *,
        control: RouterControl | None = None,
        address: tuple[str, int] | None = None,
        max_connections: int = MAX_CONNECTIONS,
        request_timeout: float = REQUEST_TIMEOUT,
        max_head_bytes: int = MAX_HEAD_BYTES,
    ) -> None:
        config = daemon.config.admin
        self.daemon = daemon
        self.control = control
        """Carries out POSTs (see :mod:`.admin_control`); None: the router takes none."""
        self.address = address or daemon.config.admin_address
        self.token = config.token.encode("ascii")
        self.require_token = bool(config.token)  # a token set is a token required...
        self.open_pages = frozenset(config.open_pages)  # ... but for these GETs
        self.allow_remote = config.allow_remote
        self.max_connections = max_connections
        self.request_timeout = request_timeout
        self.max_head_bytes = max_head_bytes
        self.registry = metrics_registry(daemon)
        self.log = daemon.log.bind(stage="admin")
        self.listen_addresses: list[tuple[str, int]] = []
        self.active = 0
        self._by_address: collections.Counter[str] = collections.Counter()
        self._reading_heads: dict[int, trio.CancelScope] = {}
        """Connections still reading their request head, oldest first (by serial)."""
        self._serial = 0
        self.requests: collections.Counter[str] = collections.Counter()
        self.refused: collections.Counter[str] = collections.Counter()
        self._streaming = trio.Lock()
        """Held while a streamed response is made: one at a time."""
        self._routes: dict[str, Callable[[dict[str, str]], Reply | StreamedReply]] = {
            "/": self._index,
            "/routes": self._routes_page,
            "/connections": self._connections_page,
            "/qrp": self._qrp_page,
            "/stages": self._stages_page,
            "/stats": self._stats_page,
            "/holds": self._holds_page,
            "/dump": self._dump_page,
            "/metrics": self._metrics_page,
            "/profile": self._profile_page,
            "/healthz": self._health_page,
        }

    # ------------------------------------------------------------------ serving

    async def serve(
        self, *, task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen and answer until cancelled; reports the (first) bound address."""
        host, port = self.address
        listeners = await open_listeners(host, port, role="the admin interface, admin.listen")
        try:
            self.listen_addresses = [sockname(lst.socket.getsockname()) for lst in listeners]
            async with trio.open_nursery() as nursery:
                for listener in listeners:
                    nursery.start_soon(self._accept_loop, listener, nursery)
                task_status.started(self.listen_addresses[0])
        finally:
            for listener in listeners:
                with trio.CancelScope(shield=True):
                    await listener.aclose()

    async def _accept_loop(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                # Out of descriptors and the like: say so, breathe, carry on.
                self.log.warning("admin accept failed", error=str(exc))
                await trio.sleep(0.1)
                continue
            nursery.start_soon(self._handle, stream)

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            address = sockname(stream.socket.getpeername())[0]
        except OSError:
            address = ""
        try:
            full = self.active >= self.max_connections
            if full and self._reading_heads and self._by_address[address] < MAX_PER_ADDRESS:
                # Full: the connection sending its head the longest makes room (it ends
                # at its next checkpoint; this one is let in meanwhile).
                oldest = next(iter(self._reading_heads))
                self._reading_heads.pop(oldest).cancel()
                self.refused["slow-head"] += 1
                full = False
            if full or self._by_address[address] >= MAX_PER_ADDRESS:
                self.refused["busy"] += 1
                reply = json_reply(503, {"error": "too many admin connections; try again"})
                with trio.move_on_after(1.0):
                    await stream.send_all(raw_response(reply))
                return
            self.active += 1
            self._by_address[address] += 1
            self._serial += 1
            serial = self._serial
            try:
                with trio.move_on_after(self.request_timeout) as scope:
                    self._reading_heads[serial] = scope
                    streamed = await self._exchange(stream, serial)
                if scope.cancelled_caught:
                    self.refused["timeout"] += 1
                elif streamed is not None:
                    await self._stream(stream, *streamed)
            finally:
                self._reading_heads.pop(serial, None)
                self.active -= 1
                self._by_address[address] -= 1
                if not self._by_address[address]:
                    del self._by_address[address]
        except trio.TooSlowError:
            self.refused["timeout"] += 1
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.refused["io"] += 1
        finally:
            await trio.aclose_forcefully(stream)

    async def _exchange(
        self, stream: trio.SocketStream, serial: int = 0
    ) -> tuple[h11.Connection, StreamedReply] | None:
        """Read the request and answer it, unless the answer is to be streamed: then
        return it, to be sent outside the deadline for the whole exchange."""
        peer = sockname(stream.socket.getpeername())
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.max_head_bytes)
        try:
            request = await read_request_head(stream, conn, self.max_head_bytes)
            self._reading_heads.pop(serial, None)  # its head is in: its slot is its own
        except h11.RemoteProtocolError as exc:
            reply = json_reply(exc.error_status_hint, {"error": f"bad request: {exc}"})
        else:
            if request is None:
                return None
            method = request.method.decode("ascii", "replace")
            target = request.target.decode("ascii", "replace")
            if method == "POST":
                reply = await self._post(stream, conn, target, request.headers.raw_items(), peer)
            else:
                answer = self.respond(method, target, request.headers.raw_items(), peer[0])
                if isinstance(answer, StreamedReply):
                    return conn, answer
                reply = answer
        self.requests[str(reply.status)] += 1
        await stream.send_all(encode_response(conn, reply))
        return None

    async def _stream(
        self, stream: trio.SocketStream, conn: h11.Connection, reply: StreamedReply
    ) -> None:
        """Send a streamed reply once no other is being made (503 after waiting
        :attr:`request_timeout` for that). Each chunk must leave within that time too:
        a client that stops reading gets cut off (``trio.TooSlowError``)."""
        acquired = False
        with trio.move_on_after(self.request_timeout):
            await self._streaming.acquire()
            acquired = True
        if not acquired:
            busy = json_reply(503, {"error": "another dump is being sent; try again"})
            self.requests["503"] += 1
            await self._send(stream, encode_response(conn, busy))
            return
        try:
            await self._send_streamed(stream, conn, reply)
        finally:
            self._streaming.release()

    async def _send_streamed(
        self, stream: trio.SocketStream, conn: h11.Connection, reply: StreamedReply
    ) -> None:
        try:
            document = reply.document()  # the snapshot: one instant, on the trio thread
        except Exception:
            self.log.exception("admin request failed")
            failed = json_reply(500, {"error": "internal error; see the daemon's log"})
            self.requests["500"] += 1
            await self._send(stream, encode_response(conn, failed))
            return
        self.requests[str(reply.status)] += 1
        head = h11.Response(
            status_code=reply.status,
            headers=streamed_headers(reply),
            reason=http.HTTPStatus(reply.status).phrase.encode("ascii"),
        )
        await self._send(stream, conn.send(head))

        async def send(data: bytes) -> None:
            await self._send(stream, conn.send(h11.Data(data=data)))

        try:
            await write_json(document, JsonStyle.COMPACT, send)
        except (trio.TooSlowError, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            raise
        except Exception:
            # The head is out: all that is left is to end the connection early, which
            # the client sees as a body cut short.
            self.log.exception("admin response failed part-way")
            self.refused["error"] += 1
            return
        await self._send(stream, conn.send(h11.EndOfMessage()))

    async def _send(self, stream: trio.SocketStream, data: bytes | None) -> None:
        """Send ``data`` within :attr:`request_timeout` (``trio.TooSlowError`` beyond)."""
        with trio.fail_after(self.request_timeout):
            await stream.send_all(data or b"")

    # ------------------------------------------------------------------ requests

    async def answer(
        self,
        method: str,
        target: str,
        headers: Sequence[tuple[bytes, bytes]],
        peer_host: str,
    ) -> Reply:
        """:meth:`respond`, with a streamed body gathered whole: for a caller in this
        process that wants the data, not a socket (the in-process test network)."""
        reply = self.respond(method, target, headers, peer_host)
        if isinstance(reply, Reply):
            return reply
        body = bytearray()

        async def gather(data: bytes) -> None:
            body.extend(data)

        async with self._streaming:
            await write_json(reply.document(), JsonStyle.COMPACT, gather)
        return Reply(reply.status, bytes(body), reply.content_type)

    def respond(
        self,
        method: str,
        target: str,
        headers: Sequence[tuple[bytes, bytes]],
        peer_host: str,
    ) -> Reply | StreamedReply:
        """The reply to one request; runs on the trio thread and never raises.

        The route dumps (``/routes``, ``/dump``) are a :class:`StreamedReply`: their
        snapshot is taken when they are sent, and their body made as it is sent.

        Args:
            method: the request method (``"GET"``).
            target: the request target, path and query (``"/routes?table=query"``).
            headers: the request headers as (name, value) bytes.
            peer_host: the address the request came from.
        """
        try:
            path, params = parse_target(target)
            name = path.rstrip("/") or "/"
            self._check_access(headers, peer_host, open_page=name in self.open_pages)
            if method != "GET":
                allow = "GET, POST" if self.control is not None else "GET"
                raise BadRequest(405, f"only {allow} is served", [("allow", allow)])
            page = self._routes.get(name)
            if page is None:
                raise BadRequest(404, f"no such page {path!r}; try {', '.join(ENDPOINTS)}")
            return page(params)
        except BadRequest as exc:
            if exc.status in (401, 403):
                self.log.warning(
                    "admin request refused", status=exc.status, peer=peer_host, reason=str(exc)
                )
            return json_reply(exc.status, {"error": str(exc)}, exc.headers)
        except Exception:
            self.log.exception("admin request failed", target=target[:200])
            return json_reply(500, {"error": "internal error; see the daemon's log"})

    async def _post(
        self,
        stream: trio.SocketStream,
        conn: h11.Connection,
        target: str,
        headers: Sequence[tuple[bytes, bytes]],
        peer: tuple[str, int],
    ) -> Reply:
        """A control request: always token-protected, a small JSON body, a JSON answer."""
        try:
            if self.control is None:
                raise BadRequest(405, "this router takes no control requests", [("allow", "GET")])
            if not self.token:
                raise BadRequest(
                    403,
                    "control requests need the admin token: set [admin] token in the "
                    "router's configuration",
                )
            self._check_access(headers, peer[0])
            body = await read_body(stream, conn, MAX_BODY_BYTES)
            path, params = parse_target(target)
            allow_params(params)
            answer = await handle_control(self.control, path.rstrip("/"), body)
        except BadRequest as exc:
            if exc.status in (401, 403):
                self.log.warning(
                    "admin request refused", status=exc.status, peer=peer[0], reason=str(exc)
                )
            return json_reply(exc.status, {"error": str(exc)}, exc.headers)
        except ControlError as exc:
            return json_reply(exc.status, {"error": str(exc)})
        except h11.RemoteProtocolError as exc:
            return json_reply(exc.error_status_hint, {"error": f"bad request: {exc}"})
        self.log.info("control request", path=target[:100], peer=peer[0], answer=answer)
        return json_reply(200, answer)

    def _check_access(
        self, headers: Sequence[tuple[bytes, bytes]], peer_host: str, *, open_page: bool = False
    ) -> None:
        """Refuse a remote client unless allowed, and a request without the token when
        one is set, unless it reads one of ``admin.open_pages``."""
        if not self.allow_remote and not is_loopback_host(peer_host):
            raise BadRequest(403, "remote admin requests are not allowed (admin.allow_remote)")
        if not self.require_token or open_page:
            return
        presented = b""
        for name, value in headers:
            if name.lower() == b"authorization":
                scheme, _, credentials = value.strip().partition(b" ")
                if scheme.lower() == b"bearer":
                    presented = credentials.strip()
        if not hmac.compare_digest(presented, self.token):
            raise BadRequest(
                401,
                "a valid 'Authorization: Bearer TOKEN' header is required",
                [("www-authenticate", 'Bearer realm="gnutella-router"')],
            )

    # ------------------------------------------------------------------ pages

    def _index(self, params: dict[str, str]) -> Reply:
        allow_params(params)
        return json_reply(200, {"endpoints": ENDPOINTS})

    def _routes_page(self, params: dict[str, str]) -> StreamedReply:
        allow_params(params, "table", "guid", "limit", "offset")
        table = params.get("table") or None
        if table is not None and table not in ROUTE_TABLES:
            raise BadRequest(400, f"table={table!r}: expected one of {', '.join(ROUTE_TABLES)}")
        guid = parse_guid(params["guid"]) if params.get("guid") else None
        limit, offset = route_limit(params), offset_param(params)

        def document() -> JsonDocument:
            snapshot = snapshot_routes(
                self.daemon, table=table, guid=guid, limit=limit, offset=offset
            )
            return routes_document(snapshot)

        return StreamedReply(document)

    def _connections_page(self, params: dict[str, str]) -> Reply:
        allow_params(params)
        return json_reply(200, dump_connections(self.daemon))

    def _qrp_page(self, params: dict[str, str]) -> Reply:
        allow_params(params, "keyword")
        keyword = params.get("keyword")
        if keyword is not None and not 0 < len(keyword) <= 200:
            raise BadRequest(400, "keyword: expected 1 to 200 characters")
        return json_reply(200, dump_qrp(self.daemon, keyword=keyword))

    def _stages_page(self, params: dict[str, str]) -> Reply:
        allow_params(params)
        return json_reply(200, dump_stages(self.daemon))

    def _stats_page(self, params: dict[str, str]) -> Reply:
        allow_params(params)
        return json_reply(200, dump_stats(self.daemon))

    def _holds_page(self, params: dict[str, str]) -> Reply:
        allow_params(params)
        holds = self.daemon.server.holds
        now = trio.current_time()
        return json_reply(
            200,
            {
                "offline": holds.offline,
                "holds": [
                    {
                        "address": format_address(*hold.address),
                        "seconds_left": (
                            round(hold.until - now, 3) if math.isfinite(hold.until) else None
                        ),
                    }
                    for hold in holds.holds(now)
                ],
                "capacity": holds.capacity,
            },
        )

    def _dump_page(self, params: dict[str, str]) -> StreamedReply:
        allow_params(params, "limit")
        limit = route_limit(params)
        return StreamedReply(lambda: full_dump_document(self.daemon, limit=limit))

    def _metrics_page(self, params: dict[str, str]) -> Reply:
        allow_params(params)
        return Reply(200, render_metrics(self.registry), METRICS_CONTENT_TYPE)

    def _profile_page(self, params: dict[str, str]) -> Reply:
        """The profiler's ring of samples, on request (it is also written at shutdown)."""
        allow_params(params, "format")
        profiler = self.daemon.profiler
        if profiler is None:
            raise BadRequest(
                404, "the profiler is off: set [profiler] enabled = true or run --profile"
            )
        form = params.get("format", "json")
        if form == "csv":
            return Reply(200, profiler.to_csv().encode(), "text/csv; charset=utf-8")
        if form != "json":
            raise BadRequest(400, "format must be json or csv")
        return Reply(200, profiler.to_json().encode() + b"\n")

    def _health_page(self, params: dict[str, str]) -> Reply:
        allow_params(params)
        node = node_identity(self.daemon)
        return json_reply(
            200,
            {
                "status": "ok",
                "guid": node["guid"],
                "uptime_seconds": node["uptime_seconds"],
                "connections": len(self.daemon.server.connections),
            },
        )

    def statistics(self) -> AdminStatistics:
        return AdminStatistics(
            listening=tuple(format_address(*a) for a in self.listen_addresses),
            active=self.active,
            requests=dict(self.requests),
            refused=dict(self.refused),
        )


# --- the daemon's side ---------------------------------------------------------------


async def serve_admin(
    daemon: RouterControl,
    *,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``daemon``'s admin interface, reads and control, until cancelled; reports its
    address.

    Registers the server in the daemon's registry as ``admin``, so its own counters
    show in ``/stages``.
    """
    server = AdminServer(daemon, control=daemon)
    daemon.registry.register("admin", server)
    await server.serve(task_status=task_status)
