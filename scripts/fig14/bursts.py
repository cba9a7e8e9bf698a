"""Fig. 14 under the papers' bursty load, beside the constant-rate sweep.

The SOSP'01 paper gives Fig. 14's load only as a rate, "an offered load increasing from
100 to 1000 packets/sec" (section 5.2.3). The quals proposal describes the same
experiment's load client (section 5.2.2): it "issues bursts of n packets with an
inter-burst delay of d seconds", and its Fig. 15 uses "a burst size of n = 10 packets
and an inter-burst delay d ranging from 100 ms to 10 ms", the x axis marked 100, 50, 25
and 10 ms. Ten packets every 100, 50, 25 and 10 ms are exactly the SOSP paper's 100,
200, 400 and 1000 packets/s, so :func:`arrival_process` maps each of the sweep's rates
to ``Bursts(10, 10 / rate)``: the same mean, all ten packets of a burst due at the same
instant.

This module only builds the arrival process and reports: the runs themselves are
:func:`scripts.fig14.runs.one_run` with ``arrivals="bursts"``. It takes the result
dictionaries that function writes and makes the side-by-side table, the figure
(fig14-bursts-latency.png: mean latency against offered load, constant and bursty, one
panel per governor setting) and a CSV of every run (docs/figures/fig14-arrivals.csv).
"""

from __future__ import annotations

import csv
import datetime
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt

from scripts.benchdocs import save_figure
from traffic_models.arrivals import ArrivalProcess, Bursts, ConstantRate

ARRIVALS = ("constant", "bursts")
BURST_SIZE = 10
"""The proposal's n."""


def arrival_process(kind: str, rate: int) -> ArrivalProcess:
    """The sweep's arrivals at ``rate`` msgs/s: evenly spaced, or the proposal's bursts
    of ten every ``10 / rate`` seconds (100 ms at 100/s, 10 ms at 1000/s)."""
    if kind == "constant":
        return ConstantRate(rate)
    if kind == "bursts":
        return Bursts(BURST_SIZE, BURST_SIZE / rate)
    raise ValueError(f"unknown arrivals {kind!r}: use {' or '.join(ARRIVALS)}")


def arrivals_of(result: dict[str, Any]) -> str:
    """A result's arrivals; results written before the choice existed were constant."""
    return str(result.get("arrivals", "constant"))


def describe(kind: str, rate: int) -> str:
    if kind == "bursts":
        return f"{BURST_SIZE} every {1000 * BURST_SIZE / rate:g} ms"
    return f"{rate}/s evenly spaced"


def _mean(entry: dict[str, float] | None) -> str:
    return "-" if entry is None else f"{entry['mean_ms']:,.1f} / {entry['p99_ms']:,.0f}"


def _cell(run: dict[str, Any] | None, kind: str) -> str:
    return "-" if run is None else _mean(run["steady"][kind])


def _pair(even: dict[str, Any] | None, bursty: dict[str, Any] | None, key: str) -> str:
    return " / ".join("-" if r is None else f"{r[key]:,}" for r in (even, bursty))


