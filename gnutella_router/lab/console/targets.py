"""The routers a console talks to, and the gateway to their admin interfaces.

A console works on a :class:`Network`: named nodes, each a router's admin interface,
with what is known of it (where it listens for peers, its GUID) and, for a test
network, the planned links. It comes from a running test network's record
(:mod:`gnutella_router.lab.testnet.record`: every node, the admin token, the plan) or from
admin addresses named on the command line (any routers, anywhere their admin interface
is reachable; their peer addresses are learned from their ``/dump``).

Everything that crosses the network goes through a :class:`Gateway`: one GET or POST to
one node's admin interface, JSON back, or a :class:`ConsoleError` that names the node
and says what went wrong. :class:`AdminGateway` is the real one (blocking
:mod:`http.client`, a timeout on everything); tests give the session a fake. Reads of
many nodes run side by side (:meth:`Network.each`), a few at a time, and never more than
one at a time per node, well within an admin interface's per-client limit.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from gnutella_router.addresses import AddressError, parse_host_port
from gnutella_router.lab.testnet.record import (
    RecordError,
    find_network_record,
    read_network_record,
)
from gnutella_router.net.connection import format_address
from gnutella_router.observe.admin_client import FetchError, fetch, post

__all__ = [
    "AdminGateway",
    "ConsoleError",
    "Gateway",
    "Network",
    "Node",
]

T = TypeVar("T")
PARALLEL_READS = 16
"""Nodes read at once (one request at a time each)."""


class ConsoleError(Exception):
    """A command that could not be carried out; the message says which node and why."""


@dataclasses.dataclass(slots=True)
class Node:
    """One router as the console knows it."""

    name: str
    """``node-3``."""
    index: int
    admin: tuple[str, int] | None
    """Its admin interface (None: the record names none, e.g. it never started)."""
    address: str | None = None
    """``HOST:PORT`` where peers dial it (its routes' next hops name it so)."""
    guid: str | None = None
    admin_of: Callable[[], str | None] | None = dataclasses.field(default=None, repr=False)
    """Where its admin interface listens now, if that can change (a restarted node)."""

    def current_admin(self) -> tuple[str, int] | None:
        if self.admin_of is not None:
            text = self.admin_of()
            if text is not None:
                with contextlib.suppress(AddressError):
                    self.admin = parse_host_port(text)
        return self.admin


class Gateway(Protocol):
    """One request to one node's admin interface."""

    def get(self, node: Node, path: str) -> object:
        """GET ``path`` and decode its JSON (ConsoleError on any failure)."""
        ...

    def post(self, node: Node, path: str, body: object) -> object:
        """POST ``body`` as JSON to a control endpoint (ConsoleError on any failure)."""
        ...


class AdminGateway:
    """The admin interfaces over HTTP, with the network's token."""

    def __init__(self, token: str = "", *, timeout: float = 5.0) -> None:
        self.token = token
        self.timeout = timeout

    def get(self, node: Node, path: str) -> object:
        return self._call(
            node, lambda where: fetch(where, path, token=self.token, timeout=self.timeout)
        )

    def post(self, node: Node, path: str, body: object) -> object:
        return self._call(
            node, lambda where: post(where, path, body, token=self.token, timeout=self.timeout)
        )

    @staticmethod
    def _call(node: Node, request: Callable[[tuple[str, int]], object]) -> object:
        where = node.current_admin()
        if where is None:
            raise ConsoleError(f"{node.name}: its admin address is not known (did it start?)")
        try:
            return request(where)
        except FetchError as exc:
            raise ConsoleError(f"{node.name}: {exc}") from None


class Network:
    """The nodes a console works on, the planned links, and the gateway to them."""

    def __init__(
        self,
        nodes: Sequence[Node],
        gateway: Gateway,
        *,
        planned: Iterable[tuple[int, int]] = (),
        source: str = "",
    ) -> None:
        if not nodes:
            raise ConsoleError("no nodes to work on")
        self.nodes = list(nodes)
        self.gateway = gateway
        self.planned = [tuple(link) for link in planned]
        """``(dialer, listener)`` index pairs of a test network's plan; empty otherwise."""
        self.source = source
        """Where the nodes came from, for the greeting."""

    # ------------------------------------------------------------------ making one

    @classmethod
    def from_record(cls, where: Path, *, token: str | None = None, timeout: float = 5.0) -> Network:
        """The test network recorded at ``where`` (a ``network.json`` or its folder).

        Raises:
            ConsoleError: no running network is recorded there.
        """
        try:
            path = find_network_record(where)
            record = read_network_record(path)
        except RecordError as exc:
            raise ConsoleError(str(exc)) from None
        nodes = []
        for index, entry in enumerate(record.nodes):
            admin = None
            if entry.admin is not None:
                try:
                    admin = parse_host_port(entry.admin)
                except AddressError:
                    admin = None
            nodes.append(
                Node(entry.name, index, admin, entry.address, entry.guid, entry.current_admin)
            )
        gateway = AdminGateway(record.token if token is None else token, timeout=timeout)
        return cls(nodes, gateway, planned=record.links, source=f"test network {path.parent}")

    @classmethod
    def from_admins(
        cls, admins: Sequence[tuple[str, int]], *, token: str = "", timeout: float = 5.0
    ) -> Network:
        """Routers named by their admin addresses, ``node-0``... in that order."""
        nodes = [Node(f"node-{i}", i, admin) for i, admin in enumerate(admins)]
        where = ", ".join(format_address(*a) for a in admins)
        return cls(nodes, AdminGateway(token, timeout=timeout), source=f"routers at {where}")

    # ------------------------------------------------------------------ naming

    def node(self, text: str) -> Node:
        """The node a person named: ``node-2``, ``2``, or its admin or peer address.

        Raises:
            ConsoleError: no such node (the message lists the names there are).
        """
        for node in self.nodes:
            if text in (node.name, str(node.index), node.address) or (
                node.admin is not None and text == format_address(*node.admin)
            ):
                return node
        names = ", ".join(n.name for n in self.nodes[:12])
        more = ", ..." if len(self.nodes) > 12 else ""
        raise ConsoleError(f"no node {text!r}; the nodes are {names}{more}")

    def names(self) -> list[str]:
        return [node.name for node in self.nodes]

    def by_address(self) -> dict[str, str]:
        """Node names by peer address, for naming routes' next hops."""
        return {node.address: node.name for node in self.nodes if node.address}

    def identify(self) -> None:
        """Learn the peer address and GUID of nodes named only by their admin address
        (from ``/dump?limit=0``); a node that does not answer stays unknown."""
        unknown = [n for n in self.nodes if n.address is None]

        def read(node: Node) -> None:
            dump = self.gateway.get(node, "/dump?limit=0")
            identity = dump.get("node") if isinstance(dump, dict) else None
            if isinstance(identity, dict):
                advertised = identity.get("advertised")
                node.address = advertised if isinstance(advertised, str) else None
                guid = identity.get("guid")
                node.guid = guid if isinstance(guid, str) else None

        self.each(unknown, read)

    # ------------------------------------------------------------------ many at once

    def each(self, nodes: Sequence[Node], work: Callable[[Node], T]) -> dict[str, T | ConsoleError]:
        """``work(node)`` for every node, side by side; each node's result, or the
        ConsoleError that stopped it, by name (in the nodes' order)."""
        results: dict[str, T | ConsoleError] = {}
        if not nodes:
            return results

        def attempt(node: Node) -> T | ConsoleError:
            try:
                return work(node)
            except ConsoleError as exc:
                return exc

        workers = min(PARALLEL_READS, len(nodes))
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            outcomes = list(pool.map(attempt, nodes))
        for node, outcome in zip(nodes, outcomes, strict=True):
            results[node.name] = outcome
        return results
