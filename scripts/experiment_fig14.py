"""The SEDA paper's Fig. 14 on this router: latency under a query delay, governor off and on.

Run from the repository root, in the project's virtual environment (unattended; the
default takes about 10 minutes):

    python scripts/experiment_fig14.py                # 60 s runs, print the table
    python scripts/experiment_fig14.py --write        # also docs/experiments.md + figures
    python scripts/experiment_fig14.py --quick        # 30 s runs, a smoke test
    python scripts/experiment_fig14.py --compare --write   # the governor's rules, 5 runs each

What is run. For each offered load (100, 200, 400 and 1000 messages/s by default, the
paper's mix: 15 % queries, 85 % pings, constant rate) and each governor setting, a
fresh router is started as a child process on a free loopback port with a generated
configuration file: ``router.query_delay_ms = 20`` (the paper's injected 20 ms per
query, run in a worker thread), ``router.threads = 1``, the governor either off or on
with its defaults (a sample every 2 s, the pool sized by Little's law from the measured
arrival rate and service time, ``sizing = "littles-law"``), the profiler on at 0.1 s,
everything else at the defaults (backpressure admission). This process then
runs the load client in-process (:func:`gnutella_router.traffic.load.LoadRun`: one injector,
three sinks) for ``--duration`` seconds, stops the router with SIGTERM (which writes
the profiler's export) and reads what it needs.

What is measured, and how:

* latency, one hop (client -> router -> sink), per type, measured from each message's
  *scheduled* time, so a client held up by a backed-up router counts the wait. Two
  figures for each: *steady state*, messages scheduled after ``--warmup`` seconds (20
  s: the governor has settled by then), as the load client's own report; and the
  *whole run*, from a second histogram fed by the same arrivals from time 0;
* late sends: messages the client wrote more than 1 ms after their scheduled time
  (whole run): with backpressure a router that cannot keep up stops reading, so the
  client's sends back up instead of anything being dropped;
* threads added, the final pool and when the pool last grew (governor samples in the
  profiler export), the peak router queue length (profiler samples every 0.1 s), drops
  (the router's own drop counters in the export), and the router's peak resident set
  (``VmHWM`` from /proc just before it is stopped).

Figures (``--write``, into docs/figures/): fig14a-latency-governor-off.png and
fig14b-latency-governor-on.png (mean steady-state latency against offered load, p99
dashed), fig14c-queue-1000.png (router queue length and pool size over time at the
highest load with the governor, thread additions marked). Raw results (summary JSON,
each run's profiler export and log) stay in ``--out`` (a fresh temporary directory by
default). Exit status 1 when one of the paper's floors, checked at the end, is missed.
The 1-minute load average is read at each run's start and end and printed with the
figures: the query delay is a sleep, so a busy machine shows in the latencies of the
light pings first.

``--compare`` runs, instead of the load sweep, the highest of ``--rates`` (1000) in four
configurations, ``--repeat`` times each (5), interleaved so that a change in the
machine's load falls on all of them alike: the governor with ``sizing =
"littles-law"``, with ``sizing = "queue-threshold"`` (SEDA's original rule: a thread
more at each sample that finds the queue at 1000), and the governor off with fixed
pools of 3 and 4 threads. It prints (and with ``--write`` puts in its own section of
docs/experiments.md) the peak and final pool of each run and the medians of the rest,
and draws fig14d-governor-rules-1000.png: pool and queue over time, first run of each
rule.

``--arrivals bursts`` offers, instead of evenly spaced messages, the quals proposal's load:
bursts of 10 every 100, 50, 25 and 10 ms (the same mean rates; see
scripts/fig14_bursts.py for the papers' words), and ``--arrivals both`` runs each; their
runs are reported side by side (table, fig14-bursts-latency.png, fig14-arrivals.csv, and
with ``--write`` their own subsection of docs/experiments.md), not in Fig. 14's table.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import fig14_bursts
import matplotlib.pyplot as plt
import trio
from benchdocs import machine, replace_section, save_figure
from matplotlib.ticker import MaxNLocator
from router_bench.processes import free_port

from gnutella_router.observe.profiler import read_peak_rss_bytes
from gnutella_router.testnet.process import (
    RouterProcessError,
    start_router_process,
    stop_router_process,
)
from gnutella_router.traffic.load import LoadRun, LoadSettings
from protocol.constants import MessageType
from protocol.framing import Frame
from traffic_models.generator import TrafficGenerator
from traffic_models.latency import LatencyBook, LatencySummary, read_stamp
from traffic_models.mix import PAPER_MIX

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "experiments.md"
FIGURES = ROOT / "docs" / "figures"
QUICK_DURATION = 30.0
QUICK_WARMUP = 15.0
"""At 1000 msgs/s the governor makes its last addition about 8 s in and the backlog it
inherited is gone a few seconds later: a quick run's steady state must start after that,
or its latency checks judge the ramp-up."""
QUERY_DELAY_MS = 20.0
DEFAULT_SIZING = "littles-law"
RATES = (100, 200, 400, 1000)
BROADCAST = (MessageType.PING, MessageType.QUERY)


class ExperimentError(Exception):
    pass


class WholeRunLoad(LoadRun):
    """The load client, plus a second histogram of every arrival from time 0."""

    def __init__(self, settings: LoadSettings, generator: TrafficGenerator) -> None:
        super().__init__(settings, generator)
        self.whole = LatencyBook()

    def _account(self, frames: list[Frame], arrived: int, sink: bool, run: int, *rest: Any) -> None:
        super()._account(frames, arrived, sink, run, *rest)
        if not sink:
            return
        for frame in frames:
            if frame.payload_type in BROADCAST:
                due = read_stamp(frame.guid, run, self.marker)
                if due:
                    self.whole.record("one-hop", frame.payload_type, arrived - due)


def router_config(
    path: Path, governor: bool, *, sizing: str = DEFAULT_SIZING, threads: int = 1
) -> Path:
    path.write_text(
        "[router]\n"
        f"query_delay_ms = {QUERY_DELAY_MS}\n"
        f"threads = {threads}\n\n"
        "[governor]\n"
        f"enabled = {'true' if governor else 'false'}\n"
        f'sizing = "{sizing}"\n\n'
        "[profiler]\n"
        "enabled = true\n"
        "interval = 0.1\n"
    )
    return path


def start_router(
    workdir: Path, governor: bool, *, sizing: str = DEFAULT_SIZING, threads: int = 1
) -> tuple[subprocess.Popen[bytes], int, Path]:
    port = free_port()
    config = router_config(workdir / "router.toml", governor, sizing=sizing, threads=threads)
    process, state = launch_router(workdir, config, port)
    return process, port, state


def launch_router(
    workdir: Path, config: Path, port: int, *, also_wait_for: tuple[int, ...] = ()
) -> tuple[subprocess.Popen[bytes], Path]:
    """Start `gnutella-router run` with ``config`` on ``port``; return once it accepts
    there (and on ``also_wait_for``, e.g. its admin port). Logs go to workdir/router.log."""
    state = workdir / "state"
    state.mkdir(parents=True)
    arguments = ["--config", str(config), "--listen", f"127.0.0.1:{port}", "--log-format", "json"]
    try:
        router = start_router_process(
            state,
            arguments,
            log_path=workdir / "router.log",
            wait_for=(port, *also_wait_for),
            cwd=ROOT,
        )
    except RouterProcessError as exc:
        raise ExperimentError(str(exc)) from exc
    return router.process, state


def stop_router(process: subprocess.Popen[bytes]) -> int | None:
    return stop_router_process(process)


def summary(s: LatencySummary | None) -> dict[str, float] | None:
    if s is None:
        return None
    return {"mean_ms": s.mean / 1000, "p99_ms": s.p99 / 1000, "max_ms": s.max / 1000}


def one_run(
    rate: int,
    governor: bool,
    duration: float,
    warmup: float,
    out: Path,
    *,
    sizing: str = DEFAULT_SIZING,
    threads: int = 1,
    name: str | None = None,
    arrivals: str = "constant",
) -> dict[str, Any]:
    # Constant-rate runs keep their old names, so earlier results still redraw.
    name = (
        name
        or f"{'' if arrivals == 'constant' else arrivals + '-'}{'on' if governor else 'off'}-{rate}"
    )
    workdir = out / name
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    load_before = os.getloadavg()[0]
    process, port, state = start_router(workdir, governor, sizing=sizing, threads=threads)
    try:
        settings = LoadSettings(
            target=("127.0.0.1", port), peers=4, injectors=1, duration=duration, warmup=warmup
        )
        traffic = TrafficGenerator(
            mix=PAPER_MIX, arrivals=fig14_bursts.arrival_process(arrivals, rate), seed=1
        )
        load = WholeRunLoad(settings, traffic)
        report = trio.run(load.run)
        load_after = os.getloadavg()[0]
        peak_rss = read_peak_rss_bytes(process.pid)
        alive = process.poll() is None
    finally:
        status = stop_router(process)
    profile_path = state / "profile.json"
    if not profile_path.exists():
        raise ExperimentError(f"{name}: no profiler export (router exit status {status})")
    profile = json.loads(profile_path.read_text())
    shutil.copy(profile_path, out / f"profile-{name}.json")
    samples = profile["samples"]
    gov = profile.get("governor") or {"added": 0, "samples": []}
    additions = [s["at"] for s in gov["samples"] if s["action"] == "added"]
    # The governor's measured load (arrival rate x service time, in workers) over the
    # steady state, where its samples measured the arrivals (littles-law only).
    loads = [
        s["load"]
        for s in gov["samples"]
        if s.get("measured") and s["at"] >= warmup and s.get("load") is not None
    ]
    steady = report.latency.get("one-hop", {})
    whole = load.whole.summaries().get("one-hop", {})
    # "connection-closing": messages still queued from a peer when the client hung up at
    # the end of the run (the backlog); counted apart from drops during the run.
    drops = profile["router"]["dropped"]
    at_close = sum(drops.get("connection-closing", {}).values())
    dropped = sum(sum(by_type.values()) for by_type in drops.values()) - at_close
    result = {
        "name": name,
        "arrivals": arrivals,
        "governor": governor,
        "sizing": sizing if governor else None,
        "threads": threads,
        "rate": rate,
        "duration": duration,
        "warmup": warmup,
        "router_exit": status,
        "alive_at_end": alive,
        "sent": sum(report.sent.values()),
        "received": sum(report.received.values()),
        "expected": sum(report.expected.values()),
        "late": report.late,
        "achieved_rate": report.achieved_rate,
        "disconnected": report.disconnected,
        "steady": {t: summary(steady.get(t)) for t in ("ping", "query")},
        "whole": {t: summary(whole.get(t)) for t in ("ping", "query")},
        "threads_added": gov["added"],
        "threads_removed": gov.get("removed", 0),
        "changes": [
            [s["at"], s["action"], s.get("reason", ""), s["pool_size"]]
            for s in gov["samples"]
            if s["action"]
        ],
        "steady_load": statistics.median(loads) if loads else None,
        # Where a query's time goes, over the whole run: on its thread (the delay plus the
        # hand-off there and back), then waiting for the stage's turn back.
        **blocking_split(profile.get("router_stage") or {}),
        "load_average": [load_before, load_after],
        "last_addition_s": additions[-1] if additions else None,
        "final_pool": samples[-1]["pool_size"] if samples else None,
        "peak_pool": max((s["pool_size"] for s in samples), default=None),
        "peak_queue": max((s["queues"].get("router", 0) for s in samples), default=0),
        "dropped": dropped,
        "dropped_at_close": at_close,
        "peak_rss_mib": peak_rss / 2**20,
    }
    (out / f"result-{name}.json").write_text(json.dumps(result, indent=2))
    return result


def blocking_split(stage: dict[str, Any]) -> dict[str, float | None]:
    """Milliseconds per blocking call on its thread and waiting for the turn back, and
    the worker time per event handled (all events), from the stage's totals."""
    calls, events = stage.get("blocking_calls") or 0, stage.get("events") or 0
    return {
        "thread_ms": stage["thread_seconds"] / calls * 1000 if calls else None,
        "turn_wait_ms": stage["turn_wait_seconds"] / calls * 1000 if calls else None,
        "busy_ms_per_event": stage["busy_seconds"] / events * 1000 if events else None,
        "blocking_calls": calls,
        "events": events,
    }


