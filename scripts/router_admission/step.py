"""``step``: every shedding policy through one load step on one router each.

Five routers, one after the other, differing only in ``[shedding]``: ``backpressure``
(the default) and ``drop-tail``, the fixed policies; ``response-time`` (target p90
100 ms), one class: queries through the controller's bucket, everything else admitted;
the same with ``response_time_classes = true`` (everything but queries, leaf queries and
ultrapeers' queries each a class, weights 4, 2, 1); the same with ``degrade_ttl_by = 3``
(forwarded queries lose up to 3 hops of TTL before any rate is cut). The catcher is
left at its defaults.

Against each, the paper's mix in a step: ``--low`` messages/s (100) for ``--before``
seconds (15), then ``--high`` (1000) for ``--after`` seconds (35); the sinks answer
queries with hits (and pings with pongs), so replies flow back through the router. The
steady state is the last ``--after - 10`` seconds of overload.

Shown per run: the one-hop latency of pings and queries and the round trip of hits in
the steady state, queries and hits delivered per second there, and what was shed; over
time (the profiler's samples), the router queue, the controller's p90 with its target
and its admitted query rate, and the TTL cut: ``admission-step.png`` (queue and p90),
``admission-rate.png`` (admitted rate, TTL cut), and each run's time series as
``series.csv`` in its folder of ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from scripts.benchdocs import save_figure
from scripts.fig14.runs import experiment_router, kept_profile, summary
from scripts.router_admission.common import (
    TARGET_MS,
    config_text,
    run_load,
    shedding,
)
from traffic_models.arrival_text import parse_arrivals

RUNS: tuple[tuple[str, str], ...] = (
    ("backpressure", shedding("backpressure")),
    ("drop-tail", shedding("drop-tail")),
    ("response-time", shedding("response-time")),
    ("classes", shedding("response-time", "response_time_classes = true\n")),
    (
        "classes + degradation",
        shedding("response-time", "response_time_classes = true\ndegrade_ttl_by = 3\n"),
    ),
)
COLOURS = ("tab:grey", "tab:brown", "tab:blue", "tab:green", "tab:purple")
STEP = {"low": 100.0, "high": 1000.0, "before": 15.0, "after": 35.0}
"""The load step by default: msgs/s before and after it, seconds before and after it."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--low", type=float, default=STEP["low"], help="msgs/s before the step")
    parser.add_argument("--high", type=float, default=STEP["high"], help="msgs/s after it")
    parser.add_argument(
        "--before", type=float, default=STEP["before"], help="seconds before the step"
    )
    parser.add_argument(
        "--after", type=float, default=STEP["after"], help="seconds after it (> 10)"
    )
    parser.add_argument(
        "--only", action="append", choices=[key for key, _ in RUNS], help="run only these"
    )


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.after <= 10:
        parser.error("--after must be above 10 s (the steady state is what follows 10 s)")
    if args.write and args.only:
        parser.error("--write publishes every policy side by side: drop --only")


