"""Fig. 14's tables and written sections: the load sweep's table and the paper's floors
checked against it, the governor's rules side by side, and the docs/experiments.md
sections they replace."""

from __future__ import annotations

import argparse
import datetime
import statistics
from pathlib import Path
from typing import Any

from scripts.benchdocs import EXPERIMENTS_DOC, machine, replace_section
from scripts.fig14.runs import COMPARED, DEFAULT_SIZING


def ms(entry: dict[str, float] | None) -> str:
    if entry is None:
        return "-"
    return f"{entry['mean_ms']:,.1f} / {entry['p99_ms']:,.0f}"


def table(results: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| governor | load (msgs/s) | ping mean / p99 ms, steady | query mean / p99 ms, steady "
        "| ping, whole run | query, whole run | threads added (peak / final pool) | last addition "
        "| peak router queue | drops (backlog at close) | late sends | peak RSS (MiB) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(results, key=lambda r: (r["governor"], r["rate"])):
        last = f"{r['last_addition_s']:.1f} s" if r["last_addition_s"] is not None else "-"
        lines.append(
            f"| {'on' if r['governor'] else 'off'} | {r['rate']:,} "
            f"| {ms(r['steady']['ping'])} | {ms(r['steady']['query'])} "
            f"| {ms(r['whole']['ping'])} | {ms(r['whole']['query'])} "
            f"| {r['threads_added']} ({r.get('peak_pool', '-')} / {r['final_pool']}) | {last} "
            f"| {r['peak_queue']:,} | {r['dropped']:,} ({r.get('dropped_at_close', 0):,}) "
            f"| {r['late']:,} / {r['sent']:,} "
            f"| {r['peak_rss_mib']:.1f} |"
        )
    return lines


def floors(results: list[dict[str, Any]]) -> list[tuple[bool, str]]:
    """The paper's claims for the highest load, checked: (passed, text)."""
    top = max(r["rate"] for r in results)
    checks: list[tuple[bool, str]] = []
    on = next((r for r in results if r["governor"] and r["rate"] == top), None)
    off = next((r for r in results if not r["governor"] and r["rate"] == top), None)
    if on is not None:
        pool = on["final_pool"] or 0
        last = on["last_addition_s"]
        checks.append(
            (
                3 <= pool <= 5 and last is not None and last <= 15.0,
                f"governor on, {top}/s: pool settles at 3-5 threads within 15 s "
                f"(final pool {pool}, last addition at {last if last is not None else '-'} s)",
            )
        )
        q, p = on["steady"]["query"], on["steady"]["ping"]
        checks.append(
            (
                q is not None and q["mean_ms"] <= 30.0,
                f"governor on, {top}/s: steady mean query latency <= 30 ms ({q['mean_ms']:.1f} ms)"
                if q
                else "no queries measured",
            )
        )
        checks.append(
            (
                p is not None and p["mean_ms"] <= 10.0,
                f"governor on, {top}/s: steady mean ping latency <= 10 ms ({p['mean_ms']:.1f} ms)"
                if p
                else "no pings measured",
            )
        )
        checks.append((on["dropped"] == 0, f"governor on, {top}/s: no drops ({on['dropped']})"))
    if off is not None:
        checks.append(
            (
                off.get("alive_at_end", True) and not off["disconnected"],
                f"governor off, {top}/s: the router stays up and keeps its peers to the end "
                f"(disconnected: {off['disconnected'] or 'none'}; exit status after SIGTERM "
                f"{off['router_exit']})",
            )
        )
        checks.append(
            (
                True,
                f"governor off, {top}/s: peak RSS {off['peak_rss_mib']:.1f} MiB, peak queue "
                f"{off['peak_queue']:,}, late sends {off['late']:,} of {off['sent']:,}, "
                f"drops {off['dropped']:,} (backpressure: readers stop, nothing is dropped)",
            )
        )
    return checks


def load_average_text(results: list[dict[str, Any]]) -> str:
    seen = [value for r in results for value in r.get("load_average", [])]
    if not seen:
        return "load average not recorded"
    return (
        f"1-minute load average {min(seen):.2f} to {max(seen):.2f} at the runs' starts and "
        "ends (2 cores)"
    )


def write_docs(results: list[dict[str, Any]], args: argparse.Namespace, figures: Path) -> None:
    date = datetime.date.today().isoformat()
    lines = [
        f"Measured {date} on {machine()}; runs of {args.duration:g} s, steady state from "
        f"{args.warmup:g} s; `.venv/bin/python scripts/experiment_fig14.py "
        f"--duration {args.duration:g} "
        f'--write`; the governor\'s rule: `sizing = "{DEFAULT_SIZING}"` (the default); '
        f"{load_average_text(results)}.",
        "",
        "Latency cells are mean / p99 in milliseconds, one hop (client -> router -> sink), "
        "measured from each message's scheduled send time. Late sends: messages the client "
        "wrote more than 1 ms after their scheduled time, of all sent.",
        "",
        *table(results),
        "",
        "Checks against the paper:",
        "",
        *(f"- {'met' if ok else 'MISSED'}: {text}" for ok, text in floors(results)),
    ]
    replace_section("fig14", lines, path=EXPERIMENTS_DOC)


def median_of(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def comparison_table(results: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| configuration | runs | peak pool, each run | final pool, each run "
        "| last addition, median (range) | ping mean / p99 ms, steady, median "
        "| query mean / p99 ms, steady, median | query mean ms, whole run, median "
        "| measured load (workers), median | per query: on its thread / turn wait ms, median "
        "| peak router queue, median |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, label, *_ in COMPARED:
        runs = [r for r in results if r.get("compared") == key]
        if not runs:
            continue
        lasts = [r["last_addition_s"] for r in runs if r["last_addition_s"] is not None]
        if lasts:
            last = f"{statistics.median(lasts):.1f} s ({min(lasts):.1f} to {max(lasts):.1f})"
        else:
            last = "-"
        cells = []
        for kind in ("ping", "query"):
            mean = median_of([(r["steady"][kind] or {}).get("mean_ms") for r in runs])
            p99 = median_of([(r["steady"][kind] or {}).get("p99_ms") for r in runs])
            cells.append("-" if mean is None or p99 is None else f"{mean:,.1f} / {p99:,.0f}")
        whole = median_of([(r["whole"]["query"] or {}).get("mean_ms") for r in runs])
        load = median_of([r.get("steady_load") for r in runs])
        queue = median_of([r["peak_queue"] for r in runs])
        on_thread = median_of([r.get("thread_ms") for r in runs])
        turn_wait = median_of([r.get("turn_wait_ms") for r in runs])
        split = "-" if on_thread is None else f"{on_thread:.2f} / {turn_wait or 0.0:.2f}"
        lines.append(
            f"| {label} | {len(runs)} "
            f"| {', '.join(str(r['peak_pool']) for r in runs)} "
            f"| {', '.join(str(r['final_pool']) for r in runs)} | {last} "
            f"| {cells[0]} | {cells[1]} | {'-' if whole is None else f'{whole:,.1f}'} "
            f"| {'-' if load is None else f'{load:.2f}'} | {split} "
            f"| {'-' if queue is None else f'{queue:,.0f}'} |"
        )
    return lines


def write_comparison(results: list[dict[str, Any]], args: argparse.Namespace, rate: int) -> None:
    date = datetime.date.today().isoformat()
    runs = max(
        (sum(1 for r in results if r.get("compared") == key) for key, *_ in COMPARED), default=0
    )
    # Only a warmup other than the default is named in the command to rerun.
    warmup = "" if args.warmup == 20.0 else f" --warmup {args.warmup:g}"
    lines = [
        f"Measured {date} on {machine()}; {runs} run{'s' if runs != 1 else ''} of "
        f"{args.duration:g} s per configuration "
        f"at {rate} messages/s (the paper's mix, `router.query_delay_ms = 20`), the "
        f"configurations interleaved, steady state from {args.warmup:g} s; "
        f"`.venv/bin/python scripts/experiment_fig14.py --compare --repeat {args.repeat} "
        f"--duration {args.duration:g}{warmup} --write`; {load_average_text(results)}.",
        "",
        "Pools come from the profiler (every 0.1 s): the peak and the last sample of each run. "
        "The measured load is the littles-law governor's own estimate (arrival rate x service "
        "time), the median of its samples that measured the arrivals in the steady state.",
        "",
        *comparison_table(results),
    ]
    replace_section("fig14-governor", lines, path=EXPERIMENTS_DOC)
