"""The thread governor through a load that rises and falls: does it settle, and shrink back?

Run from the repository root, in the project's virtual environment (unattended, about
three minutes):

    .venv/bin/python scripts/experiment_governor.py            # print the phases
    .venv/bin/python scripts/experiment_governor.py --write    # also docs/experiments.md + figure

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
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

import matplotlib

from scripts.benchdocs import EXPERIMENTS_DOC, FIGURES

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import trio
from matplotlib.ticker import MaxNLocator

from gnutella_router.lab.traffic.load import LoadRun, LoadSettings
from gnutella_router.run_folder import add_out_arguments, script_run
from protocol.framing import Frame
from scripts.benchdocs import machine, replace_section, save_figure
from scripts.fig14.runs import BROADCAST, experiment_router
from traffic_models.arrival_text import parse_arrivals
from traffic_models.generator import TrafficGenerator
from traffic_models.latency import read_stamp
from traffic_models.mix import PAPER_MIX

STEPS = "20s@100,50s@1000,50s@400,40s@100"
QUERY_SHARE, QUERY_SECONDS = 0.15, 0.020
PAPER_POOL = {100: 1, 200: 1, 400: 3, 1000: 3}
"""The pool the paper's governor reached at each load (Fig. 14: 2 threads added at 400
and 1000 packets/s, none below)."""
LONGEST_RUN = 3600
"""Seconds of latency series kept (one bucket a second per type)."""


class TimedLoad(LoadRun):
    """The load client, plus each second's latency (by when the message was due)."""

    def __init__(self, settings: LoadSettings, generator: TrafficGenerator) -> None:
        super().__init__(settings, generator)
        self.seconds: dict[tuple[int, int], list[float]] = {}
        """(second since the start, message type) -> [count, sum of ms, max ms]."""

    def _account(self, frames: list[Frame], arrived: int, sink: bool, run: int, *rest: Any) -> None:
        super()._account(frames, arrived, sink, run, *rest)
        if not sink or not self.started_ns:
            return
        for frame in frames:
            if frame.payload_type not in BROADCAST:
                continue
            due = read_stamp(frame.guid, run, self.marker)
            if not due:
                continue
            second = (due - self.started_ns) // 1_000_000_000
            if not 0 <= second < LONGEST_RUN:
                continue
            bucket = self.seconds.setdefault((int(second), frame.payload_type), [0, 0.0, 0.0])
            latency = (arrived - due) / 1e6
            bucket[0] += 1
            bucket[1] += latency
            bucket[2] = max(bucket[2], latency)

    def series(self, message_type: int) -> list[tuple[int, float, float]]:
        """(second, mean ms, max ms) of one type, in order."""
        return [
            (second, total / count, most)
            for (second, kind), (count, total, most) in sorted(self.seconds.items())
            if kind == message_type and count
        ]


def parse_steps(text: str) -> list[tuple[float, float]]:
    """``20s@100,50s@1000`` as [(seconds, rate), ...]."""
    steps = []
    for part in text.split(","):
        seconds, _, rate = part.partition("@")
        steps.append((float(seconds.removesuffix("s")), float(rate)))
    return steps


