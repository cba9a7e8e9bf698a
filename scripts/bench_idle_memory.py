"""Memory per idle connection: gnutella-router beside the plain forwarder, 10,000 of them.

Run from the repository root, in the project's virtual environment:

    .venv/bin/python scripts/bench_idle_memory.py               # print the figures
    .venv/bin/python scripts/bench_idle_memory.py --write       # also update docs/benchmarks.md
    .venv/bin/python scripts/bench_idle_memory.py --breakdown   # where a router's bytes go

What is measured, and why: a router's peers are mostly quiet, and what each quiet
connection costs decides how many a machine can hold. For each server (a fresh process
per run, started here on a free loopback port): one connection opened, served and
closed, so that one-time costs (lazily imported code, first-use caches) stay out; the
server's ``VmRSS``; then ``--connections`` connections opened ``--batch`` at a time,
each from a loopback address of its own (127.0.1.2, 127.0.1.3, ... 250 per /24, so no
per-address limit or ephemeral port range comes near its end), each doing the 0.6
handshake with the headers gtk-gnutella 1.2.3 sends (``tests/support/gtk_vectors.py``,
recorded: ``Pong-Caching``, ``GGEP``, ``Vendor-Message``, ``X-Query-Routing``,
``X-Max-TTL``...; without ``Node`` and ``X-Token``, so the router's host cache does not
grow with the peers) and then staying silent (in all but one kind of run, below; the
peers are :mod:`scripts.router_bench.idle_peers`); once every connection is seen to be
served and ``--settle`` seconds have passed, ``VmRSS`` again. The figure is the
difference divided by the number of connections (1 KB = 1,000 bytes), the median of
``--repeats`` runs. RSS is the process's own memory, not the kernel's socket buffers.

Served means: for the router, the peer has read the Messages Supported and Features
Supported the router sends a peer that announced ``Vendor-Message`` right after
registering it (and at the end the router's admin interface reports every connection
open); for the baseline (``scripts/baseline_forwarder.py``, which sends nothing of its
own), a probe ping from a sender connected before the first reading has reached it.

Four kinds of run, interleaved: the router with plain links; the router with deflate
negotiated both ways (``Accept-Encoding`` and ``Content-Encoding: deflate``, as
gtk-gnutella does; the baseline does not deflate), its peers silent; the same with each
peer speaking first, deflated, as gtk-gnutella does (a Messages Supported and a Features
Supported right after the handshake, which make the router inflate); and the baseline.
The router gets a configuration file with ``network.max_connections`` at the number of
connections, its limit on connection attempts per address lifted, and loopback listed
in ``network.trusted``; otherwise it runs with its defaults.

``--breakdown`` runs one router under ``tracemalloc`` instead (in a child process, with
fewer connections: tracing is slow) and prints what the connections' allocations were
made by, in groups (trio's tasks, the connection, the queue...), per connection.

Every run is bounded (``--timeout``) and every server started here is killed on the way
out, whatever happens. Exit status 1 when a floor is missed or a run failed.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import functools
import json
import os
import resource
import signal
import statistics
import sys
import tempfile
import tracemalloc
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import trio

from scripts.benchdocs import commit, machine, replace_section
from scripts.router_bench.idle_peers import (
    WARM_ADDRESS,
    client_address,
    open_gtk_like,
    read_introductions,
)
from scripts.router_bench.peers import BenchError, Peer, Wire, connect, reach
from scripts.router_bench.servers import Problems, stop_server
from scripts.runner import baseline_argv, free_port, router_argv, rss_bytes, started

FLOOR_BYTES = 8_000
"""Most memory an idle plain connection may cost the router (issue 26, item 4)."""
FLOOR_CONNECTIONS = 10_000
"""Idle connections the router must hold."""
TRUSTED = 'trusted = ["127.0.0.0/8", "::1/128"]\n'


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of run: which server, whether deflate is negotiated, and whether each
    peer speaks first (deflated, as gtk-gnutella does: its Messages Supported and
    Features Supported right after the handshake) or stays silent throughout."""

    name: str
    router: bool
    deflate: bool
    speaks: bool = False


