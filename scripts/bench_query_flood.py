"""Queries flooded through the router, beside a naive router and the plain forwarder.

Run from the repository root, in the project's virtual environment:

    .venv/bin/python scripts/bench_query_flood.py            # print the figures
    .venv/bin/python scripts/bench_query_flood.py --write    # also update docs/benchmarks.md

One source peer and two sink peers (ultrapeers, 0.6 handshake) on each server; the
source writes pre-encoded 64 KiB chunks of queries (TTL 2, hops 0, every GUID unique)
as fast as the server reads them, and the sinks only count bytes, so the client costs
almost nothing and the server is the limit. The figure is the queries per second each
sink receives over a window after a warm-up, and the server's CPU time per query taken
from the source. The servers, each its own process on a free loopback port:

* ``gnutella-router`` from this checkout, on its defaults (the per-IP connection limit
  lifted, as in ``scripts/bench_router.py``);
* ``scripts/reference_router.py``, a naive single-file asyncio router (route tables,
  duplicates, TTL, replies routed back; no stages, queues, counters or policies), twice:
  writing each message to each destination as it is routed (``--writes per-message``,
  the obvious way), and collecting a read's messages into one write per destination
  (``--writes per-read``, a batching router's main trick). The aim is judged against the
  second: writing per message costs so much more than everything else that it would be
  no yardstick;
* ``scripts/baseline_forwarder.py``, the plain asyncio forwarder (no routing tables).

Their runs are interleaved repetition by repetition, so the ratios hold on a shared
machine; each figure is the median of ``--repeats`` runs. A client that parsed every
message would be the limit here (near 300,000 messages/s on this machine) and hide the
difference between the servers.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Sequence

from scripts.benchdocs import commit, machine, replace_section
from scripts.router_bench.interleaved import (
    ServerCommand,
    interleaved_runs,
    parse_flood_args,
    rates_and_costs,
)
from scripts.router_bench.peers import BLAST_MESSAGES, BenchError, Blast, Wire, message_kinds
from scripts.router_bench.report import CLOSED_BY_THE_SERVER
from scripts.router_bench.runs import ThroughputRun
from scripts.router_bench.servers import Problems
from scripts.runner import baseline_argv, reference_argv, router_argv

SINKS = 2
RATIO_FLOOR = 1.5
"""gnutella-router's queries per sink over the naive router's: the aim."""
FORWARDER_FLOOR = 0.9
"""gnutella-router's queries per sink over the plain forwarder's: the aim."""
NAIVE = {
    "per-message": "naive router, a write per message",
    "per-read": "naive router, a write per read",
}
"""The naive router's two ways of writing, by its ``--writes`` option, as named here."""
YARDSTICK = NAIVE["per-read"]
"""The naive router the aim is judged against."""


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_flood_args(argv, __doc__.splitlines()[0] if __doc__ else None)
    wire = Wire.build()
    blast = Blast(wire, message_kinds(BLAST_MESSAGES, 1.0, 1))
    problems = Problems()
    load = os.getloadavg()[0]
    print(
        f"{wire.size}-byte queries, 1 source, {SINKS} sinks, {args.peers} peers; "
        f"{args.repeats} runs per server"
    )
    commands: dict[str, ServerCommand] = {
        "gnutella-router": lambda port, home: router_argv(port, home, None),
        NAIVE["per-message"]: lambda port, _: reference_argv(port, "per-message"),
        NAIVE["per-read"]: lambda port, _: reference_argv(port, "per-read"),
        "plain forwarder": lambda port, _: baseline_argv(port),
    }
    names = tuple(commands)
    runs: dict[str, list[ThroughputRun]] = {name: [] for name in names}
    try:
        runs = interleaved_runs(
            commands,
            wire=wire,
            blast=blast,
            args=args,
            sinks=SINKS,
            problems=problems,
            unit=("queries", "query"),
        )
    except BenchError as exc:
        problems.fail(str(exc))
        print(f"FAILED: {exc}")
        runs = {name: [] for name in names}

    rates, costs = rates_and_costs(runs)
    ours = rates["gnutella-router"]
    rows = []
    for name in names:
        rate, cost = rates[name], costs[name]
        ratio = "" if ours is None or not rate else f"{ours / rate:.2f}x"
        rows.append(
            (
                name,
                "n/a" if rate is None else f"{rate:,.0f}",
                "n/a" if cost is None else f"{cost:.2f}",
                ratio,
            )
        )
    print()
    print(f"{'server':<36}{'queries/s per sink':>20}{'µs CPU per query':>18}{'ours / it':>11}")
    for name, rate_text, cost_text, ratio in rows:
        print(f"{name:<36}{rate_text:>20}{cost_text:>18}{ratio:>11}")
    # The aim is judged against the naive router that writes per read: the one writing
    # per message is a far lower bar (its sends cost more than everything else), shown
    # for what joining the writes is worth, not as a yardstick.
    naive = rates[YARDSTICK]
    met = ours is not None and naive is not None and ours >= RATIO_FLOOR * naive
    if ours and naive:
        verdict = (
            f"{ours / naive:.2f}x the {YARDSTICK} (aim {RATIO_FLOOR}x: "
            f"{'met' if met else 'not met'})"
        )
    else:
        missing = "gnutella-router" if not ours else YARDSTICK
        verdict = (
            f"no ratio to the {YARDSTICK}: no run of the {missing} was measured "
            f"(aim {RATIO_FLOOR}x: not judged)"
        )
    forwarder = rates["plain forwarder"]
    if ours and forwarder:
        near = ours >= FORWARDER_FLOOR * forwarder
        verdict += (
            f"; {ours / forwarder:.2f}x the plain forwarder "
            f"(aim {FORWARDER_FLOOR}x: {'met' if near else 'not met'})"
        )
    print(f"gnutella-router: {verdict}")
    if args.write:
        lines = [
            "## Query flood (`scripts/bench_query_flood.py`)",
            "",
            f"Measured {datetime.date.today().isoformat()} at commit {commit()} on "
            f"{machine()}; load average before the runs {load:.2f}. One source "
            f"and {SINKS} sinks per server over loopback TCP, every peer announcing "
            + (
                "gtk-gnutella 1.2.3's handshake (`--peers gtk-like`: Pong-Caching, GGEP, "
                "Vendor-Message, X-Query-Routing, X-Max-TTL 4, as real servents do)"
                if args.peers == "gtk-like"
                else "a bare ultrapeer's handshake (`--peers minimal`: no Pong-Caching)"
            )
            + "; the source writes pre-encoded "
            f"{wire.size}-byte queries (TTL 2, hops 0, every GUID unique) as fast as the "
            "server reads them, the sinks only count bytes. Each figure is the median of "
            f"{args.repeats} runs of {args.duration:g} s after {args.warmup:g} s of warm-up, "
            "the servers' runs interleaved. The naive router is "
            "`scripts/reference_router.py` (route tables, duplicates, TTL, replies routed "
            "back; no stages, queues, counters or policies), run twice: writing each "
            "message to each destination as it is routed (`--writes per-message`, the "
            "obvious way: a `send` per message per destination), and with one write per "
            "destination per read (`--writes per-read`, which takes a batching router's "
            "main trick; the aim is judged against this one, since the sends of the other "
            "cost more than everything else); the plain forwarder is "
            "`scripts/baseline_forwarder.py`.",
            "",
            "| server | queries/s per sink | µs of server CPU per query | gnutella-router / it |",
            "|---|---:|---:|---:|",
            *(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows),
            "",
            f"gnutella-router: {verdict}.",
            "",
            *_failure_notes(problems, runs, args.repeats),
            "Rerun: `.venv/bin/python scripts/bench_query_flood.py --write` (about a minute).",
        ]
        print(f"wrote {replace_section('query_flood', lines)}")
    return 1 if problems.failures else 0


def _failure_notes(
    problems: Problems, runs: dict[str, list[ThroughputRun]], repeats: int
) -> list[str]:
    """What went wrong in the runs, for the written section: runs repeated after a
    failure, runs left out, and whose medians therefore count fewer runs."""
    notes = [f"- Repeated after a failure: {text}." for text in problems.retried]
    notes += [f"- Failed: {text}." for text in problems.failures]
    notes += [
        f"- {name}: the median of {len(done)} run{'' if len(done) == 1 else 's'}, not {repeats}."
        for name, done in runs.items()
        if len(done) != repeats
    ]
    if any("closed by the server" in note for note in notes):
        notes.append(f"- {CLOSED_BY_THE_SERVER}")
    return [*notes, ""] if notes else []


if __name__ == "__main__":
    raise SystemExit(main())
