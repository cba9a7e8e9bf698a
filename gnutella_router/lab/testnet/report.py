"""What a test network run writes and prints: node rows, dumps as plain data, JSON files."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gnutella_router.lab.testnet.children import ChildNode
from gnutella_router.lab.testnet.nodes import NetworkNode, NodeFailure, totals_from_stats
from gnutella_router.lab.testnet.shared import SharedNode
from gnutella_router.net.connection import format_address
from traffic_models.latency import LoadReport

TABLE_ROWS = 32
"""Nodes shown in the final table; summary.json has them all."""


def _owed_pings_only_at_node0(report: LoadReport, *, local_sinks: int) -> LoadReport:
    """Pings stop at the first router past node 0, so only node 0's sinks are owed them."""
    per_sink = report.expected.get("ping", 0) // max(report.sinks, 1)
    if not per_sink:
        return report
    expected = dict(report.expected)
    expected["ping"] = per_sink * local_sinks
    return dataclasses.replace(report, expected=expected)


def node_summary(
    node: NetworkNode,
    planned_out: list[int],
    stats: Any,
    connections: Any,
    error: str | None = None,
) -> dict[str, Any]:
    """One row of ``summary.json``'s nodes, from the node's ``/stats`` and
    ``/connections`` pages (None, with ``error``, when they could not be read)."""
    row: dict[str, Any] = {
        "node": node.index,
        "kind": node.kind,
        "address": node.peer_name,
        "admin": None if node.admin_address is None else format_address(*node.admin_address),
        "guid": node.guid,
        "planned_out": planned_out,
    }
    if isinstance(node, ChildNode | SharedNode):
        row["pid"] = node.pid
        row["exit_status"] = node.exit_status
    if node.failure is not None:
        row["failure"] = node.failure.describe()
    if stats is None or connections is None:
        return {**row, "error": error, **_EMPTY_COUNTS}
    router = stats["router"]
    server = stats["server"]
    received, dropped = totals_from_stats(stats)
    return {
        **row,
        "connections": len([c for c in connections if not c.get("closing")]),
        "incoming": server["incoming"],
        "outgoing": server["outgoing"],
        "received": router["received"],
        "forwarded": router["forwarded"],
        "generated": router["generated"],
        "dropped": router["dropped"],
        "received_total": received,
        "forwarded_total": sum(router["forwarded"].values()),
        "dropped_total": dropped,
        "relayed_higher_ttl": router.get("relayed_higher_ttl", 0),
        "route_tables": {name: table["size"] for name, table in router["tables"].items()},
    }


_EMPTY_COUNTS: dict[str, Any] = {
    "connections": 0,
    "incoming": 0,
    "outgoing": 0,
    "received": {},
    "forwarded": {},
    "generated": {},
    "dropped": {},
    "received_total": 0,
    "forwarded_total": 0,
    "dropped_total": 0,
    "relayed_higher_ttl": 0,
    "route_tables": {},
}


def prepare_results(results: Path, nodes: int) -> None:
    """Make ``results`` with a ``node-I`` folder per node. The folder is the run's own
    (see :mod:`gnutella_router.run_folder`: ``testnet`` makes a new one, or empties an
    earlier run's only when told to); nothing in it is removed here.

    Raises:
        OSError: the folders cannot be made.
    """
    results.mkdir(parents=True, exist_ok=True)
    for index in range(nodes):
        (results / f"node-{index}").mkdir(exist_ok=True)