ROUTER = Kind("gnutella-router", router=True, deflate=False)
ROUTER_DEFLATE = Kind("gnutella-router, deflate", router=True, deflate=True)
ROUTER_SPOKEN_TO = Kind(
    "gnutella-router, deflate, peers speak first", router=True, deflate=True, speaks=True
)
BASELINE = Kind("baseline", router=False, deflate=False)


@dataclass(frozen=True, slots=True)
class IdleRun:
    before: int
    after: int
    connections: int

    @property
    def per_connection(self) -> float:
        return (self.after - self.before) / self.connections


@dataclass(slots=True)
class Figures:
    kind: Kind
    runs: list[IdleRun] = field(default_factory=list)

    def median(self, value: Callable[[IdleRun], float]) -> float | None:
        return statistics.median(map(value, self.runs)) if self.runs else None


def raise_descriptor_limit(needed: int) -> None:
    """Lift this process's open-file limit to its hard limit (the servers started here
    inherit it); fail early when even that is too low."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise SystemExit(
            f"bench_idle_memory: {needed:,} file descriptors needed, the hard limit is "
            f"{hard:,} (ulimit -Hn)"
        )
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def router_connections(admin: tuple[str, int]) -> int:
    """How many connections the router's admin interface reports open."""
    url = f"http://{admin[0]}:{admin[1]}/stats"
    with urllib.request.urlopen(url, timeout=10) as response:
        stats = json.load(response)
    return int(stats["server"]["connections"])


async def idle_run(
    address: tuple[str, int], pid: int, kind: Kind, args: argparse.Namespace
) -> IdleRun:
    """One server: warm up, read RSS, open the idle connections, read RSS again."""
    peers: list[Peer] = []
    sender: Peer | None = None
    try:
        with trio.fail_after(args.timeout):
            warm = await open_gtk_like(
                address, WARM_ADDRESS, deflate=kind.deflate, speaks=kind.speaks
            )
            peers.append(warm)
            if kind.router:
                await read_introductions(warm)
            else:
                sender = await connect(address, "probe sender")
                await reach(sender, [warm], Wire.build())
            await warm.aclose()
            peers.clear()
            await trio.sleep(args.settle)
            before = rss_bytes(pid)

            async def open_one(index: int) -> None:
                peer = await open_gtk_like(
                    address, client_address(index), deflate=kind.deflate, speaks=kind.speaks
                )
                peers.append(peer)
                if kind.router:
                    await read_introductions(peer)

            for first in range(0, args.connections, args.batch):
                async with trio.open_nursery() as nursery:
                    for index in range(first, min(first + args.batch, args.connections)):
                        nursery.start_soon(open_one, index)
            if sender is not None:
                await reach(sender, peers, Wire.build())
            await trio.sleep(args.settle)
            after = rss_bytes(pid)
            if kind.router:
                held = await trio.to_thread.run_sync(
                    router_connections, (address[0], address[1] + 1)
                )
                if held != args.connections:
                    raise BenchError(
                        f"the router holds {held:,} connections, not {args.connections:,}"
                    )
            return IdleRun(before, after, args.connections)
    finally:
        with trio.CancelScope(shield=True):
            for peer in [*peers, *([sender] if sender else [])]:
                await peer.aclose()


def server_argv(kind: Kind, port: int, workdir: Path, connections: int) -> list[str]:
    if not kind.router:
        return baseline_argv(port)
    state = Path(tempfile.mkdtemp(prefix="state-", dir=workdir))
    return router_argv(port, state, connections, network=TRUSTED)


