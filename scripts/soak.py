"""Soak a small network of gnutella-router processes under steady load; watch memory and FDs.

Run from the repository root, in the project's virtual environment:

    python scripts/soak.py                          # 30 minutes at 5,000 msgs/s, docs written
    python scripts/soak.py --minutes 2 --no-write   # a short look, docs left alone
    python scripts/soak.py --minutes 0.1 --sample-seconds 1 --output /tmp/r.md   # a smoke run

Theory of operation
-------------------
A router that routes correctly for a minute may still leak: a table that is never
trimmed, a buffer per closed connection, a file descriptor per dial. Such a leak shows
only over time, as memory or descriptors that keep growing while the load stays the
same. This script holds the load steady for a long time and watches for exactly that,
from outside, on real processes.

1. **The network.** Three ``gnutella-router run`` processes (R0, R1, R2) on free ports
   of 127.0.0.1, each with its own temporary state directory and a generated TOML file
   that sets only what a network on one machine needs: the admin interface on a free
   port of its own (its default, the node's port + 1, may be taken) and
   ``catcher.min_connections`` equal to the number of seeds the router is given, so
   that each router keeps exactly its planned links and never dials the addresses it
   hears of in pongs (the responders' made-up ones among them). Everything else is at
   its defaults. They are linked with ``--seed``: in a *line* (R1 dials R0, R2 dials
   R1; the default) or a *triangle* (R2 also dials R0, so every query reaches R2 twice
   and duplicate detection works all along). Routers are started one after the other,
   each once the previous one's admin interface answers (it opens after the peer
   listener; a bare connect to the peer port would count as a broken handshake), and
   the run waits until every planned link is up. Each router runs in a session of its
   own, so a Ctrl-C at the terminal reaches this script only, which stops the routers
   in order; and each is told by the kernel to stop (SIGTERM) if this script dies
   without doing so (``PR_SET_PDEATHSIG``), so no router outlives it whatever happens.
   Logs are JSON lines, one file per router.
2. **The load.** The project's own load client (:class:`~gnutella_router.traffic.load.
   LoadRun`, in the form whose peers connect to several routers,
   :class:`~gnutella_router.testnet.spread_load.SpreadLoadRun`) runs in this process:
   five peers, two injectors (on R0 and on R2) sharing one open-loop schedule of
   ``--rate`` msgs/s of the SEDA paper's mix (85 % pings, 15 % queries, TTL 7), and one
   sink on each router, answering like servents (``respond``: a pong per ping, a hit per
   query now and then) so that pongs and query hits flow back across the network to
   the injectors. Queries cross the whole network in both directions; pings stop one
   router from where they enter (routers answer each other's pings from their pong
   caches), so each ping is owed to one sink, the one beside its injector, and each
   query to all three. Latency is the load client's own: from each message's scheduled
   time (coordinated omission excluded) to its arrival at a sink (one-hop: through one
   to three routers) or, for replies, back at the injector (round-trip).
3. **Sampling.** Every ``--sample-seconds`` from the first message on (and once before
   the load connects, and once after it has gone), each router's resident set
   (``VmRSS`` in /proc/PID/status), open descriptors (entries of /proc/PID/fd, read
   before the admin request so that its own socket is not counted) and CPU time
   (/proc/PID/stat), then its own counters from its admin interface (``/stats``:
   messages read, drops, connections, peers refused and kicked, route table sizes);
   the same /proc figures for this process (the load client), the machine's load
   average and busy CPU time (/proc/stat), and the load client's counts so far; and the
   CPU time of every other process, so the report can say what else was running. A
   status line is printed with every sample.
4. **The figures.** Memory is judged at two points: *at minute 5* (``--reference-
   minutes``; route and duplicate tables fill up and reach their caps in the first
   minutes, so that is the start of the steady state) and *at the end*, each the median
   of the samples in the minute before it (one sample can be caught mid-collection;
   the median of seven cannot). Samples taken while the load client drains its last
   copies, after the last message, are kept out of "the end". The drift is
   ``end / minute-5 - 1`` and should stay under ``--max-drift`` percent; a
   least-squares slope over the same span (MiB an hour) is reported beside it, with
   the peak (``VmHWM``). Descriptors are judged the same
   way and must not grow by more than ``--fd-slack``; and after the load client has
   gone each router must be back to the descriptors it had before it came. A run
   shorter than twice the reference takes its reference at half time. Loss is the load
   client's (copies owed to the sinks that never arrived) set beside what the routers
   say they dropped during the load, by reason, read from their counters before and
   after it (the load client's own reconciliation reads one router; here there are
   three). Latency percentiles (p50/p90/p99/p99.9/max per kind and type) come from the
   load client's report.
5. **The verdict.** Met when every router ran to the end and exited 0 on SIGTERM, no
   router's RSS drifted by ``--max-drift`` % or more, no router's descriptors grew, no
   peer was refused or kicked and no connection task failed, no load client peer was
   disconnected, loss stayed within ``--max-loss`` %, and no router logged an error or
   a traceback. Latency and late sends are reported, not judged: on a shared machine
   they measure the machine as much as the routers. Exit status 0 when met, 1 when
   not, 2 when the network could not be started or the load client could not connect,
   130 when interrupted (whose verdict is "interrupted": no steady state to judge).
6. **The report.** Printed; with ``--json FILE`` every figure and sample as JSON; a plot
   of RSS, descriptors and load over time (``--plot``, by default ``soak.png`` beside
   ``--output``); and a section of ``--output`` (docs/robustness.md) between the lines
   ``<!-- soak:begin -->`` and ``<!-- soak:end -->``. Only that block is replaced (the
   file is created with a title if missing, the block appended if absent), by reading
   the file, replacing the block, writing a temporary file beside it and renaming it
   over the original (``os.replace``), so another script writing its own section of the
   same file meanwhile never sees a half-written file; if the file changed between the
   read and the rename, it is done again. ``--from-json`` redraws the plot and the
   report from a finished run's JSON without running anything.

Ctrl-C or SIGTERM ends the load early (a second one at once); the routers are then
stopped as always (SIGTERM, up to 15 s, then SIGKILL) and the partial figures printed,
but the docs are not written: an interrupted soak does not replace a full one. Any
exception stops the routers the same way. The temporary directory (state, logs) is
removed at the end unless ``--keep`` is given or the run failed, when its path is
printed.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import datetime
import itertools
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import trio
from benchdocs import machine

from gnutella_router.observe.admin_client import FetchError, fetch
from gnutella_router.testnet.spread_load import SpreadLoadRun
from gnutella_router.traffic.load import ClientPeer, LoadError, LoadSettings
from traffic_models.arrivals import ConstantRate
from traffic_models.generator import TrafficGenerator
from traffic_models.latency import LoadReport
from traffic_models.mix import PAPER_MIX

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "robustness.md"
BEGIN = "<!-- soak:begin -->"
END = "<!-- soak:end -->"
LOOPBACK = "127.0.0.1"
ROUTERS = 3
TOPOLOGIES: dict[str, tuple[tuple[int, ...], ...]] = {
    # Seeds of each router (indices of the routers it dials).
    "line": ((), (0,), (1,)),
    "triangle": ((), (0,), (0, 1)),
}
INJECTOR_ROUTERS = (0, 2)
SINK_ROUTERS = (0, 1, 2)
"""One sink on every router, so each injector has exactly one sink beside it: every
ping is then owed to exactly one sink whichever injector sent it."""
START_TIMEOUT = 30.0
FORM_TIMEOUT = 30.0
SETTLE_TIMEOUT = 10.0
STOP_GRACE = 15.0
ADMIN_TIMEOUT = 5.0
CACHES = (("pong_cache", "cached pongs"), ("host_cache", "cached hosts"))
WINDOW_SECONDS = 60.0
"""The minute whose samples' median stands for "at minute 5" and "at the end"."""
PR_SET_PDEATHSIG = 1


