"""What the router's direct writes buy: the same router with and without them, side by side.

When the router ends a batch, each connection's socket writer (``flush``) writes the
queued bytes to the socket itself if no writer task holds an earlier write, and leaves
only what the kernel does not take to a writer task (gnutella_router/net/socket_writer.py).
The alternative is to wake the writer and let it write: one more task switch and one
more scheduler round per batch and connection. This script starts two routers from
this checkout, one of them with ``GNUTELLA_ROUTER_DIRECT_WRITES=0``, and runs the
router benchmark's throughput and latency runs against both, interleaved run by run,
so the ratio holds on a noisy machine.

    .venv/bin/python scripts/bench_direct_writes.py            # print the figures
    .venv/bin/python scripts/bench_direct_writes.py --write    # also update docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path

from scripts.benchdocs import machine, provenance, replace_section
from scripts.router_bench.peers import BLAST_MESSAGES, Wire, message_kinds
from scripts.router_bench.runs import Figures, Target, run_speed
from scripts.router_bench.servers import Problems, stop_server
from scripts.runner import free_port, router_argv, started


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=5, help="runs per figure (default 5)")
    parser.add_argument(
        "--duration", type=float, default=2.0, help="throughput window, s (default 2)"
    )
    parser.add_argument(
        "--latency-duration", type=float, default=5.0, help="latency window, s (default 5)"
    )
    parser.add_argument("--warmup", type=float, default=1.0, help="s before each window")
    parser.add_argument("--rate", type=float, default=10_000, help="latency runs' msgs/s")
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.duration <= 0 or args.latency_duration <= 0 or args.warmup < 0:
        parser.error("--repeats, --duration and --latency-duration must be positive")
    args.connections = 0  # no memory runs here
    return args


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    wire = Wire.build()
    kinds = message_kinds(BLAST_MESSAGES, 0.15, 1)
    problems = Problems()
    direct, writer_only = Figures("direct writes"), Figures("writer task only")
    with (
        tempfile.TemporaryDirectory(prefix="bench-direct-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        workdir = Path(tmp)
        targets: list[Target] = []
        servers = []
        for figures, env in ((direct, None), (writer_only, {"GNUTELLA_ROUTER_DIRECT_WRITES": "0"})):
            port = free_port()
            state = workdir / f"state-{port}"
            state.mkdir()
            server = stack.enter_context(
                started(figures.name, router_argv(port, state, None), port, workdir, env)
            )
            servers.append(server)
            targets.append((figures, server.address, server.pid))
        run_speed(targets, wire, kinds, args, problems)
        for server in servers:
            stop_server(server, problems)

    medians = [
        (
            "throughput, routed msgs/s per sink",
            [median([r.per_sink for r in f.throughput]) for f in (direct, writer_only)],
        ),
        (
            "latency p50 at 10,000 msgs/s (µs)",
            [median([r.p50 for r in f.latency]) for f in (direct, writer_only)],
        ),
        (
            "latency p99 at 10,000 msgs/s (µs)",
            [median([r.p99 for r in f.latency]) for f in (direct, writer_only)],
        ),
    ]
    rows = [("", direct.name, writer_only.name, "ratio")]
    rows += [(what, f"{a:,.0f}", f"{b:,.0f}", f"{a / b:.2f}x") for what, (a, b) in medians]
    lines = [" | ".join(row) for row in rows]
    print("\n".join(lines))
    for text in problems.failures:
        print(f"failed: {text}")
    if args.write:
        table = [f"| {' | '.join(rows[0])} |", "|---|---:|---:|---:|"]
        table += [f"| {' | '.join(row)} |" for row in rows[1:]]
        replace_section(
            "direct_writes",
            [
                "## Direct writes (`scripts/bench_direct_writes.py`)",
                "",
                f"Measured {provenance()} on {machine()}. The same router "
                "from this checkout twice, once with `GNUTELLA_ROUTER_DIRECT_WRITES=0` (every "
                "write left to the connection's writer task); the router benchmark's throughput "
                f"and latency runs, interleaved; medians of {args.repeats} runs each.",
                "",
                *table,
                "",
                "Rerun: `.venv/bin/python scripts/bench_direct_writes.py --write` (a few minutes).",
            ],
        )
    return 1 if problems.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
