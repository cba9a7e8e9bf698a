"""Starting a test network's nodes: each one's configuration, and the start itself.

:class:`Launcher` knows, for every node, what it needs to be part of the planned
network: where it listens (a port the system picks on loopback, its own address and the
usual port in a namespace), its admin interface (loopback, or beyond it, always with the
run's token), the run's GWebCache page that lists whom it dials, the servents and seeds it
dials too, and limits that fit a test network (every peer comes from one address on
loopback). It starts the foreign servents first, then the routers, several at once
(forked from the fork server, :mod:`.forks`, when there is one: then a start costs
milliseconds; in host processes shared by several routers, :mod:`.shared`, a start is
a few milliseconds too; else a few at a time, since Python's start-up is CPU work), and
publishes each router in the cache as soon as it listens.

How the planned links come up, whatever the order the routers start in: each router
dials only its planned peers (``catcher.learn_from_peers`` off: the hosts its
neighbours name are not cached), which its page of the run's cache lists once every
node has been started; until then a request waits a few seconds at most, answered the
moment the cache opens (:mod:`.cache`), and the router asks again if it was not. A
dial that fails (a peer not up yet, a handshake that timed out on a busy machine) is
retried after a backoff of half a second, doubling up to a few seconds; a dial gives
up after :data:`DIAL_TIMEOUT` seconds rather than wait on a peer that does not answer.
So no router fills its slots with peers nobody planned, and a planned link that failed
once is tried again until it is up.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from gnutella_router.config import Config, load_config
from gnutella_router.lab.testnet.cache import HostCacheService
from gnutella_router.lab.testnet.children import ChildNode, ServentNode
from gnutella_router.lab.testnet.churn import LEAVE, ChurnSettings, churn_schedule
from gnutella_router.lab.testnet.emulated_links import LinkPlan
from gnutella_router.lab.testnet.forks import ForkServer
from gnutella_router.lab.testnet.leaves import leaves_per_node
from gnutella_router.lab.testnet.namespaces import NamespaceNetwork
from gnutella_router.lab.testnet.nodes import LocalNode, NetworkNode, NodeError, NodeFailure
from gnutella_router.lab.testnet.servents import ServentSet, free_router_port
from gnutella_router.lab.testnet.settings import (
    SHARED_STARTING_AT_ONCE,
    STARTING_AT_ONCE,
    STOP_TIMEOUT,
    NetworkError,
    NetworkSettings,
)
from gnutella_router.lab.testnet.shared import HostPool, SharedNode
from gnutella_router.lab.testnet.topology import MAX_REMOTE_SINKS, Topology
from gnutella_router.net.connection import format_address

LOOPBACK = "127.0.0.1"
MIN_MAX_CONNECTIONS = 32
NAMESPACE_PORT = 6346
"""In namespaces every node listens on the usual Gnutella port (its admin on the next)."""
DIAL_TIMEOUT = 5.0
"""Seconds a router's dial (connect and handshake) and cache request may take: a peer
that does not answer by then is dialled again after its backoff."""
RUN_CATCHER = {
    # The run's own cache may be asked often; a node that was not listening yet when
    # dialled is dialled again soon; only planned peers are dialled.
    "catcher.gwebcache_interval": 1.0,
    "catcher.backoff_initial": 0.5,
    "catcher.backoff_max": 4.0,
    "catcher.dial_timeout": DIAL_TIMEOUT,
    "catcher.learn_from_peers": False,
}
FORKED_AT_ONCE = 16
"""Routers being forked and waiting to listen at the same time."""


class Launcher:
    """Configures and starts one run's nodes and servents; see the module docstring."""

    def __init__(
        self,
        settings: NetworkSettings,
        topology: Topology,
        cache: HostCacheService,
        *,
        forks: ForkServer | None = None,
        namespaces: NamespaceNetwork | None,
        servents: ServentSet | None,
        failures: list[NodeFailure],
        on_failure: Callable[[NodeFailure], None],
        note: Callable[[str], None],
        link_plan: LinkPlan | None = None,
    ) -> None:
        self.settings = settings
        self.mode = settings.node_mode
        self.topology = topology
        self.cache = cache
        self.forks = forks
        self.namespaces = namespaces
        self.servents = servents
        self.failures = failures
        self.on_failure = on_failure
        self.note = note
        self.link_plan = link_plan or LinkPlan(topology)
        """Emulated links (:mod:`.emulated_links`): the routers' share of them goes into
        their configurations."""
        if namespaces is None and settings.base_port is None:
            self.link_plan.choose_ports(settings.nodes)
        self.admin_token = secrets.token_hex(16)
        """Every node's admin token: control (the console) needs one, and admin
        interfaces beyond loopback (in namespaces) take requests with it only."""
        self.nodes: list[NetworkNode] = []
        self.shared = (
            HostPool(settings.routers_per_process, settings.results)
            if settings.routers_per_process is not None
            else None
        )
        """``shared`` mode: the host processes the routers run in (:mod:`.shared`)."""
        self.leaf_slots = dict.fromkeys(range(settings.nodes), 0) | leaves_per_node(
            settings.leaf_count, settings.ultrapeers(topology)
        )
        """Leaves each node will take (:mod:`.leaves`): its leaf slots must hold them."""

    def node_dir(self, index: int) -> Path:
        return self.settings.results / f"node-{index}"

    def node_config(self, index: int, *, listen: tuple[str, int] | None = None) -> Config:
        """Node ``index``'s configuration; ``listen`` keeps the address it had (a node
        coming back from churn returns where the others' host caches expect it)."""
        settings = self.settings
        out_degree = len(self.topology.out_neighbours(index))
        servents = self.servents.seeds_for(index) if self.servents is not None else []
        wanted = out_degree + len(settings.seeds) + len(servents)
        extra: dict[str, object] = dict(RUN_CATCHER)
        if self.namespaces is not None:
            # A host of its own: the usual ports, and an admin interface the controller
            # reaches across the bridge, with the run's token.
            host = self.namespaces.address(index)
            subnet = self.namespaces.subnet
            assert subnet is not None  # made by create(), before any node is configured
            extra |= {
                "node.listen": f"{host}:{NAMESPACE_PORT}",
                "admin.listen": f"{host}:{NAMESPACE_PORT + 1}",
                "admin.allow_remote": True,
                # The controller's load clients, sinks and leaves all come from the
                # bridge's one address: trusted, as loopback is, so that one address
                # may hold many connections. Each node has an address of its own.
                "network.trusted": [
                    *Config().network.trusted,
                    f"{self.namespaces.gateway}/32",
                ],
                # Every node is in the run's one /16 of the private 10.64.0.0/10: the
                # routers must cache and dial each other's private addresses, without the
                # per-network share that protects a router on the internet.
                "network.local_networks": [
                    *Config().network.local_networks,
                    str(subnet),
                ],
            }
        else:
            port = (
                self.link_plan.ports.get(index, 0)
                if settings.base_port is None
                else settings.base_port + index
            )
            where = format_address(*listen) if listen is not None else f"{LOOPBACK}:{port}"
            # The admin default, the node's port + 1, is the next node's port.
            extra |= {"node.listen": where, "admin.listen": f"{LOOPBACK}:0"}
        extra |= self.link_plan.node_overrides(index, self.planned_address)
        return load_config(
            None,
            {
                **extra,
                "node.state_dir": str(self.node_dir(index).resolve()),
                "admin.token": self.admin_token,
                "log.level": "warning",
                "catcher.gwebcache": self.cache.url(index),
                "catcher.seeds": [*settings.seeds, *servents],
                "catcher.min_connections": wanted,
                "network.max_connections": max(
                    MIN_MAX_CONNECTIONS,
                    self.topology.degree(index) + wanted - out_degree + MAX_REMOTE_SINKS + 8,
                ),
                # On loopback every peer of a test network comes from 127.0.0.1: the
                # per-address limit on connection attempts must allow the whole network.
                "network.connects_per_ip_per_minute": max(
                    Config().network.connects_per_ip_per_minute,
                    4 * settings.nodes + settings.leaf_count + 64,
                ),
                "network.max_leaves": max(Config().network.max_leaves, self.leaf_slots[index]),
            },
        )

    def planned_address(self, index: int) -> tuple[str, int] | None:
        """Where node ``index`` will listen, when that is known before it starts."""
        if self.namespaces is not None:
            return self.namespaces.address(index), NAMESPACE_PORT
        if self.settings.base_port is not None:
            return LOOPBACK, self.settings.base_port + index
        port = self.link_plan.ports.get(index)
        return None if port is None else (LOOPBACK, port)

    def new_node(self, index: int, limiter: trio.CapacityLimiter) -> NetworkNode:
        if self.shared is not None:
            return SharedNode(
                index,
                self.node_dir(index),
                self.shared.host_for(index),
                namespace=None if self.namespaces is None else self.namespaces.namespace(index),
                on_failure=self.on_failure,
                start_timeout=self.settings.formation_timeout,
            )
        if self.mode == "processes":
            namespaces = self.namespaces
            forked = self.forks is not None
            return ChildNode(
                index,
                self.node_dir(index),
                on_failure=self.on_failure,
                prefix=() if namespaces is None or forked else namespaces.exec_prefix(index),
                token=self.admin_token,
                start_timeout=self.settings.start_timeout,
                limiter=limiter,
                forks=self.forks,
                namespace=None if namespaces is None else namespaces.namespace(index),
            )
        return LocalNode(index, self.node_dir(index))

    async def start_nodes(
        self,
        nursery: trio.Nursery,
        *,
        before_open: Callable[[dict[int, tuple[str, int]]], Awaitable[None]] | None = None,
    ) -> None:
        """Start every node; ``before_open`` is given the started nodes' addresses before
        the bootstrap cache answers anyone (the leaves join then)."""
        # A host cache saved by an earlier run would make the catchers dial
        # yesterday's ports; each run starts from the planned topology.
        for index in range(self.settings.nodes):
            (self.node_dir(index) / Config().catcher.host_cache_file).unlink(missing_ok=True)
        if self.servents is not None:
            await self.start_servents(nursery)
        admin_threads = trio.CapacityLimiter(16)
        self.nodes = [self.new_node(i, admin_threads) for i in range(self.settings.nodes)]
        if self.mode == "shared":
            at_once = trio.Semaphore(SHARED_STARTING_AT_ONCE)
        elif self.mode == "processes":
            at_once = trio.Semaphore(FORKED_AT_ONCE if self.forks else STARTING_AT_ONCE)
        else:
            at_once = trio.Semaphore(1)  # each start is CPU work on this very thread
        errors: list[str] = []

        async def start(node: NetworkNode) -> None:
            async with at_once:
                try:
                    await node.start(nursery, self.node_config(node.index))
                except NodeError as exc:
                    errors.append(str(exc))
                    if node.failure is not None:
                        self.failures.append(node.failure)
                    return
            assert node.address is not None
            self.cache.publish_node(node.index, node.address)

        async with trio.open_nursery() as starting:
            for node in self.nodes:
                starting.start_soon(start, node)
        if before_open is not None:
            await before_open(
                {n.index: n.address for n in self.nodes if n.address is not None and n.running()}
            )
        self.cache.open()  # every node started (or failed): all pages complete at once
        if errors and (self.settings.on_node_failure == "stop" or len(errors) == len(self.nodes)):
            raise NetworkError(
                errors[0]
                if len(errors) == 1
                else f"{len(errors)} nodes did not start; first: {errors[0]}"
            )
        for error in errors:
            self.note(f"warning: {error} (going on without it)")

    async def start_servents(self, nursery: trio.Nursery) -> None:
        """Start the foreign servents (before the routers, which dial them as seeds)."""
        assert self.servents is not None
        count, routers = self.settings.servent_count, self.settings.nodes
        if self.namespaces is not None:
            addresses = [
                (self.namespaces.address(routers + j), NAMESPACE_PORT) for j in range(count)
            ]
            prefixes = [self.namespaces.exec_prefix(routers + j) for j in range(count)]
        else:
            # A port whose next one is free too: a servent that is one of our routers
            # puts its admin interface there.
            addresses, prefixes = [(LOOPBACK, free_router_port()) for _ in range(count)], []
        servents = self.servents.create(
            addresses,
            prefixes=prefixes,
            on_failure=self.on_failure,
            start_timeout=self.settings.servent_timeout,
        )
        errors: list[str] = []

        async def start(servent: ServentNode) -> None:
            try:
                await servent.start(nursery)
            except NodeError as exc:
                errors.append(str(exc))
                if servent.failure is not None:
                    self.failures.append(servent.failure)

        async with trio.open_nursery() as starting:
            for servent in servents:
                starting.start_soon(start, servent)
        if errors and (self.settings.on_node_failure == "stop" or len(errors) == count):
            raise NetworkError(errors[0])
        for error in errors:
            self.note(f"warning: {error} (going on without it)")

    async def take_down(self, node: ChildNode, *, kill: bool, grace: float) -> None:
        """Churn: the node leaves (Bye, or SIGKILL as a crashed host) and the cache
        stops listing it."""
        if kill:
            node.kill()
        else:
            node.request_stop()
        await node.wait_stopped(grace)
        self.cache.publish_node(node.index, None)

    async def bring_back(self, node: ChildNode, nursery: trio.Nursery) -> None:
        """Churn: start the node again where it was, and list it in the cache again.

        Raises:
            NodeError: it did not come back.
        """
        await node.restart(nursery, self.node_config(node.index, listen=node.address))
        assert node.address is not None
        self.cache.publish_node(node.index, node.address)

    async def churn(
        self,
        churn: ChurnSettings,
        steady: set[int],
        length: float,
        started: float,
        log: list[dict[str, Any]],
        nursery: trio.Nursery,
        changed: Callable[[], None] | None = None,
    ) -> None:
        """Carry out the churn schedule over ``length`` seconds, appending each event to
        ``log`` (times from ``started``) and calling ``changed`` after it. The ``steady``
        nodes stay up: the load client's peers are there."""
        churning = [n for n in range(self.settings.nodes) if n not in steady]
        begun = trio.current_time()
        for event in churn_schedule(churning, churn, length, self.settings.seed):
            await trio.sleep_until(begun + event.at)
            node = self.nodes[event.node]
            if not isinstance(node, ChildNode):
                continue
            ok = True
            if event.action == LEAVE:
                if not node.running():
                    continue
                await self.take_down(node, kill=churn.kill, grace=STOP_TIMEOUT)
            else:
                try:
                    await self.bring_back(node, nursery)
                except NodeError as exc:
                    ok = False
                    self.on_failure(NodeFailure(node.index, f"did not come back: {exc}"))
            log.append(
                {
                    "at": round(trio.current_time() - started, 3),
                    "node": event.node,
                    "action": "kill" if event.action == LEAVE and churn.kill else event.action,
                    "ok": ok,
                }
            )
            if changed is not None:
                changed()
