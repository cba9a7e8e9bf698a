"""Planning a test network: which node dials which, and where the sinks go.

:func:`plan_topology` turns ``ring``, ``star`` or ``random`` into a set of directed links
``(dialer, listener)``; each unordered pair of nodes is linked at most once and no node
links to itself. ``random`` is seeded and always contains the ring, so the network is
connected whatever the draw. :func:`sink_nodes` picks the nodes whose sinks can still
be reached by a query from node 0 within its TTL.
"""

from __future__ import annotations

import dataclasses
import random
from collections import deque

TOPOLOGIES = ("random", "ring", "star")
QUERY_TTL = 7
"""TTL of the load client's queries (the generator's default); with the routers'
``max_ttl`` of 7 a sink can be at most ``QUERY_TTL - 2`` hops from node 0."""
MAX_REMOTE_SINKS = 4


@dataclasses.dataclass(frozen=True, slots=True)
class Topology:
    """Who dials whom: ``links`` are ``(dialer, listener)`` node indices, sorted."""

    kind: str
    nodes: int
    links: tuple[tuple[int, int], ...]

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

    def is_connected(self) -> bool:
        return self.nodes == 0 or len(self.distances(0)) == self.nodes


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


def sink_nodes(topology: Topology, limit: int = MAX_REMOTE_SINKS) -> list[int]:
    """Nodes other than 0 that get a sink: within query reach, the farthest first."""
    reach = QUERY_TTL - 2
    far = [(d, n) for n, d in topology.distances(0).items() if 0 < d <= reach]
    far.sort(key=lambda item: (-item[0], item[1]))
    return sorted(n for _, n in far[:limit])
