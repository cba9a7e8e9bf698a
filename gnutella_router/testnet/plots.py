"""Pictures of a test network run: the overlay coloured by load, reach and duplicates by
TTL, and connectivity over time.

Drawn from what the run wrote (``summary.json`` and the CSV files), headless
(matplotlib's Agg backend); matplotlib is the ``plots`` extra and is imported only here,
when drawing, so a network runs without it and only the pictures are missing (the run
says so).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import networkx as nx

from gnutella_router.observe.profile_plot import PlotUnavailableError, pyplot

__all__ = ["PlotUnavailableError", "draw_run"]

SPRING_LAYOUT_BELOW = 500
LABELS_UP_TO = 40
"""Nodes are numbered in the overlay picture up to this many; beyond, the numbers hide it."""


def draw_run(results: Path, summary: dict[str, Any]) -> list[Path]:
    """Every picture the run's data allows, into ``results``; the files written.

    Raises:
        PlotUnavailableError: matplotlib is not installed.
    """
    plt = pyplot()
    written = [_overlay(plt, results / "overlay.png", summary)]
    overlay = summary.get("overlay")
    if overlay and overlay.get("queries"):
        written.append(_reach(plt, results / "reach.png", summary, overlay))
    samples = _read_csv(results / "connectivity.csv")
    if samples:
        written.append(_connectivity(plt, results / "connectivity.png", summary, samples))
    return written


def _read_csv(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="") as source:
            return list(csv.DictReader(source))
    except OSError:
        return []


def _overlay(plt: Any, path: Path, summary: dict[str, Any]) -> Path:
    nodes = summary["nodes"]
    graph = nx.Graph()
    graph.add_nodes_from(range(summary["settings"]["nodes"]))
    graph.add_edges_from(tuple(link) for link in summary["topology"]["links"])
    load = {row["node"]: row.get("links", {}).get("messages_in_per_second", 0.0) for row in nodes}
    failed = {f["node"] for f in summary.get("failures", [])}
    colours = [load.get(n, 0.0) for n in graph.nodes]
    size = graph.number_of_nodes()
    figure, axes = plt.subplots(figsize=(8, 7))
    seed = summary["settings"]["seed"]
    if size < SPRING_LAYOUT_BELOW:
        layout = nx.spring_layout(graph, seed=seed, k=1.5 / math.sqrt(size))
    else:  # networkx's spring layout wants scipy from 500 nodes on; this one numpy only
        layout = nx.forceatlas2_layout(graph, seed=seed)
    nx.draw_networkx_edges(graph, layout, ax=axes, alpha=0.35, width=0.8)
    drawn = nx.draw_networkx_nodes(
        graph, layout, ax=axes, node_color=colours, cmap="viridis",
        node_size=max(20, 300 - size), linewidths=[2.5 if n in failed else 0 for n in graph.nodes],
        edgecolors="red",
    )  # fmt: skip
    if size <= LABELS_UP_TO:
        nx.draw_networkx_labels(graph, layout, ax=axes, font_size=7, font_color="white")
    figure.colorbar(drawn, ax=axes, label="overlay messages in per second")
    topology = summary["topology"]["kind"]
    axes.set_title(
        f"{size} nodes, {topology} topology, {len(summary['topology']['links'])} links"
        + (f" ({len(failed)} failed, ringed red)" if failed else "")
    )
    axes.set_axis_off()
    return _save(plt, figure, path)


def _reach(plt: Any, path: Path, summary: dict[str, Any], overlay: dict[str, Any]) -> Path:
    model = overlay["model"]
    ttl = model["ttl"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    left.plot(ttl, model["reach"], "o--", label="flood on the planned graph")
    left.plot(
        ttl, overlay["reach"]["median_by_ttl"], "s-",
        label="measured: first copy within TTL - 1 hops (median)",
    )  # fmt: skip
    left.set_xlabel("query TTL")
    left.set_ylabel("nodes reached")
    left.set_ylim(0, summary["settings"]["nodes"] * 1.05 + 1)
    left.set_title("reach by TTL")
    left.legend()
    right.plot(ttl, model["duplicates"], "o--", label="flood on the planned graph")
    right.plot(
        [ttl[-1]], [overlay["duplicates_per_query"]], "s", markersize=9,
        label=f"measured at TTL {ttl[-1]} (mean per query)",
    )  # fmt: skip
    right.set_xlabel("query TTL")
    right.set_ylabel("duplicate copies per query")
    right.set_title("duplicates by TTL")
    right.legend()
    figure.suptitle(
        f"{overlay['queries']:,} queries; success {overlay['success_rate']:.0%}, "
        f"{overlay['hits_per_query']:g} hits per query"
    )
    return _save(plt, figure, path)


def _connectivity(
    plt: Any, path: Path, summary: dict[str, Any], samples: list[dict[str, str]]
) -> Path:
    at = [float(s["at"]) for s in samples]
    figure, axes = plt.subplots(figsize=(9, 4.5))
    axes.plot(at, [int(s["nodes_up"]) for s in samples], label="nodes up")
    axes.plot(at, [int(s["largest_component"]) for s in samples], label="largest component")
    axes.plot(at, [int(s["links_up"]) for s in samples], label="links up")
    axes.axhline(summary["settings"]["nodes"], color="grey", linestyle=":", linewidth=0.8)
    churn = (summary.get("churn") or {}).get("events", [])
    for event in churn:
        leaving = event["action"] in ("leave", "kill")
        axes.axvline(event["at"], color="red" if leaving else "green", alpha=0.25, linewidth=0.8)
    if churn:
        axes.set_title("connectivity over time (red: a node left, green: it came back)")
    else:
        axes.set_title("connectivity over time")
    axes.set_xlabel("seconds since the run started")
    axes.set_ylabel("count")
    axes.legend()
    return _save(plt, figure, path)


def _save(plt: Any, figure: Any, path: Path) -> Path:
    figure.tight_layout()
    temporary = path.with_name(path.stem + ".tmp.png")
    figure.savefig(temporary, dpi=110)
    plt.close(figure)
    temporary.replace(path)
    return path