def _plain(value: object) -> Any:
    """Dataclasses, tuples and dicts made into JSON-ready data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def write_json_file(path: Path, data: object) -> None:
    """``data`` as indented JSON at ``path``, through a temporary file renamed over it, so
    that a reader never sees half a file."""
    text = json.dumps(_plain(data), indent=2, sort_keys=True, allow_nan=False)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text + "\n")
    temporary.replace(path)


def _node_table(nodes: Sequence[dict[str, Any]], limit: int = TABLE_ROWS) -> str:
    header = (
        f"{'node':<5}{'address':<22}{'out':>4}{'in':>4}{'received':>11}{'forwarded':>11}"
        f"{'dropped':>9}  routes ping/query/push"
    )
    rows = [header]
    for node in nodes[:limit]:
        tables = node["route_tables"]
        routes = "/".join(
            str(size)
            for name in ("ping", "query", "push")
            for key, size in tables.items()
            if key.startswith(name)
        )
        rows.append(
            f"{node['node']:<5}{node['address']:<22}{node['outgoing']:>4}{node['incoming']:>4}"
            f"{node['received_total']:>11,}{node['forwarded_total']:>11,}"
            f"{node['dropped_total']:>9,}  {routes}"
        )
    if len(nodes) > limit:
        rows.append(f"... and {len(nodes) - limit} more nodes in summary.json")
    return "\n".join(rows)


def emulated_links_text(links: dict[str, Any]) -> str:
    """``emulated links: 4, delay 20 ms one way (held by the routers), ...``."""
    parts = [f"emulated links: {links['links']}"]
    if links.get("delay_ms"):
        low, high = links["delay_ms"]["min"], links["delay_ms"]["max"]
        span = f"{low:g} ms" if low == high else f"{low:g} to {high:g} ms"
        by = "by netem" if links["delay_by"] == "netem" else "held by the routers"
        parts.append(f"delay {span} one way ({by})")
    if links.get("bandwidth_kbps"):
        low, high = links["bandwidth_kbps"]["min"], links["bandwidth_kbps"]["max"]
        span = f"{low:g} kbit/s" if low == high else f"{low:g} to {high:g} kbit/s"
        parts.append(f"bandwidth {span} each way (tbf)")
    return ", ".join(parts)


def final_text(summary: dict[str, Any], report: LoadReport | None, results: Path) -> str:
    """What a run prints at its end: the network, the load report, the node table,
    failures and errors, how the nodes stopped, and where the results are."""
    settings, topology = summary["settings"], summary["topology"]
    formed, started = summary["formed_after_seconds"], summary.get("started_after_seconds")
    formation = summary.get("formation") or {}
    outside = len(formation.get("outside_plan") or ())
    lines = [
        f"test network: {_count(settings['nodes'], 'node')} ({settings['mode']}), "
        f"{topology['kind']} topology, {_count(len(topology['links']), 'link')}"
        + (f", all started in {started:.1f} s" if started is not None else "")
        + (f", formed in {formed:.1f} s" if formed is not None else "")
        + (f" ({_count(outside, 'link')} outside the plan)" if outside else "")
    ]
    if summary.get("emulated_links"):
        lines.append(emulated_links_text(summary["emulated_links"]))
    if report is not None:
        lines.append(report.to_text())
        sinks = ", ".join(str(n) for n in topology["sinks_on"])
        lines.append(
            f"(sinks on nodes {sinks}: latency is from the scheduled send to a sink; each "
            "row is named by the hops its copies travelled, one per router crossed)"
        )
    elif isinstance(summary["load"], dict):
        load = summary["load"]
        lines.append(
            f"traffic interrupted: sent {load['sent']:,}, "
            f"{load['copies']:,} copies reached the sinks"
        )
    overlay = summary.get("overlay")
    if overlay and overlay.get("queries"):
        relays = sum(int(node.get("relayed_higher_ttl") or 0) for node in summary["nodes"])
        lines += ["", overlay_text(overlay, relays)]
    if summary.get("leaves"):
        lines += ["", leaves_text(summary["leaves"])]
    if summary["nodes"]:
        lines += ["", _node_table(summary["nodes"])]
    for servent in summary.get("servents") or []:
        agents = sorted({c["user_agent"] or "?" for c in servent["connections"]})
        messages_in = sum(c["messages_in"] or 0 for c in servent["connections"])
        messages_out = sum(c["messages_out"] or 0 for c in servent["connections"])
        linked = ", ".join(f"node-{n}" for n in servent["connected_routers"]) or "no router"
        agent = ", ".join(agents) or "not seen"
        lines += [
            "",
            f"servent-{servent['servent']} {servent['address']} ({agent}): "
            f"linked with {linked} of {len(servent['linked_with'])} planned; the routers got "
            f"{messages_in:,} messages from it and sent it {messages_out:,}",
        ]
        if servent.get("drops") is not None:
            lines.append(f"  its own drop counters: {drops_text(servent['drops'])}")
        elif servent.get("drops_error"):
            lines.append(f"  its own drop counters not read: {servent['drops_error']}")
    churn = summary.get("churn")
    if churn:
        actions = [e["action"] for e in churn["events"]]
        failed = sum(1 for e in churn["events"] if not e["ok"])
        lines += [
            "",
            f"churn (mean up {churn['mean_session']:g} s, down {churn['mean_down']:g} s): "
            f"{actions.count('leave') + actions.count('kill')} left"
            + (" (killed)" if churn["kill"] else "")
            + f", {actions.count('return')} came back"
            + (f", {failed} did not" if failed else ""),
        ]
    for failure in summary["failures"]:
        lines += ["", f"node failure: {NodeFailure(**failure).describe()}"]
    if summary["error"] is not None:
        lines += ["", f"error: {summary['error']}"]
    stop = summary["stop_seconds"]
    if stop is not None:
        state = "stopped" if summary["stopped"] else "NOT all stopped"
        lines += ["", f"{_count(settings['nodes'], 'node')} {state} (Bye sent) in {stop:.2f} s"]
    lines.append(f"results: {results}")
    return "\n".join(lines)


def overlay_text(overlay: dict[str, Any], relays: int = 0) -> str:
    """The overlay figures, with what a pure flood would give beside them.

    ``relays`` is how many times the routers relayed a query again because a later
    copy came with a higher TTL than the first (``relayed_higher_ttl``, summed over the
    nodes). The flood model sends each query on once per node, so those relays' copies
    are duplicates the model has no place for: the reason measured duplicates can be
    above it."""
    reach, model = overlay["reach"], overlay["model"]
    first = overlay["first_hit_ms"]
    duplicates, modelled = overlay["duplicates_per_query"], model["duplicates"][-1]
    why = ""
    if relays and duplicates > modelled:
        why = (
            f"; above the model because a router relays a query again when a later copy "
            f"arrives with a higher TTL than its first (so that it still reaches as far as "
            f"its TTL allows): {relays:,} such relays in the run, each sending copies the "
            "nodes beyond already had, where the model forwards each query once per node"
        )
    return "\n".join(
        [
            f"overlay: {overlay['queries']:,} queries reached a median {reach['median']:g} of "
            f"{reach['of_nodes']} nodes ({reach['min']}..{reach['max']}; a flood on the "
            f"planned graph: {model['reach'][-1]})",
            f"duplicates: {duplicates:,} per query (a flood on the planned graph: "
            f"{modelled:,}{why})",
            f"success: {overlay['success_rate']:.1%} of queries got a hit, "
            f"{overlay['hits_per_query']:g} hits per query"
            + (f", first hit median {first['median']:g} ms" if first else ""),
        ]
    )


def leaves_text(leaves: dict[str, Any]) -> str:
    """The leaves' figures: who joined, what they found, what it cost."""
    lines = [
        f"leaves: {leaves['joined']} of {leaves['leaves']} joined "
        f"({leaves['files_per_leaf']} files each); "
        + (
            f"lost their ultrapeer: {leaves['lost_ultrapeer']}"
            if leaves["lost_ultrapeer"]
            else "all stayed"
        )
    ]
    if leaves["queries"]:
        first = leaves["first_file_ms_median"]
        lines += [
            f"leaf queries: {leaves['queries']:,}; {leaves['success_rate']:.1%} found a file on "
            f"another leaf (an oracle: {leaves['oracle_success_rate']:.1%}; of those it "
            f"could, {leaves['success_rate_of_answerable'] or 0:.1%})"
            + (f", first file median {first:g} ms" if first is not None else ""),
            f"cost: {leaves['query_copies_per_query']:g} query and "
            f"{leaves['hit_copies_per_query']:g} hit copies per query in the overlay, "
            f"{leaves['dynamic_copies_per_leaf_query']:g} dynamic-query copies per leaf query; "
            f"leaves were passed {leaves['queries_passed_to_leaves']:,} queries, "
            f"{leaves['passed_unmatched']:,} matching none of their files",
        ]
    return "\n".join(lines)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def drops_text(drops: dict[str, Any]) -> str:
    """A servent's own drop counters in a line: the total, then each reason that
    counts, most first."""
    reasons = sorted(drops["by_reason"].items(), key=lambda item: (-item[1], item[0]))
    if not reasons:
        return f"nothing dropped (of {drops['reasons']} reasons counted)"
    listed = ", ".join(f"{reason} {count:,}" for reason, count in reasons)
    return f"{drops['total']:,} dropped: {listed}"
