"""Deflated links under a flood: zlib's level, and a batch's deflates in turn or side by side.

Run from the repository root, in the project's virtual environment:

    .venv/bin/python scripts/bench_deflate.py            # print the figures
    .venv/bin/python scripts/bench_deflate.py --write    # also update docs/benchmarks.md
    .venv/bin/python scripts/bench_deflate.py --levels   # zlib's levels, no routers

Gnutella peers deflate their links (gtk-gnutella offers it on every connection), and
with GUIDs as random as a real network's, deflate can cost more than routing. Two
settings decide what it costs a router: ``network.deflate_level`` (zlib's level) and
``network.deflate_threads``: zlib releases the GIL while it works, so with worker
threads the router deflates the direct writes that end a batch side by side, on its
trio thread and the workers (:mod:`gnutella_router.net.deflate_pool`), the second
core's share of the work, at the price of handing each write to a thread and back.

What is run: four routers from this checkout, each its own process on a free loopback
port, alike but for those two settings (level 1, the default, or zlib's default 6; 0
worker threads, each link's write deflated in turn on the trio thread, or 1). Against
each in turn, the load of ``scripts/bench_router.py``'s throughput run: one source
writing pre-encoded 64 KiB chunks of 30-byte messages (85 % pings, 15 % queries, TTL 2,
every GUID unique and, here, drawn at random on every pass) as fast as the router reads
them, and three sinks that asked for deflate; the sinks inflate (in C) and count bytes.
The source sends plain and reads its pongs plain. The figure is the messages per second
each sink receives over a window after a warm-up, and the router process's CPU (all its
threads) per message taken from the source. The runs alternate between the routers, so
the ratios hold on a shared machine; each figure is the median of ``--repeats`` runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import zlib
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from protocol.codec import encode_message
from protocol.compression import DEFAULT_DEFLATE_LEVEL, WINDOW_BITS
from scripts.benchdocs import machine, provenance, replace_section
from scripts.router_bench.interleaved import (
    ServerCommand,
    interleaved_runs,
    parse_flood_args,
    rates_and_costs,
)
from scripts.router_bench.peers import BLAST_MESSAGES, SINKS, BenchError, Blast, Wire, message_kinds
from scripts.router_bench.runs import median_of
from scripts.router_bench.servers import Problems
from scripts.runner import router_argv
from traffic_models.samples import TRACE_LIKE_MIX, SampleFactory

QUERY_SHARE = 0.15
VARIANTS = {
    f"level {DEFAULT_DEFLATE_LEVEL}, one deflate at a time": (DEFAULT_DEFLATE_LEVEL, 0),
    f"level {DEFAULT_DEFLATE_LEVEL}, deflates side by side": (DEFAULT_DEFLATE_LEVEL, 1),
    "level 6, one deflate at a time": (6, 0),
    "level 6, deflates side by side": (6, 1),
}
"""Each router's ``network.deflate_level`` and ``network.deflate_threads``."""
DEFAULTS = f"level {DEFAULT_DEFLATE_LEVEL}, deflates side by side"
"""The variant that is the router's defaults."""


def _router(level: int, threads: int, port: int, home: Path) -> list[str]:
    network = f"deflate_level = {level}\ndeflate_threads = {threads}\n"
    return router_argv(port, home, None, network=network)


LEVELS = (1, 3, 6, 9)
"""The zlib levels ``--levels`` sets side by side."""
WRITE_SIZES = (4 * 1024, 16 * 1024, 64 * 1024)
"""Write sizes ``--levels`` sets side by side at the default level."""
LEVEL_WRITE = 16 * 1024
"""Bytes per deflated write in ``--levels``: about what a router's write to one peer
holds under a flood."""


def _deflate_rate(level: int, writes: list[bytes]) -> tuple[float, float]:
    """MB/s of input one raw deflater at ``level`` takes, a sync flush per write, and
    its output over its input."""
    deflater = zlib.compressobj(level, zlib.DEFLATED, -WINDOW_BITS)
    started = time.perf_counter()
    out = 0
    for data in writes:
        out += len(deflater.compress(data)) + len(deflater.flush(zlib.Z_SYNC_FLUSH))
    elapsed = time.perf_counter() - started
    size = sum(map(len, writes))
    return size / elapsed / 1e6, out / size


