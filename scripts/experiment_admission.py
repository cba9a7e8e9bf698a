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

Without ``--write`` the figures and CSV go to ``--out`` (a new run folder by default)
and docs/ is left alone; with it they go to docs/figures/ and each experiment replaces
its own marked section of docs/experiments.md (``admission-step``,
``admission-classes``, ``admission-degrade``, ``admission-floor``): the date, the
machine and its load, the command to rerun it, its table, and the files it wrote. Every
experiment keeps its result in its run folder (``result-NAME.json``), and
``--from-results DIR`` redraws its table and figures from an earlier one without
running anything.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gnutella_router.run_folder import add_out_arguments, script_run
from scripts import ROOT
from scripts.benchdocs import EXPERIMENTS_DOC, FIGURES, machine, replace_section
from scripts.fig14.runs import ExperimentError
from scripts.router_admission import step
from scripts.router_admission.classes import (
    experiment_classes,
    experiment_floor,
    report_classes,
    report_floor,
)
from scripts.router_admission.degrade import experiment_degrade, report_degrade


def _timed(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="shorter runs (a smoke test)")
    parser.add_argument("--duration", type=float, help="seconds a run (overrides --quick)")


def _timed_flags(args: argparse.Namespace) -> str:
    return f" --duration {args.duration:g}" if args.duration else " --quick" if args.quick else ""


@dataclass(frozen=True)
class Experiment:
    """One subcommand: what it runs, how it reports, and its own flags."""

    about: str
    run: Callable[[argparse.Namespace, Path], dict[str, Any]]
    """The runs, into a results folder: what they measured."""
    report: Callable[[dict[str, Any], Path], tuple[list[str], list[Path]]]
    """The lines of its section, and the files it drew (into the folder given)."""
    add_arguments: Callable[[argparse.ArgumentParser], None] = _timed
    check: Callable[[argparse.ArgumentParser, argparse.Namespace], None] = lambda _, __: None
    flags: Callable[[argparse.Namespace], str] = _timed_flags
    """This run's flags, for the rerun command."""
    earlier: Callable[[Path, argparse.Namespace], dict[str, Any] | None] = lambda _, __: None
    """A result from a folder written before results had a file of their own."""


EXPERIMENTS = {
    "step": Experiment(
        "every shedding policy through one load step",
        step.experiment_step,
        step.report_step,
        step.add_arguments,
        step.check_arguments,
        step.rerun_flags,
        step.earlier_step,
    ),
    "classes": Experiment(
        "replies under class-based admission", experiment_classes, report_classes
    ),
    "degrade": Experiment(
        "degradation along a chain of routers", experiment_degrade, report_degrade
    ),
    "floor": Experiment("the single-class figure, as a check", experiment_floor, report_floor),
}


def measured(name: str, args: argparse.Namespace) -> int:
    """Run experiment ``name`` (or read an earlier run's result), print its table under
    the date, the machine and its load and the command to rerun it, and with ``--write``
    put them in its section; exit status 1 when its check is missed or it failed."""
    experiment = EXPERIMENTS[name]
    if args.from_results:
        out = args.from_results
        path = out / f"result-{name}.json"
        result = json.loads(path.read_text()) if path.exists() else experiment.earlier(out, args)
        if result is None:
            print(f"experiment_admission: no result of {name} in {out}", file=sys.stderr)
            return 1
    else:
        out = script_run(f"experiment-admission-{name}", args)
        load_before = os.getloadavg()[0]
        try:
            result = experiment.run(args, out)
        except ExperimentError as exc:
            print(f"experiment_admission: {exc}", file=sys.stderr)
            return 1
        result["measured"] = {
            "date": datetime.date.today().isoformat(),
            "machine": machine(),
            "load_average": [load_before, os.getloadavg()[0]],
            "rerun": f".venv/bin/python scripts/experiment_admission.py {name}"
            + experiment.flags(args),
        }
        (out / f"result-{name}.json").write_text(json.dumps(result, indent=2))
    folder = FIGURES if args.write else out
    lines, paths = experiment.report(result, folder)
    header = _header(result.get("measured"), name)
    print("\n".join(header + lines))
    for path in paths:
        print("wrote", path)
    if args.write:
        names = ", ".join(f"`{p.relative_to(ROOT)}`" for p in paths)
        files = ["", f"Files: {names}."] if paths else []
        replace_section(f"admission-{name}", [*header, *lines, *files], EXPERIMENTS_DOC)
        print("wrote", EXPERIMENTS_DOC)
    return 1 if result.get("held") is False else 0


def _header(measured: dict[str, Any] | None, name: str) -> list[str]:
    """When and where a result was measured, and how to rerun it."""
    if measured is None:  # a result from before they were recorded with it
        rerun = f".venv/bin/python scripts/experiment_admission.py {name}"
        return [f"Rerun with `{rerun} --write` (under `flock /tmp/gr-bench.lock`).", ""]
    before, after = measured["load_average"]
    return [
        f"Measured {measured['date']} on {measured['machine']}, `nproc` = "
        f"{os.cpu_count()}; 1-minute load average {before:.2f} at the start, "
        f"{after:.2f} at the end. Rerun with `{measured['rerun']} --write` "
        "(under `flock /tmp/gr-bench.lock`).",
        "",
    ]


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="See the module docstring for what is run and measured.",
    )
    commands = top.add_subparsers(dest="experiment", required=True)
    for name, experiment in EXPERIMENTS.items():
        command = commands.add_parser(name, help=experiment.about)
        experiment.add_arguments(command)
        command.add_argument("--write", action="store_true", help="figures, CSV and docs")
        command.add_argument(
            "--from-results", type=Path, help="run nothing: redraw from an earlier --out"
        )
        add_out_arguments(command)
    return top


def main(argv: list[str] | None = None) -> int:
    arguments = parser()
    args = arguments.parse_args(argv)
    EXPERIMENTS[args.experiment].check(arguments, args)
    return measured(args.experiment, args)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
