"""SEDA's admission controllers on this router under overload: response time, classes and
degradation, against backpressure and drop-tail.

Run from the repository root, in the project's virtual environment (unattended; each
experiment is its own invocation of 1 to 5 minutes, so each fits one turn of the shared
lock):

    .venv/bin/python scripts/experiment_admission.py step --write      # every policy, one load step
    .venv/bin/python scripts/experiment_admission.py classes --write   # replies kept flowing
    .venv/bin/python scripts/experiment_admission.py degrade --write   # TTL and reach along a chain
    .venv/bin/python scripts/experiment_admission.py floor --write     # the documented figure
    .venv/bin/python scripts/experiment_admission.py classes --quick   # a smoke test

Without ``--write`` the figures and CSV go to ``--out`` (a fresh temporary directory by
default) and docs/ is left alone; with it they go to docs/figures/ and each experiment
replaces its own marked section of docs/experiments.md (``admission-step``,
``admission-classes``, ``admission-degrade``, ``admission-floor``).

Every router is a child process on a free loopback port with one thread, 20 ms a query
(about 50 queries/s of capacity; the routers downstream in ``degrade`` without the
delay), the governor off and the profiler every 0.1 s; the load client runs in this
process with one injector and three sinks and, but in ``floor``, the paper's mix (85 %
pings, 15 % queries, TTL 7). Latency is measured from each message's scheduled send
time, so a router that stops reading shows in it. The shared parts are in
``router_admission/common.py``; what each experiment runs and shows is in the docstring
of its module:

* ``step`` (``router_admission/step.py``): five routers, one per shedding policy
  (``backpressure``, ``drop-tail``, ``response-time``, with classes, with classes and
  degradation), each through a step from 100 to 1000 msgs/s with the sinks answering;
  the latencies of the steady state, what was shed, the queue, the controller's p90 and
  rate and the TTL cut over time.
* ``classes`` (``router_admission/classes.py``): 1000 msgs/s throughout, sinks
  answering, under ``response-time`` with classes, ``backpressure`` and ``drop-tail``:
  the replies back per second and their round-trip p90.
* ``degrade`` (``router_admission/degrade.py``): a chain of three routers, the first
  overloaded, with and without ``degrade_ttl_by``: the TTL it forwards with and the
  queries the others receive.
* ``floor`` (``router_admission/classes.py``): the single-class controller's documented
  figure, 200 queries/s for 30 s, the last 10 s timed; exit status 1 when fewer than
  15 queries/s were delivered or their p90 was over 300 ms.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gnutella_router.run_folder import add_out_arguments, script_run
from scripts.benchdocs import machine, replace_section
from scripts.fig14.runs import DOC, FIGURES, ROOT, ExperimentError
from scripts.router_admission import step
from scripts.router_admission.classes import (
    experiment_classes,
    experiment_floor,
    report_classes,
    report_floor,
)
from scripts.router_admission.degrade import experiment_degrade, report_degrade

Run = Callable[[argparse.Namespace, Path], dict[str, Any]]
Report = Callable[[dict[str, Any], Path], tuple[list[str], list[Path]]]
EXPERIMENTS: dict[str, tuple[Run, Report, str]] = {
    "classes": (experiment_classes, report_classes, "replies under class-based admission"),
    "degrade": (experiment_degrade, report_degrade, "degradation along a chain of routers"),
    "floor": (experiment_floor, report_floor, "the single-class figure, as a check"),
}
"""The experiments of one table each: run, report (lines and files written), help."""


def measured(name: str, args: argparse.Namespace) -> int:
    """Run experiment ``name``, print its table under the date, the machine and its load
    and the command to rerun it, and with ``--write`` put them in its section."""
    out = script_run(f"experiment-admission-{name}", args)
    run, report, _ = EXPERIMENTS[name]
    load_before = os.getloadavg()[0]
    try:
        result = run(args, out)
    except ExperimentError as exc:
        print(f"experiment_admission: {exc}", file=sys.stderr)
        return 1
    load_after = os.getloadavg()[0]
    (out / f"result-{name}.json").write_text(json.dumps(result, indent=2))
    folder = FIGURES if args.write else out
    lines, paths = report(result, folder)
    command = f".venv/bin/python scripts/experiment_admission.py {name}" + (
        f" --duration {args.duration:g}" if args.duration else " --quick" if args.quick else ""
    )
    header = [
        f"Measured {datetime.date.today().isoformat()} on {machine()}, `nproc` = "
        f"{os.cpu_count()}; 1-minute load average {load_before:.2f} at the start, "
        f"{load_after:.2f} at the end. Rerun with `{command} --write` "
        "(under `flock /tmp/gr-bench.lock`).",
        "",
    ]
    print("\n".join(header + lines))
    for path in paths:
        print("wrote", path)
    if args.write:
        names = ", ".join(f"`{p.relative_to(ROOT)}`" for p in paths)
        files = ["", f"Files: {names}."] if paths else []
        replace_section(f"admission-{name}", [*header, *lines, *files], DOC)
    return 1 if result.get("held") is False else 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="See the module docstring for what is run and measured.",
    )
    commands = top.add_subparsers(dest="experiment", required=True)
    steps = commands.add_parser("step", help="every shedding policy through one load step")
    step.add_arguments(steps)
    experiments = [steps]
    for name, (_, _, about) in EXPERIMENTS.items():
        command = commands.add_parser(name, help=about)
        command.add_argument("--quick", action="store_true", help="shorter runs (a smoke test)")
        command.add_argument("--duration", type=float, help="seconds a run (overrides --quick)")
        experiments.append(command)
    for command in experiments:
        command.add_argument("--write", action="store_true", help="figures, CSV and docs")
        add_out_arguments(command)
    return top


def main(argv: list[str] | None = None) -> int:
    arguments = parser()
    args = arguments.parse_args(argv)
    if args.experiment == "step":
        step.check_arguments(arguments, args)
        return step.main(args)
    return measured(args.experiment, args)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
