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

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchdocs import machine, provenance, replace_section
from router_bench.interleaved import (
    ServerCommand,
    interleaved_runs,
    parse_flood_args,
    rates_and_costs,
)
from router_bench.peers import BLAST_MESSAGES, SINKS, BenchError, Blast, Wire, message_kinds
from router_bench.processes import Problems, router_argv

import hatch_build

ROOT = Path(__file__).resolve().parent.parent
LOADS = (
    ("mixed flood (85 % pings, 15 % queries), 3 sinks", 0.15, SINKS),
    ("query flood, 2 sinks", 1.0, 2),
)
"""Each load: its name, the share of queries and the number of sinks."""


def tree_first(tree: Path) -> dict[str, str]:
    """The environment that makes a Python process import from ``tree``: first on the
    path, and no script or working directory put before it (``PYTHONSAFEPATH``), which
    would otherwise bring this checkout's own, compiled, modules back."""
    return {"PYTHONPATH": str(tree), "PYTHONSAFEPATH": "1"}


def router_from(tree: Path, port: int, home: Path) -> list[str]:
    settings = [f"{key}={value}" for key, value in tree_first(tree).items()]
    return ["env", *settings, *router_argv(port, home, None)]


def version_of(tree: Path) -> str:
    """What ``gnutella-router --version`` says when run from ``tree``."""
    result = subprocess.run(
        [sys.executable, "-m", "gnutella_router", "--version"],
        env={**os.environ, **tree_first(tree)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return (result.stdout or result.stderr).strip()


@dataclass(frozen=True)
class SideBySide:
    """Two routers under one load: the first's and the second's median messages per
    sink and µs of CPU per message (None where no run gave a figure)."""

    load: str
    before: float | None
    after: float | None
    costs: tuple[float | None, float | None]

    @property
    def ratio(self) -> str:
        """The second's messages per sink over the first's."""
        return f"{self.after / self.before:.2f}x" if self.before and self.after else "n/a"

    @property
    def cost_change(self) -> str:
        """µs of CPU per message, first -> second."""
        return " -> ".join("n/a" if cost is None else f"{cost:.2f}" for cost in self.costs)


def side_by_side(
    commands: Mapping[str, ServerCommand],
    loads: Sequence[tuple[str, float, int]],
    args: argparse.Namespace,
    problems: Problems,
) -> list[SideBySide]:
    """The two routers of ``commands`` (before, then after) under each of ``loads`` (as
    in :data:`LOADS`), their runs interleaved. Raises BenchError when it cannot."""
    first, second = commands
    compared = []
    for load_name, query_share, sinks in loads:
        wire = Wire.build()
        blast = Blast(wire, message_kinds(BLAST_MESSAGES, query_share, 1))
        print(f"\n{load_name}; {args.repeats} runs per router")
        runs = interleaved_runs(
            commands, wire=wire, blast=blast, args=args, sinks=sinks, problems=problems
        )
        rates, costs = rates_and_costs(runs)
        compared.append(
            SideBySide(load_name, rates[first], rates[second], (costs[first], costs[second]))
        )
    return compared


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
            "pure Python": lambda port, home: router_from(pure, port, home),
            "compiled": lambda port, home: router_from(compiled, port, home),
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
