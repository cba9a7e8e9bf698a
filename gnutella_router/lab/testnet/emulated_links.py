"""Emulated links for a test network: each planned link's delay and bandwidth, and
where each is carried out.

Theory of operation
-------------------
``--link-delay MS[,JITTER]`` and ``--link-bandwidth KBPS`` give every planned link a
one-way delay and a rate each way; a GraphML topology file can give a link values of its
own (``delay``, ``jitter``, ``bandwidth``: :data:`~.topology.LINK_ATTRIBUTES`), which win
over the run's. Connections to the controller (the load client's injector and sinks,
the leaves, the GWebCache) are never shaped: they are the instruments, not the overlay.

Bandwidth needs namespaces (``--netns``). A node's traffic leaves its namespace through
its veth, where ``tc`` puts an HTB root that only sorts packets by destination address
into a class per shaped neighbour (anything else passes unshaped), and under each
class a tbf at the link's rate. So A's writes to B are shaped in A's namespace and B's
to A in B's, each at the link's rate, as on a full-duplex link of that speed.

Delay: where the kernel has netem (found out once per run, by adding one to the first
namespace's loopback), by a netem qdisc in the same place (the tbf under it). Where it
has not (this project's machine has none), or without namespaces, by the routers
themselves: each router's ``[emulation]`` section lists its neighbours' listening
addresses with their links' delays (:mod:`gnutella_router.net.link_emulation`). On
loopback, where every node is 127.0.0.1 and ports tell nodes apart, those addresses
must be known before the routers start: the nodes then get ports chosen ahead (two free
ports side by side each, as servents do) instead of ports picked when they bind.

Whatever ``tc`` makes lives inside the run's namespaces and goes with them.
"""

from __future__ import annotations

import dataclasses
import math
import subprocess
from collections.abc import Callable, Sequence

from gnutella_router.lab.testnet.namespaces import INNER_INTERFACE, NamespaceError, NamespaceNetwork
from gnutella_router.lab.testnet.servents import free_router_port
from gnutella_router.lab.testnet.topology import LinkShape, Topology
from gnutella_router.net.connection import format_address

MAX_DELAY_MS = 60_000.0
MIN_BANDWIDTH_KBPS = 8.0
MAX_BANDWIDTH_KBPS = 10_000_000.0
TC_TIMEOUT = 20.0
TBF_LATENCY_MS = 200
"""The longest a packet may queue in a link's tbf before it is dropped (as a router's
buffer would): with TCP on top, a link past its rate loses packets, not throughput."""
MTU_BYTES = 1514


def parse_delay(text: str) -> tuple[float, float]:
    """``MS`` or ``MS,JITTER``: the one-way delay and its jitter, in milliseconds.

    Raises:
        ValueError: not one or two numbers from 0 to 60000.
    """
    parts = text.split(",")
    if len(parts) > 2:
        raise ValueError(f"--link-delay {text!r}: expected MS or MS,JITTER")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise ValueError(f"--link-delay {text!r}: expected MS or MS,JITTER (numbers)") from None
    if not all(math.isfinite(v) and 0 <= v <= MAX_DELAY_MS for v in values):
        raise ValueError(f"--link-delay {text!r}: milliseconds from 0 to {MAX_DELAY_MS:g}")
    return values[0], values[1] if len(values) > 1 else 0.0


def check_bandwidth(kbps: float) -> float:
    if not (math.isfinite(kbps) and MIN_BANDWIDTH_KBPS <= kbps <= MAX_BANDWIDTH_KBPS):
        raise ValueError(
            f"--link-bandwidth {kbps:g}: kbit/s from {MIN_BANDWIDTH_KBPS:g} to "
            f"{MAX_BANDWIDTH_KBPS:g}"
        )
    return kbps


@dataclasses.dataclass(frozen=True, slots=True)
class Link:
    """One planned link's effective values: the file's where it gave them, else the
    run's."""

    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    bandwidth_kbps: float | None = None

    @property
    def delayed(self) -> bool:
        return self.delay_ms > 0 or self.jitter_ms > 0