class SoakError(Exception):
    """The network could not be started or formed, or the load client could not connect."""


# --------------------------------------------------------------------------- processes


@dataclasses.dataclass(slots=True)
class Router:
    """One ``gnutella-router run`` child and where to reach it."""

    name: str
    port: int
    admin_port: int
    seeds: tuple[int, ...]
    state_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    exit_status: int | None = None
    killed: bool = False
    died_at: float | None = None
    """perf_counter() when a sample first found it gone before we stopped it."""

    @property
    def address(self) -> tuple[str, int]:
        return (LOOPBACK, self.port)

    @property
    def admin(self) -> tuple[str, int]:
        return (LOOPBACK, self.admin_port)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


def free_ports(count: int) -> list[int]:
    """Ports the system hands out as free, all bound at once so they differ."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((LOOPBACK, 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _die_with_parent(parent: int) -> Callable[[], None]:
    """Runs in the child before exec: the kernel sends it SIGTERM when this script's
    main thread ends, however it ends (even SIGKILL), so no router is left behind."""

    def prepare() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return prepare


def start_router(router: Router, peers: Sequence[Router], workdir: Path) -> None:
    """Start ``router`` (dialling ``peers``) and return once its admin interface answers."""
    config = workdir / f"{router.name}.toml"
    config.write_text(
        "# Written by scripts/soak.py: the admin interface on a port of its own, and\n"
        "# no dialling beyond the seeds given on the command line.\n"
        f'[admin]\nlisten = "{LOOPBACK}:{router.admin_port}"\n\n'
        f"[catcher]\nmin_connections = {len(router.seeds)}\n"
    )
    router.state_dir.mkdir(parents=True)
    argv = [sys.executable, "-m", "gnutella_router", "run", "--config", str(config)]
    argv += ["--listen", f"{LOOPBACK}:{router.port}", "--state-dir", str(router.state_dir)]
    argv += ["--log-format", "json"]
    for peer in peers:
        argv += ["--seed", f"{LOOPBACK}:{peer.port}"]
    with router.log_path.open("wb") as log:
        router.process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
            preexec_fn=_die_with_parent(os.getpid()),
        )
    # Ready once the admin interface answers: the router starts it after its listener,
    # and asking it costs no peer slot (a bare connect to the peer port would be
    # counted, and logged, as a broken handshake).
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if not router.alive():
            raise SoakError(f"{router.name} exited at start{log_tail(router.log_path)}")
        try:
            fetch(router.admin, "/healthz", timeout=1.0)
            return
        except FetchError:
            if time.monotonic() > deadline:
                raise SoakError(
                    f"{router.name} did not answer within {START_TIMEOUT:g} s"
                    f"{log_tail(router.log_path)}"
                ) from None
            time.sleep(0.05)


def stop_routers(routers: Sequence[Router], grace: float = STOP_GRACE) -> None:
    """SIGTERM to every router still running, wait up to ``grace`` s, then SIGKILL.

    Safe to call twice and on routers never started; an interruption while waiting
    kills the rest at once before it goes on, so nothing is left running.
    """
    running = [r for r in routers if r.process is not None and r.process.returncode is None]
    try:
        for router in running:
            assert router.process is not None
            if router.process.poll() is None:
                router.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for router in running:
            assert router.process is not None
            try:
                router.exit_status = router.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                router.process.kill()
                router.process.wait()
                router.killed = True
    finally:
        for router in running:
            assert router.process is not None
            if router.process.poll() is None:
                router.process.kill()
                router.process.wait()
                router.killed = True


def log_tail(path: Path, lines: int = 5) -> str:
    with contextlib.suppress(OSError):
        text = path.read_text(errors="replace").strip().splitlines()[-lines:]
        if text:
            return ":\n    " + "\n    ".join(text)
    return ""


# --------------------------------------------------------------------------- /proc


def proc_status(pid: int | str) -> dict[str, int]:
    """VmRSS and VmHWM in bytes (empty when the process is gone)."""
    out: dict[str, int] = {}
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":", 1)[0]] = int(line.split()[1]) * 1024
    return out


def open_fds(pid: int | str) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def cpu_seconds(pid: int | str) -> float | None:
    """User plus system CPU time of a process (all its threads), from /proc/PID/stat."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU seconds all cores have spent busy since boot, from /proc/stat."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def load_average() -> float:
    return os.getloadavg()[0]


# --------------------------------------------------------------------------- admin


def admin_get(router: Router, path: str) -> Any:
    """One admin GET; FetchError when the router does not answer."""
    return fetch(router.admin, path, timeout=ADMIN_TIMEOUT)


def outgoing_link_up(dialer: Router, listener: Router) -> bool:
    try:
        connections = admin_get(dialer, "/connections")
    except FetchError:
        return False
    wanted = f"{LOOPBACK}:{listener.port}"
    return any(
        c.get("role") == "outgoing" and not c.get("closing") and c.get("peer") == wanted
        for c in connections
    )


def connection_count(router: Router) -> int | None:
    try:
        stats = admin_get(router, "/stats")
    except FetchError:
        return None
    value = stats.get("server", {}).get("connections")
    return value if isinstance(value, int) else None


def _sum(value: object) -> int:
    """Total of a counter mapping, nested mappings included."""
    if isinstance(value, dict):
        return sum(_sum(v) for v in value.values())
    return value if isinstance(value, int) else 0


def _delta(after: object, before: object) -> Any:
    """Increase of (nested) integer counters; keys that did not move are left out."""
    if isinstance(after, dict):
        before_map = before if isinstance(before, dict) else {}
        out = {}
        for key, value in after.items():
            change = _delta(value, before_map.get(key, 0))
            if change:
                out[key] = change
        return out
    if isinstance(after, int):
        return after - (before if isinstance(before, int) else 0)
    return 0


# --------------------------------------------------------------------------- the load


