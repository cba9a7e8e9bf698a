"""gnutella-router beside the naive router and the plain forwarder, cell by cell: the
peers users have (gtk-gnutella's handshake or a bare one), the traffic, deflate, leaves.

Run from the repository root, in the project's virtual environment:

    .venv/bin/python scripts/bench_matrix.py            # print the table (about five minutes)
    .venv/bin/python scripts/bench_matrix.py --write    # also update docs/benchmarks.md
    .venv/bin/python scripts/bench_matrix.py --quick    # two cells, one short run each (tests)

Why a matrix: one flood with one kind of peer says little about the peers a router
meets. Every real servent announces ``Pong-Caching`` (a router then answers its pings
instead of broadcasting them), most ask for deflate, and an ultrapeer has leaves whose
QRP tables it must consult for every query. Each of those changes what a router does
per message, so each is a dimension:

* **peers**: ``gtk-like`` (gtk-gnutella 1.2.3's handshake: Pong-Caching, GGEP,
  Vendor-Message, X-Query-Routing, X-Max-TTL 4) or ``minimal`` (a bare ultrapeer);
* **traffic**: ``query flood`` (every message a query), or ``paper mix, replies`` (the
  SOSP'01 load, 85 % pings and 15 % queries, where one in ten of each is marked and
  every sink answers the marked copies it receives, a pong for a ping and a query hit
  for a query, which the server must route back to the source: ``router_bench.replies``);
* **deflate**: ``off``, or ``on`` (the sinks ask for deflate, as gtk-gnutella does; the
  source sends and reads plain);
* **leaves**: 0, or 30 leaves with QRP tables (Zipf-named libraries as the test
  network's leaves; three of them share a file the queries name) connected before the
  sinks.

Every message is 30 bytes, TTL 2, hops 0, with a GUID as random as a network's (drawn
afresh on every pass of the source's buffer). In each cell the three servers are
started side by side, each on its own loopback port: ``gnutella-router`` on its
defaults, ``scripts/reference_router.py`` (the naive router, one write per destination
per read) and ``scripts/baseline_forwarder.py`` (the plain forwarder); their runs
alternate, ``--repeats`` of each, and each figure is the median. One source writes the
traffic as fast as the server reads it; three sinks count bytes (and answer). The
figure compared is the messages per second the server took from the source: what it
routed, whether it answered a ping itself, forwarded it, or forwarded a query; beside
it the messages forwarded to each sink, the replies routed back to the source and the
messages each matching leaf received.

The trace model of ``traffic_models/`` is not a cell: its point is its arrivals (a
Poisson process at the papers' 179 messages a second, with bursts inside bursts) and
its replies injected with GUIDs no router has seen; a saturating flood keeps neither,
and its mix of message sizes would need sinks that frame every message, which would
make the client the limit. It is said so in the printout and in the written section.

Bounded: each run has its own time limit, the servers are started and stopped per
cell, a cell is not begun once ``--time-limit`` has passed, and every server is killed
on the way out whatever ends the script (an error, Ctrl-C, SIGTERM). Exit status 1 when
a run failed (a connection ended, a phase timed out), 0 otherwise; no figure is judged.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import signal
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType

from protocol.compression import DEFAULT_DEFLATE_LEVEL
from scripts.benchdocs import commit, machine, replace_section
from scripts.router_bench.interleaved import ServerCommand, interleaved_runs
from scripts.router_bench.peers import (
    BLAST_MESSAGES,
    SINKS,
    BenchError,
    Blast,
    Wire,
    message_kinds,
    use_peers,
)
from scripts.router_bench.replies import Answers, LeafPlan, marked_slots
from scripts.router_bench.report import CLOSED_BY_THE_SERVER, cpu_per_message
from scripts.router_bench.runs import ThroughputRun, median_of
from scripts.router_bench.servers import Problems
from scripts.runner import baseline_argv, kill_live, reference_argv, router_argv

OURS = "gnutella-router"
NAIVE = "naive router"
FORWARDER = "plain forwarder"
SERVERS: Mapping[str, ServerCommand] = {
    OURS: lambda port, home: router_argv(port, home, None),
    NAIVE: lambda port, _: reference_argv(port, "per-read"),
    FORWARDER: lambda port, _: baseline_argv(port),
}
SERVING_LEAVES = (OURS, NAIVE)
"""The servers that pass queries to leaves by their QRP tables (the forwarder sends
leaves nothing)."""
TRAFFICS = ("query flood", "paper mix, replies")
QUERY_SHARE = {"query flood": 1.0, "paper mix, replies": 0.15}
ANSWERED_SHARE = 0.1
"""Of the paper mix's pings and queries, the share the sinks answer."""
LEAVES = 30
MATCHING_LEAVES = 0.1
"""Of the leaves, the share that shares a file the queries name."""
QUICK_CELLS = ("gtk-like/query flood/off/0", "gtk-like/paper mix, replies/on/30")
LEFT_OUT = (
    "The trace model (`traffic_models/trace_model.py`) is left out: what it models is "
    "its arrivals (Poisson at the papers' 179 msgs/s with bursts inside bursts) and "
    "injected replies that match no route, neither of which a saturating flood keeps, "
    "and its messages of many sizes would need sinks that frame every message, which "
    "would make the client the limit rather than the server."
)