def levels(args: argparse.Namespace) -> int:
    """zlib's levels side by side on what a router sends: how fast, and how much smaller."""
    wire = Wire.build()
    blast = Blast(wire, message_kinds(BLAST_MESSAGES, QUERY_SHARE, 1), random_guids=True)
    flood = b"".join(bytes(blast.next_pass()) for _ in range(8))
    trace = b"".join(encode_message(m) for m in SampleFactory(1).messages(40_000, TRACE_LIKE_MIX))
    corpora = {
        f"the benchmarks' flood ({wire.size}-byte messages, random GUIDs)": flood,
        "the trace-like mix (pongs, pings, queries, hits, pushes)": trace,
    }
    rows: list[tuple[str, int, float, float]] = []
    for name, data in corpora.items():
        writes = [data[i : i + LEVEL_WRITE] for i in range(0, len(data), LEVEL_WRITE)]
        for level in LEVELS:
            runs = [_deflate_rate(level, writes) for _ in range(args.repeats)]
            rate = statistics.median(r for r, _ in runs)
            rows.append((name, level, rate, runs[0][1]))
    print(f"{'traffic':<66}{'level':>6}{'MB/s in':>9}{'out/in':>8}{'vs level 6':>12}")
    speed_at_6 = {name: rate for name, level, rate, _ in rows if level == 6}
    for name, level, rate, ratio in rows:
        print(f"{name:<66}{level:>6}{rate:>9.1f}{ratio:>8.3f}{rate / speed_at_6[name]:>11.2f}x")
    # What a write's size does to the cost of each message in it, at the default level:
    # every write ends with a sync flush, whose cost does not shrink with the write.
    sizes: list[tuple[int, float]] = []
    for size in WRITE_SIZES:
        writes = [flood[i : i + size] for i in range(0, len(flood) - size + 1, size)]
        rate = statistics.median(
            _deflate_rate(DEFAULT_DEFLATE_LEVEL, writes)[0] for _ in range(args.repeats)
        )
        sizes.append((size, wire.size / rate * 1000.0))  # ns per message: bytes / (MB/s)
    print(f"\nlevel {DEFAULT_DEFLATE_LEVEL}, the flood, by write size:")
    for size, cost in sizes:
        print(f"  {size // 1024:>3} KiB writes: {cost:,.0f} ns per {wire.size}-byte message")
    if args.write:
        lines = [
            "## zlib's levels on what a router sends (`scripts/bench_deflate.py --levels`)",
            "",
            f"Measured {provenance()} on {machine()}, in one process, no routers: one raw "
            f"deflater per level and traffic, fed {LEVEL_WRITE // 1024} KiB writes each "
            "ended with a sync flush, as a router's writes to one peer are; the speed is "
            f"the median of {args.repeats} passes over the traffic, out/in what the "
            "deflater sent over what it was given.",
            "",
            "| traffic | level | MB/s in | out / in | speed vs level 6 |",
            "|---|---:|---:|---:|---:|",
            *(
                f"| {name} | {level} | {rate:.1f} | {ratio:.3f} | {rate / speed_at_6[name]:.2f}x |"
                for name, level, rate, ratio in rows
            ),
            "",
            f"At level {DEFAULT_DEFLATE_LEVEL}, on the flood, what a write's size does to "
            "the cost of each message in it (each write ends with a sync flush, whose cost "
            "does not shrink with the write): "
            + ", ".join(f"{size // 1024} KiB writes {cost:,.0f} ns" for size, cost in sizes)
            + f" per {wire.size}-byte message. So a deflated link's write may wait for a few "
            "batches until it is worth deflating (`gnutella_router/net/outbox.py`, "
            "`DEFLATED_WAITS`).",
            "",
            f"`network.deflate_level` defaults to {DEFAULT_DEFLATE_LEVEL}: a router "
            "deflates every byte it sends, so the level decides how much of a core zlib "
            "takes, and with GUIDs as random as a network's the higher levels save little.",
            "",
            "Rerun: `.venv/bin/python scripts/bench_deflate.py --levels --write` (seconds).",
        ]
        print(f"wrote {replace_section('bench_deflate_levels', lines)}")
    return 0


