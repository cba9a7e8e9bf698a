"""The calibrated trace model's traffic statistics beside what the papers report.

Run from the repository root, in the project's virtual environment (about a minute, one
core; no router is started):

    .venv/bin/python scripts/trace_statistics.py            # print the comparison
    .venv/bin/python scripts/trace_statistics.py --write    # also docs/experiments.md, figure, CSV

What it does. It draws a 37-hour trace from :class:`traffic_models.trace_model.TraceArrivals`
(seed 1) and the ``trace`` mix, counting every arrival by second and by type, and a
Poisson source of the same mean for contrast; it generates the first ten minutes'
messages in full (:class:`traffic_models.generator.TrafficGenerator`) for their sizes.
Then it prints the statistics the papers report of their own 37-hour trace (SOSP'01 and
the quals proposal, section 5.2.1) next to the model's, and draws
docs/figures/trace-model.png: (a) packets per ten-minute interval by type over the 37
hours, in the manner of the proposal's Fig. 13; (b) the rate of the first hour at three
time scales; (c) the index of dispersion against the counting interval, model and
Poisson; (d) the distribution of payload sizes. The comparison goes to
docs/figures/trace-model.csv, the ten-minute series to
docs/figures/trace-model-intervals.csv.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import contextlib
import csv
import datetime
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from protocol.constants import HEADER_SIZE, MessageType
from scripts.benchdocs import EXPERIMENTS_DOC, FIGURES, machine, replace_section, save_figure
from traffic_models.arrivals import Poisson
from traffic_models.generator import TrafficGenerator
from traffic_models.mix import type_label
from traffic_models.trace_model import (
    PAPER_TRACE,
    TRACE_MIX,
    TRACE_SCALES,
    TraceArrivals,
    dispersion,
)

INTERVAL = 600
"""Seconds per interval of the Fig. 13-like series (ten minutes)."""
WIDTHS = (1, 10, 60, 600, 3600)
"""Counting intervals, in seconds, for the dispersion curve."""
SIZE_SECONDS = 600.0
PLURALS = {
    MessageType.PONG: "pongs",
    MessageType.PING: "pings",
    MessageType.QUERY: "queries",
    MessageType.QUERY_HIT: "query hits",
    MessageType.PUSH: "pushes",
}
TYPES = (
    MessageType.PONG,
    MessageType.PING,
    MessageType.QUERY,
    MessageType.QUERY_HIT,
    MessageType.PUSH,
)


def aggregate(counts: list[int], width: int) -> list[int]:
    return [sum(counts[i : i + width]) for i in range(0, len(counts) - width + 1, width)]


def draw_trace(seconds: int, seed: int) -> tuple[list[int], dict[int, list[int]]]:
    """Arrivals per second, and per type per interval, over ``seconds``."""
    per_second = [0] * seconds
    intervals = -(-seconds // INTERVAL)
    by_type = {int(code): [0] * intervals for code in TYPES}
    rng = random.Random(seed)
    # The mix's own draw, inlined: one uniform and a bisection per message.
    codes = [int(code) for code in TRACE_MIX.types]
    cumulative: list[float] = []
    running = 0.0
    for code in codes:
        running += TRACE_MIX.share(code)
        cumulative.append(running)
    uniform = rng.random
    for at in TraceArrivals(seed=seed).times(seconds):
        second = int(at)
        per_second[second] += 1
        index = min(bisect.bisect_right(cumulative, uniform()), len(codes) - 1)
        by_type[codes[index]][second // INTERVAL] += 1
    return per_second, by_type


def poisson_counts(seconds: int, seed: int) -> list[int]:
    counts = [0] * seconds
    for at in Poisson(PAPER_TRACE.mean_rate, seed=seed).times(seconds):
        counts[int(at)] += 1
    return counts


def payload_sizes(seed: int) -> dict[int, list[int]]:
    generator = TrafficGenerator(mix=TRACE_MIX, arrivals=TraceArrivals(seed=seed), seed=seed)
    sizes: dict[int, list[int]] = collections.defaultdict(list)
    for message in generator.schedule(SIZE_SECONDS):
        sizes[message.message_type].append(len(message.data) - HEADER_SIZE)
    return sizes


def measure(seed: int) -> dict[str, Any]:
    seconds = int(PAPER_TRACE.hours * 3600)
    started = time.monotonic()
    per_second, by_type = draw_trace(seconds, seed)
    poisson = poisson_counts(seconds, seed)
    sizes = payload_sizes(seed)
    total = sum(per_second)
    totals = [
        sum(by_type[int(code)][i] for code in TYPES) for i in range(len(by_type[int(TYPES[0])]))
    ]
    full = totals[: seconds // INTERVAL]
    all_sizes = [s for values in sizes.values() for s in values]
    hours = aggregate(per_second, 3600)
    return {
        "seconds": seconds,
        "per_second": per_second,
        "by_type": by_type,
        "interval_totals": totals,
        "packets": total,
        "mean_rate": total / seconds,
        "shares": {type_label(code): sum(by_type[int(code)]) / total for code in TYPES},
        "payload_mean": statistics.fmean(all_sizes),
        "wire_mean": statistics.fmean(all_sizes) + HEADER_SIZE,
        "payload_median": statistics.median(all_sizes),
        "sizes": sizes,
        "peak_second": max(per_second),
        "cv_second": statistics.pstdev(per_second) / statistics.fmean(per_second),
        "peak_interval": max(full),
        "cv_interval": statistics.pstdev(full) / statistics.fmean(full),
        "hour_range": (min(hours) / 3600, max(hours) / 3600),
        "dispersion": {w: dispersion(aggregate(per_second, w)) for w in WIDTHS},
        "poisson_dispersion": {w: dispersion(aggregate(poisson, w)) for w in WIDTHS},
        "elapsed": time.monotonic() - started,
    }


def comparison(stats: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(statistic, what the papers report, the model's figure)."""
    shares = stats["shares"]
    d = stats["dispersion"]
    p = stats["poisson_dispersion"]
    peak_second = stats["peak_second"] / stats["mean_rate"]
    peak_interval = stats["peak_interval"] / (stats["mean_rate"] * INTERVAL)
    rows = [
        (
            "mean rate (packets/s)",
            f"{PAPER_TRACE.mean_rate:g} (SOSP'01 5.2.1)",
            f"{stats['mean_rate']:.1f}",
        ),
        (
            f"packets in {PAPER_TRACE.hours:g} hours",
            f"{PAPER_TRACE.packets / 1e6:g} million (SOSP'01 5.2.1; 186/s over 37 h)",
            f"{stats['packets'] / 1e6:.1f} million",
        ),
        ("pong share", "more than 50 % (proposal 5.2.1)", f"{shares['pong']:.1%}"),
        (
            "ping, query, query hit, push shares",
            "not reported (Fig. 13's legend order: pongs, pings, queries, query hits, pushes)",
            ", ".join(f"{shares[k]:.1%}" for k in ("ping", "query", "query_hit", "push")),
        ),
        (
            "mean packet size (bytes)",
            f"about {PAPER_TRACE.mean_packet_bytes:g} (both papers)",
            f"{stats['payload_mean']:.1f} payload ({stats['wire_mean']:.1f} with the header; "
            f"median payload {stats['payload_median']:g})",
        ),
        (
            "burstiness",
            '"extremely bursty" (proposal 5.2.1)',
            f"busiest second {stats['peak_second']:,} packets "
            f"({peak_second:.1f} x mean); per-second CV {stats['cv_second']:.2f}; "
            "index of dispersion "
            f"{d[1]:.0f} at 1 s, {d[60]:,.0f} at 1 min, {d[600]:,.0f} at 10 min (Poisson: "
            f"{p[1]:.2f}, {p[60]:.2f}, {p[600]:.2f})",
        ),
        (
            "ten-minute intervals",
            f"Fig. 13's axis tops at {PAPER_TRACE.interval_axis_top:,} packets",
            f"busiest {stats['peak_interval']:,} "
            f"({peak_interval:.2f} x mean), CV {stats['cv_interval']:.2f}",
        ),
        (
            "daily pattern",
            '"does not appear to follow clear diurnal patterns" (proposal 5.2.1)',
            f"none by construction; hourly means {stats['hour_range'][0]:.0f} to "
            f"{stats['hour_range'][1]:.0f} packets/s in no daily order",
        ),
        (
            "connections",
            f"{PAPER_TRACE.connections:,} received, "
            f"{PAPER_TRACE.simultaneous_connections:g} at a time on average",
            "not modelled (the load client's peers are set per run)",
        ),
    ]
    return rows


