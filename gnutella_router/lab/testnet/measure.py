"""What overlay research measures, taken from a test network's own tables.

Theory of operation
-------------------
The routers already keep what is needed: each node's query route table holds one entry
per query GUID it saw, with the hops the first copy had travelled, and counts the
duplicate copies it dropped; each connection counts the messages and bytes it carried.
The load client's injector counts the query hits that came back per GUID. So, read
through the nodes' admin pages at the end of the traffic:

* **reach** of a query: the nodes whose query table holds its GUID, and by how many
  hops each first saw it. Reach "within TTL ``t``" counts the nodes whose first copy
  had travelled at most ``t - 1`` hops past the injector's router: a lower bound of
  what a query sent with TTL ``t`` reaches, since a node whose first copy came the
  long way round (a slower path wins the race) may be within ``t - 1`` hops too;
* **duplicates**: copies dropped as duplicates across the network, per query (the
  tables count them per table, not per GUID, so this is the run's mean per query);
* **hits** at the origin: per GUID, how many hits came back and when the first did,
  and the share of queries that got at least one (success);
* **load per node**: messages and bytes per second in and out over the overlay links,
  from the connection counters before and after the traffic;
* **connectivity over time**: sampled with the status line, as :mod:`.formation`
  defines it: the planned links up, the links outside the plan, the graph of every link
  between running nodes, its connected components and the largest one's size.

Beside the measured reach and duplicates goes what a pure flood on the planned graph
would give (:func:`flood_model`), computed with networkx: a node at distance ``d`` from
the origin is reached when ``d <= TTL - 1`` and, unless its copy arrives with TTL 1,
forwards it to every neighbour but the one it came from. A measured curve below the
model means copies were lost or a longer path won the race; above it cannot happen.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import networkx as nx

from gnutella_router.lab.testnet.formation import Formation, formation
from gnutella_router.lab.testnet.nodes import NetworkNode
from gnutella_router.lab.testnet.topology import QUERY_TTL, Topology


@dataclasses.dataclass(frozen=True, slots=True)
class QueryRecord:
    """One query of the run, seen across the network."""

    guid: str
    reach: int
    """Nodes whose query table holds it (the origin's router included)."""
    hops: dict[int, int]
    """Nodes by the hops its first copy to them had travelled."""
    hits: int
    first_hit_ms: float | None


def flood_model(topology: Topology, origin: int = 0, ttl: int = QUERY_TTL) -> dict[str, list[int]]:
    """Reach and duplicates of a pure flood from ``origin`` for each TTL from 1 to ``ttl``.

    The origin's router receives the query from a client with TTL ``t`` and sends it to
    all its neighbours; a node first reached at distance ``d`` gets it with ``t - d``
    left and forwards it to its other neighbours when more than 1 is left. Every copy
    beyond the first a node gets is a duplicate.
    """
    graph = topology.graph()
    distance = nx.single_source_shortest_path_length(graph, origin)
    reach, duplicates = [], []
    for t in range(1, ttl + 1):
        reached = [n for n, d in distance.items() if d <= t - 1]
        sent = sum(
            graph.degree(n) - (0 if n == origin else 1) for n in reached if t - distance[n] > 1
        )
        reach.append(len(reached))
        duplicates.append(sent - (len(reached) - 1))
    return {"ttl": list(range(1, ttl + 1)), "reach": reach, "duplicates": duplicates}


def query_records(
    route_pages: Sequence[Any],
    hits: Mapping[bytes, Sequence[int]],
    origin: int = 0,
) -> list[QueryRecord]:
    """Per query GUID, from every node's ``/routes?table=query`` page (None where a node
    could not be read): the queries are those the origin's router got from its client
    (first seen there with 0 hops)."""
    seen: dict[str, dict[int, int]] = {}
    for node, page in enumerate(route_pages):
        for entry in _query_entries(page):
            seen.setdefault(entry["guid"], {})[node] = int(entry["hops"])
    ours = [guid for guid, nodes in seen.items() if nodes.get(origin) == 0]
    records = []
    for guid in sorted(ours):
        by_hops: dict[int, int] = {}
        for hops in seen[guid].values():
            by_hops[hops] = by_hops.get(hops, 0) + 1
        answered = hits.get(bytes.fromhex(guid))
        records.append(
            QueryRecord(
                guid=guid,
                reach=len(seen[guid]),
                hops=dict(sorted(by_hops.items())),
                hits=0 if answered is None else int(answered[0]),
                first_hit_ms=None if answered is None else round(answered[1] / 1e6, 3),
            )
        )
    return records


def _query_entries(page: Any) -> list[dict[str, Any]]:
    if not isinstance(page, dict):
        return []
    table = page.get("tables", {}).get("query")
    entries = table.get("entries") if isinstance(table, dict) else None
    return [e for e in entries or [] if isinstance(e, dict) and "guid" in e and "hops" in e]


def query_duplicates(route_pages: Sequence[Any]) -> int:
    """Query copies the nodes recognised as duplicates, network-wide."""
    total = 0
    for page in route_pages:
        if isinstance(page, dict):
            table = page.get("tables", {}).get("query") or {}
            total += int((table.get("statistics") or {}).get("duplicates", 0))
    return total


def reach_within(record: QueryRecord, ttl: int) -> int:
    """Nodes the query reached within ``ttl`` (first seen at most ``ttl - 1`` hops on)."""
    return sum(count for hops, count in record.hops.items() if hops <= ttl - 1)


def summarise(
    records: Sequence[QueryRecord], duplicates: int, topology: Topology
) -> dict[str, Any]:
    """The run's overlay figures for ``summary.json``."""
    model = flood_model(topology)
    if not records:
        return {"queries": 0, "model": model}
    reach = [r.reach for r in records]
    first_hits = [r.first_hit_ms for r in records if r.first_hit_ms is not None]
    by_ttl = [statistics.median(reach_within(r, t) for r in records) for t in model["ttl"]]
    return {
        "queries": len(records),
        "reach": {
            "median": statistics.median(reach),
            "min": min(reach),
            "max": max(reach),
            "of_nodes": topology.nodes,
            "median_by_ttl": by_ttl,
        },
        "duplicates_per_query": round(duplicates / len(records), 2),
        "success_rate": round(sum(1 for r in records if r.hits) / len(records), 4),
        "hits_per_query": round(sum(r.hits for r in records) / len(records), 3),
        "first_hit_ms": None
        if not first_hits
        else {
            "median": round(statistics.median(first_hits), 3),
            "p90": round(_quantile(first_hits, 0.9), 3),
        },
        "model": model,
    }


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclasses.dataclass(frozen=True, slots=True)
class LinkCounters:
    """A node's overlay connections' counters, summed, at one moment."""

    at: float
    messages_in: int = 0
    messages_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0


def link_counters(at: float, connections: Any) -> LinkCounters:
    """Sums over a node's ``/connections`` page."""
    totals = [0, 0, 0, 0]
    for connection in connections if isinstance(connections, list) else []:
        if isinstance(connection, dict):
            for i, key in enumerate(("messages_in", "messages_out", "bytes_in", "bytes_out")):
                totals[i] += int(connection.get(key) or 0)
    return LinkCounters(at, *totals)


def node_rates(before: LinkCounters | None, after: LinkCounters | None) -> dict[str, float]:
    """Messages and bytes per second between two readings (zeros when one is missing)."""
    keys = ("messages_in", "messages_out", "bytes_in", "bytes_out")
    if before is None or after is None or after.at <= before.at:
        return {f"{k}_per_second": 0.0 for k in keys}
    span = after.at - before.at
    return {
        f"{k}_per_second": round(max(0, getattr(after, k) - getattr(before, k)) / span, 1)
        for k in keys
    }


def write_csv(path: Path, rows: Sequence[Mapping[str, object]]) -> None:
    """``rows`` as CSV with a header (nothing written when there are none)."""
    if not rows:
        return
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    temporary.replace(path)


MAX_SAMPLES = 86_400
"""Connectivity samples kept (a day at one a second); older ones are dropped."""


class OverlayRecord:
    """Everything measured of one run's overlay, gathered as the run goes."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.before: dict[int, LinkCounters] = {}
        self.after: dict[int, LinkCounters] = {}
        self.route_pages: list[Any] = [None] * topology.nodes
        self.connectivity: collections.deque[Formation] = collections.deque(maxlen=MAX_SAMPLES)
        self.records: list[QueryRecord] = []

    def sample(self, at: float, nodes: Sequence[NetworkNode]) -> Formation:
        """Take a connectivity sample of ``nodes``' last views; the snapshot."""
        state = formation(at, self.topology, nodes)
        self.connectivity.append(state)
        return state

    def conclude(self, hits: Mapping[bytes, Sequence[int]]) -> dict[str, Any]:
        """Match the route tables with the hits; the figures for ``summary.json``."""
        self.records = query_records(self.route_pages, hits)
        return summarise(self.records, query_duplicates(self.route_pages), self.topology)

    def rates(self, node: int) -> dict[str, float]:
        return node_rates(self.before.get(node), self.after.get(node))

    def write(self, results: Path) -> list[Path]:
        """``queries.csv``, ``nodes.csv`` and ``connectivity.csv``; the files written."""
        written = []
        queries = [
            {
                "guid": r.guid,
                "reach": r.reach,
                **{f"reached_within_ttl_{t}": reach_within(r, t) for t in range(1, QUERY_TTL + 1)},
                "hits": r.hits,
                "first_hit_ms": "" if r.first_hit_ms is None else r.first_hit_ms,
            }
            for r in self.records
        ]
        nodes = [{"node": n, **self.rates(n)} for n in range(self.topology.nodes)]
        samples = [s.row() for s in self.connectivity]
        for name, rows in (("queries", queries), ("nodes", nodes), ("connectivity", samples)):
            if rows:
                write_csv(results / f"{name}.csv", rows)
                written.append(results / f"{name}.csv")
        return written