def one_run(key: str, shedding_lines: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    name = key.replace(" + ", "-")
    steps = f"steps:{args.before:g}s@{args.low:g},{args.after:g}s@{args.high:g}"
    with experiment_router(out / name, config_text(shedding_lines)) as router:
        _, report = run_load(
            router.port,
            parse_arrivals(steps, seed=1),
            args.before + args.after,
            respond=True,
            warmup=args.before + 10,
            drain=5.0,
        )
    profile = kept_profile(router, out, name)
    series = [
        {
            "at": s["at"],
            "queue": s["queues"].get("router", 0),
            "admission_rate": s.get("admission_rate"),
            "admission_p90_ms": None
            if s.get("admission_p90") is None
            else 1000.0 * s["admission_p90"],
            "ttl_cut": s.get("ttl_cut"),
            "queries_in_per_s": s["rates"].get("query", 0.0),
            "hits_in_per_s": s["rates"].get("query_hit", 0.0),
        }
        for s in profile["samples"]
    ]
    with (out / name / "series.csv").open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(series[0]))
        writer.writeheader()
        writer.writerows(series)
    drops = profile["router"]["dropped"]
    shed = {reason: sum(by_type.values()) for reason, by_type in drops.items() if "shed" in reason}
    latency = report.latency
    steady_seconds = args.after - 10
    overloaded = [row for row in series if row["at"] >= args.before + 10]
    return {
        "key": key,
        "ping": summary(latency.get("one-hop", {}).get("ping")),
        "query": summary(latency.get("one-hop", {}).get("query")),
        "hit": summary(latency.get("round-trip", {}).get("query_hit")),
        "queries_delivered_per_s": (
            latency.get("one-hop", {}).get("query").count  # type: ignore[union-attr]
            / 3
            / steady_seconds
        )  # three sinks each get a copy
        if latency.get("one-hop", {}).get("query")
        else 0.0,
        "hits_per_s": latency["round-trip"]["query_hit"].count / steady_seconds
        if latency.get("round-trip", {}).get("query_hit")
        else 0.0,
        "shed": shed,
        "degraded": profile["router"].get("degraded_queries", 0),
        "max_ttl_cut": max((row["ttl_cut"] or 0 for row in series), default=0),
        "peak_queue": max((row["queue"] for row in series), default=0),
        "median_queue_overloaded": sorted(r["queue"] for r in overloaded)[len(overloaded) // 2]
        if overloaded
        else None,
        "series": series,
    }


def cell(entry: dict[str, float] | None) -> str:
    if entry is None:
        return "-"
    return f"{entry['mean_ms']:,.1f} / {entry['p99_ms']:,.0f}"


def table(results: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| shedding | ping mean / p99 ms | query mean / p99 ms | hit round trip mean / p99 ms "
        "| queries delivered /s | hits back /s | shed (whole run) | queries degraded "
        "| router queue, median / peak |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        shed = ", ".join(f"{k} {v:,}" for k, v in sorted(r["shed"].items())) or "0"
        lines.append(
            f"| {r['key']} | {cell(r['ping'])} | {cell(r['query'])} | {cell(r['hit'])} "
            f"| {r['queries_delivered_per_s']:.1f} | {r['hits_per_s']:.1f} | {shed} "
            f"| {r['degraded']:,} (cut up to {r['max_ttl_cut']}) "
            f"| {r['median_queue_overloaded']} / {r['peak_queue']} |"
        )
    return lines


def plot(results: list[dict[str, Any]], load: dict[str, Any], figures: Path) -> list[Path]:
    """``admission-step.png`` and ``admission-rate.png`` in ``figures``; ``load``: the
    step's ``low``, ``high`` and ``before``."""
    paths = []
    figure, (queue_axes, p90_axes) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True)
    for r, colour in zip(results, COLOURS, strict=False):
        times = [s["at"] for s in r["series"]]
        queue_axes.plot(times, [s["queue"] for s in r["series"]], color=colour, label=r["key"])
        p90 = [(s["at"], s["admission_p90_ms"]) for s in r["series"] if s["admission_p90_ms"]]
        if p90:
            p90_axes.plot(*zip(*p90, strict=True), color=colour, label=r["key"])
    for axes in (queue_axes, p90_axes):
        axes.axvline(load["before"], color="black", linestyle=":", linewidth=1)
        axes.grid(alpha=0.3)
    p90_axes.axhline(TARGET_MS, color="red", linestyle="--", linewidth=1, label="target")
    queue_axes.set_ylabel("router queue (events)")
    p90_axes.set_ylabel("controller's p90 (ms)")
    p90_axes.set_xlabel(f"time (s); the load steps from {load['low']:g} to {load['high']:g} msgs/s")
    queue_axes.legend(fontsize=8)
    p90_axes.legend(fontsize=8)
    queue_axes.set_title("One thread, 20 ms a query, a load step: the router queue and p90")
    paths.append(save_figure(figure, figures / "admission-step.png", dpi=110))

    figure, (rate_axes, cut_axes) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    for r, colour in zip(results, COLOURS, strict=False):
        rate = [(s["at"], s["admission_rate"]) for s in r["series"] if s["admission_rate"]]
        if rate:
            rate_axes.plot(*zip(*rate, strict=True), color=colour, label=r["key"])
        cut = [(s["at"], s["ttl_cut"]) for s in r["series"] if s["ttl_cut"] is not None]
        if cut and r["max_ttl_cut"]:
            cut_axes.step(*zip(*cut, strict=True), where="post", color=colour, label=r["key"])
    rate_axes.set_yscale("log")
    rate_axes.set_ylabel("queries admitted /s (bucket)")
    cut_axes.set_ylabel("TTL cut (hops)")
    cut_axes.set_xlabel("time (s)")
    for axes in (rate_axes, cut_axes):
        axes.axvline(load["before"], color="black", linestyle=":", linewidth=1)
        axes.grid(alpha=0.3)
        if axes.get_legend_handles_labels()[0]:  # no TTL was cut: nothing to name
            axes.legend(fontsize=8)
    rate_axes.set_title("The controller's admitted rate and the degradation it chose")
    paths.append(save_figure(figure, figures / "admission-rate.png", dpi=110))
    return paths


def experiment_step(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Every policy of :data:`RUNS` (or those of ``--only``) through the step, in turn."""
    results = []
    for key, shedding_lines in RUNS:
        if args.only and key not in args.only:
            continue
        result = one_run(key, shedding_lines, args, out)
        print(
            f"{key}: query {cell(result['query'])} ms, "
            f"{result['queries_delivered_per_s']:.1f} queries/s, hits "
            f"{cell(result['hit'])} ms, shed {result['shed']}",
            flush=True,
        )
        results.append(result)
    return {**{name: getattr(args, name) for name in STEP}, "runs": results}


def earlier_step(out: Path, args: argparse.Namespace) -> dict[str, Any] | None:
    """The result of a run written before the step's result had its own file (its runs
    alone, in ``results.json``; the step as this invocation's flags say)."""
    path = out / "results.json"
    if not path.exists():
        return None
    return {**{name: getattr(args, name) for name in STEP}, "runs": json.loads(path.read_text())}


def report_step(result: dict[str, Any], folder: Path) -> tuple[list[str], list[Path]]:
    """The table, with the two figures drawn into ``folder`` and linked below it."""
    runs = result["runs"]
    paths = plot(runs, result, folder)
    lines = [
        "One router per row, one after the other; the paper's mix at "
        f"{result['low']:g} msgs/s for {result['before']:g} s, then {result['high']:g} "
        f"msgs/s for {result['after']:g} s; `router.threads = 1`, "
        "`router.query_delay_ms = 20`; sinks answer queries with hits. Latencies from "
        f"each message's scheduled time, over the last {result['after'] - 10:g} s of overload.",
        "",
        *table(runs),
        "",
        "![Router queue and the controller's p90 through the load step]"
        "(figures/admission-step.png)",
        "",
        "![The admitted query rate and the TTL cut](figures/admission-rate.png)",
    ]
    return lines, paths


def rerun_flags(args: argparse.Namespace) -> str:
    """The flags of this run that differ from the defaults, for the rerun command."""
    return "".join(
        f" --{name} {getattr(args, name):g}"
        for name, default in STEP.items()
        if getattr(args, name) != default
    )