@dataclass(frozen=True, slots=True)
class Cell:
    peers: str
    traffic: str
    deflate: bool
    leaves: int

    @property
    def key(self) -> str:
        return f"{self.peers}/{self.traffic}/{'on' if self.deflate else 'off'}/{self.leaves}"

    @property
    def label(self) -> str:
        return (
            f"{self.peers} peers, {self.traffic}, deflate {'on' if self.deflate else 'off'}, "
            f"{self.leaves} leaves"
        )


ALL_CELLS = tuple(
    Cell(peers, traffic, deflate, leaves)
    for peers in ("gtk-like", "minimal")
    for traffic in TRAFFICS
    for deflate in (False, True)
    for leaves in (0, LEAVES)
)


@dataclass(frozen=True, slots=True)
class CellFigures:
    """One cell's medians, by server name."""

    cell: Cell
    runs: Mapping[str, Sequence[ThroughputRun]]

    def median(self, server: str, value: Callable[[ThroughputRun], float | None]) -> float | None:
        return median_of(self.runs.get(server, ()), value)

    def taken(self, server: str) -> float | None:
        return self.median(server, lambda r: r.accepted)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=2, metavar="N", help="runs per server (2)")
    parser.add_argument(
        "--duration", type=float, default=2.0, metavar="SECONDS", help="window (2 s)"
    )
    parser.add_argument(
        "--warmup", type=float, default=0.5, metavar="SECONDS", help="before each window (0.5 s)"
    )
    parser.add_argument(
        "--cells",
        nargs="+",
        metavar="CELL",
        help="only these cells, as PEERS/TRAFFIC/DEFLATE/LEAVES, e.g. "
        "'gtk-like/query flood/on/30' (default: all 16)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{len(QUICK_CELLS)} cells, one run of 0.3 s each (for tests); not with --write",
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        default=900.0,
        metavar="SECONDS",
        help="no cell is begun after this long (900 s)",
    )
    parser.add_argument(
        "--random-seed",
        "--seed",
        dest="seed",
        type=int,
        default=1,
        help="seed of the message order",
    )
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args(argv)
    if args.quick:
        if args.write:
            parser.error("--quick runs too little to write down")
        args.repeats, args.duration, args.warmup = 1, 0.3, 0.2
        args.cells = args.cells or list(QUICK_CELLS)
    if args.repeats < 1 or args.duration <= 0 or args.warmup < 0 or args.time_limit <= 0:
        parser.error("--repeats, --duration and --time-limit must be positive")
    known = {cell.key: cell for cell in ALL_CELLS}
    chosen = []
    for key in args.cells or known:
        if key not in known:
            parser.error(f"unknown cell {key!r}: one of {', '.join(known)}")
        chosen.append(known[key])
    args.chosen = chosen
    return args


def run_cell(
    cell: Cell,
    wire: Wire,
    args: argparse.Namespace,
    problems: Problems,
    leaves: Callable[[], LeafPlan],
) -> CellFigures:
    """One cell: the three servers started, ``args.repeats`` interleaved runs each."""
    use_peers(cell.peers)
    share = QUERY_SHARE[cell.traffic]
    kinds = message_kinds(BLAST_MESSAGES, share, args.seed)
    answered = cell.traffic != "query flood"
    marked = marked_slots(BLAST_MESSAGES, ANSWERED_SHARE, args.seed) if answered else []
    blast = Blast(wire, kinds, random_guids=True, marked=marked)
    print(f"{cell.label}:", flush=True)

    def show_pids(pids: Mapping[str, int]) -> None:
        print("  started " + ", ".join(f"{n} (pid {p})" for n, p in pids.items()), flush=True)

    runs = interleaved_runs(
        SERVERS,
        wire=wire,
        blast=blast,
        args=args,
        sinks=SINKS,
        problems=problems,
        deflate_sinks=cell.deflate,
        answers=Answers.build(wire) if answered else None,
        leaves=leaves() if cell.leaves else None,
        serving_leaves=SERVING_LEAVES,
        started_servers=show_pids,
    )
    return CellFigures(cell, runs)


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def _ratio(ours: float | None, other: float | None) -> str:
    return "n/a" if ours is None or not other else f"{ours / other:.2f}x"


def _pair(first: float | None, second: float | None) -> str:
    return f"{_rate(first)} / {_rate(second)}"