def plot(stats: dict[str, Any], path: Path) -> Path:
    figure, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    (fig13, scales), (variance, sizes) = axes
    intervals = range(len(stats["interval_totals"]))
    for code in TYPES:
        fig13.plot(intervals, stats["by_type"][int(code)], label=PLURALS[code])
    fig13.plot(intervals, stats["interval_totals"], color="black", linewidth=0.8, label="total")
    fig13.axhline(
        PAPER_TRACE.interval_axis_top, color="grey", linestyle=":", label="Fig. 13 axis top"
    )
    fig13.set_xlabel("time (10-minute intervals)")
    fig13.set_ylabel("packets per interval")
    fig13.set_title(f"(a) {PAPER_TRACE.hours:g} hours by type, as the proposal's Fig. 13")
    fig13.set_ylim(0, PAPER_TRACE.interval_axis_top * 1.25)
    fig13.legend(fontsize="small", ncol=4, loc="upper center")
    fig13.grid(alpha=0.3)
    first_hour = stats["per_second"][:3600]
    for width, color in ((1, "tab:gray"), (10, "tab:blue"), (60, "tab:red")):
        rates = [c / width for c in aggregate(first_hour, width)]
        scales.step(
            [i * width / 60 for i in range(len(rates))],
            rates,
            where="post",
            color=color,
            linewidth=0.6 if width == 1 else 1.2,
            label=f"per {width} s",
        )
    scales.axhline(PAPER_TRACE.mean_rate, color="black", linestyle="--", label="179/s")
    scales.set_xlabel("time (minutes)")
    scales.set_ylabel("packets/s")
    scales.set_title("(b) the first hour at three time scales")
    scales.legend(fontsize="small")
    scales.grid(alpha=0.3)
    for key, label, marker in (
        ("dispersion", "model", "o"),
        ("poisson_dispersion", "Poisson, 179/s", "x"),
    ):
        variance.plot(WIDTHS, [stats[key][w] for w in WIDTHS], marker=marker, label=label)
    variance.set_xscale("log")
    variance.set_yscale("log")
    variance.set_xticks(WIDTHS, ["1 s", "10 s", "1 min", "10 min", "1 h"])
    variance.set_xlabel("counting interval")
    variance.set_ylabel("index of dispersion (variance / mean)")
    variance.set_title("(c) burstiness against time scale")
    variance.legend(fontsize="small")
    variance.grid(alpha=0.3, which="both")
    labels = [type_label(code) for code in TYPES]
    data = [stats["sizes"].get(int(code), [0]) for code in TYPES]
    sizes.boxplot(data, tick_labels=labels, showfliers=False)
    sizes.axhline(
        PAPER_TRACE.mean_packet_bytes, color="tab:red", linestyle="--", label="papers' mean, 32"
    )
    sizes.axhline(
        stats["payload_mean"],
        color="black",
        linestyle=":",
        label=f"model's mean, {stats['payload_mean']:.1f}",
    )
    sizes.set_yscale("symlog", linthresh=10)
    sizes.set_ylim(0, None)
    sizes.set_ylabel("payload bytes")
    sizes.set_title("(d) payload sizes by type (first 10 minutes)")
    sizes.legend(fontsize="small")
    sizes.grid(alpha=0.3)
    figure.suptitle("The calibrated trace model (seed 1) against the papers' 37-hour trace")
    return save_figure(figure, path)