def run(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    config = (
        "[router]\nquery_delay_ms = 20\nthreads = 1\n\n[governor]\nenabled = true\n\n"
        "[profiler]\nenabled = true\ninterval = 0.1\n"
    )
    steps = parse_steps(args.steps)
    with experiment_router(out / "router", config) as router:
        settings = LoadSettings(
            target=router.address, peers=4, injectors=1, duration=sum(s for s, _ in steps)
        )
        arrivals = parse_arrivals(f"steps:{args.steps}", seed=1)
        load = TimedLoad(settings, TrafficGenerator(mix=PAPER_MIX, arrivals=arrivals, seed=1))
        report = trio.run(load.run)
    profile = router.profile()
    governor = (profile.get("governor") or {}).get("samples", [])
    queue = [(s["at"], s["queues"].get("router", 0)) for s in profile["samples"]]
    # The load client starts sending once its peers are connected; the router's clock
    # (the profiler's and the governor's) started earlier. The first profiler sample
    # (every 0.1 s) that saw a message arrive marks the start of the load.
    first = next((s["at"] for s in profile["samples"] if s.get("rates")), 0.0)
    start = max(0.0, first - profile.get("interval", 0.1))
    latency = {
        name: load.series(kind) for name, kind in zip(("ping", "query"), BROADCAST, strict=True)
    }
    phases = []
    at = 0.0
    for seconds, rate in steps:
        inside = [s for s in governor if at < s["at"] - start <= at + seconds]
        late = [s for s in inside if s["at"] - start > at + seconds / 2 and s.get("measured")]
        second_half = {
            name: [m for t, m, _ in series if at + seconds / 2 <= t < at + seconds]
            for name, series in latency.items()
        }
        phases.append(
            {
                "rate": rate,
                "from": round(at, 1),
                "seconds": seconds,
                "littles_law": rate * QUERY_SHARE * QUERY_SECONDS,
                "measured_load": statistics.median(s["load"] for s in late) if late else None,
                "pool_at_end": inside[-1]["pool_size"] if inside else None,
                "peak_pool": max((s["pool_size"] for s in inside), default=None),
                "paper_pool": PAPER_POOL.get(int(rate)),
                "peak_queue": max(
                    (q for t, q in queue if at < t - start <= at + seconds), default=0
                ),
                "latency_ms": {
                    name: statistics.median(values) if values else None
                    for name, values in second_half.items()
                },
                "changes": [
                    [s["at"] - start, s["action"], s["reason"]] for s in inside if s["action"]
                ],
            }
        )
        at += seconds
    write_csv(out / "governor-steps.csv", governor, queue, latency, start)
    return {
        "steps": args.steps,
        "phases": phases,
        "governor": governor,
        "queue": queue,
        "latency": latency,
        "start": start,
        "sent": sum(report.sent.values()),
    }


def write_csv(
    path: Path,
    governor: list[dict[str, Any]],
    queue: list[tuple[float, int]],
    latency: dict[str, list[tuple[int, float, float]]],
    start: float,
) -> Path:
    """One row a second since the load began: the pool and the governor's measured load
    (its last sample), the longest router queue and the mean latencies of the messages
    due in that second."""
    by_second: dict[int, dict[str, Any]] = {}
    for s in governor:
        second = int(s["at"] - start)
        if second >= 0:
            by_second.setdefault(second, {}).update(
                pool_size=s["pool_size"],
                load=round(s["load"], 3),
                arrival_rate=round(s["arrival_rate"], 1),
                service_ms=round(s["service_ms"], 3),
                action=s["action"],
            )
    for t, q in queue:
        second = int(t - start)
        if second >= 0:
            row = by_second.setdefault(second, {})
            row["queue_length"] = max(q, row.get("queue_length", 0))
    for name, series in latency.items():
        for second, mean, _most in series:
            by_second.setdefault(second, {})[f"{name}_mean_ms"] = round(mean, 2)
    fields = ["second", "pool_size", "load", "arrival_rate", "service_ms", "queue_length"]
    fields += ["ping_mean_ms", "query_mean_ms", "action"]
    last: dict[str, Any] = {}
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=fields)
        writer.writeheader()
        for second in range(max(by_second, default=-1) + 1):
            row = by_second.get(second, {})
            # The governor samples every 2 s: between samples its pool and load hold.
            for key in ("pool_size", "load", "arrival_rate", "service_ms"):
                last[key] = row.get(key, last.get(key))
            writer.writerow({**row, **last, "second": second, "action": row.get("action", "")})
    return path


