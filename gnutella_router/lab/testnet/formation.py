"""Whether a test network has formed: one definition for the status line, the
``connectivity.csv`` samples, the report and the failure message.

Theory of operation
-------------------
A *link* is an open connection between two routers of the network. It is found from
the side that dialled it, the only side that can tell: a node's outgoing connection
whose peer is another running node's listening address. (An incoming connection's peer
is the dialler's ephemeral port on loopback, which names no node.) Connections to
anything else (the load client's peers, leaves, servents, outside seeds) are not links.

* A planned link is *up* when a link joins its two nodes, whichever of them dialled.
* A link between two nodes the plan does not join is *outside the plan*: counted, and
  named in the report, never counted as a planned one. (A test network's routers dial
  only their planned peers, ``catcher.learn_from_peers`` being off, so there should be
  none.)
* A planned link between two running nodes that is not up is *missing*; a node that is
  not running is *down*, and its links are neither up nor missing.
* The network has *formed* when at least one node runs and no planned link is missing.

:func:`formation` takes one such snapshot from the nodes' last views; the status line
prints its counts, ``connectivity.csv`` gets one row per sample (:meth:`Formation.row`),
``summary.json`` the snapshot taken when formation ended (:meth:`Formation.describe`),
and :func:`failure_message` names what was missing when it did not end well.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import networkx as nx

from gnutella_router.lab.testnet.nodes import NetworkNode
from gnutella_router.lab.testnet.topology import Topology

NAMED_IN_MESSAGES = 20
"""Links named in a failure message at most (``summary.json`` lists them all)."""

Link = tuple[int, int]


@dataclasses.dataclass(frozen=True, slots=True)
class Formation:
    """The network's links at one moment; see the module docstring."""

    at: float
    nodes: int
    nodes_up: int
    links_planned: int
    links_up: int
    components: int
    largest_component: int
    missing: tuple[Link, ...] = ()
    """Planned links between running nodes that are not up, as planned (dialler first)."""
    outside_plan: tuple[Link, ...] = ()
    """Links the plan does not have, as dialled (dialler first)."""
    down: tuple[int, ...] = ()
    """Nodes not running."""

    @property
    def formed(self) -> bool:
        return self.nodes_up > 0 and not self.missing

    @property
    def links_outside_plan(self) -> int:
        return len(self.outside_plan)

    def counts(self) -> str:
        """``links 398/400`` (and those outside the plan, if any): for the status line."""
        text = f"links {self.links_up}/{self.links_planned}"
        if self.outside_plan:
            text += f" (+{len(self.outside_plan)} outside the plan)"
        return text

    def row(self) -> dict[str, object]:
        """One line of ``connectivity.csv``."""
        return {
            "at": self.at,
            "nodes_up": self.nodes_up,
            "links_up": self.links_up,
            "links_planned": self.links_planned,
            "links_outside_plan": len(self.outside_plan),
            "components": self.components,
            "largest_component": self.largest_component,
        }

    def describe(self) -> dict[str, object]:
        """What ``summary.json`` keeps of it."""
        return {
            "formed": self.formed,
            "at_seconds": self.at,
            "nodes_up": self.nodes_up,
            "nodes": self.nodes,
            "links_up": self.links_up,
            "links_planned": self.links_planned,
            "missing": [list(link) for link in self.missing],
            "outside_plan": [list(link) for link in self.outside_plan],
            "nodes_down": list(self.down),
        }


def dialled_links(nodes: Sequence[NetworkNode]) -> set[Link]:
    """Every link between running nodes, as (dialler, listener), from the diallers' views."""
    where = {node.peer_name: node.index for node in nodes if node.running() and node.peer_name}
    links = set()
    for node in nodes:
        if not node.running():
            continue
        for connection in node.view.open_connections():
            other = where.get(connection.peer)
            if connection.role == "outgoing" and other is not None and other != node.index:
                links.add((node.index, other))
    return links


def formation(at: float, topology: Topology, nodes: Sequence[NetworkNode]) -> Formation:
    """The snapshot of ``nodes`` (their last views) against the plan, ``at`` seconds in."""
    running = {node.index for node in nodes if node.running()}
    dialled = dialled_links(nodes)
    joined = {frozenset(link) for link in dialled}
    planned = {frozenset(link) for link in topology.links}
    live = [
        (a, b) for a, b in topology.links if a in running and b in running
    ]  # planned, between running nodes
    up = sum(1 for link in live if frozenset(link) in joined)
    missing = tuple(link for link in live if frozenset(link) not in joined)
    outside: dict[frozenset[int], Link] = {}
    for link in sorted(dialled):
        pair = frozenset(link)
        if pair not in planned:
            outside.setdefault(pair, link)
    graph = nx.Graph()
    graph.add_nodes_from(running)
    graph.add_edges_from(dialled)
    parts = list(nx.connected_components(graph)) if running else []
    return Formation(
        at=round(at, 3),
        nodes=topology.nodes,
        nodes_up=len(running),
        links_planned=len(topology.links),
        links_up=up,
        components=len(parts),
        largest_component=max((len(p) for p in parts), default=0),
        missing=missing,
        outside_plan=tuple(outside.values()),
        down=tuple(n for n in range(topology.nodes) if n not in running),
    )


def failure_message(state: Formation, nodes: Sequence[NetworkNode], waited: float) -> str:
    """Why the network did not form within ``waited`` seconds: the links missing (with
    the listener's address), who holds how many of its planned links, the nodes down
    and the links outside the plan, each list cut at :data:`NAMED_IN_MESSAGES`."""
    by_index = {node.index: node for node in nodes}

    def address(index: int) -> str:
        node = by_index.get(index)
        return node.peer_name if node is not None and node.peer_name else "no address"

    parts = [
        f"the network did not form within {waited:g} s: "
        f"{len(state.missing)} of {state.links_planned} planned links missing: "
        + _named(f"node-{a} -> node-{b} ({address(b)})" for a, b in state.missing)
    ]
    diallers = sorted({a for a, _ in state.missing})
    if diallers:
        parts.append("nodes missing links: " + _named(f"node-{a}" for a in diallers))
    if state.down:
        parts.append("nodes not running: " + _named(f"node-{n}" for n in state.down))
    if state.outside_plan:
        parts.append(
            f"{len(state.outside_plan)} links outside the plan: "
            + _named(f"node-{a} -> node-{b}" for a, b in state.outside_plan)
        )
    return "; ".join(parts)


def _named(names: Any) -> str:
    listed = list(names)
    text = ", ".join(listed[:NAMED_IN_MESSAGES])
    if len(listed) > NAMED_IN_MESSAGES:
        text += f" and {len(listed) - NAMED_IN_MESSAGES} more (summary.json lists them all)"
    return text
