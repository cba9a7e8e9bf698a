"""The batching controller through a load that steps up and down, beside the fixed batch.

Run from the repository root, in the project's virtual environment (unattended; about
four minutes with the defaults, two router runs):

    python scripts/experiment_batching.py            # print the comparison
    python scripts/experiment_batching.py --write    # also docs/experiments.md, figure, CSV

What is run. Twice, one router each time (a ``gnutella-router run`` child on a free
loopback port, one worker, no injected delay, backpressure, the profiler at 0.1 s): the
batching controller on with a sample every 0.5 s (``[batching] interval = 0.5``), then
off (``router.batch_size = 250`` fixed, the old default). The load client (one injector,
four peers, the paper's mix) offers the same steps to both (``--steps``; by default a
light load, a load over the router's capacity, and back, twice, like the paper's
Figure 9 of an oscillating load).

What is shown: over time, the batch size and the router's output rate (messages
received per second, from the profiler) for both runs (``batching-steps.png``), and
the controller's samples as CSV (``batching-steps.csv``: rate, mean batch, per-batch
cost, whether the sample was bound by the batch, the action and why). Side by side,
the medians and totals of each run: messages delivered per second while the load was
on, one-hop latency p50 and p99 (whole run, from each message's scheduled time), and the
router's CPU seconds per thousand messages received (``/proc/PID/stat``).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import trio
from benchdocs import machine, replace_section, save_figure
from experiment_fig14 import DOC, FIGURES, ExperimentError, WholeRunLoad, launch_router, stop_router
from router_bench.processes import cpu_seconds, free_port

from gnutella_router.traffic.load import LoadSettings
from traffic_models.arrival_text import parse_arrivals
from traffic_models.generator import TrafficGenerator
from traffic_models.mix import PAPER_MIX

STEPS = "20s@2000,25s@40000,20s@2000,25s@40000,15s@2000"
CSV_NAME = "batching-steps.csv"
CSV_FIELDS = (
    "at",
    "batch_size",
    "rate",
    "mean_batch",
    "batch_cost_ms",
    "queue_length",
    "bound",
    "action",
    "reason",
)


def run(name: str, auto: bool, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    workdir = out / name
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "router.toml"
    config.write_text(
        "[router]\nthreads = 1\nbatch_size = 250\n\n"
        f"[batching]\nenabled = {'true' if auto else 'false'}\ninterval = {args.interval}\n\n"
        "[profiler]\nenabled = true\ninterval = 0.1\n"
    )
    port = free_port()
    load_before = os.getloadavg()[0]
    process, state = launch_router(workdir, config, port)
    try:
        duration = sum(float(p.split("@")[0].removesuffix("s")) for p in args.steps.split(","))
        settings = LoadSettings(
            target=("127.0.0.1", port), peers=4, injectors=1, duration=duration, warmup=0.0
        )
        arrivals = parse_arrivals(f"steps:{args.steps}", seed=1)
        load = WholeRunLoad(settings, TrafficGenerator(mix=PAPER_MIX, arrivals=arrivals, seed=1))
        report = trio.run(load.run)
        cpu = cpu_seconds(process.pid)
        load_after = os.getloadavg()[0]
    finally:
        status = stop_router(process)
    profile_path = state / "profile.json"
    if not profile_path.exists():
        raise ExperimentError(f"{name}: no profiler export (router exit status {status})")
    profile = json.loads(profile_path.read_text())
    samples = profile["samples"]
    series = [
        (s["at"], s["batch_size"], sum(s["rates"].values()), s["queues"].get("router", 0))
        for s in samples
    ]
    loaded = [rate for _, _, rate, _ in series if rate > 0]
    whole = load.whole.summaries().get("one-hop", {})
    latency = {
        kind: None if whole.get(kind) is None else [whole[kind].p50 / 1000, whole[kind].p99 / 1000]
        for kind in ("ping", "query")
    }
    total = samples[-1]["received"] if samples else 0
    return {
        "name": name,
        "auto": auto,
        "series": series,
        "controller": (profile.get("batching") or {}).get("samples", []),
        "changes": {
            k: (profile.get("batching") or {}).get(k, 0)
            for k in ("decreased", "increased", "resets")
        },
        "received": total,
        "delivered": sum(report.received.values()),
        "expected": sum(report.expected.values()),
        "late": report.late,
        "median_rate": statistics.median(loaded) if loaded else 0.0,
        "peak_rate": max(loaded, default=0.0),
        "latency_ms": latency,
        "cpu_seconds": cpu,
        "cpu_ms_per_1000": None if cpu is None or not total else cpu * 1e6 / total,
        "load_average": [load_before, load_after],
    }


def lines_of(results: list[dict[str, Any]]) -> list[str]:
    rows = [
        "| batch | messages received | median rate (msgs/s, loaded samples) | peak rate "
        "| ping p50 / p99 (ms) | query p50 / p99 (ms) | router CPU ms per 1000 msgs "
        "| sends late | changes (decreased / increased / resets) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:

        def lat(kind: str, r: dict[str, Any] = r) -> str:
            pair = r["latency_ms"][kind]
            return "-" if pair is None else f"{pair[0]:.1f} / {pair[1]:.1f}"

        cpu = r["cpu_ms_per_1000"]
        changes = r["changes"]
        rows.append(
            f"| {'controller' if r['auto'] else 'fixed 250'} | {r['received']:,} "
            f"| {r['median_rate']:,.0f} | {r['peak_rate']:,.0f} | {lat('ping')} | {lat('query')} "
            f"| {'-' if cpu is None else f'{cpu:.1f}'} | {r['late']:,} "
            f"| {changes['decreased']} / {changes['increased']} / {changes['resets']} |"
        )
    auto = next((r for r in results if r["auto"]), None)
    fixed = next((r for r in results if not r["auto"]), None)
    if auto and fixed and fixed["received"] and fixed["cpu_ms_per_1000"]:
        rows += [
            "",
            f"Controller / fixed: messages received {auto['received'] / fixed['received']:.2f}x, "
            f"median rate {auto['median_rate'] / max(1.0, fixed['median_rate']):.2f}x, "
            f"CPU per message {auto['cpu_ms_per_1000'] / fixed['cpu_ms_per_1000']:.2f}x. "
            f"1-minute load average at start and end: "
            + "; ".join(
                f"{r['name']} {r['load_average'][0]:.2f} -> {r['load_average'][1]:.2f}"
                for r in results
            ),
        ]
    return rows


def plot(results: list[dict[str, Any]], path: Path) -> Path:
    figure, (batch_axes, rate_axes) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for r, color in zip(results, ("tab:blue", "tab:grey"), strict=False):
        label = "controller" if r["auto"] else "fixed 250"
        times = [s[0] for s in r["series"]]
        batch_axes.step(times, [s[1] for s in r["series"]], where="post", color=color, label=label)
        rate_axes.plot(times, [s[2] for s in r["series"]], color=color, label=label, lw=0.8)
    batch_axes.set_ylabel("router batch size")
    batch_axes.set_ylim(0, 270)
    batch_axes.legend(loc="lower right", fontsize=8)
    batch_axes.grid(alpha=0.3)
    rate_axes.set_ylabel("messages received / s")
    rate_axes.set_xlabel("time since the router started (s)")
    rate_axes.legend(loc="upper right", fontsize=8)
    rate_axes.grid(alpha=0.3)
    batch_axes.set_title("The batching controller through load steps, beside a fixed batch")
    return save_figure(figure, path, dpi=110)


def write_csv(results: list[dict[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    auto = next((r for r in results if r["auto"]), None)
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for s in [] if auto is None else auto["controller"]:
            writer.writerow({k: s.get(k) for k in CSV_FIELDS})
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default=STEPS, help=f"SECONDSs@RATE,... (default {STEPS})")
    parser.add_argument("--interval", type=float, default=0.5, help="controller sample (s)")
    parser.add_argument("--only", choices=("auto", "fixed"), help="run one of the two")
    parser.add_argument("--out", type=Path, help="raw results (default: a temporary folder)")
    parser.add_argument("--write", action="store_true", help="update docs/experiments.md")
    parser.add_argument("--from-results", type=Path, help="skip the runs: redraw an earlier --out")
    args = parser.parse_args(argv)
    if args.from_results:
        out = args.from_results
        results = [
            json.loads((out / f"result-{n}.json").read_text())
            for n in ("auto", "fixed")
            if (out / f"result-{n}.json").exists()
        ]
    else:
        out = args.out or Path(tempfile.mkdtemp(prefix="batching-steps-"))
        out.mkdir(parents=True, exist_ok=True)
        print(f"raw results in {out}", flush=True)
        results = []
        for name, auto in (("auto", True), ("fixed", False)):
            if args.only and args.only != name:
                continue
            result = run(name, auto, args, out)
            (out / f"result-{name}.json").write_text(json.dumps(result))
            results.append(result)
    table = lines_of(results)
    print("\n".join(table))
    where = FIGURES if args.write else out
    figure = plot(results, where / "batching-steps.png")
    data = write_csv(results, where / CSV_NAME)
    print(figure, data, sep="\n")
    if args.write:
        replace_section(
            "batching-steps",
            [
                f"Measured {datetime.date.today().isoformat()} on {machine()}; "
                f"`python scripts/experiment_batching.py --write` (steps `{args.steps}`, "
                f"a controller sample every {args.interval} s).",
                "",
                *table,
                "",
                "![The batching controller through load steps](figures/batching-steps.png)",
                "",
                f"The controller's samples: [{CSV_NAME}](figures/{CSV_NAME}).",
            ],
            path=DOC,
        )
        print(DOC)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
