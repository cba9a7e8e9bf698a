"""The thread governor through a load that rises and falls: does it settle, and shrink back?

Run from the repository root, in the project's virtual environment (unattended, about
three minutes):

    python scripts/experiment_governor.py            # print the phases
    python scripts/experiment_governor.py --write    # also docs/experiments.md + figure

What is run. One router (a ``gnutella-router run`` child on a free loopback port) with
the paper's bottleneck (``router.query_delay_ms = 20``, starting from one thread), the
governor on with its defaults (``sizing = "littles-law"``, a sample every 2 s) and the
profiler at 0.1 s. The load client offers the paper's mix (85 % pings, 15 % queries) in
steps: ``--steps`` (default 100 msgs/s for 20 s, 1000 for 50 s, 400 for 50 s, 100 for
40 s). By Little's law a step of R msgs/s keeps R x 0.15 x 20 ms workers busy: 0.3,
3, 1.2 and 0.3.

What is shown: per step, the pool the governor ended it with, the most it had, its
measured load (arrival rate x service time, the median of its samples in the step's
second half) and Little's law for the offered rate; over time, the pool, the measured
load and the router queue (``governor-steps.png``), and the governor's samples as CSV
(``governor-steps.csv`` in ``--out``).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import trio
from benchdocs import machine, replace_section
from experiment_fig14 import DOC, FIGURES, ExperimentError, launch_router, stop_router
from matplotlib.ticker import MaxNLocator
from router_bench.processes import free_port

from gnutella_router.traffic.load import LoadRun, LoadSettings
from traffic_models.arrivals import parse_arrivals
from traffic_models.generator import TrafficGenerator
from traffic_models.mix import PAPER_MIX

STEPS = "20s@100,50s@1000,50s@400,40s@100"
QUERY_SHARE, QUERY_SECONDS = 0.15, 0.020


def parse_steps(text: str) -> list[tuple[float, float]]:
    """``20s@100,50s@1000`` as [(seconds, rate), ...]."""
    steps = []
    for part in text.split(","):
        seconds, _, rate = part.partition("@")
        steps.append((float(seconds.removesuffix("s")), float(rate)))
    return steps


def run(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    workdir = out / "router"
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "router.toml"
    config.write_text(
        "[router]\nquery_delay_ms = 20\nthreads = 1\n\n[governor]\nenabled = true\n\n"
        "[profiler]\nenabled = true\ninterval = 0.1\n"
    )
    port = free_port()
    process, state = launch_router(workdir, config, port)
    steps = parse_steps(args.steps)
    try:
        settings = LoadSettings(
            target=("127.0.0.1", port), peers=4, injectors=1, duration=sum(s for s, _ in steps)
        )
        arrivals = parse_arrivals(f"steps:{args.steps}", seed=1)
        report = trio.run(
            LoadRun(settings, TrafficGenerator(mix=PAPER_MIX, arrivals=arrivals, seed=1)).run
        )
    finally:
        status = stop_router(process)
    profile_path = state / "profile.json"
    if not profile_path.exists():
        raise ExperimentError(f"no profiler export (router exit status {status})")
    profile = json.loads(profile_path.read_text())
    governor = (profile.get("governor") or {}).get("samples", [])
    queue = [(s["at"], s["queues"].get("router", 0)) for s in profile["samples"]]
    # The load client starts sending once its peers are connected; the router's clock
    # started earlier. The first arrival marks the step's start.
    first = next((s["at"] for s in governor if s.get("arrival_rate")), 0.0)
    start = max(0.0, first - 2.0)
    phases = []
    at = start
    for seconds, rate in steps:
        inside = [s for s in governor if at < s["at"] <= at + seconds]
        late = [s for s in inside if s["at"] > at + seconds / 2 and s.get("measured")]
        phases.append(
            {
                "rate": rate,
                "from": round(at, 1),
                "seconds": seconds,
                "littles_law": rate * QUERY_SHARE * QUERY_SECONDS,
                "measured_load": statistics.median(s["load"] for s in late) if late else None,
                "pool_at_end": inside[-1]["pool_size"] if inside else None,
                "peak_pool": max((s["pool_size"] for s in inside), default=None),
                "changes": [[s["at"], s["action"], s["reason"]] for s in inside if s["action"]],
            }
        )
        at += seconds
    with (out / "governor-steps.csv").open("w", newline="") as file:
        fields = ["at", "pool_size", "load", "arrival_rate", "service_ms", "queue_length"]
        writer = csv.DictWriter(file, fieldnames=[*fields, "action", "reason"])
        writer.writeheader()
        for s in governor:
            writer.writerow({k: s.get(k) for k in [*fields, "action", "reason"]})
    return {
        "phases": phases,
        "governor": governor,
        "queue": queue,
        "start": start,
        "sent": sum(report.sent.values()),
    }


def lines_of(result: dict[str, Any]) -> list[str]:
    rows = [
        "| step (msgs/s) | Little's law: workers | measured load, median | pool at the "
        "step's end (most during it) | the governor's changes |",
        "|---:|---:|---:|---:|---|",
    ]
    for p in result["phases"]:
        load = "-" if p["measured_load"] is None else f"{p['measured_load']:.2f}"
        changes = (
            "; ".join(
                f"{at - result['start']:.0f} s {action} ({why})" for at, action, why in p["changes"]
            )
            or "none"
        )
        rows.append(
            f"| {p['rate']:g} | {p['littles_law']:.2f} | {load} "
            f"| {p['pool_at_end']} ({p['peak_pool']}) | {changes} |"
        )
    return rows


def plot(result: dict[str, Any], path: Path) -> Path:
    start = result["start"]
    samples = result["governor"]
    figure, (pool_axes, queue_axes) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    times = [s["at"] - start for s in samples]
    pool_axes.step(times, [s["pool_size"] for s in samples], where="post", label="threads")
    pool_axes.plot(times, [s["load"] for s in samples], color="tab:orange", label="measured load")
    at = 0.0
    for p in result["phases"]:
        pool_axes.hlines(
            p["littles_law"], at, at + p["seconds"], colors="grey", linestyles=":",
            label="Little's law" if at == 0.0 else None,
        )  # fmt: skip
        pool_axes.text(at + 1, 0.1, f"{p['rate']:g}/s", fontsize=8)
        at += p["seconds"]
    pool_axes.set_ylabel("router workers")
    pool_axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    pool_axes.set_ylim(0, max(s["pool_size"] for s in samples) + 0.8)
    pool_axes.legend(loc="upper right", fontsize=8)
    pool_axes.grid(alpha=0.3)
    queue_axes.plot([t - start for t, _ in result["queue"]], [q for _, q in result["queue"]])
    queue_axes.set_ylabel("router queue (events)")
    queue_axes.set_xlabel("time since the load began (s)")
    queue_axes.grid(alpha=0.3)
    pool_axes.set_title("The governor (Little's law) through load steps, 20 ms per query")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default=STEPS, help=f"SECONDSs@RATE,... (default {STEPS})")
    parser.add_argument("--out", type=Path, help="raw results (default: a temporary folder)")
    parser.add_argument("--write", action="store_true", help="update docs/experiments.md")
    parser.add_argument("--from-results", type=Path, help="skip the run: redraw an earlier --out")
    args = parser.parse_args(argv)
    if args.from_results:
        out = args.from_results
        result = json.loads((out / "result.json").read_text())
    else:
        out = args.out or Path(tempfile.mkdtemp(prefix="governor-steps-"))
        out.mkdir(parents=True, exist_ok=True)
        print(f"raw results in {out}", flush=True)
        result = run(args, out)
        (out / "result.json").write_text(json.dumps(result))
    table = lines_of(result)
    print("\n".join(table))
    path = plot(result, (FIGURES if args.write else out) / "governor-steps.png")
    print(path)
    if args.write:
        replace_section(
            "governor-steps",
            [
                f"Measured {datetime.date.today().isoformat()} on {machine()}; "
                f"`python scripts/experiment_governor.py --write` (steps `{args.steps}`).",
                "",
                *table,
                "",
                "![The governor through load steps](figures/governor-steps.png)",
            ],
            path=DOC,
        )
        print(DOC)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