HEADER = (
    "cell",
    f"msgs/s taken from the source: {OURS} / {NAIVE} / {FORWARDER}",
    "ours / naive",
    "ours / forwarder",
    "ours: forwarded per sink",
    "replies routed back /s: ours / naive",
    "per matching leaf /s: ours / naive",
    "ours: µs CPU per msg",
)


def table_rows(figures: Sequence[CellFigures]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for cell_figures in figures:
        cell = cell_figures.cell
        taken = {name: cell_figures.taken(name) for name in SERVERS}
        answered = cell.traffic != "query flood"
        rows.append(
            (
                cell.label,
                " / ".join(_rate(taken[name]) for name in SERVERS),
                _ratio(taken[OURS], taken[NAIVE]),
                _ratio(taken[OURS], taken[FORWARDER]),
                _rate(cell_figures.median(OURS, lambda r: r.per_sink)),
                _pair(
                    cell_figures.median(OURS, lambda r: r.replies_back),
                    cell_figures.median(NAIVE, lambda r: r.replies_back),
                )
                if answered
                else "",
                _pair(
                    cell_figures.median(OURS, lambda r: r.per_matching_leaf),
                    cell_figures.median(NAIVE, lambda r: r.per_matching_leaf),
                )
                if cell.leaves
                else "",
                "n/a"
                if (cost := cell_figures.median(OURS, cpu_per_message)) is None
                else f"{cost:.2f}",
            )
        )
    return rows


SHORT_HEADER = (
    "cell",
    "taken /s: ours / naive / fwd",
    "/naive",
    "/fwd",
    "per sink",
    "replies back: ours / naive",
    "matching leaf: ours / naive",
    "µs/msg",
)
"""The printout's column names (the written table spells them out)."""


def print_table(rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in [SHORT_HEADER, *rows]) for i in range(len(HEADER))]
    for row in [SHORT_HEADER, *rows]:
        print("  ".join(text.ljust(width) for text, width in zip(row, widths, strict=True)))


def summary(figures: Sequence[CellFigures]) -> list[str]:
    """The ratios over all cells: their spread, and where ours was behind."""
    notes = []
    for other in (NAIVE, FORWARDER):
        ratios = [
            ours / theirs
            for f in figures
            if (ours := f.taken(OURS)) is not None and (theirs := f.taken(other))
        ]
        if ratios:
            notes.append(
                f"{OURS} / {other}, messages taken from the source: median "
                f"{statistics.median(ratios):.2f}x over {len(ratios)} cells, from "
                f"{min(ratios):.2f}x to {max(ratios):.2f}x."
            )
    return notes


def failure_notes(problems: Problems, figures: Sequence[CellFigures], repeats: int) -> list[str]:
    notes = [f"Repeated after a failure: {text}." for text in problems.retried]
    notes += [f"Failed: {text}." for text in problems.failures]
    for f in figures:
        for name, runs in f.runs.items():
            if len(runs) != repeats:
                notes.append(
                    f"{f.cell.label}, {name}: the median of {len(runs)} "
                    f"run{'' if len(runs) == 1 else 's'}, not {repeats}."
                )
    return notes