def measure(figures: Figures, workdir: Path, args: argparse.Namespace, problems: Problems) -> None:
    """One run of one kind, on a server started for it and stopped after."""
    kind = figures.kind
    port = free_port()
    name = f"{kind.name} run {len(figures.runs) + 1}"
    argv = server_argv(kind, port, workdir, args.connections)
    try:
        with started(kind.name, argv, port, workdir) as server:
            try:
                run = trio.run(functools.partial(idle_run, server.address, server.pid, kind, args))
            finally:
                stop_server(server, problems)
    except (BenchError, trio.TooSlowError, OSError) as exc:
        reason = str(exc) or exc.__class__.__name__
        problems.fail(f"{name}: {reason}")
        print(f"  {name}: FAILED: {reason}")
        return
    figures.runs.append(run)
    print(
        f"  {name}: RSS {run.before / 1e6:.1f} MB -> {run.after / 1e6:.1f} MB with "
        f"{run.connections:,} idle connections: {run.per_connection / 1000:.2f} KB each"
    )


# ---------------------------------------------------------------------- breakdown

GROUPS: tuple[tuple[str, frozenset[str], int], ...] = (
    (
        "handshake: the peer's parsed capabilities",
        frozenset({"headers.py", "handshake.py", "capabilities.py"}),
        0,
    ),
    ("deflate (zlib objects)", frozenset({"compression.py"}), 0),
    (
        "outgoing queue",
        frozenset({"outqueue.py", "threshold_queue.py", "flow_control_queue.py", "slow_peers.py"}),
        0,
    ),
    ("abuse meter", frozenset({"abuse.py"}), 0),
    ("structlog loggers", frozenset({"structlog"}), 0),
    ("frame decoder", frozenset({"framing.py"}), 0),
    ("trio: parking lots", frozenset({"trio/_parking_lot.py"}), 0),
    (
        "trio: the reader's wait for the socket",
        frozenset({"trio/_io_epoll.py", "trio/_generated_io_epoll.py"}),
        0,
    ),
    (
        "trio: socket objects",
        frozenset({"trio/_highlevel_socket.py", "trio/_socket.py", "socket.py"}),
        0,
    ),
    (
        "trio: tasks, nurseries, cancel scopes",
        frozenset({"trio/_run.py", "trio/_util.py", "trio/_ki.py", "trio attrs"}),
        3,
    ),
    (
        "the connection, its session and writer, its coroutine frames",
        frozenset({"connection.py", "session.py", "socket_writer.py"}),
        1,
    ),
    ("the server's frames and records", frozenset({"server.py"}), 1),
)
"""Allocation groups: a name, the files that put an allocation in it, and how many of
the innermost frames are looked at (0: all); tried in order."""


def group_of(traceback: tracemalloc.Traceback) -> str:
    """The group of an allocation, from the files of its traceback (oldest first)."""
    files = [_file(frame.filename) for frame in traceback]
    for name, members, innermost in GROUPS:
        if any(file in members for file in files[-innermost:]):
            return name
    return "router, catcher, others"


def _file(path: str) -> str:
    if "structlog" in path:
        return "structlog"
    if path.startswith("<attrs generated methods trio."):
        return "trio attrs"
    name = os.path.basename(path)
    return f"trio/{name}" if f"{os.sep}trio{os.sep}" in path else name


def serve_traced(config_path: Path, snapshots: Path, overrides: str) -> None:
    """The child of ``--breakdown``: a router as ``gnutella-router run`` starts it, under
    tracemalloc; each SIGUSR2 writes a snapshot (``0.snapshot``, ``1.snapshot``...).
    ``overrides`` are the settings the command line would give, in JSON."""
    from gnutella_router.config import load_config
    from gnutella_router.daemon import Daemon
    from gnutella_router.logs import configure_logging

    config = load_config(config_path, json.loads(overrides))
    configure_logging(config.log.format, config.log.level)
    daemon = Daemon(config)
    tracemalloc.start(25)

    async def snapshot_on_signal() -> None:
        with trio.open_signal_receiver(signal.SIGUSR2) as received:
            count = 0
            async for _ in received:
                tracemalloc.take_snapshot().dump(str(snapshots / f"{count}.snapshot"))
                (snapshots / f"{count}.done").touch()
                count += 1

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(snapshot_on_signal)
            await daemon.run(handle_signals=True)  # until SIGTERM
            nursery.cancel_scope.cancel()

    trio.run(main)


