"""Class-based admission against backpressure and drop-tail, and degradation's reach.

``experiment_admission.py`` puts every admission policy through one load step on one
router; this script adds what that cannot show: replies against the fixed policies at a
lasting overload, the reach of degraded queries along a chain of routers, and the
single-class controller's documented figure as a check.

Run from the repository root, in the project's virtual environment (unattended; each
experiment is its own invocation of 1 to 3 minutes, so each fits one turn of the shared
lock):

    python scripts/experiment_admission_classes.py classes --write   # hits kept flowing
    python scripts/experiment_admission_classes.py degrade --write   # TTL and reach
    python scripts/experiment_admission_classes.py floor --write     # the documented figure
    python scripts/experiment_admission_classes.py classes --quick   # a smoke test

Every router is a child process on a free loopback port (the helpers of
``experiment_fig14.py``), with ``router.threads = 1``, ``router.query_delay_ms = 20``
(about 50 queries/s of capacity), the governor off and the profiler sampling every
0.1 s; the load client runs in this process with one injector and three sinks and the
paper's mix (85 % pings, 15 % queries, TTL 7). What each experiment compares:

* ``classes``: 1000 msgs/s throughout, the sinks answer (pongs to pings, hits to a
  share of the queries), so replies cross the router on their way back to the
  injector. Policies ``response-time`` with ``response_time_classes`` (weights at their
  defaults), ``backpressure`` and ``drop-tail``. Per second: pongs and hits back at the
  injector and their round-trip p90, queries delivered, and the rate of each class.
* ``degrade``: a chain of three routers, the load on the first (overloaded: 20 ms a
  query), the second and third with no delay. The first runs ``response-time`` with
  classes, with ``degrade_ttl_by = 5`` or without degradation; the load steps from
  100 to 1000 msgs/s a third of the way in (at most 20 s).
  Per second: the TTL cut of the first, and the queries the second and third receive
  (reach: a query that leaves the first with TTL 1 stops at the second).

* ``floor``: the single-class controller's documented figure: 200 queries/s (queries
  only) for 30 s, the last 10 s timed; exit status 1 when fewer than 15 queries/s were
  delivered or their p90 was over 300 ms.

The figures (``--write``): docs/figures/admission-classes.png and
admission-degrade.png; the per-second series as CSV beside them (admission-classes.csv,
admission-degrade.csv), and a table per experiment in docs/experiments.md. Raw
profiler exports and router logs stay in ``--out`` (a fresh temporary directory by
default).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import trio
from benchdocs import machine, replace_section, save_figure
from experiment_fig14 import ROOT, ExperimentError, launch_router, stop_router
from router_bench.processes import free_port

from gnutella_router.traffic.load import LoadRun, LoadSettings
from protocol.constants import MessageType
from protocol.framing import Frame
from traffic_models.arrivals import ArrivalProcess, ConstantRate, Schedule
from traffic_models.generator import TrafficGenerator
from traffic_models.latency import read_stamp
from traffic_models.mix import PAPER_MIX, MessageMix, load_mix

DOC = ROOT / "docs" / "experiments.md"
FIGURES = ROOT / "docs" / "figures"
TARGET_MS = 100.0
QUERY, PING, PONG, HIT = (
    int(MessageType.QUERY),
    int(MessageType.PING),
    int(MessageType.PONG),
    int(MessageType.QUERY_HIT),
)
NAMES = {QUERY: "query", PING: "ping", PONG: "pong", HIT: "hit"}


class SeriesLoad(LoadRun):
    """The load client, also bucketing each arrival by second: counts and latencies,
    at the sinks (queries, pings) and back at the injector (pongs, hits)."""

    def __init__(self, settings: LoadSettings, generator: TrafficGenerator) -> None:
        super().__init__(settings, generator)
        self.counts: dict[tuple[str, int], int] = defaultdict(int)
        self.latencies: dict[tuple[str, int], list[float]] = defaultdict(list)

    def _account(self, frames: list[Frame], arrived: int, sink: bool, run: int, *rest: Any) -> None:
        super()._account(frames, arrived, sink, run, *rest)
        started = getattr(self, "started_ns", None)
        if started is None:
            return
        second = max(0, (arrived - started) // 1_000_000_000)
        for frame in frames:
            kind = frame.payload_type
            if kind not in NAMES or (sink and kind not in (QUERY, PING)):
                continue
            due = read_stamp(frame.guid, run, self.marker)
            if not due:
                continue
            key = (NAMES[kind], int(second))
            self.counts[key] += 1
            self.latencies[key].append((arrived - due) / 1e6)


def p90(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, -(-len(ordered) * 9 // 10) - 1)]


def config_text(policy: str, *, delay: bool = True, extra: str = "", seeds: str = "") -> str:
    text = "[router]\nthreads = 1\n"
    if delay:
        text += "query_delay_ms = 20\n"
    text += "\n[governor]\nenabled = false\n\n[profiler]\nenabled = true\ninterval = 0.1\n\n"
    text += f'[shedding]\npolicy = "{policy}"\n'
    if policy == "response-time":
        text += f"response_time_target_ms = {TARGET_MS}\n"
    text += extra
    text += f"\n[catcher]\nmin_connections = {1 if seeds else 0}\nseeds = [{seeds}]\n"
    return text


def start(workdir: Path, text: str) -> tuple[Any, int, Path]:
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    (workdir / "router.toml").write_text(text)
    port = free_port()
    process, state = launch_router(workdir, workdir / "router.toml", port)
    return process, port, state


def finish(process: Any, state: Path, out: Path, name: str) -> dict[str, Any]:
    status = stop_router(process)
    path = state / "profile.json"
    if not path.exists():
        raise ExperimentError(f"{name}: no profiler export (router exit status {status})")
    shutil.copy(path, out / f"profile-{name}.json")
    profile: dict[str, Any] = json.loads(path.read_text())
    return profile


def run_load(
    port: int,
    arrivals: ArrivalProcess,
    duration: float,
    respond: bool,
    mix: MessageMix = PAPER_MIX,
) -> SeriesLoad:
    settings = LoadSettings(
        target=("127.0.0.1", port),
        peers=4,
        injectors=1,
        duration=duration,
        respond=respond,
        drain=2.0,
    )
    load = SeriesLoad(settings, TrafficGenerator(mix=mix, arrivals=arrivals, seed=1))
    trio.run(load.run)
    return load


def per_second(load: SeriesLoad, kind: str, seconds: int) -> tuple[list[int], list[float | None]]:
    counts = [load.counts.get((kind, s), 0) for s in range(seconds)]
    tails = [p90(load.latencies.get((kind, s), [])) for s in range(seconds)]
    return counts, tails


def controller_series(profile: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in profile["samples"] if s.get("admission_rate") is not None]


def dropped(profile: dict[str, Any]) -> dict[str, dict[str, int]]:
    return {k: v for k, v in profile["router"]["dropped"].items() if k != "connection-closing"}


# --- the experiments ---------------------------------------------------------------


def timing(args: argparse.Namespace, full: float, quick: float) -> tuple[float, float]:
    """The run's duration and when the load steps (a third of the way in, at most 20 s)."""
    duration = args.duration or (quick if args.quick else full)
    return duration, min(20.0, duration / 3)


