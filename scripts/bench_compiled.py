"""The router with its hot path compiled by mypyc against the same sources uncompiled.

Run from the repository root, in the project's virtual environment (the ``dev`` extra:
it compiles with mypyc, as the build does):

    .venv/bin/python scripts/bench_compiled.py            # print the figures
    .venv/bin/python scripts/bench_compiled.py --write    # also update docs/benchmarks.md

What is run: two copies of this checkout's packages in a temporary folder, one left as
Python sources and one with the hot modules compiled by ``hatch_build.compile_hot_path``
(what ``pip install`` does on a machine with a C compiler); a router from each (its
own process on a free loopback port, the copy first on ``PYTHONPATH``, on its defaults
otherwise). Against each in turn, interleaved, two floods: the throughput load of
``scripts/bench_router.py`` (one source writing pre-encoded 64 KiB chunks of 30-byte
messages, 85 % pings and 15 % queries, TTL 2, every GUID unique, three sinks counting
bytes) and the load of ``scripts/bench_query_flood.py`` (queries only, two sinks). Each
figure is the median of ``--repeats`` runs.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import hatch_build
from scripts import ROOT
from scripts.benchdocs import machine, provenance, replace_section
from scripts.router_bench.interleaved import (
    LOADS,
    ServerCommand,
    parse_flood_args,
    side_by_side,
)
from scripts.router_bench.peers import BenchError
from scripts.router_bench.servers import Problems
from scripts.router_bench.trees import router_from, version_of


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_flood_args(argv, __doc__.splitlines()[0] if __doc__ else None, "router")
    load_average = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-compiled-") as folder:
        pure = hatch_build.copy_of_the_sources(ROOT, Path(folder) / "pure")
        compiled = hatch_build.copy_of_the_sources(ROOT, Path(folder) / "compiled")
        print("compiling the hot modules with mypyc ...", flush=True)
        try:
            hatch_build.compile_hot_path(compiled)
        except hatch_build.NativeBuildError as exc:
            print(f"FAILED: cannot compile here: {exc}")
            return 1
        for name, tree, expected in (
            ("pure Python", pure, "hot path: pure Python"),
            ("compiled", compiled, "hot path: compiled with mypyc"),
        ):
            said = version_of(tree)
            print(f"{name}: {said}")
            if expected not in said:
                print(f"FAILED: the {name} copy does not run what it should")
                return 1
        commands: dict[str, ServerCommand] = {
            "pure Python": partial(router_from, pure),
            "compiled": partial(router_from, compiled),
        }
        problems = Problems()
        try:
            compared = side_by_side(commands, LOADS, args, problems)
        except BenchError as exc:
            print(f"FAILED: {exc}")
            return 1
        rows = [
            (
                each.load,
                "n/a" if each.before is None else f"{each.before:,.0f}",
                "n/a" if each.after is None else f"{each.after:,.0f}",
                each.ratio,
                each.cost_change,
            )
            for each in compared
        ]
    print()
    for row in rows:
        print("  ".join(row))
    if args.write:
        lines = [
            "## The hot path compiled (`scripts/bench_compiled.py`)",
            "",
            f"Measured {provenance()} on {machine()}; load average before the runs "
            f"{load_average:.2f}. The "
            "same sources twice: as Python, and with the hot modules "
            f"({', '.join(f'`{m}`' for m in hatch_build.HOT_MODULES)}) compiled by mypyc as "
            "`pip install` does where a C compiler is at hand (`hatch_build.py`); a router "
            "from each, on its defaults, against the floods of `scripts/bench_router.py` "
            "and `scripts/bench_query_flood.py` in turn; the median of "
            f"{args.repeats} runs of {args.duration:g} s after {args.warmup:g} s of "
            "warm-up each, the routers' runs interleaved.",
            "",
            "| load | pure Python, msgs/s per sink | compiled | ratio "
            "| µs of router CPU per message, pure -> compiled |",
            "|---|---:|---:|---:|---:|",
            *(f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in rows),
            "",
            "Without a C compiler, or with `GNUTELLA_ROUTER_PURE=1` at install time, the "
            "package installs as pure Python and runs the same code, at the first column's "
            "speed; `gnutella-router --version` says which it runs.",
            "",
            "Rerun: `.venv/bin/python scripts/bench_compiled.py --write` (about two minutes).",
        ]
        print(f"wrote {replace_section('bench_compiled', lines)}")
    return 1 if problems.failures else 0


if __name__ == "__main__":
    sys.exit(main())