async def _snapshot(pid: int, snapshots: Path, index: int) -> tracemalloc.Snapshot:
    os.kill(pid, signal.SIGUSR2)
    with trio.fail_after(120):
        # Another process writes the file: there is nothing to wait on but the disk.
        while not (snapshots / f"{index}.done").exists():  # noqa: ASYNC110
            await trio.sleep(0.1)
    return tracemalloc.Snapshot.load(str(snapshots / f"{index}.snapshot"))


async def traced_run(
    address: tuple[str, int], pid: int, snapshots: Path, kind: Kind, args: argparse.Namespace
) -> tuple[tracemalloc.Snapshot, tracemalloc.Snapshot]:
    peers: list[Peer] = []
    try:
        with trio.fail_after(args.timeout):
            warm = await open_gtk_like(
                address, WARM_ADDRESS, deflate=kind.deflate, speaks=kind.speaks
            )
            await read_introductions(warm)
            await warm.aclose()
            await trio.sleep(args.settle)
            first = await _snapshot(pid, snapshots, 0)
            for index in range(args.connections):
                peer = await open_gtk_like(
                    address, client_address(index), deflate=kind.deflate, speaks=kind.speaks
                )
                peers.append(peer)
                await read_introductions(peer)
            await trio.sleep(args.settle)
            return first, await _snapshot(pid, snapshots, 1)
    finally:
        with trio.CancelScope(shield=True):
            for peer in peers:
                await peer.aclose()


def breakdown(kind: Kind, workdir: Path, args: argparse.Namespace, problems: Problems) -> None:
    port = free_port()
    state = Path(tempfile.mkdtemp(prefix="state-", dir=workdir))
    snapshots = Path(tempfile.mkdtemp(prefix="snapshots-", dir=workdir))
    argv = router_argv(port, state, args.connections, network=TRUSTED)
    config = argv[argv.index("--config") + 1]
    overrides = {
        "node.listen": f"127.0.0.1:{port}",
        "node.state_dir": str(state),
        "log.level": "warning",
        "network.max_connections": args.connections,
    }
    traced = [
        *(sys.executable, __file__, "--serve-traced", config, str(snapshots)),
        json.dumps(overrides),
    ]
    with started(f"traced {kind.name}", traced, port, workdir) as server:
        try:
            first, second = trio.run(
                functools.partial(traced_run, server.address, server.pid, snapshots, kind, args)
            )
        except (BenchError, trio.TooSlowError, OSError) as exc:
            problems.fail(f"breakdown: {exc}")
            print(f"  breakdown: FAILED: {exc}")
            return
        finally:
            stop_server(server, problems)
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__)]
    stats = second.filter_traces(ignore).compare_to(first.filter_traces(ignore), "traceback")
    sizes: collections.Counter[str] = collections.Counter()
    blocks: collections.Counter[str] = collections.Counter()
    shown: list[tracemalloc.StatisticDiff] = []
    for stat in stats:
        group = group_of(stat.traceback)
        sizes[group] += stat.size_diff
        blocks[group] += stat.count_diff
        if args.show and args.show in group:
            shown.append(stat)
    count = args.connections
    print(f"\n{kind.name}: allocations per idle connection ({count:,} opened), by group:")
    for group, size in sizes.most_common():
        print(f"  {size / count:7,.0f} B  {blocks[group] / count:5.1f} blocks  {group}")
    for stat in sorted(shown, key=lambda stat: -stat.size_diff)[:20]:
        where = " <- ".join(f"{_file(f.filename)}:{f.lineno}" for f in stat.traceback[-6:])
        print(f"    {stat.size_diff / count:7,.0f} B  {where}")
    print(
        f"  {sum(sizes.values()) / count:7,.0f} B  in all (traced; RSS also counts allocator slack)"
    )


# ---------------------------------------------------------------------- report


def kb(value: float | None) -> str:
    return "n/a" if value is None else f"{value / 1000:.2f} KB"


