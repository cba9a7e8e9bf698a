"""Routing stalls while a router makes its largest dumps, and its memory after them.

Run from the repository root, in the project's virtual environment:

    .venv/bin/python scripts/bench_dump_stall.py                   # this checkout
    .venv/bin/python scripts/bench_dump_stall.py --before aea9480  # that revision first, then this
    .venv/bin/python scripts/bench_dump_stall.py --before aea9480 --write  # also docs/robustness.md

One router (``gnutella-router run`` from the tree, its own process on a free loopback
port, on its defaults) has its route tables filled by a flood peer: 100,000 queries and
50,000 pings, each GUID new and TTL 1, so that the router records each, answers the
pings and forwards nothing. The flood peer stays connected (a router forgets a closed
connection's routes). Then an honest peer pings the router without a break, one ping
(TTL 1, answered by the router's own pong) 1 ms after each pong, while the script, one
after the other, reads ``/dump?limit=100000`` and ``/routes?limit=100000`` to the end
(and throws them away) and sends SIGUSR1 (done when the dump file appears). For each,
the longest ping-to-pong round trip that overlapped it is the worst routing stall; the
router's VmRSS is read before and a second after.

The ping table is left half full because the honest peer's pings are recorded too: the
flood's 50,000 fill one generation, and the honest pings fill the next one.

``--before REV`` runs the same measurement first on the router of ``REV``: its sources
from ``git archive``, its hot path compiled by its own build hook, as
``scripts/bench_commits.py`` does. ``--queries`` and ``--pings`` make a smaller flood
for a quick look (``--write`` records only the full one).

Everything runs within ``--timeout`` per router, and the routers are stopped on every
way out (Ctrl-C, SIGTERM and SIGHUP included: exit status 130). Exit status 0 when the
last router's worst stall is under 50 ms, 1 when it is not or a run failed, 2 for bad
arguments.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import trio

from protocol.codec import encode_message
from protocol.constants import MessageType
from protocol.messages import Message, Ping, random_guid
from scripts import ROOT
from scripts.benchdocs import ROBUSTNESS_DOC, commit, machine, replace_section
from scripts.router_bench.dumps import LIMIT, Flooder, handshaken, http_get, sigusr1, table_sizes
from scripts.router_bench.peers import BenchError
from scripts.router_bench.trees import compile_in, export
from scripts.runner import Router, free_port, router_started, rss_bytes, stopped_like_ctrl_c

SECTION = "dump-stall"
QUERIES = 100_000
"""Flood queries: both generations of the query table full (50,000 each)."""
PINGS = 50_000
"""Flood pings: one generation of the ping table full."""
BASELINE_SECONDS = 3.0
SETTLE_SECONDS = 1.0
PING_PAUSE = 0.001
PONG_TIMEOUT = 30.0
GOAL_MS = 50.0
MIB = 1024 * 1024


@dataclass(frozen=True)
class Settings:
    """What one run does: the flood's size, the idle window, the bound on it all."""

    queries: int = QUERIES
    pings: int = PINGS
    baseline: float = BASELINE_SECONDS
    timeout: float = 300.0
    """Seconds for one router's whole run (the flood, the idle window and the dumps)."""


@dataclass
class Pings:
    """The honest peer's round trips: (sent, answered) on trio's clock."""

    trips: list[tuple[float, float]] = field(default_factory=list)

    def overlapping(self, start: float, end: float) -> list[float]:
        return [b - a for a, b in self.trips if b >= start and a <= end]


@dataclass
class Action:
    """One dump asked of the router, and what routing went through meanwhile."""

    name: str
    seconds: float
    size: int
    """Bytes of the answer read, or of the file written."""
    trips: list[float]
    rss_before: int
    rss_after: int
    entries: int
    """Route entries the router held when it was asked."""

    @property
    def worst_ms(self) -> float:
        return max(self.trips, default=0.0) * 1000