# --- figures -------------------------------------------------------------------------


def plot_latency(results: list[dict[str, Any]], governor: bool, path: Path) -> Path:
    rows = sorted((r for r in results if r["governor"] == governor), key=lambda r: r["rate"])
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for kind, color in (("ping", "tab:blue"), ("query", "tab:orange")):
        rates = [r["rate"] for r in rows if r["steady"][kind]]
        means = [r["steady"][kind]["mean_ms"] for r in rows if r["steady"][kind]]
        p99s = [r["steady"][kind]["p99_ms"] for r in rows if r["steady"][kind]]
        axes.plot(rates, means, marker="o", color=color, label=f"{kind} mean")
        axes.plot(rates, p99s, marker="x", color=color, linestyle="--", label=f"{kind} p99")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xticks([r["rate"] for r in rows], [str(r["rate"]) for r in rows])
    axes.set_xlabel("offered load (messages/s)")
    axes.set_ylabel("latency, steady state (ms)")
    state = "with the thread governor" if governor else "one thread, governor off"
    axes.set_title(f"Fig. 14({'b' if governor else 'a'}): 20 ms per query, {state}")
    axes.grid(alpha=0.3, which="both")
    axes.legend()
    return save_figure(figure, path)


def plot_queue(profile: dict[str, Any], rate: int, path: Path, governor_on: bool = True) -> Path:
    samples = profile["samples"]
    times = [s["at"] for s in samples]
    figure, axes = plt.subplots(figsize=(8, 4.5))
    axes.plot(times, [s["queues"].get("router", 0) for s in samples], label="router queue")
    axes.set_xlabel("time (s)")
    axes.set_ylabel("router queue length (events)")
    pool_axes = axes.twinx()
    pool_axes.step(
        times, [s["pool_size"] for s in samples], where="post", color="tab:green", label="pool"
    )
    pool_axes.set_ylabel("router threads", color="tab:green")
    pool_axes.set_ylim(0, max(s["pool_size"] for s in samples) + 2)
    pool_axes.yaxis.set_major_locator(MaxNLocator(integer=True))  # threads come whole
    governor = profile.get("governor") or {"samples": []}
    for index, s in enumerate(g for g in governor["samples"] if g["action"] == "added"):
        axes.axvline(
            s["at"], color="tab:red", alpha=0.5, label="thread added" if index == 0 else None
        )
    lines = axes.get_legend_handles_labels()
    more = pool_axes.get_legend_handles_labels()
    axes.legend(lines[0] + more[0], lines[1] + more[1], loc="upper right")
    axes.set_title(
        f"Fig. 14(c): router queue at {rate} messages/s with the governor"
        if governor_on
        else f"Router queue at {rate} messages/s, governor off (one thread)"
    )
    axes.grid(alpha=0.3)
    return save_figure(figure, path)