def lines_of(result: dict[str, Any]) -> list[str]:
    rows = [
        "| step (msgs/s) | Little's law: workers | measured load, median | pool at the "
        "step's end (most during it) | the paper's pool | peak router queue "
        "| ping / query mean ms, median of the step's second half | the governor's changes |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for p in result["phases"]:
        load = "-" if p["measured_load"] is None else f"{p['measured_load']:.2f}"
        changes = (
            "; ".join(f"{at:.0f} s {action} ({why})" for at, action, why in p["changes"]) or "none"
        )
        latency = " / ".join(
            "-" if p["latency_ms"][name] is None else f"{p['latency_ms'][name]:,.1f}"
            for name in ("ping", "query")
        )
        paper = "-" if p["paper_pool"] is None else str(p["paper_pool"])
        rows.append(
            f"| {p['rate']:g} | {p['littles_law']:.2f} | {load} "
            f"| {p['pool_at_end']} ({p['peak_pool']}) | {paper} | {p['peak_queue']:,} "
            f"| {latency} | {changes} |"
        )
    return rows


def plot(result: dict[str, Any], path: Path) -> Path:
    start = result["start"]
    samples = result["governor"]
    figure, (pool_axes, queue_axes, latency_axes) = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    times = [s["at"] - start for s in samples]
    pool_axes.step(times, [s["pool_size"] for s in samples], where="post", label="threads")
    pool_axes.plot(times, [s["load"] for s in samples], color="tab:orange", label="measured load")
    at = 0.0
    for p in result["phases"]:
        pool_axes.hlines(
            p["littles_law"], at, at + p["seconds"], colors="grey", linestyles=":",
            label="Little's law" if at == 0.0 else None,
        )  # fmt: skip
        pool_axes.text(at + 1, 4.6, f"{p['rate']:g}/s", fontsize=8)
        at += p["seconds"]
    pool_axes.set_ylabel("router workers")
    pool_axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    pool_axes.set_ylim(0, 5.5)
    pool_axes.legend(loc="upper right", fontsize=8)
    pool_axes.grid(alpha=0.3)
    queue_axes.plot([t - start for t, _ in result["queue"]], [q for _, q in result["queue"]])
    queue_axes.set_ylabel("router queue (events)")
    queue_axes.grid(alpha=0.3)
    for name, color in (("ping", "tab:blue"), ("query", "tab:red")):
        series = result["latency"][name]
        latency_axes.plot(
            [t + 0.5 for t, _, _ in series], [m for _, m, _ in series], color=color, label=name
        )
    latency_axes.set_yscale("log")
    latency_axes.set_ylabel("mean latency (ms), per second due")
    latency_axes.set_xlabel("time since the load began (s)")
    latency_axes.legend(loc="upper right", fontsize=8)
    latency_axes.grid(alpha=0.3)
    pool_axes.set_title("The governor (Little's law) through load steps, 20 ms per query")
    return save_figure(figure, path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default=STEPS, help=f"SECONDSs@RATE,... (default {STEPS})")
    add_out_arguments(parser)
    parser.add_argument(
        "--from-results", type=Path, help="skip the run: redraw from a previous --out"
    )
    parser.add_argument("--write", action="store_true", help="update docs/experiments.md")
    args = parser.parse_args(argv)
    if args.from_results:
        out = args.from_results
        result = json.loads((out / "result.json").read_text())
    else:
        out = script_run("experiment-governor", args)
        result = run(args, out)
        result["date"] = datetime.date.today().isoformat()
        result["machine"] = machine()
        (out / "result.json").write_text(json.dumps(result))
    table = lines_of(result)
    print("\n".join(table))
    figures = FIGURES if args.write else out
    path = plot(result, figures / "governor-steps.png")
    print(path)
    if args.write:
        shutil.copy(out / "governor-steps.csv", figures / "governor-steps.csv")
        replace_section(
            "governor-steps",
            [
                f"Measured {result['date']} on {result['machine']}; "
                "`.venv/bin/python scripts/experiment_governor.py --write` "
                f"(steps `{result['steps']}`); "
                "the time series (a row a second) in `docs/figures/governor-steps.csv`.",
                "",
                *table,
                "",
                "![The governor through load steps](figures/governor-steps.png)",
            ],
            path=EXPERIMENTS_DOC,
        )
        print(EXPERIMENTS_DOC)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