@dataclass
class Run:
    """One router measured: its idle round trips and its actions."""

    label: str
    idle: list[float]
    actions: list[Action]
    rss_started: int
    rss_filled: int
    peak_rss: int
    exit_status: int | None

    @property
    def worst_ms(self) -> float:
        return max(action.worst_ms for action in self.actions)


async def ping_continuously(address: tuple[str, int], pings: Pings, stop: trio.Event) -> None:
    """Ping, wait for the pong, note the round trip, pause PING_PAUSE; until ``stop``."""
    stream, decoder = await handshaken(address)
    async with stream:
        while not stop.is_set():
            guid = random_guid()
            sent = trio.current_time()
            await stream.send_all(encode_message(Message(guid, 1, 0, Ping())))
            with trio.fail_after(PONG_TIMEOUT):
                answered = False
                while not answered:
                    data = await stream.receive_some(65536)
                    if not data:
                        raise BenchError("the router closed the honest peer's connection")
                    answered = any(
                        f.guid == guid and f.payload_type == MessageType.PONG
                        for f in decoder.receive_data(data)
                    )
            pings.trips.append((sent, trio.current_time()))
            await trio.sleep(PING_PAUSE)


# --- the measurement -----------------------------------------------------------------


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


async def measure(label: str, router: Router, settings: Settings) -> Run:
    address, admin, state = router.address, router.admin, router.state
    pid = router.pid
    rss_started = rss_bytes(pid)
    pings = Pings()
    stop = trio.Event()
    with trio.fail_after(settings.timeout):
        async with trio.open_nursery() as nursery:
            flooder = Flooder(*await handshaken(address))
            nursery.start_soon(flooder.read)
            sizes: dict[str, int] = {}
            with trio.move_on_after(settings.timeout / 2) as filling:
                await flooder.fill(admin, sizes, settings.queries, settings.pings)
            if filling.cancelled_caught:
                wait = settings.timeout / 2
                raise BenchError(f"the route tables did not fill in {wait:g} s: {sizes}")
            print(f"  {label}: route tables filled: {sizes}", flush=True)
            rss_filled = rss_bytes(pid)
            nursery.start_soon(ping_continuously, address, pings, stop)
            while not pings.trips:  # noqa: ASYNC110 - the first round trip is a sample
                await trio.sleep(0.01)
            start = trio.current_time()
            await trio.sleep(settings.baseline)
            idle = pings.overlapping(start, trio.current_time())

            async def get(target: str) -> int:
                status, size, _ = await http_get(admin, target)
                if status != 200:
                    raise BenchError(f"{target} answered {status}")
                return size

            steps: list[tuple[str, Callable[[], Awaitable[int]]]] = [
                (f"GET /dump?limit={LIMIT}", lambda: get(f"/dump?limit={LIMIT}")),
                (f"GET /routes?limit={LIMIT}", lambda: get(f"/routes?limit={LIMIT}")),
                ("SIGUSR1 (every entry, to a file)", lambda: sigusr1(pid, state)),
            ]
            actions = []
            for name, step in steps:
                entries = sum((await table_sizes(admin)).values())
                rss_before = rss_bytes(pid)
                begun = trio.current_time()
                size = await step()
                ended = trio.current_time()
                await trio.sleep(SETTLE_SECONDS)
                action = Action(
                    name,
                    ended - begun,
                    size,
                    pings.overlapping(begun, ended),
                    rss_before,
                    rss_bytes(pid),
                    entries,
                )
                print(f"  {label}: {describe(action)}", flush=True)
                actions.append(action)
            stop.set()
            peak = peak_rss(pid)
            nursery.cancel_scope.cancel()
        await flooder.stream.aclose()
    return Run(label, idle, actions, rss_started, rss_filled, peak, router.stop())


