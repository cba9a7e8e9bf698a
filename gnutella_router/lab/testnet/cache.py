"""The test network's own GWebCache: each node bootstraps from a page of its own.

Each node's ``catcher.gwebcache`` points at ``/node/<i>``, which lists the nodes it is
planned to dial, so the catchers build exactly the planned topology through the same
bootstrap path a router uses on the real network.

The cache learns each node's address as it comes up (:meth:`HostCacheService.publish_node`)
but lists nobody until every node has been started (:meth:`HostCacheService.open`), so
that leaves can join their ultrapeers (and publish their tables) before any overlay
link comes up. Until then a request is held, a long poll of at most ``hold`` seconds
(below the routers' fetch deadline): it is answered the moment the cache opens, or
with no hosts and a warning line when the hold runs out, and the router asks again.
So a router asks a few times while the others start, not every second (a network in
one process would spend its one core answering), and none waits long for a page.
From then on every page lists the planned peers that listen, at once (a node back
from churn is told where its neighbours are now). A router of the
test network dials no one else (``catcher.learn_from_peers`` is off), so a page
answered in part cannot lead it to fill its slots with peers nobody planned.
"""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import Sequence

import trio

from gnutella_router.lab.testnet.topology import Topology
from gnutella_router.net.connection import format_address

HOLD_SECONDS = 4.0
"""Longest a request waits for the cache to open (the long poll of the module
docstring); below the test network's fetch deadline, ``launch.DIAL_TIMEOUT``."""
REQUEST_SECONDS = 5.0
"""Longest a client may take to send its request."""
LOOPBACK = "127.0.0.1"


class HostCacheService:
    """A tiny GWebCache v2 (on loopback unless told otherwise) that knows the test
    network's nodes.

    ``GET /node/<i>?...`` answers node i with the nodes it should dial; any other page
    lists every node. The answer is v2 (``I|pong|...`` then ``H|ip:port|age``), or bare
    ``ip:port`` lines (v1) when the request asks ``hostfile=1`` without ``get=1``.
    Until :meth:`open` (or :meth:`publish`) has been called, every page lists nobody,
    and a request waits up to ``hold`` seconds for it.
    """

    def __init__(
        self, topology: Topology, *, host: str = LOOPBACK, hold: float = HOLD_SECONDS
    ) -> None:
        self.topology = topology
        self.host = host
        self.hold = hold
        """Where it listens: loopback, or the bridge of a network in namespaces."""
        self.addresses: list[tuple[str, int] | None] = [None] * topology.nodes
        """Where each node listens, once it does (None before, or after it left)."""
        self.published_at = 0.0
        self.requests = 0
        self._opened = trio.Event()
        self.port = 0

    def publish(self, addresses: Sequence[tuple[str, int]]) -> None:
        """The nodes are listening at ``addresses`` (index order): answer every page."""
        for index, address in enumerate(addresses):
            self.publish_node(index, address)
        self.open()

    def publish_node(self, index: int, address: tuple[str, int] | None) -> None:
        """Node ``index`` listens at ``address`` now (None: it is gone)."""
        self.addresses[index] = address
        self.published_at = trio.current_time()

    def open(self) -> None:
        """Every node has been started: list the nodes from now on, and answer the
        requests held until now."""
        self._opened.set()

    @property
    def opened(self) -> bool:
        return self._opened.is_set()

    def url(self, node: int | None = None) -> str:
        page = "gwc" if node is None else f"node/{node}"
        return f"http://{format_address(self.host, self.port)}/{page}"

    def body(self, target: str) -> bytes:
        """The answer to one request target (``/node/3?get=1&net=gnutella``)."""
        parts = urllib.parse.urlsplit(target)
        query = urllib.parse.parse_qs(parts.query)
        hosts = self._hosts_for(parts.path)
        if "hostfile" in query and "get" not in query:
            return "".join(f"{format_address(*h)}\n" for h in hosts).encode()
        age = max(0, int(trio.current_time() - self.published_at)) if hosts else 0
        lines = ["I|pong|gnutella-router testnet"]
        lines.extend(f"H|{format_address(*h)}|{age}" for h in hosts)
        if not hosts:
            lines.append("I|WARNING|the test network is not listening yet; ask again soon")
        return ("\n".join(lines) + "\n").encode()

    def _wanted(self, path: str) -> list[int]:
        head, _, index = path.strip("/").partition("/")
        if head == "node" and index.isdigit() and int(index) < self.topology.nodes:
            return self.topology.out_neighbours(int(index))
        return list(range(self.topology.nodes))

    def _hosts_for(self, path: str) -> list[tuple[str, int]]:
        if not self.opened:
            return []
        return [a for n in self._wanted(path) if (a := self.addresses[n]) is not None]

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host=self.host)
        self.port = int(listeners[0].socket.getsockname()[1])
        task_status.started(self.port)
        await trio.serve_listeners(self._answer, listeners)

    async def _answer(self, stream: trio.SocketStream) -> None:
        try:
            request = b""
            with trio.move_on_after(REQUEST_SECONDS):
                while b"\r\n\r\n" not in request and len(request) < 16384:
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        return
                    request += chunk
            line = request.split(b"\r\n", 1)[0].decode("latin-1").split()
            if len(line) != 3 or line[0] != "GET":
                await stream.send_all(_http(400, b"only GET is served\n"))
                return
            self.requests += 1
            with trio.move_on_after(self.hold):
                await self._opened.wait()
            await stream.send_all(_http(200, self.body(line[1])))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            with (
                trio.move_on_after(0.5, shield=True),
                contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError),
            ):
                await stream.aclose()


def _http(status: int, body: bytes) -> bytes:
    reason = {200: "OK", 400: "Bad Request"}[status]
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body