class SoakLoad(SpreadLoadRun):
    """The spread load client, telling when its clock starts: samples are timed from
    its first message, as its latencies are."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sending = trio.Event()

    async def _send(self, injectors: Sequence[ClientPeer], sinks: int) -> None:
        # Waiters run only at this task's next checkpoint, which is inside the parent's
        # ``_send`` after it has set ``started_ns``: they always see the start time.
        self.sending.set()
        await super()._send(injectors, sinks)


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
    sample.received = _sum(routing.get("received"))
    sample.forwarded = _sum(routing.get("forwarded"))
    sample.dropped = _sum(routing.get("dropped"))
    sample.kicked = _sum(server.get("kicked"))
    sample.refused = _sum(server.get("refused"))
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


# --------------------------------------------------------------------------- the soak


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    """What a soak does and the bounds it is judged by (the command line's flags)."""

    minutes: float = 30.0
    """Length of the load: long enough that a slow leak outgrows the noise."""
    rate: float = 5000.0
    """Offered msgs/s in all, shared by the two injectors."""
    sample_seconds: float = 10.0
    seed: int = 1
    """Seed of the traffic model: the same messages in the same order on every run."""
    topology: str = "line"
    reference_minutes: float = 5.0
    """When the steady state is taken to start: the tables have filled by then."""
    max_drift: float = 5.0
    """Largest RSS growth from the reference to the end, in percent."""
    fd_slack: int = 2
    """Descriptors a router may gain: a save of its host cache may hold a file open."""
    max_loss: float = 0.1
    """Largest share of owed copies that may not arrive, in percent."""

    @property
    def duration(self) -> float:
        return self.minutes * 60.0

    @property
    def reference(self) -> float:
        """Seconds into the load of the "minute 5" point; half time in a short run."""
        return min(self.reference_minutes * 60.0, self.duration / 2)

    @property
    def window(self) -> float:
        """Span of the samples whose median stands for one point in time."""
        return min(WINDOW_SECONDS, max(self.reference / 3, self.sample_seconds))


class Soak:
    """One soak: network, load, samples, then :func:`analyse` makes the figures."""

    def __init__(self, settings: Settings, workdir: Path) -> None:
        self.settings = settings
        self.workdir = workdir
        ports = free_ports(2 * ROUTERS)
        seeds = TOPOLOGIES[settings.topology]
        self.routers = [
            Router(
                name=f"R{i}",
                port=ports[2 * i],
                admin_port=ports[2 * i + 1],
                seeds=seeds[i],
                state_dir=workdir / f"R{i}-state",
                log_path=workdir / f"R{i}.log",
            )
            for i in range(ROUTERS)
        ]
        self.samples: list[Sample] = []
        self.stats_before: list[Any] = []
        self.stats_after: list[Any] = []
        self.peak_rss: list[int | None] = [None] * ROUTERS
        self.load: SoakLoad | None = None
        self.report: LoadReport | None = None
        self.load_error: str | None = None
        self.interrupted = False
        self.aborted = False
        self.started_at = datetime.datetime.now(datetime.UTC)
        self.load_average_start = load_average()
        self.t0: float | None = None
        self.others = OtherProcesses()

    # ------------------------------------------------------------------ network

    def links(self) -> list[tuple[Router, Router]]:
        return [(r, self.routers[s]) for r in self.routers for s in r.seeds]

    def degree(self, router: Router) -> int:
        return sum(router in link for link in self.links())

    def start_network(self) -> None:
        for router in self.routers:
            start_router(router, [self.routers[s] for s in router.seeds], self.workdir)
            print(
                f"{router.name}: pid {router.pid}, 127.0.0.1:{router.port} "
                f"(admin {router.admin_port})"
                + (
                    f", dials {', '.join(self.routers[s].name for s in router.seeds)}"
                    if router.seeds
                    else ""
                ),
                flush=True,
            )
        deadline = time.monotonic() + FORM_TIMEOUT
        while missing := [(a, b) for a, b in self.links() if not outgoing_link_up(a, b)]:
            for router in self.routers:
                if not router.alive():
                    raise SoakError(f"{router.name} exited{log_tail(router.log_path)}")
            if time.monotonic() > deadline:
                names = ", ".join(f"{a.name} -> {b.name}" for a, b in missing)
                raise SoakError(f"the network did not form within {FORM_TIMEOUT:g} s: {names}")
            time.sleep(0.1)
        print(
            f"network formed ({self.settings.topology}: "
            + ", ".join(f"{a.name} -> {b.name}" for a, b in self.links())
            + ")",
            flush=True,
        )

    def read_stats(self) -> list[Any]:
        out = []
        for router in self.routers:
            try:
                out.append(admin_get(router, "/stats"))
            except FetchError as exc:
                out.append({"error": str(exc)})
        return out

    def settle(self) -> None:
        """Wait (bounded) until the load client's peers have left every router."""
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while time.monotonic() < deadline:
            counts = [connection_count(r) for r in self.routers]
            if all(
                c is None or c <= self.degree(r) for r, c in zip(self.routers, counts, strict=True)
            ):
                return
            time.sleep(0.1)

    # ------------------------------------------------------------------ load

    async def registered(self, index: int, address: tuple[str, int]) -> bool:
        """Has router ``index`` registered the load client's peer at ``address``?"""
        try:
            connections = await trio.to_thread.run_sync(
                admin_get, self.routers[index], "/connections"
            )
        except FetchError:
            return False
        wanted = f"{address[0]}:{address[1]}"
        return any(c.get("peer") == wanted and not c.get("closing") for c in connections)

    def make_load(self) -> SoakLoad:
        settings = self.settings
        targets = [(i, self.routers[i].address) for i in INJECTOR_ROUTERS]
        targets += [(i, self.routers[i].address) for i in SINK_ROUTERS]
        load_settings = LoadSettings(
            target=self.routers[0].address,
            peers=len(targets),
            injectors=len(INJECTOR_ROUTERS),
            duration=settings.duration,
            seed=settings.seed,
            respond=True,
            admin=None,  # three routers: reconciled here, from each one's counters
            user_agent="gnutella-router-soak",
        )
        traffic = TrafficGenerator(
            mix=PAPER_MIX, arrivals=ConstantRate(settings.rate), seed=settings.seed
        )
        return SoakLoad(load_settings, traffic, targets, self.registered)

    async def drive(self) -> None:
        """The load, the sampler and the signal watcher, until the load has ended."""
        load = self.load = self.make_load()
        done = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_signals, nursery.cancel_scope, load)
            sampler_done = trio.Event()
            nursery.start_soon(self._sample_during_load, load, done, sampler_done)
            try:
                self.report = owe_each_ping_once(await load.run())
            except LoadError as exc:
                self.load_error = str(exc)
            finally:
                done.set()
            await sampler_done.wait()
            nursery.cancel_scope.cancel()

    async def _watch_signals(self, scope: trio.CancelScope, load: SpreadLoadRun) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                if not self.interrupted:
                    self.interrupted = True
                    print(
                        f"\n{signal.Signals(signum).name}: ending the load early "
                        "(again to stop at once)",
                        flush=True,
                    )
                    load.request_stop()
                else:
                    self.aborted = True
                    scope.cancel()
                    return

    async def _sample_during_load(
        self, load: SoakLoad, done: trio.Event, sampler_done: trio.Event
    ) -> None:
        try:
            async with trio.open_nursery() as first:
                # Whichever comes first: the first message, or the end of a load that
                # never sent one (it could not connect, or was interrupted).
                for event in (load.sending, done):
                    first.start_soon(_set_then_cancel, event, first.cancel_scope)
            if not load.started_ns:
                return
            self.t0 = t0 = load.started_ns / 1e9
            interval = self.settings.sample_seconds
            tick = 0
            while True:
                delay = t0 + tick * interval - time.perf_counter()
                with trio.move_on_after(max(0.0, delay)):
                    await done.wait()
                if done.is_set():
                    return
                # Samples due after the last message (the load client is draining) are
                # kept apart: the figures "at the end" are those of the load itself.
                phase = "load" if tick * interval <= self.settings.duration + 1e-9 else "drain"
                sample = await trio.to_thread.run_sync(self._sample, phase, load)
                self.samples.append(sample)
                self.print_status(sample)
                # A slow sample skips the ticks it overran instead of bunching up.
                tick = max(tick + 1, math.floor((time.perf_counter() - t0) / interval) + 1)
        finally:
            sampler_done.set()

    def _sample(self, phase: str, load: SoakLoad) -> Sample:
        sample = take_sample(self.routers, phase, load)
        if phase == "load":
            self.others.scan({os.getpid(), *(r.pid for r in self.routers if r.process)})
        return sample

    def print_status(self, sample: Sample) -> None:
        assert self.t0 is not None
        at = sample.clock - self.t0
        rss = "/".join(f"{r.rss / 2**20:.1f}" if r.rss else "-" for r in sample.routers)
        fds = "/".join(str(r.fds) if r.fds is not None else "-" for r in sample.routers)
        rate = f"{sample.sent / at:,.0f}/s" if at >= 1 else "-"
        print(
            f"[{int(at) // 60:3d}:{int(at) % 60:02d}] sent {sample.sent:>10,} ({rate}) "
            f"copies {sample.copies:>10,} late {sample.late:>9,} | RSS MiB {rss} | FDs {fds} "
            f"| client {(sample.client_rss or 0) / 2**20:.1f} MiB | load {sample.load_average:.2f}",
            flush=True,
        )

    # ------------------------------------------------------------------ the run

    def run(self) -> None:
        """Start, load, sample, stop. Routers are stopped on every path out."""
        try:
            self.start_network()
            time.sleep(0.2)  # the routers close the sockets of our last admin requests
            self.samples.append(take_sample(self.routers, "before", None))
            self.stats_before = self.read_stats()
            trio.run(self.drive)
            if self.aborted:
                return
            self.settle()
            self.stats_after = self.read_stats()
            time.sleep(0.2)
            self.samples.append(take_sample(self.routers, "after", None))
            self.peak_rss = [
                proc_status(r.pid).get("VmHWM") if r.alive() else None for r in self.routers
            ]
        finally:
            stop_routers(self.routers)
        if self.t0 is not None:
            for sample in self.samples:
                sample.at = sample.clock - self.t0
        if self.load_error is not None:
            raise SoakError(f"load client: {self.load_error}")


