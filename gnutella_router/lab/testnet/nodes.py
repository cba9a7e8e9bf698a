"""The nodes of a test network behind one face, whether they run here or as processes.

The controller (:mod:`.network`) never reaches into a router: it starts a node, reads
its admin pages as JSON (``/connections``, ``/stats``, ``/dump``), asks it for a dump
file and stops it, through :class:`NetworkNode`. A :class:`LocalNode` is a
:class:`~gnutella_router.daemon.Daemon` in the controller's own trio run whose pages are
answered by an admin server without a socket; a
:class:`~gnutella_router.lab.testnet.children.ChildNode` is ``gnutella-router run`` in an OS
process of its own, read over HTTP. Both give the same JSON, so formation, the status
line, collection and the report are written once, for both.

What the controller keeps of a node between two polls is a :class:`NodeView`: its
connections (who, which way, closing or not) and its routed and dropped totals.
"""

from __future__ import annotations

import abc
import dataclasses
import json
from pathlib import Path
from typing import Any

import trio

from gnutella_router.config import Config
from gnutella_router.daemon import Daemon
from gnutella_router.net.connection import format_address
from gnutella_router.observe.admin import AdminServer
from gnutella_router.observe.dump_files import write_dump_file

LOCAL_PEER = "127.0.0.1"


class NodeError(Exception):
    """A node could not be started, reached or read; the message says which and why."""


@dataclasses.dataclass(frozen=True, slots=True)
class PeerConnection:
    """One connection as a node's ``/connections`` page lists it."""

    peer: str
    """``HOST:PORT`` as the node formats it."""
    role: str
    """``incoming`` or ``outgoing``."""
    closing: bool


@dataclasses.dataclass(frozen=True, slots=True)
class NodeView:
    """What the controller last read of a node."""

    connections: tuple[PeerConnection, ...] = ()
    received: int = 0
    dropped: int = 0

    def open_connections(self) -> list[PeerConnection]:
        return [c for c in self.connections if not c.closing]

    def has_peer(self, peer: str, role: str | None = None) -> bool:
        return any(
            c.peer == peer and (role is None or c.role == role) for c in self.open_connections()
        )


@dataclasses.dataclass(frozen=True, slots=True)
class NodeFailure:
    """A node that died or never came up: its exit status and the end of its log."""

    node: int
    reason: str
    status: int | None = None
    log_tail: tuple[str, ...] = ()
    kind: str = "node"
    """``node`` (a router) or ``servent`` (a foreign one)."""

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.node}"

    def describe(self) -> str:
        text = f"{self.name} {self.reason}"
        if self.log_tail:
            text += "; its log ends:\n    " + "\n    ".join(self.log_tail)
        return text


def connections_from_page(page: object) -> tuple[PeerConnection, ...]:
    """The ``/connections`` page (a list of objects) as :class:`PeerConnection` s."""
    if not isinstance(page, list):
        raise NodeError("/connections did not answer a list")
    return tuple(
        PeerConnection(str(c.get("peer")), str(c.get("role")), bool(c.get("closing")))
        for c in page
        if isinstance(c, dict)
    )


def totals_from_stats(stats: object) -> tuple[int, int]:
    """Messages received and dropped, from the ``/stats`` page."""
    router = stats.get("router") if isinstance(stats, dict) else None
    if not isinstance(router, dict):
        raise NodeError("/stats has no router section")
    return _sum(router.get("received")), _sum(router.get("dropped"))


def _sum(counts: object) -> int:
    if isinstance(counts, dict):
        return sum(int(v) for v in counts.values() if isinstance(v, int))
    if isinstance(counts, list):
        return sum(int(v) for v in counts if isinstance(v, int))
    return 0