def write_section(
    rows: Sequence[tuple[str, ...]],
    notes: Sequence[str],
    args: argparse.Namespace,
    argv: Sequence[str],
    loads: tuple[tuple[float, float, float], tuple[float, float, float]],
    seconds: float,
) -> None:
    before, after = (", ".join(f"{x:.2f}" for x in load) for load in loads)
    lines = [
        "## The peers users have: a matrix (`scripts/bench_matrix.py`)",
        "",
        f"Measured {datetime.date.today().isoformat()} at commit {commit()} on {machine()}, "
        f"in {seconds / 60:.1f} minutes; load average (1, 5, 15 min) {before} before the "
        f"runs, {after} after: the machine was shared with other work, which slows every "
        "server alike within a cell (their runs alternate) but moves the figures from "
        "cell to cell.",
        "",
        f"- Per cell, three servers side by side, each started afresh on its own loopback "
        f"port: {OURS} on its defaults (the per-IP limit on connection attempts lifted), "
        f"the naive router (`scripts/reference_router.py`, one write per destination per "
        "read: route tables, duplicates, TTL, replies routed back, pings of Pong-Caching "
        "peers and leaves answered with its pong and not broadcast, leaves passed the "
        "queries their QRP tables match, deflate on request; no stages, queues, counters "
        f"or policies) and the plain forwarder (`scripts/baseline_forwarder.py`: no route "
        "tables, no replies, pings broadcast whatever the peer, leaves sent nothing, "
        f"deflate on request). Their runs alternate, {args.repeats} each; every figure is "
        f"the median, each run {args.duration:g} s after {args.warmup:g} s of warm-up.",
        f"- One source and {SINKS} sinks, ultrapeers after a 0.6 handshake: gtk-gnutella "
        "1.2.3's (`gtk-like`: Pong-Caching, GGEP, Vendor-Message, X-Query-Routing, "
        "X-Max-TTL 4) or a bare one (`minimal`). Every message 30 bytes, TTL 2, hops 0, "
        "its GUID random. The source writes as fast as the server reads; the sinks count "
        "bytes. Query flood: every message a query. Paper mix, replies: 85 % pings, 15 % "
        f"queries, {ANSWERED_SHARE:.0%} of each marked, and every sink answers the marked "
        "copies it receives (a pong for a ping, a query hit for a query, from a bounded "
        "queue: a reply the queue cannot take is not sent); the source counts the "
        "replies routed back to it. With gtk-like peers a router answers the pings "
        "itself and forwards only the queries, so its messages per sink are the queries "
        "alone. Deflate on: the sinks ask for deflate (they inflate and count), and "
        f"every server deflates at zlib level {DEFAULT_DEFLATE_LEVEL} (the router's "
        "default `network.deflate_level`, the yardsticks' default `--deflate-level`), "
        "so that the cells compare routing, not zlib settings; the "
        f"source and the leaves send and read plain. {LEAVES} leaves: each a leaf's "
        "handshake of the same kind and a QRP table of 20 Zipf-named files, connected "
        f"before the sinks; {MATCHING_LEAVES:.0%} of them also share a file the queries "
        "name, and the probe that starts a run must reach those through the two routers.",
        "- The figure compared is the messages per second each server took from the "
        "source: what it routed, pings answered or forwarded and queries forwarded. "
        "Forwarded per sink is what each sink received (queries only where the router "
        "answers the pings); replies routed back are those of the sinks' replies that "
        "reached the source; per matching leaf is what each leaf whose table matches "
        "received. CPU per message is the router process's CPU time (all its threads) "
        "over the messages taken from the source.",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|---|" + "---:|" * (len(HEADER) - 1),
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
        *(f"- {note}" for note in notes),
        *(
            ["- n/a: no run of that server was measured in that cell; the failures above say why."]
            if any("n/a" in cell for row in rows for cell in row)
            else []
        ),
        *([f"- {CLOSED_BY_THE_SERVER}"] if any("by the server" in n for n in notes) else []),
        f"- {LEFT_OUT}",
        "",
        f"Rerun: `{shlex.join(['.venv/bin/python', 'scripts/bench_matrix.py', *argv])}` "
        "(about five minutes with the defaults).",
    ]
    print(f"wrote {replace_section('bench_matrix', lines)}")


def _terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM: kill every server started and exit at once (Ctrl-C unwinds through
    trio instead, whose ``with`` blocks stop them)."""
    killed = kill_live()
    print(f"terminated: servers killed: {', '.join(map(str, killed)) or 'none'}", flush=True)
    os._exit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    wire = Wire.build()
    problems = Problems()
    loads_before = os.getloadavg()
    began = time.monotonic()
    plan: list[LeafPlan] = []

    def leaves() -> LeafPlan:
        if not plan:
            plan.append(LeafPlan.build(LEAVES, MATCHING_LEAVES, args.seed))
        return plan[0]

    print(
        f"{len(args.chosen)} cells, {len(SERVERS)} servers each, {args.repeats} runs of "
        f"{args.duration:g} s per server; load average {loads_before[0]:.2f}",
        flush=True,
    )
    figures: list[CellFigures] = []
    skipped: list[Cell] = []
    try:
        for cell in args.chosen:
            if time.monotonic() - began > args.time_limit:
                skipped.append(cell)
                continue
            retried, failed = len(problems.retried), len(problems.failures)
            try:
                figures.append(run_cell(cell, wire, args, problems, leaves))
            except BenchError as exc:
                problems.fail(str(exc))
                print(f"  FAILED: {exc}", flush=True)
            # The runs name their server; the notes name the cell too.
            for texts, since in ((problems.retried, retried), (problems.failures, failed)):
                texts[since:] = [f"{cell.label}: {text}" for text in texts[since:]]
    except KeyboardInterrupt:
        print("interrupted: every server started has been stopped", flush=True)
        return 130
    finally:
        use_peers("gtk-like")
    seconds = time.monotonic() - began
    loads_after = os.getloadavg()
    rows = table_rows(figures)
    notes = summary(figures) + failure_notes(problems, figures, args.repeats)
    notes += [f"Not run (past --time-limit): {cell.label}." for cell in skipped]
    print()
    print_table(rows)
    for note in notes:
        print(note)
    print(LEFT_OUT)
    print(
        f"load average before {loads_before[0]:.2f}, after {loads_after[0]:.2f}; "
        f"{seconds:.0f} s in all"
    )
    if args.write:
        write_section(rows, notes, args, argv, (loads_before, loads_after), seconds)
    return 1 if problems.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
