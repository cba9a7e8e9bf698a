"""Pictures of a test network run: the overlay coloured by load with the load client's
injector and sinks marked, reach and duplicates by TTL, connectivity over time, the
latency CDF, and offered against delivered traffic second by second.

Drawn from what the run wrote (``summary.json`` and the CSV files), headless
(matplotlib's Agg backend), at the end of the run or again later from its folder
(``gnutella-router plot RUN``); matplotlib is the ``plots`` extra and is imported only
here, when drawing, so a network runs without it and only the pictures are missing (the
run says so).

The overlay stays readable as the network grows: the figure grows with the node count
(up to :data:`MAX_FIGURE_INCHES`), a node's size follows its degree, and past
:data:`LABELS_UP_TO` nodes only the injector, the sinks and the best-linked nodes (the
hubs) are numbered.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import networkx as nx

from gnutella_router.lab.testnet.timeseries import LATENCY_FILE, TRAFFIC_FILE
from gnutella_router.observe.profile_plot import PlotUnavailableError, pyplot
from traffic_models.latency import REPLY_KINDS

__all__ = ["PlotUnavailableError", "draw_run"]

SPRING_LAYOUT_BELOW = 500
LABELS_UP_TO = 30
"""Every node is numbered in the overlay picture up to this many; beyond, the numbers
would hide it, so only the injector, the sinks and the hubs are."""
HUB_SHARE = 0.05
"""Past :data:`LABELS_UP_TO` nodes, this share of the nodes (the best linked, at least
:data:`MIN_HUBS`) is numbered as hubs."""
MIN_HUBS = 3
MAX_FIGURE_INCHES = 18.0
NODE_SHARE = 0.01
"""Of the overlay figure's area per node, what a node's marker takes (before its links
scale it)."""
MIN_NODE_AREA = 15.0
MAX_NODE_AREA = 300.0


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
    latencies = _read_csv(results / LATENCY_FILE)
    if latencies:
        written.append(latency_cdf(plt, results / "latency.png", latencies))
    seconds = _read_csv(results / TRAFFIC_FILE)
    if seconds:
        written.append(throughput(plt, results / "throughput.png", summary, seconds))
    return written


def _read_csv(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="") as source:
            return list(csv.DictReader(source))
    except OSError:
        return []


def load_roles(summary: dict[str, Any]) -> tuple[set[int], set[int]]:
    """The nodes the load client's injectors and sinks connected to (none when the run
    had no load)."""
    if summary.get("load") is None:
        return set(), set()
    sinks = {int(n) for n in summary.get("topology", {}).get("sinks_on", [])}
    return ({0} if sinks else set()), sinks


def labelled_nodes(
    degrees: dict[int, int], injectors: set[int], sinks: set[int], *, up_to: int = LABELS_UP_TO
) -> tuple[set[int], set[int]]:
    """Which nodes carry their number, and which of them are hubs: every node in a
    network of ``up_to`` nodes or fewer; beyond, the injectors, the sinks and the
    best-linked :data:`HUB_SHARE` of the nodes (at least :data:`MIN_HUBS`; none of
    them a node of no more links than most)."""
    if len(degrees) <= up_to:
        return set(degrees), set()
    typical = sorted(degrees.values())[len(degrees) // 2]
    ranked = sorted(degrees, key=lambda n: (-degrees[n], n))
    count = max(MIN_HUBS, round(len(degrees) * HUB_SHARE))
    hubs = {n for n in ranked[:count] if degrees[n] > typical}
    return hubs | injectors | sinks, hubs


def figure_inches(nodes: int) -> float:
    """The overlay figure's height: 7 inches for a few nodes, growing with the count."""
    return min(MAX_FIGURE_INCHES, 7.0 + nodes / 20)