def side_by_side(results: list[dict[str, Any]]) -> list[str]:
    """One row per governor setting and load: constant and bursty runs next to each
    other, with the bursty / constant ratio of the steady-state mean latencies."""
    lines = [
        "| governor | load (msgs/s) | bursts | ping mean / p99 ms, constant "
        "| ping mean / p99 ms, bursts | query mean / p99 ms, constant "
        "| query mean / p99 ms, bursts | query mean, bursts / constant "
        "| peak queue, constant / bursts | threads added, constant / bursts "
        "| late sends, constant / bursts |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    by_key = {(r["governor"], r["rate"], arrivals_of(r)): r for r in results}
    for governor, rate in sorted({(r["governor"], r["rate"]) for r in results}):
        even = by_key.get((governor, rate, "constant"))
        bursty = by_key.get((governor, rate, "bursts"))

        ratio = "-"
        if even and bursty and even["steady"]["query"] and bursty["steady"]["query"]:
            ratio = (
                f"{bursty['steady']['query']['mean_ms'] / even['steady']['query']['mean_ms']:.2f}"
            )
        lines.append(
            f"| {'on' if governor else 'off'} | {rate:,} | {describe('bursts', rate)} "
            f"| {_cell(even, 'ping')} | {_cell(bursty, 'ping')} "
            f"| {_cell(even, 'query')} | {_cell(bursty, 'query')} | {ratio} "
            f"| {_pair(even, bursty, 'peak_queue')} | {_pair(even, bursty, 'threads_added')} "
            f"| {_pair(even, bursty, 'late')} |"
        )
    return lines


def write_csv(results: list[dict[str, Any]], path: Path) -> Path:
    """Every run, one row: its settings and its figures (latencies in ms)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = [
        "arrivals",
        "governor",
        "rate",
        "duration_s",
        "warmup_s",
        *(
            f"{span}_{kind}_{stat}_ms"
            for span in ("steady", "whole")
            for kind in ("ping", "query")
            for stat in ("mean", "p99", "max")
        ),
        "threads_added",
        "final_pool",
        "peak_queue",
        "dropped",
        "dropped_at_close",
        "late",
        "sent",
        "peak_rss_mib",
    ]
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for r in sorted(results, key=lambda r: (arrivals_of(r), r["governor"], r["rate"])):
            row: list[Any] = [
                arrivals_of(r),
                "on" if r["governor"] else "off",
                r["rate"],
                r["duration"],
                r["warmup"],
            ]
            for span in ("steady", "whole"):
                for kind in ("ping", "query"):
                    entry = r[span][kind]
                    row.extend(
                        "" if entry is None else f"{entry[f'{stat}_ms']:.3f}"
                        for stat in ("mean", "p99", "max")
                    )
            row += [
                r["threads_added"],
                r["final_pool"],
                r["peak_queue"],
                r["dropped"],
                r.get("dropped_at_close", 0),
                r["late"],
                r["sent"],
                f"{r['peak_rss_mib']:.1f}",
            ]
            writer.writerow(row)
    return path


def plot_side_by_side(results: list[dict[str, Any]], path: Path) -> Path:
    """Mean steady-state latency against offered load, constant (solid) and bursty
    (dashed), governor off on the left and on on the right, as in Fig. 14(a) and (b)."""
    figure, panels = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    for axes, governor in zip(panels, (False, True), strict=True):
        for kind, color in (("ping", "tab:blue"), ("query", "tab:orange")):
            for arrivals, style in (("constant", "-"), ("bursts", "--")):
                rows = sorted(
                    (
                        r
                        for r in results
                        if r["governor"] == governor
                        and arrivals_of(r) == arrivals
                        and r["steady"][kind]
                    ),
                    key=lambda r: r["rate"],
                )
                if rows:
                    axes.plot(
                        [r["rate"] for r in rows],
                        [r["steady"][kind]["mean_ms"] for r in rows],
                        marker="o" if arrivals == "constant" else "s",
                        linestyle=style,
                        color=color,
                        label=f"{kind}, {arrivals}",
                    )
        rates = sorted({r["rate"] for r in results})
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xticks(rates, [str(r) for r in rates])
        axes.set_xlabel("offered load (messages/s)")
        axes.set_title("(a) one thread, governor off" if not governor else "(b) governor on")
        axes.grid(alpha=0.3, which="both")
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize="small")
    panels[0].set_ylabel("mean latency, steady state (ms)")
    figure.suptitle("Fig. 14, 20 ms per query: constant rate against bursts of 10")
    return save_figure(figure, path)


def write_section(results: list[dict[str, Any]], command: str, when: str, doc: Path) -> None:
    """The generated part of docs/experiments.md's bursty subsection; ``command`` is
    markdown (how to rerun it)."""
    from scripts.benchdocs import machine, replace_section

    durations = sorted({r["duration"] for r in results})
    warmups = sorted({r["warmup"] for r in results})
    loads = [v for r in results for v in r.get("load_average", [])]
    lines = [
        f"Measured {when} on {machine()}; runs of {', '.join(f'{d:g}' for d in durations)} s, "
        f"steady state from {', '.join(f'{w:g}' for w in warmups)} s; {command}; "
        + (
            f"1-minute load average {min(loads):.2f} to {max(loads):.2f} at the runs' starts "
            "and ends (2 cores)."
            if loads
            else "load average not recorded."
        ),
        "",
        "Latency cells are mean / p99 in milliseconds, one hop, steady state, measured from "
        "each message's scheduled send time (for a burst, the instant all ten are due). "
        "Every run's figures are in [figures/fig14-arrivals.csv](figures/fig14-arrivals.csv).",
        "",
        *side_by_side(results),
    ]
    replace_section("fig14-bursts", lines, path=doc)


def report(results: list[dict[str, Any]], duration: float, figures: Path, doc: Path | None) -> None:
    """The bursty runs beside the constant-rate ones: table, figure, CSV and, given a
    ``doc`` (``--write``), their subsection of it. Nothing without bursty runs."""
    if not any(arrivals_of(r) == "bursts" for r in results):
        return
    print("\n".join(side_by_side(results)))
    print(plot_side_by_side(results, figures / "fig14-bursts-latency.png"))
    print(write_csv(results, figures / "fig14-arrivals.csv"))
    if doc is not None:
        command = (
            "`.venv/bin/python scripts/experiment_fig14.py --arrivals both "
            f"--duration {duration:g} "
            "--write` (here run in four parts, `--arrivals bursts` or `constant` with "
            "`--governor off` or `on` and `--out DIR`, then `--from-results DIR --arrivals "
            "both --write`)"
        )
        write_section(results, command, datetime.date.today().isoformat(), doc)
        print(doc)