def describe(action: Action) -> str:
    return (
        f"{action.name}: {action.seconds:.2f} s, {action.size / MIB:.1f} MiB; worst round "
        f"trip {action.worst_ms:.1f} ms over {len(action.trips)} pings; RSS "
        f"{action.rss_before / MIB:.0f} -> {action.rss_after / MIB:.0f} MiB"
    )


def run_router(label: str, tree: Path, settings: Settings) -> Run:
    """Start the router of ``tree``, measure it, stop it (whatever happens)."""
    with tempfile.TemporaryDirectory(prefix="bench-dump-stall-") as folder:
        port = free_port()
        config = "[network]\nconnects_per_ip_per_minute = 100000\n"
        with router_started(
            Path(folder),
            config,
            port=port,
            admin_port=port + 1,
            wait_for_admin=True,
            arguments=["--log-level", "info"],
            cwd=tree,
        ) as router:
            print(f"  {label}: router pid {router.pid}, port {port}", flush=True)
            try:
                return trio.run(measure, label, router, settings)
            except BaseException as error:
                plain = _plain(error, settings)
                if not isinstance(plain, KeyboardInterrupt):
                    print(f"  {label}: router log tail: {_tail(router.log_path)}")
                if plain is error:
                    raise
                raise plain from error


def _plain(error: BaseException, settings: Settings) -> BaseException:
    """What stopped a run, out of trio's exception groups: an interrupt, a
    :class:`BenchError` (the run's own timeout is one), or ``error`` as it is."""
    if isinstance(error, BaseExceptionGroup):
        for kind in (KeyboardInterrupt, BenchError, trio.TooSlowError):
            group, _ = error.split(kind)
            if group is not None:
                found: BaseException = group
                while isinstance(found, BaseExceptionGroup):
                    found = found.exceptions[0]
                return _plain(found, settings)
    if isinstance(error, trio.TooSlowError):
        return BenchError(f"the run took longer than {settings.timeout:g} s (--timeout)")
    return error


def _tail(path: Path) -> str:
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    return " | ".join(lines[-5:]) or "(empty)"


# --- the report ----------------------------------------------------------------------