def _overlay(plt: Any, path: Path, summary: dict[str, Any]) -> Path:
    from matplotlib.lines import Line2D

    nodes = summary["nodes"]
    graph = nx.Graph()
    graph.add_nodes_from(range(summary["settings"]["nodes"]))
    graph.add_edges_from(tuple(link) for link in summary["topology"]["links"])
    load = {row["node"]: row.get("links", {}).get("messages_in_per_second", 0.0) for row in nodes}
    failed = {f["node"] for f in summary.get("failures", []) if f.get("kind", "node") == "node"}
    injectors, sinks = load_roles(summary)
    size = graph.number_of_nodes()
    degrees = {int(n): int(d) for n, d in graph.degree}
    labelled, hubs = labelled_nodes(degrees, injectors, sinks)
    labelled |= failed & set(degrees)
    height = figure_inches(size)
    figure, axes = plt.subplots(figsize=(height * 1.15, height))
    seed = summary["settings"]["seed"]
    if size < SPRING_LAYOUT_BELOW:
        layout = nx.spring_layout(graph, seed=seed, k=1.5 / math.sqrt(size))
    else:  # networkx's spring layout wants scipy from 500 nodes on; this one numpy only
        layout = nx.forceatlas2_layout(graph, seed=seed)
    crowded = size > LABELS_UP_TO
    nx.draw_networkx_edges(
        graph, layout, ax=axes, alpha=0.2 if crowded else 0.35, width=0.5 if crowded else 0.8
    )
    # Each node's share of the figure sets the base area (in points squared), within
    # bounds that keep a few nodes from being blobs and a thousand from being dots; a
    # node's links scale it from half to twice that.
    share = NODE_SHARE * (height * 1.15 * 72) * (height * 72) / size
    base = min(MAX_NODE_AREA, max(MIN_NODE_AREA, share))
    widest = max(degrees.values(), default=0) or 1
    loads = [load.get(n, 0.0) for n in graph.nodes]
    scale = {"vmin": min(loads, default=0.0), "vmax": max(max(loads, default=0.0), 1e-9)}
    groups = (  # drawn in this order, the marked nodes over the plain ones, never tiny
        ("o", 1.0, 0.0, [n for n in graph.nodes if n not in injectors | sinks]),
        ("D", 1.3, 80.0, [n for n in graph.nodes if n in sinks and n not in injectors]),
        ("*", 3.0, 250.0, [n for n in graph.nodes if n in injectors]),
    )
    drawn = None
    areas: dict[int, float] = {}
    for shape, grow, least, members in groups:
        if not members:
            continue
        areas.update(
            {n: max(least, grow * base * (0.5 + 1.5 * degrees[n] / widest)) for n in members}
        )
        drawn = nx.draw_networkx_nodes(
            graph, layout, ax=axes, nodelist=members, node_shape=shape,
            node_color=[load.get(n, 0.0) for n in members], cmap="viridis", **scale,
            node_size=[areas[n] for n in members],
            linewidths=[2.5 if n in failed else (1.2 if shape != "o" else 0) for n in members],
            edgecolors=["red" if n in failed else "black" for n in members],
        )  # fmt: skip
    for n in sorted(labelled):
        # Just above the marker (its area is in points squared), on a pale box: readable
        # over edges and whatever the marker's colour.
        axes.annotate(
            str(n), layout[n], xytext=(0, 0.6 * math.sqrt(areas[n]) + 1),
            textcoords="offset points", ha="center", va="bottom", fontsize=8,
            bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "alpha": 0.8,
                  "linewidth": 0},
        )  # fmt: skip
    figure.colorbar(drawn, ax=axes, label="overlay messages in per second", shrink=0.8)
    legend = []
    if injectors:
        legend.append(_marker(Line2D, "*", 14, "injector (node 0, with a sink)"))
    if sinks - injectors:
        legend.append(_marker(Line2D, "D", 8, "sink of the load client"))
    legend.append(_marker(Line2D, "o", 8, "router (size: its links)"))
    if failed:
        legend.append(_marker(Line2D, "o", 8, "failed", edge="red"))
    axes.legend(  # below the drawing, where it hides no node
        handles=legend, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=len(legend),
        fontsize=8, frameon=False,
    )  # fmt: skip
    topology = summary["topology"]["kind"]
    title = f"{size} nodes, {topology} topology, {len(summary['topology']['links'])} links" + (
        f" ({len(failed)} failed, ringed red)" if failed else ""
    )
    if size > LABELS_UP_TO:
        numbered = "the injector, the sinks, " if injectors else ""
        numbered += "the failed nodes, " if failed else ""
        title += f"\nnumbered: {numbered}{len(hubs)} hubs (the best-linked nodes)"
    axes.set_title(title)
    axes.set_axis_off()
    return _save(plt, figure, path)


