"""The end of a test network run: what is read from the nodes while they still run, the
run's ``summary.json``, and every file and picture of its folder.

Collection reads each node's ``/stats``, ``/connections``, its query routes (when
traffic ran, for the overlay's reach) and its full ``/dump``, all nodes at once and each
failure kept to its node; a foreign servent's own drop counters are read beside them.
The summary is built from what the run kept (:class:`FinishedRun`), so that it can be
written however the run ended: formed or not, interrupted, failed.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Protocol

import trio

from gnutella_router.lab.testnet.children import ChildNode
from gnutella_router.lab.testnet.console import Console
from gnutella_router.lab.testnet.emulated_links import LinkPlan
from gnutella_router.lab.testnet.forks import ForkServer
from gnutella_router.lab.testnet.formation import Formation
from gnutella_router.lab.testnet.leaves import LeafPopulation
from gnutella_router.lab.testnet.measure import OverlayRecord, link_counters, write_csv
from gnutella_router.lab.testnet.namespaces import NamespaceNetwork
from gnutella_router.lab.testnet.nodes import NetworkNode, NodeError, NodeFailure
from gnutella_router.lab.testnet.plots import PlotUnavailableError, draw_run
from gnutella_router.lab.testnet.report import node_summary, write_json_file
from gnutella_router.lab.testnet.servents import ServentSet
from gnutella_router.lab.testnet.settings import NetworkSettings
from gnutella_router.lab.testnet.shared import SharedNode
from gnutella_router.lab.testnet.spread_load import SpreadLoadRun
from gnutella_router.lab.testnet.topology import Topology, sink_nodes
from traffic_models.latency import LoadReport

ROUTES_READ = 100_000
"""Query route entries read per node at the end (the admin interface's most per page)."""


@dataclasses.dataclass(slots=True)
class Collected:
    """What was read from the nodes at the end (each list in node order)."""

    summaries: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    states: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """Each node's full dump, or the error that kept it."""
    stats_pages: dict[int, Any] = dataclasses.field(default_factory=dict)
    connection_pages: dict[int, Any] = dataclasses.field(default_factory=dict)


class FinishedRun(Protocol):
    """What the end of a run reads of it."""

    settings: NetworkSettings
    mode: str
    topology: Topology
    console: Console
    overlay: OverlayRecord
    link_plan: LinkPlan
    forks: ForkServer | None
    namespaces: NamespaceNetwork | None
    servents: ServentSet | None
    leaves: LeafPopulation | None
    failures: list[NodeFailure]
    churn_log: list[dict[str, Any]]
    load_run: SpreadLoadRun | None
    report: LoadReport | None
    load_counters: dict[str, Any] | None
    formation: Formation | None
    formed_after: float | None
    started_after: float | None
    interrupted: bool
    error: str | None

    @property
    def nodes(self) -> list[NetworkNode]: ...

    def node_dir(self, index: int) -> Path: ...


async def collect(run: FinishedRun) -> Collected:
    """Per-node summaries and full states, read while the nodes still run."""
    collected = Collected()
    summaries = collected.summaries = [{} for _ in run.nodes]
    states = collected.states = [{} for _ in run.nodes]

    async def read(node: NetworkNode) -> None:
        planned = run.topology.out_neighbours(node.index)
        try:
            stats = collected.stats_pages[node.index] = await node.get("/stats")
            connections = await node.get("/connections")
            run.overlay.after[node.index] = link_counters(trio.current_time(), connections)
            collected.connection_pages[node.index] = connections
            summaries[node.index] = node_summary(node, planned, stats, connections)
            if run.load_run is not None:
                run.overlay.route_pages[node.index] = await node.get(
                    f"/routes?table=query&limit={ROUTES_READ}"
                )
        except (NodeError, KeyError, TypeError, ValueError) as exc:
            summaries[node.index] = node_summary(node, planned, None, None, str(exc))
        try:
            states[node.index] = await node.get("/dump")
        except NodeError as exc:  # a broken dump must not lose the rest
            states[node.index] = {"error": str(exc)}

    async with trio.open_nursery() as nursery:
        for node in run.nodes:
            nursery.start_soon(read, node)
        if run.servents is not None:
            nursery.start_soon(run.servents.read_drops)
    return collected


def summarize(
    run: FinishedRun, collected: Collected | None, stopped_in: float | None
) -> dict[str, Any]:
    """The run's ``summary.json``: settings, plan, formation, nodes, traffic, outcome."""
    settings = run.settings
    load: dict[str, Any] | None = None
    if run.report is not None:
        load = json.loads(run.report.to_json())
    elif run.load_counters is not None:
        load = {"interrupted": True, **run.load_counters}
    rows = collected.summaries if collected else []
    for row in rows:
        node = run.nodes[row["node"]]
        if isinstance(node, ChildNode | SharedNode):  # read now: exits came after collection
            row["exit_status"] = node.exit_status
        row["links"] = run.overlay.rates(node.index)
    pages = collected.connection_pages if collected else {}
    stats_pages = collected.stats_pages if collected else {}
    hits = run.load_run.query_hits if run.load_run is not None else {}
    return {
        "settings": {"mode": run.mode, **settings.describe()},
        "topology": {
            "kind": run.topology.kind,
            "file": None if settings.topology_file is None else str(settings.topology_file),
            **run.topology.describe(),
            "leaves": sorted(run.topology.leaves),
            "links": [list(link) for link in run.topology.links],
            "sinks_on": [0, *sink_nodes(run.topology)] if settings.duration else [],
        },
        "formed_after_seconds": _rounded(run.formed_after),
        "started_after_seconds": _rounded(run.started_after),
        "formation": None if run.formation is None else run.formation.describe(),
        "fork_server": run.forks is not None,
        "namespaces": None
        if run.namespaces is None
        else {"prefix": run.namespaces.prefix, "subnet": str(run.namespaces.subnet)},
        "emulated_links": run.link_plan.describe(),
        "nodes": rows,
        "failures": [dataclasses.asdict(f) for f in run.failures],
        "overlay": run.overlay.conclude(hits) if run.load_run is not None else None,
        "servents": None
        if run.servents is None
        else run.servents.report([pages.get(n) for n in range(settings.nodes)], run.failures),
        "churn": None
        if settings.churn is None
        else {**dataclasses.asdict(settings.churn), "events": run.churn_log},
        "load": load,
        "leaves": None
        if run.leaves is None
        else run.leaves.summary(
            list(stats_pages.values()),
            0 if run.report is None else run.report.sent.get("query", 0),
        ),
        "interrupted": run.interrupted,
        "error": run.error,
        "stopped": not any(n.running() for n in run.nodes),
        "stop_seconds": _rounded(stopped_in),
    }


def write_results(run: FinishedRun, summary: dict[str, Any], states: list[dict[str, Any]]) -> None:
    """Every file of the run's folder, then its pictures; a failure is noted, not raised."""
    try:
        for index, state in enumerate(states):
            write_json_file(run.node_dir(index) / "state.json", state)
        write_json_file(run.settings.results / "summary.json", summary)
        run.overlay.write(run.settings.results)
        write_csv(run.settings.results / "churn.csv", run.churn_log)
        if run.leaves is not None:
            write_csv(run.settings.results / "leaf-queries.csv", run.leaves.rows())
    except (OSError, TypeError, ValueError) as exc:
        run.console.note(f"warning: results not written: {exc}")
        return
    try:
        draw_run(run.settings.results, summary)
    except PlotUnavailableError as exc:
        run.console.note(f"no pictures: {exc}")
    except Exception as exc:  # a picture that fails must not cost the results
        run.console.note(f"warning: pictures not drawn: {exc.__class__.__name__}: {exc}")


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