def rows(figures: dict[Kind, Figures], args: argparse.Namespace) -> list[tuple[str, str, str, str]]:
    count = f"{args.connections:,} open"
    ours, deflated, base = (figures.get(k) for k in (ROUTER, ROUTER_DEFLATE, BASELINE))
    spoken_to = figures.get(ROUTER_SPOKEN_TO)
    out: list[tuple[str, str, str, str]] = []

    def per(f: Figures | None) -> float | None:
        return None if f is None else f.median(lambda r: r.per_connection)

    def rss(f: Figures | None) -> str:
        if f is None or not f.runs:
            return "n/a"
        return (
            f"{(f.median(lambda r: r.before) or 0) / 1e6:.1f} -> "
            f"{(f.median(lambda r: r.after) or 0) / 1e6:.1f} MB"
        )

    mine, theirs = per(ours), per(base)
    ratio = f"{mine / theirs:.2f}x" if mine is not None and theirs else ""
    out.append((f"memory per idle connection, {count}, plain", kb(mine), kb(theirs), ratio))
    out.append(("RSS before -> after, plain", rss(ours), rss(base), ""))
    if deflated is not None:
        out.append(
            (
                f"memory per idle connection, {count}, deflate both ways",
                kb(per(deflated)),
                "n/a",
                "",
            )
        )
        out.append(("RSS before -> after, deflate", rss(deflated), "n/a", ""))
    if spoken_to is not None:
        what = f"memory per idle connection, {count}, deflate both ways, peers speak first"
        out.append((what, kb(per(spoken_to)), "n/a", ""))
        out.append(("RSS before -> after, peers speak first", rss(spoken_to), "n/a", ""))
    return out


def check_floors(
    figures: dict[Kind, Figures], args: argparse.Namespace, problems: Problems
) -> None:
    ours = figures.get(ROUTER)
    if ours is None:
        return
    if args.connections < FLOOR_CONNECTIONS:
        print(
            f"(the floor asks for {FLOOR_CONNECTIONS:,} connections; {args.connections:,} measured)"
        )
    per = ours.median(lambda r: r.per_connection)
    if per is not None and per > FLOOR_BYTES:
        problems.fail(
            f"memory per idle connection {per / 1000:.2f} KB, "
            f"over the {FLOOR_BYTES / 1000:g} KB floor"
        )


def write_section(table: list[tuple[str, str, str, str]], args: argparse.Namespace) -> None:
    today = datetime.date.today().isoformat()
    lines = [
        "## Memory per idle connection (`scripts/bench_idle_memory.py`)",
        "",
        f"Measured {today} on {machine()}, at commit {commit()}. Each server runs "
        "in a fresh process per run; the client is another process (trio).",
        "",
        f"- {args.connections:,} connections opened {args.batch} at a time, each from its own "
        "loopback address (127.0.1.2, 127.0.1.3, ...), each doing the 0.6 handshake with "
        "the headers gtk-gnutella 1.2.3 sends (recorded, `tests/support/gtk_vectors.py`: "
        "`Pong-Caching`, `GGEP`, `Vendor-Message`, `X-Query-Routing`, `X-Max-TTL`...; less "
        "`Node` and `X-Token`) and then staying silent (but see the deflate runs below). "
        "Before them, one connection opened, "
        "served and closed keeps one-time costs out.",
        "- Figure: the server's VmRSS after every connection is served and "
        f"{args.settle:g} s have passed, less its VmRSS before, divided by the number of "
        "connections; 1 KB = 1,000 bytes. RSS is the process's own memory, not the "
        "kernel's socket buffers. Served: the router's Messages Supported and Features "
        "Supported (sent to a peer that announced `Vendor-Message` once it is registered) "
        "have arrived, and its admin interface reports every connection open; for the "
        "baseline, a probe ping from a sender connected before the first reading has "
        "reached it.",
        "- The router gets `network.max_connections` at the number of connections, its "
        "limit on connection attempts per address lifted and loopback in `network.trusted`; "
        "otherwise its defaults. With deflate, the peers ask for it both ways "
        "(`Accept-Encoding` and `Content-Encoding: deflate`), as gtk-gnutella does, and "
        "stay silent, or first send a Messages Supported and a Features Supported, "
        "deflated, as gtk-gnutella does right after its handshake; the baseline "
        "(`scripts/baseline_forwarder.py`, a plain asyncio forwarder) does not deflate. "
        "Each figure is the median of "
        f"{args.repeats} runs, the kinds of run interleaved. Ratio = gnutella-router / "
        "baseline.",
        "",
        "| what | gnutella-router | baseline forwarder | ratio |",
        "|---|---:|---:|---:|",
        *(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in table),
        "",
        f"Floors: at most {FLOOR_BYTES / 1000:g} KB per idle plain connection, with "
        f"{FLOOR_CONNECTIONS:,} held.",
        "",
        "Rerun: `.venv/bin/python scripts/bench_idle_memory.py --write` (a few minutes; "
        "exits 1 if a floor is missed or a run failed). `--breakdown` prints what a "
        "router's per-connection allocations are made by, under tracemalloc.",
    ]
    print(f"wrote {replace_section('idle_memory', lines)}")


