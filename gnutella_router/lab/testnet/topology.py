"""Planning a test network: which node dials which, and where the sinks go.

:func:`plan_topology` turns a kind of topology into a set of directed links
``(dialer, listener)``; each unordered pair of nodes is linked at most once, no node
links to itself, and the network is connected whatever the draw:

* ``ring``: node i dials node i + 1; ``star``: every node dials node 0;
* ``random``: the ring plus ``degree`` random links per node (seeded);
* ``power-law``: Barabasi-Albert preferential attachment (networkx), each node
  attaching to ``degree + 1`` earlier ones, so a few hubs hold many links, as in the
  measured Gnutella overlays;
* ``two-tier``: ultrapeers (the first fifth of the nodes, at least one) meshed as a ring
  plus ``degree`` random links each, and every other node a leaf linked to
  :data:`LEAF_LINKS` ultrapeers; today the leaves are routers like the others, with few
  links, marked as leaves in the plan and the report.

:func:`load_topology` reads a planned graph from a file instead (an edge list, or
GraphML). For the kinds built with networkx and for files, the later node of each link
dials the earlier one (as a node joining a grown network dials those already there).
networkx is imported where a graph is built, not with this module: the command line
reads this module for every command, a router's included, and need not carry it.
:func:`sink_nodes` picks the nodes whose sinks can still be reached by a query from
node 0 within its TTL.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import networkx as nx

TOPOLOGIES = ("random", "ring", "star", "power-law", "two-tier")
LEAVES_PER_ULTRAPEER = 4
"""two-tier: one node in five is an ultrapeer."""
LEAF_LINKS = 2
"""two-tier: the ultrapeers each leaf is linked with (as gtk-gnutella leaves keep a few)."""
MAX_FILE_NODES = 2000
QUERY_TTL = 7
"""TTL of the load client's queries (the generator's default); with the routers'
``max_ttl`` of 7 a sink can be at most ``QUERY_TTL - 2`` hops from node 0."""
MAX_REMOTE_SINKS = 4


@dataclasses.dataclass(frozen=True, slots=True)
class LinkShape:
    """An emulated link's own values, from a topology file; None: the run's default."""

    delay_ms: float | None = None
    """One way, in milliseconds."""
    jitter_ms: float | None = None
    bandwidth_kbps: float | None = None
    """Each way, in kilobits (1,000 bits) per second."""


LINK_ATTRIBUTES = {
    # GraphML edge attribute: (field, unit factor to the field's unit, lowest, highest)
    "delay": ("delay_ms", 1.0, 0.0, 60_000.0),
    "jitter": ("jitter_ms", 1.0, 0.0, 60_000.0),
    "bandwidth": ("bandwidth_kbps", 1.0, 8.0, 10_000_000.0),
    # The Internet Topology Zoo's link speed, in bits per second.
    "LinkSpeedRaw": ("bandwidth_kbps", 0.001, 8.0, 10_000_000.0),
}
"""Edge attributes a GraphML topology may give a link, and what they mean: ``delay`` and
``jitter`` in milliseconds, ``bandwidth`` in kbit/s (else the Topology Zoo's
``LinkSpeedRaw`` in bit/s)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Topology:
    """Who dials whom: ``links`` are ``(dialer, listener)`` node indices, sorted."""

    kind: str
    nodes: int
    links: tuple[tuple[int, int], ...]
    leaves: frozenset[int] = frozenset()
    """two-tier: the nodes planned as leaves."""
    shapes: tuple[tuple[tuple[int, int], LinkShape], ...] = ()
    """Links a topology file gave emulated values (delay, bandwidth), by planned link."""

    def shape(self, a: int, b: int) -> LinkShape:
        """What the file said of the link between ``a`` and ``b`` (either way round)."""
        for (x, y), shape in self.shapes:
            if (x, y) in ((a, b), (b, a)):
                return shape
        return LinkShape()

    def out_neighbours(self, node: int) -> list[int]:
        return [b for a, b in self.links if a == node]

    def degree(self, node: int) -> int:
        return sum(1 for a, b in self.links if node in (a, b))

    def distances(self, source: int = 0) -> dict[int, int]:
        """Hops from ``source`` to every node it reaches, links taken both ways."""
        adjacent: dict[int, set[int]] = {n: set() for n in range(self.nodes)}
        for a, b in self.links:
            adjacent[a].add(b)
            adjacent[b].add(a)
        found = {source: 0}
        queue = deque([source])
        while queue:
            node = queue.popleft()
            for other in sorted(adjacent[node]):
                if other not in found:
                    found[other] = found[node] + 1
                    queue.append(other)
        return found

    def host_pairs(self, servent_links: Sequence[Sequence[int]] = ()) -> list[tuple[int, int]]:
        """Who talks to whom, by host: the planned links, then servent j as host
        ``nodes + j`` with each router of ``servent_links[j]``."""
        pairs = list(self.links)
        for servent, routers in enumerate(servent_links):
            pairs += [(self.nodes + servent, router) for router in routers]
        return pairs

    def is_connected(self) -> bool:
        return self.nodes == 0 or len(self.distances(0)) == self.nodes

    def graph(self) -> nx.Graph:
        """The links as an undirected networkx graph over every node."""
        import networkx as nx

        graph = nx.Graph()
        graph.add_nodes_from(range(self.nodes))
        graph.add_edges_from(self.links)
        return graph

    def describe(self) -> dict[str, object]:
        """Its shape in numbers, for ``summary.json``."""
        import networkx as nx

        graph = self.graph()
        degrees = [d for _, d in graph.degree()]
        return {
            "degree_min": min(degrees, default=0),
            "degree_mean": round(sum(degrees) / max(len(degrees), 1), 2),
            "degree_max": max(degrees, default=0),
            "diameter": nx.diameter(graph) if self.nodes and self.is_connected() else None,
            "clustering": round(nx.average_clustering(graph), 3) if self.nodes else None,
        }


