"""The router under attack: its configuration, its process, and what its admin interface
says (its counters, and who holds its connections).

Each scenario has a router of its own, so that one attack's bans, tables and memory do
not colour the next one's figures.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import trio

from scripts import runner
from scripts.router_attack.settings import STATS_PATIENCE, TRUSTED_NETWORKS, AttackError
from scripts.router_bench.dumps import http_get
from scripts.router_bench.peers import BenchError
from scripts.router_fuzz.router import error_lines, scan_log
from scripts.router_fuzz.wire import RouterTarget

COMMON_CONFIG: Mapping[str, Mapping[str, object]] = {
    "network": {"trusted": list(TRUSTED_NETWORKS)},
    "catcher": {"min_connections": 0},
    "log": {"format": "json", "level": "info"},
}
"""What every scenario's router changes from its defaults: only 127.0.0.1 is trusted
(the honest peers), it never dials (there is no network to dial), and it logs JSON so
its errors can be found. The admin interface's port is added per run."""
ADMIN_TIMEOUT = 10.0


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def merged(
    *layers: Mapping[str, Mapping[str, object]],
) -> dict[str, dict[str, object]]:
    tables: dict[str, dict[str, object]] = {}
    for layer in layers:
        for table, values in layer.items():
            tables.setdefault(table, {}).update(values)
    return tables


def config_text(tables: Mapping[str, Mapping[str, object]]) -> str:
    lines = ["# Written by scripts/attack_router.py for one scenario."]
    for table, values in tables.items():
        lines += ["", f"[{table}]", *(f"{k} = {toml_value(v)}" for k, v in values.items())]
    return "\n".join(lines) + "\n"


class Router:
    """A router process started for one scenario (see :func:`started`)."""

    def __init__(self, process: runner.Router):
        self.process = process
        self.pid = process.pid
        self.target = RouterTarget(process.address, spread_sources=True)
        self.address = process.address
        self.admin = process.admin
        self.state = process.state
        self.log_path = process.log_path

    @property
    def exit_status(self) -> int | None:
        """After the ``with`` block: the exit status on SIGTERM (None: it was killed)."""
        return self.process.exit_status

    def alive(self) -> bool:
        return self.process.alive()

    def problems(self) -> list[str]:
        """Error lines and tracebacks in its log."""
        found = [f"error logged: {line[:300]}" for line in error_lines(self.log_path)[:3]]
        for text, lines in scan_log(self.log_path).items():
            if lines:
                found.append(f"{len(lines)} log line(s) with {text!r}: {lines[0][:300]}")
        return found


@contextlib.contextmanager
def started(workdir: Path, scenario_config: Mapping[str, Mapping[str, object]]) -> Iterator[Router]:
    """A router on free loopback ports for the ``with`` block; stopped (SIGTERM, then
    SIGKILL) on every way out, an interrupt during its start included."""
    port, admin_port = runner.free_ports(2)
    tables = merged(
        COMMON_CONFIG, {"admin": {"listen": f"127.0.0.1:{admin_port}"}}, scenario_config
    )
    with runner.router_started(
        workdir, config_text(tables), port=port, admin_port=admin_port, wait_for_admin=True
    ) as router:
        yield Router(router)


# --- the admin interface -------------------------------------------------------------


async def admin_json(admin: tuple[str, int], target: str) -> Any:
    """GET ``target`` and decode its JSON; :class:`AttackError` on anything but 200 within
    :data:`ADMIN_TIMEOUT` seconds."""
    try:
        with trio.fail_after(ADMIN_TIMEOUT):
            status, _, body = await http_get(admin, target, keep=True)
    except (OSError, trio.TooSlowError, BenchError) as exc:
        raise AttackError(f"GET {target}: {exc!r}") from exc
    if status != 200:
        raise AttackError(f"GET {target} answered {status}")
    return json.loads(body)


async def stats(admin: tuple[str, int]) -> dict[str, float]:
    """The router's ``/stats`` counters, flattened; retried while the admin interface is
    busy (503) or slow, up to :data:`STATS_PATIENCE` seconds."""
    deadline = trio.current_time() + STATS_PATIENCE
    while True:
        try:
            return flatten(await admin_json(admin, "/stats"))
        except AttackError:
            if trio.current_time() > deadline:
                raise
            await trio.sleep(0.25)


def flatten(data: Any, prefix: str = "") -> dict[str, float]:
    """Numbers in nested JSON objects as ``{"a.b.c": n}`` (lists and text are skipped)."""
    found: dict[str, float] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            found.update(flatten(value, f"{prefix}{key}."))
    elif isinstance(data, int | float) and not isinstance(data, bool):
        found[prefix[:-1]] = float(data)
    return found


def delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    return {key: value - before.get(key, 0.0) for key, value in after.items()}


async def connections_from(admin: tuple[str, int], host: str) -> int:
    """How many live connections the router holds from ``host``."""
    connections = await admin_json(admin, "/connections")
    return sum(1 for c in connections if str(c.get("peer", "")).rsplit(":", 1)[0] == host)