# --- report --------------------------------------------------------------------------


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
        f"{args.warmup:g} s; `python scripts/experiment_fig14.py --duration {args.duration:g} "
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
    replace_section("fig14", lines, path=DOC)


# --- the governor's rules compared --------------------------------------------------------

COMPARED = (
    ("littles-law", 'governor on, `sizing = "littles-law"` (the default)', True, "littles-law", 1),
    ("queue-threshold", 'governor on, `sizing = "queue-threshold"`', True, "queue-threshold", 1),
    ("fixed-3", "governor off, `router.threads = 3`", False, DEFAULT_SIZING, 3),
    ("fixed-4", "governor off, `router.threads = 4`", False, DEFAULT_SIZING, 4),
)
"""(key, label, governor on, its rule, initial pool) of each configuration compared."""


def compare(rate: int, args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    """Each configuration ``--repeat`` times at ``rate``, interleaved, so that a change in
    the machine's load over the whole series falls on every configuration alike."""
    results = []
    for repeat in range(1, args.repeat + 1):
        for key, _label, governor, sizing, threads in COMPARED:
            started = time.monotonic()
            name = f"{key}-{rate}-r{repeat}"
            result = one_run(
                rate,
                governor,
                args.duration,
                args.warmup,
                out,
                sizing=sizing,
                threads=threads,
                name=name,
            )
            result["compared"] = key
            (out / f"result-{name}.json").write_text(json.dumps(result, indent=2))
            results.append(result)
            print(
                f"{name}: pool {result['peak_pool']} peak / {result['final_pool']} final, "
                f"last addition {result['last_addition_s']}, ping {ms(result['steady']['ping'])}"
                f"  query {ms(result['steady']['query'])} ms (steady), "
                f"per query {result['thread_ms'] or 0:.2f} ms on its thread, "
                f"{result['turn_wait_ms'] or 0:.2f} ms turn wait, "
                f"load average {result['load_average'][1]:.2f} "
                f"[{time.monotonic() - started:.0f} s]",
                flush=True,
            )
    return results


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


def plot_rules(out: Path, rate: int, path: Path) -> Path | None:
    """Pool and router queue over time, first run of each governor rule."""
    profiles = {}
    for key, *_ in COMPARED[:2]:
        profile_path = out / f"profile-{key}-{rate}-r1.json"
        if profile_path.exists():
            profiles[key] = json.loads(profile_path.read_text())
    if not profiles:
        return None
    figure, (pool_axes, queue_axes) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for (key, profile), color in zip(profiles.items(), ("tab:green", "tab:purple"), strict=False):
        samples = profile["samples"]
        times = [s["at"] for s in samples]
        pool_axes.step(
            times, [s["pool_size"] for s in samples], where="post", color=color, label=key
        )
        queue_axes.plot(
            times, [s["queues"].get("router", 0) for s in samples], color=color, label=key
        )
    pool_axes.set_ylabel("router threads")
    pool_axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    pool_axes.set_ylim(0, None)
    pool_axes.axhline(3, color="grey", linestyle=":", label="paper: 3")
    pool_axes.legend(loc="lower right")
    pool_axes.grid(alpha=0.3)
    queue_axes.set_ylabel("router queue (events)")
    queue_axes.set_xlabel("time (s)")
    queue_axes.legend(loc="upper right")
    queue_axes.grid(alpha=0.3)
    pool_axes.set_title(f"The governor's rules at {rate} messages/s, 20 ms per query (first run)")
    return save_figure(figure, path)


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
        f"`python scripts/experiment_fig14.py --compare --repeat {args.repeat} "
        f"--duration {args.duration:g}{warmup} --write`; {load_average_text(results)}.",
        "",
        "Pools come from the profiler (every 0.1 s): the peak and the last sample of each run. "
        "The measured load is the littles-law governor's own estimate (arrival rate x service "
        "time), the median of its samples that measured the arrivals in the steady state.",
        "",
        *comparison_table(results),
    ]
    replace_section("fig14-governor", lines, path=DOC)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per run (60)")
    parser.add_argument("--warmup", type=float, default=20.0, help="steady state from (20 s)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_DURATION:g} s runs, {QUICK_WARMUP:g} s warm-up (the governor's additions "
        "and the backlog they drain fit inside the warm-up)",
    )
    parser.add_argument(
        "--rates", default=",".join(map(str, RATES)), help="offered loads, messages/s"
    )
    parser.add_argument("--governor", choices=("off", "on", "both"), default="both")
    parser.add_argument(
        "--arrivals",
        choices=(*fig14_bursts.ARRIVALS, "both"),
        default="constant",
        help="constant: evenly spaced, Fig. 14's table and figures; bursts: the quals "
        "proposal's 10 packets every 100/50/25/10 ms (the same mean rates); both: each, "
        "reported side by side in their own section (constant)",
    )
    parser.add_argument("--out", type=Path, help="directory for raw results (default: a temp)")
    parser.add_argument("--write", action="store_true", help="update docs/experiments.md")
    parser.add_argument(
        "--figures",
        type=Path,
        help="where the PNGs go (default: docs/figures with --write, else the results dir)",
    )
    parser.add_argument(
        "--from-results", type=Path, help="skip the runs: redraw from a previous --out"
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="instead of the load sweep: at the highest of --rates, the governor's two rules "
        "and fixed pools of 3 and 4 threads, --repeat runs each",
    )
    parser.add_argument(
        "--repeat", type=int, default=5, help="runs per configuration with --compare (5)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.duration, args.warmup = QUICK_DURATION, QUICK_WARMUP
    if args.warmup >= args.duration:
        parser.error("--warmup must be shorter than --duration")
    rates = [int(r) for r in args.rates.split(",")]
    if args.compare:
        return main_compare(args, max(rates))
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.governor]
    if args.from_results:
        out = args.from_results
        results = [json.loads(p.read_text()) for p in sorted(out.glob("result-*.json"))]
    else:
        out = args.out or Path(tempfile.mkdtemp(prefix="fig14-"))
        out.mkdir(parents=True, exist_ok=True)
        print(f"raw results in {out}", flush=True)
        results = []
        kinds = fig14_bursts.ARRIVALS if args.arrivals == "both" else (args.arrivals,)
        for arrivals, governor, rate in ((a, g, r) for a in kinds for g in modes for r in rates):
            started = time.monotonic()
            result = one_run(rate, governor, args.duration, args.warmup, out, arrivals=arrivals)
            results.append(result)
            print(
                f"{arrivals:<8} governor {'on ' if governor else 'off'} {rate:>5}/s: "
                f"ping {ms(result['steady']['ping'])}  query {ms(result['steady']['query'])} "
                f"ms (steady)  added {result['threads_added']}  "
                f"peak queue {result['peak_queue']}  late {result['late']}  "
                f"drops {result['dropped']}  RSS {result['peak_rss_mib']:.1f} MiB  "
                f"[{time.monotonic() - started:.0f} s]",
                flush=True,
            )
        (out / "summary.json").write_text(
            json.dumps({"args": {**vars(args), "out": str(out)}, "results": results}, default=str)
        )
    figures: Path = args.figures or (FIGURES if args.write else out)
    fig14_bursts.report(results, args.duration, figures, DOC if args.write else None)
    if args.arrivals != "constant":
        # The side-by-side runs have their own section; Fig. 14's own table, figures and
        # checks are the constant-rate sweep's (`--arrivals constant`, the default).
        return 0
    results = [r for r in results if fig14_bursts.arrivals_of(r) == "constant"]
    print("\n".join(table(results)))
    checks = floors(results)
    for ok, text in checks:
        print(f"{'met   ' if ok else 'MISSED'} {text}")
    # A smoke run must not replace the published figures: docs/ only with --write.
    drawn = []
    for governor, name in (
        (False, "fig14a-latency-governor-off"),
        (True, "fig14b-latency-governor-on"),
    ):
        if any(r["governor"] == governor for r in results):
            drawn.append(plot_latency(results, governor, figures / f"{name}.png"))
    top = max(r["rate"] for r in results)
    profile_path = out / f"profile-on-{top}.json"
    if profile_path.exists():
        profile = json.loads(profile_path.read_text())
        drawn.append(plot_queue(profile, top, figures / "fig14c-queue-1000.png"))
    profile_path = out / f"profile-off-{top}.json"
    if profile_path.exists():
        profile = json.loads(profile_path.read_text())
        drawn.append(plot_queue(profile, top, figures / "fig14-queue-1000-governor-off.png", False))
    for path in drawn:
        print(path)
    if args.write:
        write_docs(results, args, figures)
        print(DOC)
    return 0 if all(ok for ok, _ in checks) else 1


def main_compare(args: argparse.Namespace, rate: int) -> int:
    if args.from_results:
        out = args.from_results
        results = [json.loads(p.read_text()) for p in sorted(out.glob("result-*.json"))]
    else:
        out = args.out or Path(tempfile.mkdtemp(prefix="fig14-compare-"))
        out.mkdir(parents=True, exist_ok=True)
        print(f"raw results in {out}", flush=True)
        results = compare(rate, args, out)
        (out / "summary.json").write_text(
            json.dumps({"args": {**vars(args), "out": str(out)}, "results": results}, default=str)
        )
    print("\n".join(comparison_table(results)))
    figures: Path = args.figures or (FIGURES if args.write else out)
    drawn = plot_rules(out, rate, figures / "fig14d-governor-rules-1000.png")
    if drawn is not None:
        print(drawn)
    if args.write:
        write_comparison(results, args, rate)
        print(DOC)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
