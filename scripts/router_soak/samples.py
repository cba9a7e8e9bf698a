"""The load the soak offers, and the samples it takes while that runs: one
:class:`Sample` of every router (and of the machine's other busy processes) every
``--sample-seconds``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gnutella_router.lab.testnet.spread_load import SpreadLoadRun
from gnutella_router.observe.admin_client import FetchError
from scripts.router_soak.probes import (
    admin_get,
    counter_total,
    cpu_seconds,
    load_average,
    machine_busy_seconds,
    open_fds,
    proc_status,
)
from scripts.router_soak.processes import Router


class SoakLoad(SpreadLoadRun):
    """The spread load client: its ``sending`` event tells when its clock starts, and
    samples are timed from its first message, as its latencies are."""


# --------------------------------------------------------------------------- samples


@dataclasses.dataclass(slots=True)
class RouterSample:
    alive: bool
    rss: int | None
    fds: int | None
    cpu: float | None
    connections: int | None = None
    received: int | None = None
    forwarded: int | None = None
    dropped: int | None = None
    kicked: int | None = None
    refused: int | None = None
    failed_connections: int | None = None
    route_entries: int | None = None
    pong_cache: int | None = None
    host_cache: int | None = None
    admin_error: str | None = None


@dataclasses.dataclass(slots=True)
class Sample:
    clock: float
    """perf_counter() when taken."""
    phase: str
    """"before" the load connects, during the "load", while it "drain"s its last copies,
    "after" it has gone."""
    routers: list[RouterSample]
    client_rss: int | None
    client_fds: int | None
    client_cpu: float
    machine_busy: float
    load_average: float
    sent: int = 0
    copies: int = 0
    late: int = 0
    at: float = 0.0
    """Seconds since the first message was sent (negative before)."""


def sample_router(router: Router) -> RouterSample:
    if not router.alive():
        return RouterSample(alive=False, rss=None, fds=None, cpu=None)
    pid = router.pid
    # /proc first: the admin request's own socket must not be counted as an open FD.
    status = proc_status(pid)
    sample = RouterSample(alive=True, rss=status.get("VmRSS"), fds=open_fds(pid), cpu=None)
    sample.cpu = cpu_seconds(pid)
    try:
        stats = admin_get(router, "/stats")
    except FetchError as exc:
        sample.admin_error = str(exc)
        return sample
    routing = stats.get("router", {})
    server = stats.get("server", {})
    sample.connections = server.get("connections")
    sample.received = counter_total(routing.get("received"))
    sample.forwarded = counter_total(routing.get("forwarded"))
    sample.dropped = counter_total(routing.get("dropped"))
    sample.kicked = counter_total(server.get("kicked"))
    sample.refused = counter_total(server.get("refused"))
    sample.failed_connections = server.get("failed_connections")
    tables = routing.get("tables", {})
    sample.route_entries = sum(t.get("size", 0) for t in tables.values() if isinstance(t, dict))
    # The router's other structures that grow with what it hears: if memory creeps,
    # these say whether one of them is the cause.
    sample.pong_cache = routing.get("pong_cache_size")
    sample.host_cache = stats.get("catcher", {}).get("hosts", {}).get("size")
    return sample


def take_sample(routers: Sequence[Router], phase: str, load: SoakLoad | None) -> Sample:
    clock = time.perf_counter()
    status = proc_status("self")
    sample = Sample(
        clock=clock,
        phase=phase,
        routers=[sample_router(r) for r in routers],
        client_rss=status.get("VmRSS"),
        client_fds=open_fds("self"),
        client_cpu=time.process_time(),
        machine_busy=machine_busy_seconds(),
        load_average=load_average(),
    )
    if load is not None:
        counters = load.counters()
        sample.sent, sample.copies, sample.late = (
            counters["sent"],
            counters["copies"],
            counters["late"],
        )
    for router, taken in zip(routers, sample.routers, strict=True):
        if not taken.alive and router.died_at is None:
            router.died_at = clock
    return sample


class OtherProcesses:
    """CPU used by every process that is neither a router nor this script, by command:
    what else was running on the machine during the load (printed and in the JSON)."""

    def __init__(self) -> None:
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.names: dict[int, str] = {}

    def scan(self, ours: set[int]) -> None:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in ours:
                continue
            pid = int(entry.name)
            used = cpu_seconds(pid)
            if used is None:
                continue
            self.first.setdefault(pid, used)
            self.last[pid] = used
            if pid not in self.names:
                self.names[pid] = _command(pid)

    def top(self, seconds: float, count: int = 5) -> list[dict[str, Any]]:
        """The commands that used the most CPU, as shares of one core over ``seconds``."""
        by_command: dict[str, float] = {}
        for pid, last in self.last.items():
            name = self.names.get(pid, "?")
            by_command[name] = by_command.get(name, 0.0) + last - self.first[pid]
        ranked = sorted(by_command.items(), key=lambda item: -item[1])[:count]
        return [
            {"command": name, "cpu_share": used / seconds}
            for name, used in ranked
            if seconds > 0 and used > 0
        ]


def _command(pid: int) -> str:
    """A short name for a process: its program and first argument that is not a flag."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    words = [a.decode(errors="replace") for a in argv if a]
    if not words:
        with contextlib.suppress(OSError):
            return "[" + Path(f"/proc/{pid}/comm").read_text().strip() + "]"
        return "?"
    shown = [Path(words[0]).name]
    shown += [w for w in words[1:] if not w.startswith("-")][:1]
    return " ".join(shown)[:60]