def _marker(line: Any, shape: str, size: float, label: str, *, edge: str = "black") -> Any:
    """A legend entry: a marker of the overlay's, in a neutral colour."""
    return line(
        [], [], linestyle="", marker=shape, markersize=size, markerfacecolor="#9ab",
        markeredgecolor=edge, markeredgewidth=1.5 if edge == "red" else 0.8, label=label,
    )  # fmt: skip


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


def latency_cdf(plt: Any, path: Path, rows: list[dict[str, str]]) -> Path:
    """The CDF of every latency row of ``latency.csv`` (copies at the sinks by their hops,
    solid; replies back at the injector, dashed), on a log axis of milliseconds."""
    curves: dict[tuple[str, str], list[tuple[float, int]]] = {}
    for row in rows:
        key = (row["kind"], row["type"])
        curves.setdefault(key, []).append((int(row["latency_us"]) / 1000, int(row["count"])))
    figure, axes = plt.subplots(figsize=(9, 5.5))
    for (kind, name), points in curves.items():
        points.sort()
        total = sum(count for _, count in points)
        running, xs, ys = 0, [], []
        for ms, count in points:
            running += count
            xs.append(ms)
            ys.append(running / total)
        style = "--" if kind in REPLY_KINDS else "-"
        axes.step(xs, ys, style, where="post", label=f"{kind} {name} ({total:,})")
    for share in (0.5, 0.9, 0.99):
        axes.axhline(share, color="grey", linestyle=":", linewidth=0.7)
    axes.set_xscale("log")
    axes.set_ylim(0, 1.005)
    axes.set_xlabel("latency (ms, log scale)")
    axes.set_ylabel("share of messages at or below")
    axes.set_title("latency CDF: copies at the sinks (solid), replies at the injector (dashed)")
    axes.legend(fontsize=8, loc="lower right")
    return _save(plt, figure, path)


def throughput(plt: Any, path: Path, summary: dict[str, Any], rows: list[dict[str, str]]) -> Path:
    """Offered, owed and delivered messages per second over the traffic phase, and the
    delivered copies' latency percentiles below, from ``timeseries.csv``."""
    at = [float(r["second"]) for r in rows]
    spans = [max(float(r["span_s"]), 1e-3) for r in rows]

    def rate(column: str) -> list[float]:
        return [float(r[column]) / span for r, span in zip(rows, spans, strict=True)]

    edges = [*at, at[-1] + spans[-1]]  # each rate holds over its row's span

    def steps(column: str) -> list[float]:
        values = rate(column)
        return [*values, values[-1]]

    figure, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    top.step(edges, steps("offered"), where="post", label="offered: messages injected")
    top.step(edges, steps("owed"), where="post", linestyle="--", label="owed: copies due at sinks")
    top.step(edges, steps("delivered"), where="post", label="delivered: copies at the sinks")
    duration = float(summary.get("settings", {}).get("duration") or 0)
    for axes in (top, bottom):
        if duration:
            axes.axvline(duration, color="grey", linestyle=":", linewidth=0.8)
    top.set_ylabel("messages per second")
    top.set_title(
        "traffic per second" + (" (dotted: sending ends, the drain follows)" if duration else "")
    )
    top.legend(fontsize=8)
    for column, label in (("p50_ms", "p50"), ("p90_ms", "p90"), ("p99_ms", "p99")):
        points = [
            (x + span / 2, float(r[column]))  # the copies that arrived within the row
            for x, span, r in zip(at, spans, rows, strict=True)
            if r[column]
        ]
        if points:
            bottom.plot(*zip(*points, strict=True), marker=".", label=label)
    if bottom.lines:
        bottom.set_yscale("log")
        bottom.legend(fontsize=8)
    bottom.set_ylabel("latency of copies (ms)")
    bottom.set_xlabel("seconds since the first message")
    return _save(plt, figure, path)


def _save(plt: Any, figure: Any, path: Path) -> Path:
    figure.tight_layout()
    temporary = path.with_name(path.stem + ".tmp.png")
    figure.savefig(temporary, dpi=110)
    plt.close(figure)
    temporary.replace(path)
    return path