class LinkPlan:
    """A run's emulated links; see the module docstring."""

    def __init__(
        self,
        topology: Topology,
        *,
        delay_ms: float = 0.0,
        jitter_ms: float = 0.0,
        bandwidth_kbps: float | None = None,
    ) -> None:
        self.topology = topology
        self.links: dict[tuple[int, int], Link] = {}
        for a, b in topology.links:
            shape = topology.shape(a, b)
            link = _effective(shape, delay_ms, jitter_ms, bandwidth_kbps)
            if link != Link():
                self.links[(a, b)] = link
        self.kernel_delay = False
        """Whether netem carries the delays (found out in :meth:`shape_namespaces`)."""
        self.ports: dict[int, int] = {}
        """Loopback ports chosen ahead for the nodes (:meth:`choose_ports`)."""

    @property
    def active(self) -> bool:
        return bool(self.links)

    @property
    def delays(self) -> bool:
        return any(link.delayed for link in self.links.values())

    @property
    def bandwidths(self) -> bool:
        return any(link.bandwidth_kbps is not None for link in self.links.values())

    def neighbours(self, index: int) -> list[tuple[int, Link]]:
        """Node ``index``'s shaped links, by the neighbour at their other end."""
        found = []
        for (a, b), link in sorted(self.links.items()):
            if index in (a, b):
                found.append((b if a == index else a, link))
        return found

    # ------------------------------------------------------------------ the routers

    def choose_ports(self, nodes: int) -> None:
        """Loopback: a port for each node now, so that the routers' delay tables can name
        their neighbours before anyone listens (only when the routers carry delays)."""
        if self.delays and not self.ports:
            self.ports = {index: free_router_port() for index in range(nodes)}

    def router_delays(self) -> bool:
        """Whether the routers hold their writes (delays, and no netem carries them)."""
        return self.delays and not self.kernel_delay

    def node_overrides(
        self, index: int, address_of: Callable[[int], tuple[str, int] | None]
    ) -> dict[str, object]:
        """Node ``index``'s ``[emulation]`` settings, as dotted overrides (none when the
        routers carry no delay): an entry per delayed link, by the neighbour's listening
        address."""
        if not self.router_delays():
            return {}
        entries = []
        for other, link in self.neighbours(index):
            address = address_of(other)
            if link.delayed and address is not None:
                entries.append(f"{format_address(*address)}={link.delay_ms:g},{link.jitter_ms:g}")
        return {"emulation.enabled": True, "emulation.links": entries} if entries else {}

    # ------------------------------------------------------------------ the kernel

    def shape_namespaces(self, network: NamespaceNetwork) -> None:
        """Put the links' qdiscs into the nodes' namespaces (after they are made).

        Raises:
            NamespaceError: ``tc`` is missing or refused a command.
        """
        if not self.active:
            return
        if self.delays:
            self.kernel_delay = _has_netem(network, network.namespace(0))
        if not (self.bandwidths or self.kernel_delay):
            return
        for index in range(min(network.nodes, self.topology.nodes)):
            lines = self.tc_commands(index, network.address)
            if lines:
                network.commands += [f"tc -n {network.namespace(index)} {line}" for line in lines]
                _tc_batch(network.namespace(index), lines)

    def tc_commands(self, index: int, address_of: Callable[[int], str]) -> list[str]:
        """``tc`` commands (for ``tc -batch``) shaping node ``index``'s egress: an HTB
        root that sorts by destination, and per shaped neighbour a class with a netem
        (when the kernel carries the delays) and a tbf (when the link has a rate)."""
        dev = INNER_INTERFACE
        lines = []
        minor = 0
        for other, link in self.neighbours(index):
            kernel_delay = self.kernel_delay and link.delayed
            if link.bandwidth_kbps is None and not kernel_delay:
                continue
            minor += 1
            handle = 10 + minor
            lines += [
                f"class add dev {dev} parent 1: classid 1:{minor} htb rate 10gbit quantum 60000",
                f"filter add dev {dev} parent 1: protocol ip prio 1 u32 match ip dst "
                f"{address_of(other)}/32 flowid 1:{minor}",
            ]
            parent = f"1:{minor}"
            if kernel_delay:
                jitter = f" {link.jitter_ms:g}ms" if link.jitter_ms else ""
                lines.append(
                    f"qdisc add dev {dev} parent {parent} handle {handle}: netem "
                    f"delay {link.delay_ms:g}ms{jitter} limit 100000"
                )
                parent, handle = f"{handle}:1", handle + 1000
            if link.bandwidth_kbps is not None:
                lines.append(
                    f"qdisc add dev {dev} parent {parent} handle {handle}: tbf "
                    f"rate {link.bandwidth_kbps:g}kbit burst {_burst(link.bandwidth_kbps)} "
                    f"latency {TBF_LATENCY_MS}ms"
                )
        if not lines:
            return []
        return [f"qdisc add dev {dev} root handle 1: htb", *lines]

    def describe(self) -> dict[str, object] | None:
        """How the links are emulated, for ``summary.json``."""
        if not self.active:
            return None
        delays = [link.delay_ms for link in self.links.values()]
        rates = [link.bandwidth_kbps for link in self.links.values() if link.bandwidth_kbps]
        return {
            "links": len(self.links),
            "delay_ms": {"min": min(delays), "max": max(delays)} if self.delays else None,
            "delay_by": None if not self.delays else ("netem" if self.kernel_delay else "routers"),
            "bandwidth_kbps": {"min": min(rates), "max": max(rates)} if rates else None,
            "bandwidth_by": "tbf" if rates else None,
        }


def _effective(
    shape: LinkShape, delay_ms: float, jitter_ms: float, bandwidth_kbps: float | None
) -> Link:
    return Link(
        delay_ms=delay_ms if shape.delay_ms is None else shape.delay_ms,
        jitter_ms=jitter_ms if shape.jitter_ms is None else shape.jitter_ms,
        bandwidth_kbps=bandwidth_kbps if shape.bandwidth_kbps is None else shape.bandwidth_kbps,
    )


def _burst(kbps: float) -> int:
    """Bytes a tbf may send at once: 10 ms at the rate, and never less than a frame."""
    return max(MTU_BYTES, math.ceil(kbps * 1000 / 8 * 0.01))


def _tc_batch(namespace: str, lines: Sequence[str]) -> None:
    arguments = ["tc", "-n", namespace, "-batch", "-"]
    try:
        done = subprocess.run(
            arguments,
            input="\n".join(lines) + "\n",
            capture_output=True,
            text=True,
            timeout=TC_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NamespaceError(f"{' '.join(arguments)}: {exc}") from exc
    if done.returncode != 0:
        raise NamespaceError(f"{' '.join(arguments)}: {done.stderr.strip() or done.returncode}")


def _has_netem(network: NamespaceNetwork, namespace: str) -> bool:
    """Whether this kernel has netem: one added to (and taken from) a namespace's
    loopback, where it touches nothing."""
    try:
        done = subprocess.run(
            ["tc", "-n", namespace, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
            capture_output=True,
            text=True,
            timeout=TC_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NamespaceError(f"tc: {exc}") from exc
    network.commands.append(f"tc -n {namespace} qdisc add dev lo root netem delay 1ms")
    if done.returncode != 0:
        return False
    subprocess.run(
        ["tc", "-n", namespace, "qdisc", "del", "dev", "lo", "root"],
        capture_output=True,
        timeout=TC_TIMEOUT,
        check=False,
    )
    return True
