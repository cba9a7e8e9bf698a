"""What a test network run writes and prints: node rows, dumps as plain data, JSON files."""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import trio

from gnutella_router.config import config_as_dict
from gnutella_router.daemon import Daemon
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


def _full_dump_function() -> Callable[[Daemon], dict[str, Any]] | None:
    """The admin interface's ``full_dump`` when the project has one."""
    try:
        module = importlib.import_module("gnutella_router.observe.dumps")
    except ImportError:
        return None
    dump = getattr(module, "full_dump", None)
    return dump if callable(dump) else None


def _own_dump(daemon: Daemon) -> dict[str, Any]:
    """A node's state from its statistics records, when there is no admin dump."""
    now = trio.current_time()
    return {
        "address": format_address(*daemon.address),
        "guid": daemon.guid.hex(),
        "config": config_as_dict(daemon.config),
        "stages": _plain(daemon.registry.statistics()),
        "router": _plain(daemon.router.statistics()),
        "catcher": _plain(daemon.catcher.statistics()),
        "connections": [_plain(c.statistics(now)) for c in daemon.server.connections.snapshot()],
    }


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


def _write_json(path: Path, data: object) -> None:
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
