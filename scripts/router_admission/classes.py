"""``classes`` and ``floor``: replies against the fixed policies under a lasting
overload, and the single-class controller's documented figure as a check.

``classes``: 1000 msgs/s of the paper's mix throughout, the sinks answering (pongs to
pings, hits to a share of the queries), so replies cross the overloaded router on their
way back to the injector. Policies ``response-time`` with ``response_time_classes``
(weights at their defaults), ``backpressure`` and ``drop-tail``. Per second: pongs and
hits back at the injector and their round-trip p90, and query copies delivered at the
sinks; ``admission-classes.png`` and ``admission-classes.csv``.

``floor``: 200 queries/s (queries only) for 30 s to one router with ``response-time``,
the last 10 s timed; held when at least 15 queries/s get through with a p90 of at most
300 ms (the script then exits 0, else 1).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import matplotlib

from scripts import ROOT

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from scripts.benchdocs import save_figure
from scripts.fig14.runs import experiment_router, kept_profile
from scripts.router_admission.common import (
    SeriesLoad,
    config_text,
    controller_series,
    median,
    ms,
    p90,
    run_load,
    shedding,
    write_csv,
)
from traffic_models.arrivals import ConstantRate
from traffic_models.mix import load_mix

POLICIES = {
    "response-time, classes": ("response-time", "response_time_classes = true\n"),
    "backpressure": ("backpressure", ""),
    "drop-tail": ("drop-tail", ""),
}
"""Label in the table: (policy, more ``[shedding]`` lines)."""


def per_second(load: SeriesLoad, kind: str, seconds: int) -> tuple[list[int], list[float | None]]:
    counts = [load.counts.get((kind, s), 0) for s in range(seconds)]
    tails = [p90(load.latencies.get((kind, s), [])) for s in range(seconds)]
    return counts, tails


def dropped(profile: dict[str, Any]) -> dict[str, dict[str, int]]:
    return {k: v for k, v in profile["router"]["dropped"].items() if k != "connection-closing"}


def experiment_classes(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    duration = args.duration or (20.0 if args.quick else 40.0)
    runs: dict[str, Any] = {}
    for label, (policy, extra) in POLICIES.items():
        name = "classes-" + policy
        config = config_text(shedding(policy, extra), seeds="")
        with experiment_router(out / name, config) as router:
            load, _ = run_load(router.port, ConstantRate(1000), duration, respond=True)
        profile = kept_profile(router, out, name)
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


def experiment_floor(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The documented figure of the single-class controller: 200 queries/s offered to
    one thread at 20 ms a query, the last 10 s timed."""
    duration = args.duration or 30.0
    mix = load_mix(ROOT / "traffic_models" / "mixes" / "queries-only.toml")
    config = config_text(shedding("response-time"), seeds="")
    with experiment_router(out / "floor", config) as router:
        load, _ = run_load(router.port, ConstantRate(200), duration, respond=False, mix=mix)
    profile = kept_profile(router, out, "floor")
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


def after(values: list[Any], start: int) -> list[Any]:
    return [v for v in values[start:] if v is not None]


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
