"""Two versions of the router side by side under the same floods: is a change faster?

Run from the repository root, in the project's virtual environment (the ``dev`` extra:
it compiles with mypyc, as the build does):

    .venv/bin/python scripts/bench_commits.py                   # HEAD against the working tree
    .venv/bin/python scripts/bench_commits.py --base HEAD~3 --head HEAD --repeats 7

What is run: each version's packages in a temporary folder (a revision from ``git
archive``, the working tree copied as it is, uncommitted changes included), with its hot
modules compiled by that version's own ``hatch_build.py``, as ``pip install`` would on a
machine with a C compiler; a router from each (its own process on a free loopback port,
its copy first on ``PYTHONPATH``, on its defaults otherwise). Against each in turn,
interleaved, the floods of ``scripts/bench_compiled.py``: the throughput load of
``scripts/bench_router.py`` (85 % pings and 15 % queries, three sinks) and a query flood
(two sinks). Each figure is the median of ``--repeats`` runs; the ratio is head / base.

The machine's speed drifts by more than most changes gain, which is why the runs are
interleaved and only the ratio of one invocation means anything. Nothing is written to
``docs/``: a change's figure belongs in its commit message or in the section of
``docs/benchmarks.md`` it concerns.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from scripts.router_bench.interleaved import LOADS, ServerCommand, side_by_side
from scripts.router_bench.peers import BenchError
from scripts.router_bench.servers import Problems
from scripts.router_bench.trees import WORKING_TREE, compile_in, export, router_from, version_of


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--base", default="HEAD", metavar="REV", help="the version before (HEAD)")
    parser.add_argument(
        "--head",
        default=WORKING_TREE,
        metavar="REV",
        help="the version after (the working tree, uncommitted changes included)",
    )
    parser.add_argument("--repeats", type=int, default=5, metavar="N", help="runs per router (5)")
    parser.add_argument(
        "--duration", type=float, default=3.0, metavar="SECONDS", help="window (3 s)"
    )
    parser.add_argument(
        "--warmup", type=float, default=1.0, metavar="SECONDS", help="before each window (1 s)"
    )
    parser.add_argument(
        "--only", choices=("mixed", "query"), help="one of the two floods instead of both"
    )
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.duration <= 0 or args.warmup < 0:
        parser.error("--repeats and --duration must be positive, --warmup not negative")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    args.write = False
    names = {"base": f"base ({args.base})", "head": f"head ({args.head})"}
    with tempfile.TemporaryDirectory(prefix="bench-commits-") as folder:
        trees: dict[str, Path] = {}
        try:
            for role, revision in (("base", args.base), ("head", args.head)):
                tree = export(revision, Path(folder) / role)
                print(f"compiling {names[role]} ...", flush=True)
                compile_in(tree)
                print(f"  {version_of(tree)}")
                trees[role] = tree
        except BenchError as exc:
            print(f"FAILED: {exc}")
            return 1

        commands: dict[str, ServerCommand] = {
            names[role]: partial(router_from, tree) for role, tree in trees.items()
        }
        problems = Problems()
        loads = [
            load
            for key, load in zip(("mixed", "query"), LOADS, strict=True)
            if args.only is None or args.only == key
        ]
        try:
            compared = side_by_side(commands, loads, args, problems)
        except BenchError as exc:
            print(f"FAILED: {exc}")
            return 1
    print()
    for each in compared:
        print(
            f"{each.load}: {each.before or 0:,.0f} -> {each.after or 0:,.0f} msgs/s per sink "
            f"({each.ratio}); µs of server CPU per message {each.cost_change}"
        )
    return 1 if problems.failures else 0


if __name__ == "__main__":
    sys.exit(main())