async def _set_then_cancel(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def owe_each_ping_once(report: LoadReport) -> LoadReport:
    """Expected copies as the network delivers them: a ping is owed to one sink only.

    The load client owes every broadcast to every sink, but a router answers another
    router's pings from its pong cache instead of passing them on, so a ping reaches the
    sink beside its injector only; there is one such sink per injector.
    """
    per_sink = report.expected.get("ping", 0) // max(report.sinks, 1)
    if not per_sink:
        return report
    return dataclasses.replace(report, expected={**report.expected, "ping": per_sink})


# --------------------------------------------------------------------------- figures


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def slope_per_hour(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) points, per hour."""
    if len(points) < 3:
        return None
    mean_t = statistics.fmean(t for t, _ in points)
    mean_v = statistics.fmean(v for _, v in points)
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return None
    return sum((t - mean_t) * (v - mean_v) for t, v in points) / spread * 3600


def window_values(
    samples: Sequence[Sample], start: float, end: float, pick: Callable[[Sample], float | None]
) -> list[float]:
    out = []
    for s in samples:
        if s.phase == "load" and start - 1e-6 <= s.at <= end + 1e-6:
            value = pick(s)
            if value is not None:
                out.append(value)
    return out


def log_findings(path: Path) -> dict[str, Any]:
    """Warnings and errors in a router's JSON log, counted by event; tracebacks."""
    events: dict[str, int] = {}
    tracebacks = 0
    errors = 0
    with contextlib.suppress(OSError):
        for line in path.read_text(errors="replace").splitlines():
            if "Traceback" in line:
                tracebacks += 1
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not isinstance(record, dict):
                continue
            level = record.get("level")
            if level in ("warning", "error", "critical"):
                key = f"{level}: {record.get('event')}"
                events[key] = events.get(key, 0) + 1
                errors += level != "warning"
    return {"warnings_and_errors": events, "errors": errors, "tracebacks": tracebacks}


def analyse(soak: Soak) -> dict[str, Any]:
    """Every figure of the run, JSON-ready, with the checks and the verdict."""
    settings = soak.settings
    samples = soak.samples
    load_samples = [s for s in samples if s.phase == "load"]
    last = max((s.at for s in load_samples), default=0.0)
    duration = last if soak.interrupted else settings.duration
    ref_point = min(settings.reference, last)
    end_point = last
    window = settings.window
    ref_span = (ref_point - window, ref_point)
    end_span = (end_point - window, end_point)
    before = next((s for s in samples if s.phase == "before"), None)
    after = next((s for s in samples if s.phase == "after"), None)

    routers: list[dict[str, Any]] = []
    for index, router in enumerate(soak.routers):

        def pick_rss(s: Sample, i: int = index) -> float | None:
            return s.routers[i].rss

        def pick_fds(s: Sample, i: int = index) -> float | None:
            return s.routers[i].fds

        rss_ref = median(window_values(samples, *ref_span, pick_rss))
        rss_end = median(window_values(samples, *end_span, pick_rss))
        fds_ref = median(window_values(samples, *ref_span, pick_fds))
        fds_end = median(window_values(samples, *end_span, pick_fds))
        rss_all = [v for s in load_samples if (v := s.routers[index].rss)]
        fds_all = [f for s in load_samples if (f := s.routers[index].fds) is not None]
        steady = [
            (s.at, v / 2**20)
            for s in load_samples
            if s.at >= ref_point and (v := s.routers[index].rss)
        ]
        cpu = [(s.at, c) for s in load_samples if (c := s.routers[index].cpu) is not None]
        stats_before = soak.stats_before[index] if soak.stats_before else {}
        stats_after = soak.stats_after[index] if soak.stats_after else {}
        routing_delta = _delta(stats_after.get("router", {}), stats_before.get("router", {}))
        server_after = stats_after.get("server", {})
        server_delta = _delta(server_after, stats_before.get("server", {}))
        received = _sum(routing_delta.get("received", {})) if routing_delta else 0
        routers.append(
            {
                "name": router.name,
                "pid": router.process.pid if router.process else None,
                "address": f"{LOOPBACK}:{router.port}",
                "admin": f"{LOOPBACK}:{router.admin_port}",
                "dials": [soak.routers[s].name for s in router.seeds],
                "rss_at_reference": rss_ref,
                "rss_at_end": rss_end,
                "rss_drift_percent": (
                    (rss_end / rss_ref - 1) * 100 if rss_ref and rss_end is not None else None
                ),
                "rss_trend_mib_per_hour": slope_per_hour(steady),
                "rss_min": min(rss_all, default=None),
                "rss_peak_sampled": max(rss_all, default=None),
                "rss_peak_vmhwm": soak.peak_rss[index],
                "fds_before_load": before.routers[index].fds if before else None,
                "fds_at_reference": fds_ref,
                "fds_at_end": fds_end,
                "fds_min": min(fds_all, default=None),
                "fds_max": max(fds_all, default=None),
                "fds_after_load": after.routers[index].fds if after else None,
                "cpu_share": (cpu[-1][1] - cpu[0][1]) / (cpu[-1][0] - cpu[0][0])
                if len(cpu) > 1 and cpu[-1][0] > cpu[0][0]
                else None,
                "received_during_load": received,
                "received_per_second": received / duration if duration else None,
                "forwarded_during_load": _sum(routing_delta.get("forwarded", {})),
                "dropped_during_load": routing_delta.get("dropped", {}),
                "outgoing_dropped_during_load": server_delta.get("outgoing_dropped", {}),
                "route_entries_at_end": next(
                    (
                        s.routers[index].route_entries
                        for s in reversed(load_samples)
                        if s.routers[index].route_entries is not None
                    ),
                    None,
                ),
                "kicked": server_after.get("kicked", {}),
                "refused": server_after.get("refused", {}),
                "failed_connections": server_after.get("failed_connections"),
                "bans": server_after.get("bans"),
                "alive_to_the_end": router.died_at is None
                and all(s.routers[index].alive for s in samples),
                "died_at_seconds": router.died_at - soak.t0
                if router.died_at is not None and soak.t0 is not None
                else None,
                "exit_status": router.exit_status,
                "killed_after_grace": router.killed,
                "log": log_findings(router.log_path),
            }
        )

    client_rss_ref = median(window_values(samples, *ref_span, lambda s: s.client_rss))
    client_rss_end = median(window_values(samples, *end_span, lambda s: s.client_rss))
    shares = machine_shares(soak)
    report = soak.report
    load: dict[str, Any] | None = json.loads(report.to_json()) if report is not None else None
    not_arrived = (
        {
            name: expected - report.received.get(name, 0)
            for name, expected in report.expected.items()
        }
        if report is not None
        else {}
    )
    owed = sum(report.expected.values()) if report is not None else 0
    loss_percent = (sum(not_arrived.values()) / owed * 100) if owed else None
    dropped_total: dict[str, dict[str, int]] = {}
    for r in routers:
        for reason, by_type in r["dropped_during_load"].items():
            into = dropped_total.setdefault(reason, {})
            for name, count in by_type.items():
                into[name] = into.get(name, 0) + count
    result: dict[str, Any] = {
        "date": soak.started_at.isoformat(timespec="seconds"),
        "machine": machine(),
        "settings": dataclasses.asdict(settings),
        "interrupted": soak.interrupted,
        "load_seconds": duration,
        "reference_seconds": ref_point,
        "end_seconds": end_point,
        "window_seconds": window,
        "routers": routers,
        "client": {
            "rss_at_reference": client_rss_ref,
            "rss_at_end": client_rss_end,
            "rss_drift_percent": (client_rss_end / client_rss_ref - 1) * 100
            if client_rss_ref and client_rss_end is not None
            else None,
            "rss_peak_vmhwm": proc_status("self").get("VmHWM"),
            "fds_at_reference": median(window_values(samples, *ref_span, lambda s: s.client_fds)),
            "fds_at_end": median(window_values(samples, *end_span, lambda s: s.client_fds)),
            "cpu_share": shares["client"],
        },
        "machine_load": {
            "load_average_at_start": soak.load_average_start,
            "load_average_median": median([s.load_average for s in load_samples]),
            "load_average_max": max((s.load_average for s in load_samples), default=None),
            "cores": os.cpu_count(),
            "others_cpu_share_median": shares["others"],
            "routers_cpu_share": shares["routers"],
            "other_commands": soak.others.top(
                (load_samples[-1].clock - load_samples[0].clock) if len(load_samples) > 1 else 0
            ),
        },
        "load": load,
        "not_arrived": not_arrived,
        "loss_percent": loss_percent,
        "dropped_by_routers": dropped_total,
        "samples": [dataclasses.asdict(s) for s in samples],
        "router_stats_before_load": soak.stats_before,
        "router_stats_after_load": soak.stats_after,
    }
    result["checks"] = checks(result, settings)
    if soak.interrupted:
        result["verdict"] = "interrupted"  # no steady state to judge
    else:
        result["verdict"] = "pass" if all(ok for ok, _ in result["checks"]) else "fail"
    return result


def machine_shares(soak: Soak) -> dict[str, Any]:
    """Median shares of one core, per sampling interval: the routers, this process (the
    load client), and every other process on the machine (what else was running)."""
    load_samples = [s for s in soak.samples if s.phase == "load"]
    others: list[float] = []
    client: list[float] = []
    for a, b in itertools.pairwise(load_samples):
        span = b.clock - a.clock
        if span <= 0:
            continue
        ours = b.client_cpu - a.client_cpu
        for ra, rb in zip(a.routers, b.routers, strict=True):
            if ra.cpu is not None and rb.cpu is not None:
                ours += rb.cpu - ra.cpu
        others.append(max(0.0, (b.machine_busy - a.machine_busy - ours) / span))
        client.append((b.client_cpu - a.client_cpu) / span)
    routers = []
    for index in range(len(soak.routers)):
        values = []
        for a, b in itertools.pairwise(load_samples):
            first, last = a.routers[index].cpu, b.routers[index].cpu
            if first is not None and last is not None and b.clock > a.clock:
                values.append((last - first) / (b.clock - a.clock))
        routers.append(median(values))
    return {"others": median(others), "client": median(client), "routers": routers}


def checks(result: dict[str, Any], settings: Settings) -> list[tuple[bool, str]]:
    """The soak's goals, each (met, text)."""
    out: list[tuple[bool, str]] = []
    for r in result["routers"]:
        name = r["name"]
        out.append((r["alive_to_the_end"], f"{name} ran to the end"))
        out.append(
            (
                r["exit_status"] == 0 and not r["killed_after_grace"],
                f"{name} exited 0 on SIGTERM (exit status {r['exit_status']}"
                + (", killed after the grace period" if r["killed_after_grace"] else "")
                + ")",
            )
        )
        drift = r["rss_drift_percent"]
        out.append(
            (
                drift is not None and drift < settings.max_drift,
                f"{name} RSS drift from {fmt_minutes(result['reference_seconds'])} to the end "
                f"under {settings.max_drift:g} % ({fmt_percent(drift)})",
            )
        )
        fd_ref, fd_end = r["fds_at_reference"], r["fds_at_end"]
        out.append(
            (
                fd_ref is not None and fd_end is not None and fd_end - fd_ref <= settings.fd_slack,
                f"{name} open FDs steady under load ({fmt_count(fd_ref)} -> {fmt_count(fd_end)}, "
                f"at most +{settings.fd_slack})",
            )
        )
        fd_before, fd_after = r["fds_before_load"], r["fds_after_load"]
        out.append(
            (
                fd_before is not None
                and fd_after is not None
                and fd_after - fd_before <= settings.fd_slack,
                f"{name} back to its FDs once the load client left "
                f"({fmt_count(fd_before)} before, {fmt_count(fd_after)} after)",
            )
        )
        kicked, refused = _sum(r["kicked"]), _sum(r["refused"])
        out.append(
            (
                kicked == 0 and refused == 0 and not r["failed_connections"],
                f"{name} kicked no peer ({kicked}), refused none ({refused}), "
                f"no connection task failed ({r['failed_connections']})",
            )
        )
        log = r["log"]
        out.append(
            (
                log["errors"] == 0 and log["tracebacks"] == 0,
                f"{name} logged no error ({log['errors']}) and no traceback ({log['tracebacks']})",
            )
        )
    load = result["load"]
    if load is None:
        out.append((False, "the load client reported"))
    else:
        out.append(
            (
                not load["disconnected"],
                "no load client peer was disconnected"
                + (f" ({'; '.join(load['disconnected'])})" if load["disconnected"] else ""),
            )
        )
        loss = result["loss_percent"]
        out.append(
            (
                loss is not None and loss <= settings.max_loss,
                f"copies not arrived at most {settings.max_loss:g} % "
                f"({'-' if loss is None else f'{loss:.3f} %'})",
            )
        )
    return out


# --------------------------------------------------------------------------- output


def fmt_mib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.1f} MiB"