class NetworkNode(abc.ABC):
    """One node of the network, as the controller sees it."""

    kind: str = ""
    label: str = "node"
    """How it is named to people: ``node-3``."""

    def __init__(self, index: int, state_dir: Path) -> None:
        self.index = index
        self.state_dir = state_dir
        self.address: tuple[str, int] | None = None
        """Where it accepts peers, once started."""
        self.admin_address: tuple[str, int] | None = None
        self.guid: str | None = None
        self.view = NodeView()
        self.failure: NodeFailure | None = None

    @property
    def peer_name(self) -> str:
        """Its address as other nodes' ``/connections`` pages show it."""
        return "" if self.address is None else format_address(*self.address)

    @abc.abstractmethod
    async def start(self, nursery: trio.Nursery, config: Config) -> None:
        """Start the node with ``config`` and return once it listens.

        Raises:
            NodeError: it did not come up (why, and the end of its log if it has one).
        """

    @abc.abstractmethod
    async def get(self, target: str) -> Any:
        """The admin page ``target`` (``/stats``, ``/dump?limit=0``...) as JSON.

        Raises:
            NodeError: the node could not answer.
        """

    @abc.abstractmethod
    def running(self) -> bool:
        """Started and not stopped (nor dead)."""

    @abc.abstractmethod
    async def write_dump(self) -> None:
        """Have the node write a full dump into its state directory, as on SIGUSR1."""

    @abc.abstractmethod
    def request_stop(self) -> None:
        """Ask the node to stop the graceful way (Bye to its peers); returns at once."""

    @abc.abstractmethod
    async def wait_stopped(self, grace: float) -> bool:
        """Wait (at most ``grace`` seconds, then force) until it stopped; whether it
        stopped on its own."""

    async def refresh(self, *, totals: bool = True) -> NodeView:
        """Read its connections (and its totals) again; an unreachable node keeps its
        last view."""
        connections = connections_from_page(await self.get("/connections"))
        received, dropped = self.view.received, self.view.dropped
        if totals:
            received, dropped = totals_from_stats(await self.get("/stats"))
        self.view = NodeView(connections, received, dropped)
        return self.view


class LocalNode(NetworkNode):
    """A daemon in this process; its admin pages answered without a socket."""

    kind = "in-process"

    def __init__(self, index: int, state_dir: Path) -> None:
        super().__init__(index, state_dir)
        self.daemon: Daemon | None = None
        self._pages: AdminServer | None = None
        self._authorization: list[tuple[bytes, bytes]] = []

    async def start(self, nursery: trio.Nursery, config: Config) -> None:
        daemon = Daemon(config)
        failure: BaseException | None = None
        try:
            await nursery.start(daemon.run)
        except* OSError as group:
            # Binding the listener is what fails in practice (a --base-port in use).
            failure = _first_leaf(group)
        if failure is not None:
            self.failure = NodeFailure(self.index, f"did not start: {failure}")
            raise NodeError(f"cannot start node-{self.index} on {config.node.listen}: {failure}")
        self.daemon = daemon
        self._pages = AdminServer(daemon)
        if config.admin.token:
            self._authorization = [(b"authorization", f"Bearer {config.admin.token}".encode())]
        self.address = daemon.address
        self.admin_address = daemon.admin_address
        self.guid = daemon.guid.hex()

    async def get(self, target: str) -> Any:
        if self._pages is None:
            raise NodeError(f"node-{self.index} has not started")
        reply = await self._pages.answer("GET", target, self._authorization, LOCAL_PEER)
        data = json.loads(reply.body)
        if reply.status != 200:
            raise NodeError(f"node-{self.index} {target}: {data.get('error', reply.status)}")
        return data

    def running(self) -> bool:
        return self.daemon is not None and not self.daemon.stopped.is_set()

    async def write_dump(self) -> None:
        if self.daemon is not None:
            try:
                await write_dump_file(self.daemon, self.state_dir)
            except OSError as exc:
                raise NodeError(f"node-{self.index}: dump not written: {exc}") from exc

    def request_stop(self) -> None:
        if self.daemon is not None:
            self.daemon.request_stop()

    async def wait_stopped(self, grace: float) -> bool:
        if self.daemon is None:
            return True
        with trio.move_on_after(grace):
            await self.daemon.stopped.wait()
        return self.daemon.stopped.is_set()


def _first_leaf(error: BaseException) -> BaseException:
    """The first exception that is not a group, however deeply nested."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error