def write_csvs(
    stats: dict[str, Any], rows: list[tuple[str, str, str]], figures: Path
) -> list[Path]:
    figures.mkdir(parents=True, exist_ok=True)
    summary = figures / "trace-model.csv"
    with summary.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["statistic", "papers", "model"])
        writer.writerows(rows)
        for width in WIDTHS:
            writer.writerow(
                [
                    f"index of dispersion, {width} s counts",
                    "",
                    f"{stats['dispersion'][width]:.2f} "
                    f"(Poisson {stats['poisson_dispersion'][width]:.2f})",
                ]
            )
    series = figures / "trace-model-intervals.csv"
    with series.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["interval", "start_s", *(type_label(c) for c in TYPES), "total"])
        for index, total in enumerate(stats["interval_totals"]):
            writer.writerow(
                [
                    index,
                    index * INTERVAL,
                    *(stats["by_type"][int(c)][index] for c in TYPES),
                    total,
                ]
            )
    return [summary, series]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random-seed", "--seed", dest="seed", type=int, default=1)
    parser.add_argument("--write", action="store_true", help="update docs/experiments.md")
    parser.add_argument("--figures", type=Path, help="where the PNG and CSVs go")
    args = parser.parse_args(argv)
    stats = measure(args.seed)
    rows = comparison(stats)
    table = [
        "| statistic | the papers | the model |",
        "|---|---|---|",
        *(f"| {name} | {paper} | {model} |" for name, paper, model in rows),
    ]
    print("\n".join(table))
    figures: Path = args.figures or (FIGURES if args.write else Path("."))
    print(plot(stats, figures / "trace-model.png"))
    for path in write_csvs(stats, rows, figures):
        print(path)
    if args.write:
        scales = ", ".join(f"{w:g} s: {s:g}" for w, s in TRACE_SCALES)
        replace_section(
            "trace-model",
            [
                f"Computed {datetime.date.today().isoformat()} on {machine()} in "
                f"{stats['elapsed']:.0f} s; `.venv/bin/python scripts/trace_statistics.py --write` "
                f"(seed {args.seed}; cascade spreads {scales}). The comparison is also in "
                "[figures/trace-model.csv](figures/trace-model.csv), the ten-minute series "
                "in [figures/trace-model-intervals.csv](figures/trace-model-intervals.csv).",
                "",
                *table,
            ],
            path=EXPERIMENTS_DOC,
        )
        print(EXPERIMENTS_DOC)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
