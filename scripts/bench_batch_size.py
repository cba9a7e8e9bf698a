"""The router's largest batch against its throughput, side by side.

Run from the repository root, in the project's virtual environment:

    .venv/bin/python scripts/bench_batch_size.py            # print the figures
    .venv/bin/python scripts/bench_batch_size.py --write    # also update docs/benchmarks.md

A router batch pays some costs once whatever it holds: the stage's wake-up and turn,
the batch path's set-up, one flush (one write) per destination. The larger the batch a
saturated router may take, the less each message pays of them. What is run: one router
per largest batch (``router.batch_size``; ``slow_peer.threshold_messages`` at twice it,
the least the configuration allows, so that one batch cannot close a healthy peer), each
its own process on a free loopback port, on its defaults otherwise (so the batching
controller may choose smaller batches); against each in turn the throughput load of
``scripts/bench_router.py`` (one source writing pre-encoded 64 KiB chunks of 30-byte
messages, 85 % pings and 15 % queries, TTL 2, every GUID unique, three sinks counting
bytes). The runs are interleaved, so the ratios hold on a shared machine; each figure
is the median of ``--repeats`` runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from gnutella_router.config.sections import RouterConfig
from scripts.benchdocs import machine, provenance, replace_section
from scripts.router_bench.interleaved import (
    ServerCommand,
    interleaved_runs,
    parse_flood_args,
    rates_and_costs,
)
from scripts.router_bench.peers import BLAST_MESSAGES, SINKS, BenchError, Blast, Wire, message_kinds
from scripts.router_bench.servers import Problems
from scripts.runner import router_argv

QUERY_SHARE = 0.15
BATCHES = (RouterConfig().batch_size, 250, 500, 2000)
"""The largest batches compared; the first is the default."""


def _router(batch: int, port: int, home: Path) -> list[str]:
    tables = f"[router]\nbatch_size = {batch}\n[slow_peer]\nthreshold_messages = {2 * batch}\n"
    return router_argv(port, home, None, tables=tables)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_flood_args(argv, __doc__.splitlines()[0] if __doc__ else None, "router")
    wire = Wire.build()
    blast = Blast(wire, message_kinds(BLAST_MESSAGES, QUERY_SHARE, 1))
    problems = Problems()
    load = os.getloadavg()[0]
    names = {f"batch_size = {batch}": batch for batch in BATCHES}
    commands: dict[str, ServerCommand] = {
        name: partial(_router, batch) for name, batch in names.items()
    }
    print(f"{wire.size}-byte messages, 1 source, {SINKS} sinks; {args.repeats} runs per router")
    try:
        runs = interleaved_runs(
            commands, wire=wire, blast=blast, args=args, sinks=SINKS, problems=problems
        )
    except BenchError as exc:
        print(f"FAILED: {exc}")
        return 1
    rates, costs = rates_and_costs(runs)
    default = rates[f"batch_size = {BATCHES[0]}"]
    rows: list[tuple[str, str, str, str]] = []
    for name in names:
        rate, cost = rates[name], costs[name]
        rows.append(
            (
                f"`{name}`, `threshold_messages = {2 * names[name]}`",
                "n/a" if rate is None else f"{rate:,.0f}",
                "n/a" if cost is None else f"{cost:.2f}",
                "" if rate is None or not default else f"{rate / default:.2f}x",
            )
        )
    print()
    for row in rows:
        print("  ".join(row))
    if args.write:
        lines = [
            "## The largest batch (`scripts/bench_batch_size.py`)",
            "",
            f"Measured {provenance()} on {machine()}; load average before the runs "
            f"{load:.2f}. One router "
            "per largest batch, on its defaults otherwise, against each in turn the "
            f"throughput load of `scripts/bench_router.py` (1 source, {SINKS} sinks, "
            f"{wire.size}-byte messages, {QUERY_SHARE:.0%} queries); the median of "
            f"{args.repeats} runs of {args.duration:g} s after {args.warmup:g} s of warm-up "
            "each, the routers' runs interleaved.",
            "",
            "| largest batch | msgs/s per sink | µs of router CPU per message | vs the default |",
            "|---|---:|---:|---:|",
            *(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows),
            "",
            f"Why the default is {BATCHES[0]}: every batch costs the router its writes (one "
            "per peer with something to send, each a syscall that on loopback also runs "
            "the receiving side) and a round of the scheduler, whatever its size, so "
            "small batches spend the core on them under a flood. A batch is only as "
            "large as what is queued: at any load the router keeps up with, batches are "
            "small and nothing waits for a batch to fill. Under saturation a message may "
            "wait the batch's routing time before it is written (the batch times the CPU "
            "per message above), and a slow peer is closed only after twice the batch in "
            "queued messages (the slow-peer threshold must be at least that, or one batch "
            "could close a healthy peer). The batching controller (on by default) starts "
            "from this largest batch and shrinks it while throughput allows.",
            "",
            "Rerun: `.venv/bin/python scripts/bench_batch_size.py --write` (about two minutes).",
        ]
        print(f"wrote {replace_section('bench_batch_size', lines)}")
    return 1 if problems.failures else 0


if __name__ == "__main__":
    sys.exit(main())