def plan_topology(kind: str, nodes: int, *, degree: int = 1, seed: int = 1) -> Topology:
    """The links of a ``ring``, ``star`` or ``random`` network of ``nodes`` nodes.

    * ``ring``: node i dials node i + 1, the last dials node 0.
    * ``star``: every other node dials node 0.
    * ``random``: the ring, plus ``degree`` random outgoing links per node, drawn with
      ``random.Random(seed)`` among the nodes it is not linked with yet (fewer when
      there are not that many left).

    Two nodes are linked at most once, whichever dials; no node dials itself.
    """
    if kind not in TOPOLOGIES:
        raise ValueError(f"unknown topology {kind!r}: expected one of {', '.join(TOPOLOGIES)}")
    if nodes < 1:
        raise ValueError("a network needs at least one node")
    if degree < 0:
        raise ValueError("degree must be 0 or more")
    if kind == "power-law":
        import networkx as nx

        attach = degree + 1
        graph = (
            nx.complete_graph(nodes)
            if nodes <= attach
            else nx.barabasi_albert_graph(nodes, attach, seed=seed)
        )
        return _from_graph(kind, nodes, graph)
    if kind == "two-tier":
        return _two_tier(nodes, degree, seed)
    links: list[tuple[int, int]] = []
    pairs: set[frozenset[int]] = set()

    def link(a: int, b: int) -> None:
        pair = frozenset((a, b))
        if a != b and pair not in pairs:
            pairs.add(pair)
            links.append((a, b))

    if kind == "star":
        for node in range(1, nodes):
            link(node, 0)
    else:
        for node in range(nodes):
            link(node, (node + 1) % nodes)
    if kind == "random":
        rng = random.Random(seed)
        for node in range(nodes):
            free = [o for o in range(nodes) if o != node and frozenset((node, o)) not in pairs]
            for other in sorted(rng.sample(free, min(degree, len(free)))):
                link(node, other)
    return Topology(kind, nodes, tuple(sorted(links)))


def _from_graph(
    kind: str, nodes: int, graph: nx.Graph, leaves: frozenset[int] = frozenset()
) -> Topology:
    """A networkx graph over 0..nodes-1 as links: the later node of each dials the earlier."""
    links = sorted((max(a, b), min(a, b)) for a, b in graph.edges() if a != b)
    return Topology(kind, nodes, tuple(links), leaves)


def _two_tier(nodes: int, degree: int, seed: int) -> Topology:
    import networkx as nx

    ultrapeers = max(1, round(nodes / (1 + LEAVES_PER_ULTRAPEER)))
    core = plan_topology("random", ultrapeers, degree=degree, seed=seed)
    graph = nx.Graph()
    graph.add_nodes_from(range(nodes))
    graph.add_edges_from(core.links)
    rng = random.Random(f"two-tier:{seed}")
    for leaf in range(ultrapeers, nodes):
        for ultrapeer in rng.sample(range(ultrapeers), min(LEAF_LINKS, ultrapeers)):
            graph.add_edge(leaf, ultrapeer)
    return _from_graph("two-tier", nodes, graph, frozenset(range(ultrapeers, nodes)))


