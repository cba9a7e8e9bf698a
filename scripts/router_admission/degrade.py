"""``degrade``: the reach of degraded queries along a chain of three routers.

r1 -> r2 -> r3, each dialling the next; the load on r1 (overloaded: 20 ms a query), r2
and r3 with no delay and ``backpressure``. r1 runs ``response-time`` with classes, with
``degrade_ttl_by = 5`` or without degradation; the load steps from 100 to 1000 msgs/s a
third of the way in (at most 20 s). Per second: the TTL r1 forwards with, and the
queries each router receives (reach: a query that leaves r1 with TTL 1 stops at r2);
``admission-degrade.png`` and ``admission-degrade.csv``.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from scripts.benchdocs import save_figure
from scripts.fig14.runs import experiment_router, kept_profile
from scripts.router_admission.common import (
    config_text,
    controller_series,
    run_load,
    shedding,
    write_csv,
)
from scripts.runner import Router
from traffic_models.arrivals import ArrivalProcess, Schedule


def timing(args: argparse.Namespace, full: float, quick: float) -> tuple[float, float]:
    """The run's duration and when the load steps (a third of the way in, at most 20 s)."""
    duration = args.duration or (quick if args.quick else full)
    return duration, min(20.0, duration / 3)


def step_arrivals(before: float, after: float, at: float) -> ArrivalProcess:
    return Schedule([(at, before), (0, after)])


def experiment_degrade(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    duration, at = timing(args, 60.0, 30.0)
    runs: dict[str, Any] = {}
    for cut in (5, 0):
        label = f"degrade_ttl_by = {cut}"
        chain: dict[str, Router] = {}
        with contextlib.ExitStack() as stack:  # stopped r1 first, as they were started
            seeds = ""
            for hop in (3, 2):
                name = f"degrade-{cut}-r{hop}"
                text = config_text(shedding("backpressure"), delay=False, seeds=seeds)
                router = stack.enter_context(experiment_router(out / name, text))
                chain[name] = router
                seeds = f'"127.0.0.1:{router.port}"'
            extra = "response_time_classes = true\n" + (f"degrade_ttl_by = {cut}\n" if cut else "")
            name = f"degrade-{cut}-r1"
            text = config_text(shedding("response-time", extra), seeds=seeds)
            router = stack.enter_context(experiment_router(out / name, text))
            chain[name] = router
            time.sleep(3.0)  # the chain links up (each router dials its seed at once)
            run_load(router.port, step_arrivals(100, 1000, at), duration, respond=False)
        profiles = {n: kept_profile(r, out, n) for n, r in reversed(chain.items())}
        first = profiles[f"degrade-{cut}-r1"]
        runs[label] = {
            "cut": [(s["at"], s.get("ttl_cut") or 0) for s in first["samples"]],
            "r1_rate": [(s["at"], s["admission_rate"]) for s in controller_series(first)],
            "reach": {
                hop: [
                    (s["at"], s["rates"].get("query", 0.0))
                    for s in profiles[f"degrade-{cut}-{hop}"]["samples"]
                ]
                for hop in ("r1", "r2", "r3")
            },
            "received": {
                hop: profiles[f"degrade-{cut}-{hop}"]["router"]["received"].get("query", 0)
                for hop in ("r1", "r2", "r3")
            },
            "shed": first["router"]["dropped"].get("shed-admission", {}).get("query", 0),
            "degraded": (
                first["router"].get("degraded_queries", 0),
                first["router"].get("degraded_hops", 0),
            ),
        }
        print(f"degrade {label}: queries received {runs[label]['received']}", flush=True)
    return {"duration": duration, "step_at": at, "runs": runs}


def report_degrade(result: dict[str, Any], folder: Path) -> tuple[list[str], list[Path]]:
    runs, at = result["runs"], result["step_at"]
    figure, axes = plt.subplots(len(runs) + 1, 1, figsize=(8, 9), sharex=True)
    for index, (label, run) in enumerate(runs.items()):
        ax = axes[index]
        for hop in ("r1", "r2", "r3"):
            series = run["reach"][hop]
            ax.plot([t for t, _ in series], [v for _, v in series], label=f"queries/s at {hop}")
        ax.set_ylabel("queries received / s")
        ax.set_title(label, fontsize=9)
        ax.legend(fontsize=8)
        cut = run["cut"]
        axes[-1].step([t for t, _ in cut], [7 - 1 - v for _, v in cut], where="post", label=label)
    axes[-1].set_ylabel("TTL r1 forwards with")
    axes[-1].set_xlabel(f"seconds (load on r1 steps 100 -> 1000 msgs/s at {at:.0f} s)")
    axes[-1].legend(fontsize=8)
    figure.suptitle("degradation: a chain r1 -> r2 -> r3, r1 overloaded")
    paths = [save_figure(figure, folder / "admission-degrade.png", dpi=110)]
    rows: list[list[Any]] = []
    for label, run in runs.items():
        cuts = dict(run["cut"])
        reach = {hop: dict(run["reach"][hop]) for hop in ("r1", "r2", "r3")}
        rows.extend(
            [label, t, 6 - cuts[t], *(reach[hop].get(t, "") for hop in ("r1", "r2", "r3"))]
            for t in sorted(cuts)
        )
    paths.append(
        write_csv(
            folder / "admission-degrade.csv",
            ["run", "at", "forwarded_ttl", "r1 queries/s", "r2 queries/s", "r3 queries/s"],
            rows,
        )
    )
    lines = [
        "| r1 | queries received by r1 | by r2 | by r3 | queries degraded (hops taken off) "
        "| r1 queries shed |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, run in runs.items():
        received = run["received"]
        degraded, hops = run["degraded"]
        lines.append(
            f"| {label} | {received['r1']:,} | {received['r2']:,} | {received['r3']:,} "
            f"| {degraded:,} ({hops:,}) | {run['shed']:,} |"
        )
    return lines, paths