def _ratio(rate: float | None, defaults: float | None) -> str:
    return f"{rate / defaults:.2f}x" if rate and defaults else "n/a"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_flood_args(
        argv,
        __doc__.splitlines()[0] if __doc__ else None,
        "router",
        lambda parser: parser.add_argument(
            "--levels",
            action="store_true",
            help="instead: zlib's levels side by side in this process, speed and output",
        ),
    )
    if args.levels:
        return levels(args)
    wire = Wire.build()
    problems = Problems()
    load = os.getloadavg()[0]
    print(
        f"{wire.size}-byte messages ({QUERY_SHARE:.0%} queries), 1 source, {SINKS} deflated "
        f"sinks; {args.repeats} runs per router"
    )
    blast = Blast(wire, message_kinds(BLAST_MESSAGES, QUERY_SHARE, 1), random_guids=True)
    commands: dict[str, ServerCommand] = {
        name: partial(_router, level, threads) for name, (level, threads) in VARIANTS.items()
    }
    try:
        runs = interleaved_runs(
            commands,
            wire=wire,
            blast=blast,
            args=args,
            sinks=SINKS,
            problems=problems,
            deflate_sinks=True,
        )
    except BenchError as exc:
        problems.fail(str(exc))
        print(f"FAILED: {exc}")
        return 1
    rates, costs = rates_and_costs(runs)
    shares = {name: median_of(runs[name], lambda r: r.cpu.server) for name in VARIANTS}
    rows = [
        (
            f"{name} (`deflate_level = {level}`, `deflate_threads = {threads}`)",
            "n/a" if rates[name] is None else f"{rates[name]:,.0f}",
            "n/a" if costs[name] is None else f"{costs[name]:.2f}",
            "n/a" if shares[name] is None else f"{shares[name]:.0%}",
            _ratio(rates[name], rates[DEFAULTS]),
        )
        for name, (level, threads) in VARIANTS.items()
    ]
    print()
    print(f"{'router':<86}{'msgs/s per sink':>17}{'µs CPU/msg':>12}{'CPU':>7}{'vs defaults':>13}")
    for name, rate, cost, share, ratio in rows:
        print(f"{name:<86}{rate:>17}{cost:>12}{share:>7}{ratio:>13}")
    if args.write:
        lines = [
            "## Deflated links: zlib's level and the second core (`scripts/bench_deflate.py`)",
            "",
            f"Measured {provenance()} on {machine()}; load average before the runs "
            f"{load:.2f}. Four routers from this checkout, alike but for "
            "`network.deflate_level` and `network.deflate_threads`; against each in "
            f"turn one source and {SINKS} sinks that ask for deflate, the source writing "
            f"pre-encoded {wire.size}-byte messages ({QUERY_SHARE:.0%} queries, TTL 2, every "
            "GUID unique and random) as fast as the router reads them, the sinks inflating "
            f"(in C) and counting bytes. Each figure is the median of {args.repeats} runs of "
            f"{args.duration:g} s after {args.warmup:g} s of warm-up, the routers' runs "
            "interleaved. CPU is the router process's, all threads, as a share of one core.",
            "",
            "| router | msgs/s per sink | µs of router CPU per message | router CPU | "
            "msgs/s vs the defaults |",
            "|---|---:|---:|---:|---:|",
            *(f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in rows),
            "",
            "Deflating a batch's writes side by side on a worker thread pays only where "
            "zlib's work outweighs handing each write to the thread and back, so the pool "
            "takes a batch only when its writes hold enough bytes for the level "
            "(`gnutella_router/net/deflate_pool.py`, `parallel_bytes`: 4 KiB at level 6, "
            "32 KiB at level 1, where this load's batches stay under it and are deflated "
            "in place). The defaults are level "
            f"{DEFAULT_DEFLATE_LEVEL} and one worker thread. The client takes a share of "
            "the same two cores. "
            "Links that do not deflate (`scripts/bench_router.py`) are unaffected: their "
            "writes are made in place either way.",
            "",
            "Rerun: `.venv/bin/python scripts/bench_deflate.py --write` (about two minutes).",
        ]
        print(f"wrote {replace_section('bench_deflate', lines)}")
    return 1 if problems.failures else 0


if __name__ == "__main__":
    sys.exit(main())