def load_topology(path: Path) -> Topology:
    """A planned graph from ``path``: GraphML (``.graphml``) or an edge list (a pair of
    node names per line, ``#`` starts a comment). Node names are numbered in sorted
    order (numerically when they are all integers), so ``0..n-1`` keep their numbers.

    Raises:
        ValueError: unreadable, empty, a self-link, more than :data:`MAX_FILE_NODES`
            nodes, or not connected (the message says how many parts it has).
    """
    import networkx as nx

    try:
        if path.suffix.lower() == ".graphml":
            graph = nx.read_graphml(path)
        else:
            graph = _read_edge_list(path)
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    except (nx.NetworkXError, SyntaxError) as exc:  # GraphML parse errors
        raise ValueError(f"{path}: not a graph: {exc}") from None
    graph = nx.Graph(graph)  # directions and repeated links collapsed
    if graph.number_of_nodes() == 0:
        raise ValueError(f"{path}: no nodes")
    if graph.number_of_nodes() > MAX_FILE_NODES:
        raise ValueError(f"{path}: {graph.number_of_nodes()} nodes, at most {MAX_FILE_NODES}")
    loops = list(nx.selfloop_edges(graph))
    if loops:
        raise ValueError(f"{path}: node {loops[0][0]} is linked to itself")
    parts = nx.number_connected_components(graph)
    if parts > 1:
        raise ValueError(f"{path}: the graph is not connected: it has {parts} separate parts")
    names = sorted(graph.nodes, key=_name_order(list(graph.nodes)))
    numbered = nx.relabel_nodes(graph, {name: index for index, name in enumerate(names)})
    planned = _from_graph("file", len(names), numbered)
    shapes = []
    for a, b in planned.links:
        shape = _link_shape(path, names[a], names[b], numbered.edges[a, b])
        if shape != LinkShape():
            shapes.append(((a, b), shape))
    return dataclasses.replace(planned, shapes=tuple(shapes))


def _link_shape(path: Path, a: object, b: object, data: dict[str, object]) -> LinkShape:
    """A link's emulated values from its GraphML attributes (see :data:`LINK_ATTRIBUTES`).

    Raises:
        ValueError: a value that is no number in its range, naming the link.
    """
    values: dict[str, float] = {}
    for name in sorted(LINK_ATTRIBUTES, key=lambda n: n == "LinkSpeedRaw"):  # bandwidth first
        if name not in data:
            continue
        field, factor, lowest, highest = LINK_ATTRIBUTES[name]
        if field in values:
            continue
        raw = data[name]
        try:
            number = float(raw) * factor  # type: ignore[arg-type]
        except (TypeError, ValueError):
            number = math.nan
        if not lowest <= number <= highest:
            raise ValueError(
                f"{path}: link {a} - {b}: {name} = {raw!r} is not a number from "
                f"{lowest / factor:g} to {highest / factor:g}"
            )
        values[field] = number
    return LinkShape(**values)


def _read_edge_list(path: Path) -> nx.Graph:
    import networkx as nx

    graph = nx.Graph()
    for number, line in enumerate(path.read_text().splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) == 1:
            graph.add_node(words[0])  # a node of its own (it must be linked elsewhere)
        elif len(words) == 2:
            graph.add_edge(words[0], words[1])
        else:
            raise ValueError(f"{path}:{number}: expected two node names, got {len(words)} words")
    return graph


def _name_order(names: list[object]) -> Callable[[object], tuple[int, str]]:
    """Integers in numeric order when every name is one, else names as text."""
    numeric = all(str(n).lstrip("-").isdigit() for n in names)
    return (lambda n: (int(str(n)), "")) if numeric else (lambda n: (0, str(n)))


def sink_nodes(topology: Topology, limit: int = MAX_REMOTE_SINKS) -> list[int]:
    """Nodes other than 0 that get a sink: within query reach, the farthest first."""
    reach = QUERY_TTL - 2
    far = [(d, n) for n, d in topology.distances(0).items() if 0 < d <= reach]
    far.sort(key=lambda item: (-item[0], item[1]))
    return sorted(n for _, n in far[:limit])