# ---------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--connections",
        type=int,
        default=FLOOR_CONNECTIONS,
        metavar="N",
        help=f"idle connections per run (default {FLOOR_CONNECTIONS:,}; the router's "
        "network.max_connections allows at most 10,000)",
    )
    parser.add_argument("--repeats", type=int, default=3, metavar="N", help="runs per kind (3)")
    parser.add_argument(
        "--batch", type=int, default=200, metavar="N", help="connections opened at once (200)"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=2.5,
        metavar="SECONDS",
        help="wait before each RSS reading (2.5: past two of the router's once-a-second "
        "housekeeping checks)",
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, metavar="SECONDS", help="bound on a run (300)"
    )
    parser.add_argument("--skip-baseline", action="store_true", help="no baseline runs")
    parser.add_argument("--skip-deflate", action="store_true", help="no runs with deflate")
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="trace one router's allocations instead (default 1,000 connections)",
    )
    parser.add_argument(
        "--show",
        metavar="GROUP",
        help="with --breakdown: the largest allocations of the groups whose name has GROUP",
    )
    parser.add_argument("--serve-traced", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.breakdown and "--connections" not in (argv if argv is not None else sys.argv):
        args.connections = 1_000
    if not 1 <= args.connections <= 10_000:
        parser.error("--connections must be within 1..10,000 (network.max_connections)")
    if args.repeats < 1 or args.batch < 1 or args.settle < 0 or args.timeout <= 0:
        parser.error("--repeats, --batch and --timeout must be positive, --settle not negative")
    if args.write and args.breakdown:
        parser.error("--write records the RSS figures; it cannot go with --breakdown")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve_traced:
        config, snapshots, overrides = args.serve_traced
        serve_traced(Path(config), Path(snapshots), overrides)
        return 0
    raise_descriptor_limit(args.connections + 200)
    problems = Problems()
    kinds = [ROUTER]
    if not args.skip_deflate:
        kinds.append(ROUTER_DEFLATE)
        kinds.append(ROUTER_SPOKEN_TO)
    if not args.skip_baseline and not args.breakdown:
        kinds.append(BASELINE)
    figures = {kind: Figures(kind) for kind in kinds}
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp:
        workdir = Path(tmp)
        if args.breakdown:
            for kind in kinds:
                breakdown(kind, workdir, args, problems)
            return 1 if problems.failures else 0
        print(
            f"{args.connections:,} idle gtk-gnutella-like connections per run, "
            f"{args.repeats} runs per kind"
        )
        for _ in range(args.repeats):
            for kind in kinds:
                measure(figures[kind], workdir, args, problems)
    check_floors(figures, args, problems)
    table = rows(figures, args)
    print()
    width = max(len(row[0]) for row in table)
    print(f"{'what':<{width}}  {'gnutella-router':>22}  {'baseline':>22}  ratio")
    for what, mine, theirs, ratio in table:
        print(f"{what:<{width}}  {mine:>22}  {theirs:>22}  {ratio}")
    if args.write:
        write_section(table, args)
    if problems.failures:
        print("below floor or failed: " + "; ".join(dict.fromkeys(problems.failures)))
        return 1
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
    raise SystemExit(130)