def rows(run: Run, settings: Settings) -> list[str]:
    idle = sorted(run.idle)
    lines = [
        f"| {run.label} | none (idle, {settings.baseline:g} s) | | | {len(idle):,} | "
        f"{idle[len(idle) // 2] * 1000:.2f} | {max(idle) * 1000:.1f} | "
        f"{run.rss_filled / MIB:.0f} |"
    ]
    for action in run.actions:
        trips = sorted(action.trips)
        median = trips[len(trips) // 2] * 1000 if trips else 0.0
        lines.append(
            f"| {run.label} | `{action.name}` ({action.entries:,} entries held) | "
            f"{action.seconds:.2f} | {action.size / MIB:.1f} | {len(trips):,} | {median:.2f} | "
            f"{action.worst_ms:.1f} | {action.rss_before / MIB:.0f} -> "
            f"{action.rss_after / MIB:.0f} |"
        )
    return lines


def section(
    runs: Sequence[Run], load: float, command: str, settings: Settings, before: str | None
) -> list[str]:
    after = runs[-1]
    verdict = "met" if after.worst_ms < GOAL_MS else "not met"
    trees = (
        f" The router before is revision {before}, from `git archive`, its hot path compiled "
        "by its own build hook; the router after is this checkout, as installed."
        if before
        else ""
    )
    return [
        "## Routing during dumps",
        "",
        f"`scripts/bench_dump_stall.py`, {datetime.date.today().isoformat()}, on {machine()}; "
        f"load average before the runs {load:.2f}. One `gnutella-router run` process at a "
        f"time on 127.0.0.1, on its defaults. A flood peer fills its route tables with "
        f"{settings.queries:,} queries and {settings.pings:,} pings (TTL 1, every GUID new; "
        "it stays "
        "connected), then an honest peer pings it without a break (TTL 1, answered by the "
        "router's own pong, the next ping 1 ms after each pong) while the script reads "
        f"`/dump?limit={LIMIT}` and `/routes?limit={LIMIT}` to the end and then sends "
        "SIGUSR1 (done when the dump file appears). *Worst* is the longest ping-to-pong "
        "round trip that overlapped the dump: the longest the router kept a ping waiting. "
        "RSS is the router's VmRSS before the dump and 1 s after it." + trees,
        "",
        "| router | dump | seconds | MiB | pings | median ms | worst ms | RSS MiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
        *(line for run in runs for line in rows(run, settings)),
        "",
        *(
            f"- {run.label}: RSS {run.rss_started / MIB:.0f} MiB at start, "
            f"{run.rss_filled / MIB:.0f} MiB with the tables filled, peak (VmHWM) "
            f"{run.peak_rss / MIB:.0f} MiB; exit status on SIGTERM {run.exit_status}."
            for run in runs
        ),
        "",
        f"Worst routing stall of {after.label}: {after.worst_ms:.1f} ms "
        f"(aim: under {GOAL_MS:g} ms: {verdict}).",
        "",
        "Rerun (about a minute per router, plus a compile for `--before`):",
        "",
        "```sh",
        f".venv/bin/python scripts/bench_dump_stall.py {command}".rstrip(),
        "```",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--before", metavar="REV", help="measure this revision's router first")
    parser.add_argument(
        "--write", action="store_true", help="write the section of " + str(ROBUSTNESS_DOC)
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, metavar="SECONDS", help="per router (300)"
    )
    parser.add_argument(
        "--queries", type=int, default=QUERIES, metavar="N", help=f"flood queries ({QUERIES:,})"
    )
    parser.add_argument(
        "--pings", type=int, default=PINGS, metavar="N", help=f"flood pings ({PINGS:,})"
    )
    parser.add_argument(
        "--baseline",
        type=float,
        default=BASELINE_SECONDS,
        metavar="SECONDS",
        help=f"pings before the first dump ({BASELINE_SECONDS:g})",
    )
    args = parser.parse_args(argv)
    # More would rotate the tables for capacity: the query table drops half of what it
    # holds, the ping table half of the flood as the honest pings come in.
    if not (0 < args.queries <= QUERIES and 0 < args.pings <= PINGS):
        parser.error(f"--queries must be 1 to {QUERIES:,} and --pings 1 to {PINGS:,}")
    if args.baseline <= 0 or args.timeout <= 0:
        parser.error("--baseline and --timeout must be positive")
    if args.write and (args.queries, args.pings) != (QUERIES, PINGS):
        parser.error("--write records runs with the full flood only")
    settings = Settings(args.queries, args.pings, args.baseline, args.timeout)
    load = os.getloadavg()[0]
    runs: list[Run] = []
    try:
        with (
            stopped_like_ctrl_c(),
            tempfile.TemporaryDirectory(prefix="bench-dump-stall-trees-") as folder,
        ):
            if args.before:
                tree = export(args.before, Path(folder) / "before")
                print(f"compiling {args.before} ...", flush=True)
                compile_in(tree)
                runs.append(run_router(f"before ({args.before})", tree, settings))
            runs.append(run_router(f"after ({commit()})", ROOT, settings))
    except BenchError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: the routers were stopped", file=sys.stderr)
        return 130
    print()
    for run in runs:
        idle = max(run.idle, default=0.0) * 1000
        print(f"{run.label}: worst routing stall {run.worst_ms:.1f} ms (idle: {idle:.1f} ms)")
        for action in run.actions:
            print(f"  {describe(action)}")
    if args.write:
        command = f"--before {args.before} --write" if args.before else "--write"
        lines = section(runs, load, command, settings, args.before)
        print(f"wrote {replace_section(SECTION, lines, ROBUSTNESS_DOC)}")
    return 0 if runs[-1].worst_ms < GOAL_MS else 1


if __name__ == "__main__":
    raise SystemExit(main())