def fmt_percent(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:+.{digits}f} %"


def fmt_count(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def fmt_share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def fmt_minutes(seconds: float) -> str:
    return f"{seconds / 60:.3g} min" if seconds >= 60 else f"{seconds:.2g} s"


def fmt_ms(micros: int | float) -> str:
    return f"{micros / 1000:,.2f}"


def counts_text(by_type: dict[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in sorted(by_type.items())) or "none"


def drops_text(dropped: dict[str, dict[str, int]]) -> str:
    if not dropped:
        return "none"
    return "; ".join(f"{reason}: {counts_text(by)}" for reason, by in sorted(dropped.items()))


def rerun_command(settings: Settings) -> str:
    """The command line that repeats this run: the script with its non-default flags."""
    parts = [".venv/bin/python scripts/soak.py"]
    defaults = Settings()
    for field in dataclasses.fields(Settings):
        value = getattr(settings, field.name)
        if value != getattr(defaults, field.name):
            flag = "--" + field.name.replace("_", "-")
            parts.append(f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}")
    return " ".join(parts)


def rss_by_period(result: dict[str, Any], periods: int = 6) -> list[str]:
    """Each router's RSS over equal spans of the load (median, and min-max): two points
    can be caught on a high and a low, but spans that keep rising are a creep, and
    spans that go up and down are noise."""
    samples = [s for s in result["samples"] if s["phase"] == "load"]
    end = result["end_seconds"]
    if end <= 0 or not samples:
        return []
    span = end / periods
    unit, scale = ("min", 60.0) if end >= 60 else ("s", 1.0)
    labels = [f"{k * span / scale:.3g}-{(k + 1) * span / scale:.3g} {unit}" for k in range(periods)]
    lines = [
        f"RSS in MiB over the load, by {fmt_minutes(span)} span: median (min-max).",
        "",
        "| router | " + " | ".join(labels) + " |",
        "|---|" + "---:|" * periods,
    ]
    for index, router in enumerate(result["routers"]):
        cells = []
        for k in range(periods):
            values = [
                s["routers"][index]["rss"] / 2**20
                for s in samples
                if s["routers"][index]["rss"] and min(periods - 1, int(s["at"] // span)) == k
            ]
            cells.append(
                f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"
                if values
                else "-"
            )
        lines.append(f"| {router['name']} | " + " | ".join(cells) + " |")
    last = samples[-1]["routers"]
    sizes = []
    for router, r in zip(result["routers"], last, strict=True):
        known = [f"{r.get('route_entries') or 0:,} route-table entries"]
        known += [f"{r[k]:,} {name}" for k, name in CACHES if r.get(k) is not None]
        sizes.append(f"{router['name']} " + ", ".join(known))
    lines += ["", "At the end: " + "; ".join(sizes) + ".", ""]
    return lines


def report_lines(result: dict[str, Any], plot: Path | None, doc: Path) -> list[str]:
    """The soak's section of docs/robustness.md, as Markdown lines (also printed)."""
    settings = result["settings"]
    routers = result["routers"]
    ref = fmt_minutes(result["reference_seconds"])
    window = fmt_minutes(result["window_seconds"])
    load = result["load"]
    machine_load = result["machine_load"]
    links = ", ".join(f"{r['name']} -> {d}" for r in routers for d in r["dials"])
    lines = [
        "## Soak",
        "",
        f"`scripts/soak.py`, {result['date'][:10]}, on {result['machine']}: three "
        f"`gnutella-router run` processes on 127.0.0.1 linked in a {settings['topology']} "
        f"({links}), {settings['rate']:,.0f} msgs/s of the SEDA paper's mix (85 % pings, "
        f"15 % queries) for {fmt_minutes(result['load_seconds'])}"
        + (" (INTERRUPTED: partial figures)" if result["interrupted"] else "")
        + ".",
        "",
        "Each router runs with its defaults, except its admin interface on a port of its "
        "own and `catcher.min_connections` equal to its seeds (so it keeps exactly its "
        "planned links). The project's load client connects five peers: injectors on R0 "
        "and R2 share one open-loop schedule, and one sink on each router answers like a "
        "servent (a pong per ping, a query hit now and then), so queries cross the network "
        "both ways and pongs and hits come back across it. Every "
        f"{settings['sample_seconds']:g} s the script reads each router's VmRSS and open "
        "file descriptors from /proc and its counters from its admin interface. "
        f'"At {ref}" and "at the end" are medians of the samples in the {window} before '
        "each point.",
        "",
        f"Verdict: **{result['verdict']}**"
        + (
            ""
            if result["verdict"] == "pass"
            else ": " + "; ".join(text for ok, text in result["checks"] if not ok)
        ),
        "",
        "| router | RSS at " + ref + " | RSS at end | drift | trend after " + ref + " | peak RSS "
        "(VmHWM) | FDs before load / at " + ref + " / at end / after load (min-max under load) "
        "| msgs read/s (all peers) | CPU (one core) | kicked / refused | exit |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r, share in zip(routers, machine_load["routers_cpu_share"], strict=True):
        trend = r["rss_trend_mib_per_hour"]
        rate = r["received_per_second"]
        lines.append(
            f"| {r['name']} | {fmt_mib(r['rss_at_reference'])} | {fmt_mib(r['rss_at_end'])} "
            f"| {fmt_percent(r['rss_drift_percent'])} "
            f"| {'-' if trend is None else f'{trend:+.2f} MiB/h'} "
            f"| {fmt_mib(r['rss_peak_vmhwm'] or r['rss_peak_sampled'])} "
            f"| {fmt_count(r['fds_before_load'])} / {fmt_count(r['fds_at_reference'])} / "
            f"{fmt_count(r['fds_at_end'])} / {fmt_count(r['fds_after_load'])} "
            f"({fmt_count(r['fds_min'])}-{fmt_count(r['fds_max'])}) "
            f"| {'-' if rate is None else f'{rate:,.0f}'} | {fmt_share(share)} "
            f"| {_sum(r['kicked'])} / {_sum(r['refused'])} | {r['exit_status']} |"
        )
    client = result["client"]
    lines += [
        f"| load client (this script) | {fmt_mib(client['rss_at_reference'])} "
        f"| {fmt_mib(client['rss_at_end'])} | {fmt_percent(client['rss_drift_percent'])} | "
        f"| {fmt_mib(client['rss_peak_vmhwm'])} | - / {fmt_count(client['fds_at_reference'])} / "
        f"{fmt_count(client['fds_at_end'])} / - | | {fmt_share(client['cpu_share'])} | | |",
        "",
        *rss_by_period(result),
    ]
    if load is not None:
        sent = load["sent"]
        total = sum(sent.values())
        late = load["late"]
        lines += [
            f"Sent {total:,} messages ({counts_text(sent)}) at {load['achieved_rate']:,.0f} "
            f"msgs/s; {late:,} ({late / total if total else 0:.1%}) went out more than "
            f"{load['late_threshold_ms']:g} ms after their scheduled time (their latency "
            "counts from the scheduled time).",
            "",
            "| type | copies owed to the sinks | arrived | not arrived |",
            "|---|---:|---:|---:|",
        ]
        for name, owed in sorted(load["expected"].items()):
            got = load["received"].get(name, 0)
            lines.append(
                f"| {name} | {owed:,} | {got:,} | {owed - got:,} "
                f"({(owed - got) / owed if owed else 0:.3%}) |"
            )
        lines += [
            "",
            f"Replies back at the injectors: {counts_text(load['replies'])}. Dropped by the "
            f"routers during the load, by reason: {drops_text(result['dropped_by_routers'])}. "
            "Dropped by their outgoing queues: "
            + (
                "; ".join(
                    f"{r['name']} {counts_text(r['outgoing_dropped_during_load'])}"
                    for r in routers
                    if r["outgoing_dropped_during_load"]
                )
                or "none"
            )
            + ". Load client peers disconnected by a router: "
            + ("; ".join(load["disconnected"]) or "none")
            + ".",
            "",
            "Latency in ms, from each message's scheduled send time: *one-hop* is a copy "
            "reaching a sink (through one to three routers), *round-trip* a sink's reply "
            "back at the injector, *target-reply* the pong of the injector's own router.",
            "",
            "| kind | type | count | p50 | p90 | p99 | p99.9 | max |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for kind, by_type in load["latency"].items():
            for name, s in by_type.items():
                lines.append(
                    f"| {kind} | {name} | {s['count']:,} | {fmt_ms(s['p50'])} "
                    f"| {fmt_ms(s['p90'])} | {fmt_ms(s['p99'])} | {fmt_ms(s['p999'])} "
                    f"| {fmt_ms(s['max'])} |"
                )
        if load["negative_samples"]:
            lines.append(
                f"\n{load['negative_samples']:,} latency samples below zero were left out "
                "(an error of the instrument)."
            )
        lines.append("")
    load_avg = machine_load["load_average_median"]
    lines += [
        f"What else ran: on {machine_load['cores']} cores, the 1-minute load average was "
        f"{machine_load['load_average_at_start']:.2f} at the start and a median of "
        + ("-" if load_avg is None else f"{load_avg:.2f}")
        + f" (max {machine_load['load_average_max'] or 0:.2f}) during the load; processes "
        "other than the routers and the load client used a median of "
        f"{fmt_share(machine_load['others_cpu_share_median'])} of one core.",
        "",
        "Checks:",
        "",
        *(f"- {'met' if ok else 'MISSED'}: {text}" for ok, text in result["checks"]),
        "",
    ]
    if plot is not None:
        link = os.path.relpath(plot, doc.parent)
        lines += [f"![RSS, open FDs and load over the soak]({link})", ""]
    lines += [
        "Rerun (the routers and the load client share the machine; about "
        f"{fmt_minutes(result['load_seconds'] + 30)} in all):",
        "",
        "```sh",
        rerun_command(Settings(**settings)),
        "```",
    ]
    return lines


def replace_block(text: str | None, lines: Sequence[str]) -> str:
    """``text`` with the soak block replaced (or appended; a new file if ``None``)."""
    block = [BEGIN, *lines, END]
    if text is None:
        return "# Robustness\n\n" + "\n".join(block) + "\n"
    existing = text.splitlines()
    try:
        start = existing.index(BEGIN)
        end = existing.index(END, start)
    except ValueError:
        return text.rstrip("\n") + "\n\n" + "\n".join(block) + "\n"
    kept = existing[:start] + block + existing[end + 1 :]
    return "\n".join(kept) + ("\n" if text.endswith("\n") else "")


def write_block(path: Path, lines: Sequence[str], attempts: int = 5) -> None:
    """Replace our block in ``path`` atomically (temporary file + rename).

    Another script may write its own section of the same file meanwhile: if the file
    changed between our read and our rename, we read it again rather than overwrite
    what it wrote.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(attempts):
        try:
            original: str | None = path.read_text()
        except FileNotFoundError:
            original = None
        updated = replace_block(original, lines)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(handle, "w") as out:
                out.write(updated)
            with contextlib.suppress(OSError):
                os.chmod(temporary, path.stat().st_mode & 0o777 if path.exists() else 0o644)
            try:
                current: str | None = path.read_text()
            except FileNotFoundError:
                current = None
            if current == original:
                os.replace(temporary, path)
                return
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
    raise OSError(f"{path} kept changing while the soak section was written")


def plot(result: dict[str, Any], path: Path) -> Path:
    """RSS, open FDs and the load over time, with the two judged windows shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = [s for s in result["samples"] if s["phase"] == "load"]
    minutes = [s["at"] / 60 for s in samples]
    figure, (rss_axes, fd_axes, load_axes) = plt.subplots(
        3, 1, figsize=(9, 9), sharex=True, gridspec_kw={"height_ratios": [3, 2, 2]}
    )
    for index, router in enumerate(result["routers"]):
        rss = [
            (m, s["routers"][index]["rss"] / 2**20)
            for m, s in zip(minutes, samples, strict=True)
            if s["routers"][index]["rss"]
        ]
        fds = [
            (m, s["routers"][index]["fds"])
            for m, s in zip(minutes, samples, strict=True)
            if s["routers"][index]["fds"] is not None
        ]
        rss_axes.plot([m for m, _ in rss], [v for _, v in rss], label=router["name"])
        line = fd_axes.step(
            [m for m, _ in fds],
            [v for _, v in fds],
            where="post",
            label=router["name"],
            linestyle=("-", "--", ":")[index % 3],
        )[0]
        # Before the load client came and after it left: the router's own descriptors.
        for phase, marker in (("before", "o"), ("after", "s")):
            for s in result["samples"]:
                if s["phase"] == phase and s["routers"][index]["fds"] is not None:
                    fd_axes.plot(
                        s["at"] / 60, s["routers"][index]["fds"], marker=marker,
                        color=line.get_color(), linestyle="none",
                    )  # fmt: skip
    client = [
        (m, s["client_rss"] / 2**20)
        for m, s in zip(minutes, samples, strict=True)
        if s["client_rss"]
    ]
    rss_axes.plot(
        [m for m, _ in client], [v for _, v in client], color="grey", linestyle="--",
        label="load client",
    )  # fmt: skip
    ref, window, end = result["reference_seconds"], result["window_seconds"], result["end_seconds"]
    for axes in (rss_axes, fd_axes, load_axes):
        for start in (ref - window, end - window):
            axes.axvspan(start / 60, (start + window) / 60, color="tab:green", alpha=0.1)
        axes.grid(alpha=0.3)
    rss_axes.set_ylabel("RSS (MiB)")
    rss_axes.set_ylim(bottom=0)
    rss_axes.legend(loc="lower right", ncol=4)
    rss_axes.set_title(
        f"Soak {result['date'][:10]}: 3 routers, {result['settings']['rate']:,.0f} msgs/s, "
        f"verdict {result['verdict']} (shaded: the windows compared)"
    )
    fd_axes.set_ylabel("open FDs")
    fd_axes.set_title(
        "open FDs; circles: before the load client came, squares: after it left", fontsize=9
    )
    fd_axes.set_ylim(bottom=0, top=max(
        (s["routers"][i]["fds"] or 0 for s in samples for i in range(len(result["routers"]))),
        default=1,
    ) * 1.3 + 1)  # fmt: skip
    fd_axes.legend(loc="lower right", ncol=3)
    rates = [
        (b["at"] / 60, (b["sent"] - a["sent"]) / (b["at"] - a["at"]))
        for a, b in itertools.pairwise(samples)
        if b["at"] > a["at"]
    ]
    load_axes.plot([m for m, _ in rates], [r for _, r in rates], color="tab:blue")
    load_axes.set_ylabel("sent msgs/s", color="tab:blue")
    load_axes.set_ylim(bottom=0)
    average = load_axes.twinx()
    average.plot(minutes, [s["load_average"] for s in samples], color="tab:red", alpha=0.7)
    average.set_ylabel("1-min load average", color="tab:red")
    average.set_ylim(bottom=0)
    load_axes.set_xlabel("minutes since the first message")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


# --------------------------------------------------------------------------- main


class Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown, except where there is none to show (a flag, or "see the help")."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(
        description=doc.split("\nTheory of operation", 1)[0],
        formatter_class=Formatter,
        epilog="Exit status: 0 when every check is met, 1 when one is missed, 2 when the "
        "network could not be started, 130 when interrupted. The theory of operation is at "
        "the top of scripts/soak.py.",
    )
    defaults = Settings()
    parser.add_argument("--minutes", type=float, default=defaults.minutes, help="load duration")
    parser.add_argument("--rate", type=float, default=defaults.rate, help="offered msgs/s in all")
    parser.add_argument(
        "--sample-seconds", type=float, default=defaults.sample_seconds, help="between samples"
    )
    parser.add_argument("--seed", type=int, default=defaults.seed, help="traffic model seed")
    parser.add_argument(
        "--topology", choices=sorted(TOPOLOGIES), default=defaults.topology, help="router links"
    )
    parser.add_argument(
        "--reference-minutes",
        type=float,
        default=defaults.reference_minutes,
        help="the steady-state point RSS and FDs at the end are compared with (half time "
        "when the run is shorter than twice this)",
    )
    parser.add_argument(
        "--max-drift", type=float, default=defaults.max_drift, help="largest RSS drift, %%"
    )
    parser.add_argument(
        "--fd-slack", type=int, default=defaults.fd_slack, help="FDs a router may gain"
    )
    parser.add_argument(
        "--max-loss", type=float, default=defaults.max_loss, help="largest share not arrived, %%"
    )
    parser.add_argument(
        "--output", type=Path, default=DOC, help="Markdown file whose soak block is replaced"
    )
    parser.add_argument(
        "--plot", type=Path, default=None, help="plot file (default: soak.png beside --output)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write every figure here")
    parser.add_argument(
        "--from-json",
        type=Path,
        default=None,
        metavar="FILE",
        help="run nothing: redraw the plot and the report from a run's --json file",
    )
    parser.add_argument(
        "--no-write",
        action="store_true",
        help="leave --output alone; the plot goes to the kept work directory",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary directory (state, router logs)"
    )
    args = parser.parse_args(argv)
    if not (args.minutes > 0 and args.rate > 0 and args.sample_seconds > 0):
        parser.error("--minutes, --rate and --sample-seconds must be positive")
    if args.sample_seconds * 2 > args.minutes * 60:
        parser.error("--sample-seconds must leave at least two samples in the run")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.from_json is not None:
        # A report redrawn from a finished run: nothing is started.
        result = json.loads(args.from_json.read_text())
        return publish(result, args, args.from_json.parent)
    settings = Settings(
        minutes=args.minutes,
        rate=args.rate,
        sample_seconds=args.sample_seconds,
        seed=args.seed,
        topology=args.topology,
        reference_minutes=args.reference_minutes,
        max_drift=args.max_drift,
        fd_slack=args.fd_slack,
        max_loss=args.max_loss,
    )
    workdir = Path(tempfile.mkdtemp(prefix="soak-"))
    keep = args.keep
    # Outside the load (start-up, shutdown, report) SIGTERM is handled like Ctrl-C, so
    # the routers are stopped by the same `finally` on either.
    previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    soak = Soak(settings, workdir)
    try:
        print(
            f"soak: {settings.minutes:g} min at {settings.rate:,.0f} msgs/s, sampling every "
            f"{settings.sample_seconds:g} s; work directory {workdir}",
            flush=True,
        )
        try:
            soak.run()
        except SoakError as exc:
            print(f"soak: {exc}", file=sys.stderr)
            keep = True
            return 2
        if soak.aborted:
            print("soak: stopped at once; no report", file=sys.stderr)
            return 130
        status = publish(analyse(soak), args, workdir)
        keep = keep or status != 0 or args.no_write
        return status
    except KeyboardInterrupt:
        print("soak: interrupted", file=sys.stderr)
        return 130
    finally:
        stop_routers(soak.routers)
        signal.signal(signal.SIGTERM, previous)
        if keep:
            print(f"soak: state and router logs kept in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def publish(result: dict[str, Any], args: argparse.Namespace, scratch: Path) -> int:
    """Plot, print, and write the JSON and the doc block; the exit status of the run.

    An interrupted run never replaces a full one's figures: its plot goes to
    ``scratch`` and the doc is left alone.
    """
    interrupted = bool(result["interrupted"])
    to_docs = not (args.no_write or interrupted)
    plot_path = (args.plot or args.output.parent / "soak.png") if to_docs else None
    plot(result, plot_path or scratch / "soak.png")
    lines = report_lines(result, plot_path, args.output)
    print("\n" + "\n".join(lines))
    others = result["machine_load"]["other_commands"]
    if others:
        print(
            "\nother processes during the load (share of one core): "
            + ", ".join(f"{o['command']} {o['cpu_share']:.0%}" for o in others)
        )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1, default=str))
    if interrupted:
        print("soak: interrupted, so the docs were left alone", file=sys.stderr)
        return 130
    if to_docs:
        write_block(args.output, lines)
        print(f"\nwrote the soak section of {args.output}, and {plot_path}")
    return 0 if result["verdict"] == "pass" else 1


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