def step_arrivals(before: float, after: float, at: float) -> ArrivalProcess:
    return Schedule([(at, before), (0, after)])


def experiment_classes(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    duration = args.duration or (20.0 if args.quick else 40.0)
    runs: dict[str, Any] = {}
    policies = {
        "response-time, classes": ("response-time", "response_time_classes = true\n"),
        "backpressure": ("backpressure", ""),
        "drop-tail": ("drop-tail", ""),
    }
    for label, (policy, extra) in policies.items():
        name = "classes-" + policy
        process, port, state = start(out / name, config_text(policy, extra=extra))
        try:
            load = run_load(port, ConstantRate(1000), duration, respond=True)
        finally:
            profile = finish(process, state, out, name)
        seconds = int(duration)
        series = {kind: per_second(load, kind, seconds) for kind in ("query", "pong", "hit")}
        runs[label] = {
            **{kind: counts for kind, (counts, _) in series.items()},
            **{f"{kind}_p90": tails for kind, (_, tails) in series.items()},
            "controller": controller_series(profile),
            "dropped": dropped(profile),
        }
        print(
            f"classes {label}: {sum(series['query'][0])} queries, "
            f"{sum(series['pong'][0])} pongs, {sum(series['hit'][0])} hits",
            flush=True,
        )
    return {"duration": duration, "runs": runs}


def experiment_degrade(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    duration, at = timing(args, 60.0, 30.0)
    runs: dict[str, Any] = {}
    for cut in (5, 0):
        label = f"degrade_ttl_by = {cut}"
        chain: list[tuple[Any, int, Path, str]] = []
        try:
            seeds = ""
            for hop in (3, 2):
                name = f"degrade-{cut}-r{hop}"
                process, port, state = start(
                    out / name, config_text("backpressure", delay=False, seeds=seeds)
                )
                chain.append((process, port, state, name))
                seeds = f'"127.0.0.1:{port}"'
            extra = "response_time_classes = true\n" + (f"degrade_ttl_by = {cut}\n" if cut else "")
            name = f"degrade-{cut}-r1"
            process, port, state = start(
                out / name, config_text("response-time", extra=extra, seeds=seeds)
            )
            chain.append((process, port, state, name))
            time.sleep(3.0)  # the chain links up (each router dials its seed at once)
            run_load(port, step_arrivals(100, 1000, at), duration, respond=False)
        finally:
            profiles = {n: finish(p, s, out, n) for p, _, s, n in reversed(chain)}
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


def experiment_floor(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The documented figure of the single-class controller: 200 queries/s offered to
    one thread at 20 ms a query, the last 10 s timed."""
    duration = args.duration or 30.0
    mix = load_mix(ROOT / "traffic_models" / "mixes" / "queries-only.toml")
    process, port, state = start(out / "floor", config_text("response-time"))
    try:
        load = run_load(port, ConstantRate(200), duration, respond=False, mix=mix)
    finally:
        profile = finish(process, state, out, "floor")
    last = range(max(0, int(duration) - 10), int(duration))
    latencies = [v for s in last for v in load.latencies.get(("query", s), [])]
    sinks = 3  # run_load's four peers, one injecting: every query is a copy at each sink
    delivered = sum(load.counts.get(("query", s), 0) for s in last) / sinks
    result = {
        "duration": duration,
        "delivered_per_second": delivered / len(last),
        "p90_ms": p90(latencies),
        "shed": profile["router"]["dropped"].get("shed-admission", {}).get("query", 0),
    }
    print(f"floor: {result}", flush=True)
    return result


# --- figures, CSV and the written section ------------------------------------------


def write_csv(path: Path, header: list[str], rows: list[list[Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows([["" if v is None else v for v in row] for row in rows])
    return path


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} ms"


def after(values: list[Any], start: int) -> list[Any]:
    return [v for v in values[start:] if v is not None]


def median(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def report_classes(result: dict[str, Any], folder: Path) -> tuple[list[str], list[Path]]:
    runs, seconds = result["runs"], int(result["duration"])
    settle = min(10, seconds - 1)
    figure, axes = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    for label, run in runs.items():
        axes[0].plot(range(seconds), run["hit"], label=label)
        axes[1].plot(range(seconds), run["hit_p90"], label=label)
        axes[2].plot(range(seconds), run["query"], label=label)
    axes[0].set_ylabel("hits back / s")
    axes[1].set_ylabel("hit round-trip p90 (ms)")
    axes[1].set_yscale("log")
    axes[2].set_ylabel("query copies at 3 sinks / s")
    axes[2].set_xlabel("seconds (1000 msgs/s, sinks answering)")
    for ax in axes:
        ax.legend(fontsize=8)
    figure.suptitle("class-based admission: replies keep flowing while queries are shed")
    paths = [save_figure(figure, folder / "admission-classes.png", dpi=110)]
    header, rows = ["second"], [[s] for s in range(seconds)]
    for label, run in runs.items():
        for kind in ("query", "pong", "hit"):
            header += [f"{label} {kind}", f"{label} {kind} p90 ms"]
        for s in range(seconds):
            for kind in ("query", "pong", "hit"):
                rows[s] += [run[kind][s], run[f"{kind}_p90"][s]]
    paths.append(write_csv(folder / "admission-classes.csv", header, rows))
    lines = [
        f"Medians of the seconds from {settle} s to the end:",
        "",
        "| policy | hits back/s | hit round trip p90 | pongs back/s | pong round trip p90 "
        "| query copies delivered/s (3 sinks) | shed (reason, type) |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for label, run in runs.items():
        shed = ", ".join(
            f"{reason} {kind} {count:,}"
            for reason, by_type in run["dropped"].items()
            for kind, count in by_type.items()
            if reason.startswith("shed")
        )
        lines.append(
            f"| {label} | {median(after(run['hit'], settle)) or 0:.0f} "
            f"| {ms(median(after(run['hit_p90'], settle)))} "
            f"| {median(after(run['pong'], settle)) or 0:.0f} "
            f"| {ms(median(after(run['pong_p90'], settle)))} "
            f"| {median(after(run['query'], settle)) or 0:.0f} | {shed or '-'} |"
        )
    return lines, paths


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


def report_floor(result: dict[str, Any], folder: Path) -> tuple[list[str], list[Path]]:
    rate, tail = result["delivered_per_second"], result["p90_ms"]
    result["held"] = held = rate >= 15 and tail is not None and tail <= 300
    verdict = "held" if held else "MISSED"
    lines = [
        "| delivered in the last 10 s | their p90 | shed at the door "
        "| floor (>= 15/s, p90 <= 300 ms) |",
        "|---:|---:|---:|---|",
        f"| {rate:.1f}/s | {ms(tail)} | {result['shed']:,} queries | {verdict} |",
    ]
    return lines, []


EXPERIMENTS = {
    "floor": (experiment_floor, report_floor),
    "classes": (experiment_classes, report_classes),
    "degrade": (experiment_degrade, report_degrade),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="See the module docstring for what is run and measured.",
    )
    parser.add_argument("experiment", choices=sorted(EXPERIMENTS))
    parser.add_argument("--write", action="store_true", help="figures, CSV and docs")
    parser.add_argument("--quick", action="store_true", help="shorter runs (a smoke test)")
    parser.add_argument("--duration", type=float, help="seconds a run (overrides --quick)")
    parser.add_argument("--out", type=Path, help="raw results (default: a temporary folder)")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="admission-"))
    out.mkdir(parents=True, exist_ok=True)
    run, report = EXPERIMENTS[args.experiment]
    load_before = os.getloadavg()[0]
    try:
        result = run(args, out)
    except ExperimentError as exc:
        print(f"experiment_admission_classes: {exc}", file=sys.stderr)
        return 1
    load_after = os.getloadavg()[0]
    (out / f"result-{args.experiment}.json").write_text(json.dumps(result, indent=2))
    folder = FIGURES if args.write else out
    lines, paths = report(result, folder)
    command = f"python scripts/experiment_admission_classes.py {args.experiment}" + (
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
    print("raw results in", out)
    for path in paths:
        print("wrote", path)
    if args.write:
        names = ", ".join(f"`{p.relative_to(ROOT)}`" for p in paths)
        files = ["", f"Files: {names}."] if paths else []
        replace_section(f"admission-{args.experiment}", [*header, *lines, *files], DOC)
    return 1 if result.get("held") is False else 0


if __name__ == "__main__":
    sys.exit(main())
