"""The paper's single-threaded router with an unbounded queue, beside the bounded default.

Run from the repository root, in the project's virtual environment (unattended; the
default takes about 7 minutes):

    .venv/bin/python scripts/experiment_unbounded_queue.py            # print the table
    .venv/bin/python scripts/experiment_unbounded_queue.py --write    # also docs + figure + CSV

Why. In SOSP'01 Fig. 14(a) the single-threaded router "ran out of memory" at 1000
packets/s: its GnutellaRouter queue had no bound, so the backlog the 20 ms query delay
builds grew until the Java heap was full (quals proposal Fig. 16(a): "the cause of the
crash is the large number of packets in the incoming event queue for the GnutellaLogger
stage"). This router's queue holds 1000 events by default and then stops reading the
sending peer (backpressure), so its Fig. 14 runs cannot show that growth. Here the same
single-threaded router (governor off, ``router.threads = 1``, ``router.query_delay_ms =
20``, the paper's mix) runs twice at each load: with the default bound, and with
``router.queue_threshold = 0`` and ``router.unbounded_experiment = true``, a queue
bounded only by memory (the configuration refuses a 0 without the second key, so a
normal router can never be unbounded by accident).

Loads: 400 and 1000 messages/s (``--rates``), as the quals proposal's bursts of 10 every
25 and 10 ms by default (``--arrivals constant`` for evenly spaced). Each run lasts
``--duration`` seconds (90).

What is recorded: the router's queue length, resident set (RSS) and pool every 0.1 s
(the profiler's samples), the load client's one-hop latency over the whole run, and this
process's own RSS reading of the router every 0.5 s, which is also the safety stop: a run
ends early, and says so, when the router's RSS passes ``--rss-cap-mib`` (2048 MiB), and
no run lasts longer than its duration plus the load client's drain. The machine is never
asked for more than that.

Output: a table, docs/figures/unbounded-queue.png (queue and RSS over time, one column
per load, bounded and unbounded in each), docs/figures/unbounded-queue.csv (every
sample: run, time, queue, RSS, pool) and, with ``--write``, the generated part of the
"unbounded queue" section of docs/experiments.md. ``--from-results DIR`` redraws from an
earlier ``--out DIR``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import trio

from gnutella_router.lab.traffic.load import LoadSettings
from gnutella_router.observe.profiler import read_peak_rss_bytes, read_rss_bytes
from gnutella_router.run_folder import add_out_arguments, script_run
from scripts.benchdocs import EXPERIMENTS_DOC, FIGURES, machine, replace_section, save_figure
from scripts.fig14 import bursts
from scripts.fig14.report import ms
from scripts.fig14.runs import QUERY_DELAY_MS, WholeRunLoad, experiment_router, summary
from traffic_models.generator import TrafficGenerator
from traffic_models.latency import LoadReport
from traffic_models.mix import PAPER_MIX

FIGURE = FIGURES / "unbounded-queue.png"
CSV = FIGURES / "unbounded-queue.csv"
RATES = (400, 1000)
BOUNDS = ("bounded", "unbounded")
WATCH_INTERVAL = 0.5
"""Seconds between this process's readings of the router's RSS (the safety stop)."""


def config_text(bound: str) -> str:
    """The Fig. 14(a) router: one thread, 20 ms per query, governor off, profiler at
    0.1 s; with ``unbounded``, a router queue bounded by memory only."""
    queue = "queue_threshold = 0\nunbounded_experiment = true\n" if bound == "unbounded" else ""
    return (
        "[router]\n"
        f"query_delay_ms = {QUERY_DELAY_MS}\n"
        "threads = 1\n"
        f"{queue}\n"
        "[governor]\n"
        "enabled = false\n\n"
        "[profiler]\n"
        "enabled = true\n"
        "interval = 0.1\n"
    )


async def load_with_cap(
    load: WholeRunLoad, pid: int, cap_bytes: int, watched: list[tuple[float, int]]
) -> tuple[LoadReport | None, float | None]:
    """Run the load; stop it early if the router's RSS passes ``cap_bytes``.

    Returns the load's report (None when stopped) and when the cap was passed."""
    report: LoadReport | None = None
    capped_at: float | None = None
    started = trio.current_time()

    async def run_load(done: trio.CancelScope) -> None:
        nonlocal report
        report = await load.run()
        done.cancel()

    async def watch(done: trio.CancelScope) -> None:
        nonlocal capped_at
        while True:
            rss = read_rss_bytes(pid)
            if rss == 0:
                return  # the router is gone; the load run reports its disconnection
            at = trio.current_time() - started
            watched.append((at, rss))
            if rss > cap_bytes:
                capped_at = at
                done.cancel()
                return
            await trio.sleep(WATCH_INTERVAL)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_load, nursery.cancel_scope)
        nursery.start_soon(watch, nursery.cancel_scope)
    return report, capped_at


def one_run(
    bound: str, rate: int, arrivals: str, args: argparse.Namespace, out: Path
) -> dict[str, Any]:
    name = f"{bound}-{arrivals}-{rate}"
    watched: list[tuple[float, int]] = []
    load_before = os.getloadavg()[0]
    with experiment_router(out / name, config_text(bound)) as router:
        settings = LoadSettings(target=router.address, peers=4, injectors=1, duration=args.duration)
        traffic = TrafficGenerator(
            mix=PAPER_MIX, arrivals=bursts.arrival_process(arrivals, rate), seed=1
        )
        load = WholeRunLoad(settings, traffic)
        report, capped_at = trio.run(
            load_with_cap, load, router.pid, args.rss_cap_mib * 2**20, watched
        )
        peak_rss = read_peak_rss_bytes(router.pid)
    status = router.exit_status
    profile_path = router.state / "profile.json"
    profile = json.loads(profile_path.read_text()) if profile_path.exists() else None
    samples = [
        [s["at"], s["queues"].get("router", 0), s["rss_bytes"] / 2**20, s["pool_size"]]
        for s in (profile or {}).get("samples", [])
    ]
    whole = load.whole.summaries().get("one-hop", {})
    result = {
        "name": name,
        "bound": bound,
        "arrivals": arrivals,
        "rate": rate,
        "duration": args.duration,
        "rss_cap_mib": args.rss_cap_mib,
        "capped_at_s": capped_at,
        "router_exit": status,
        "profile_written": profile is not None,
        "sent": sum(report.sent.values()) if report else None,
        "late": report.late if report else None,
        "disconnected": report.disconnected if report else None,
        "whole": {t: summary(whole.get(t)) for t in ("ping", "query")},
        "peak_queue": max((s[1] for s in samples), default=None),
        "final_queue": samples[-1][1] if samples else None,
        "peak_rss_mib": peak_rss / 2**20,
        "first_rss_mib": watched[0][1] / 2**20 if watched else None,
        "load_average": [load_before, os.getloadavg()[0]],
        "samples": samples,
        "watched": [[at, rss / 2**20] for at, rss in watched],
    }
    (out / f"result-{name}.json").write_text(json.dumps(result))
    return result


def queue_at_end(result: dict[str, Any]) -> int | None:
    """The queue when the load stopped: the last sample within the offered load (later
    ones see the backlog that leaves with the client's connections)."""
    within = [q for at, q, _, _ in result["samples"] if at <= result["duration"]]
    return within[-1] if within else None


def growth_per_event(result: dict[str, Any]) -> float | None:
    """KiB of RSS per queued event: the slope of RSS against queue length over the
    offered load. Only for an unbounded queue: a bounded one sits at its bound while
    RSS grows for other reasons (the route tables filling)."""
    if result["bound"] != "unbounded":
        return None
    points = [(q, rss) for at, q, rss, _ in result["samples"] if q > 0 and at <= result["duration"]]
    if len(points) < 10:
        return None
    n = len(points)
    mean_q = sum(q for q, _ in points) / n
    mean_r = sum(r for _, r in points) / n
    spread = sum((q - mean_q) ** 2 for q, _ in points)
    if spread == 0:
        return None
    slope = sum((q - mean_q) * (r - mean_r) for q, r in points) / spread
    return float(slope) * 1024


def table(results: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| router queue | load (msgs/s) | arrivals | peak queue (events) "
        "| queue when the load stopped | RSS at start / peak (MiB) "
        "| RSS per queued event (KiB) | stopped by the RSS cap "
        "| ping mean / p99 ms, whole run | query mean / p99 ms, whole run | late sends "
        "| exit after SIGTERM |",
        "|---|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in sorted(results, key=lambda r: (r["rate"], r["bound"])):
        slope = growth_per_event(r)
        first = r["first_rss_mib"]
        capped = "no" if r["capped_at_s"] is None else f"yes, at {r['capped_at_s']:.0f} s"
        late = "-" if r["late"] is None else f"{r['late']:,} / {r['sent']:,}"
        lines.append(
            f"| {'default (1000 events)' if r['bound'] == 'bounded' else 'unbounded'} "
            f"| {r['rate']:,} | {bursts.describe(r['arrivals'], r['rate'])} "
            f"| {r['peak_queue'] or 0:,} | {queue_at_end(r) or 0:,} "
            f"| {'-' if first is None else f'{first:.1f}'} / {r['peak_rss_mib']:.1f} "
            f"| {'-' if slope is None else f'{slope:.2f}'} "
            f"| {capped} "
            f"| {ms(r['whole']['ping'])} | {ms(r['whole']['query'])} "
            f"| {late} "
            f"| {r['router_exit']} |"
        )
    return lines


def plot(results: list[dict[str, Any]], path: Path) -> Path:
    rates = sorted({r["rate"] for r in results})
    figure, axes = plt.subplots(2, len(rates), figsize=(5.5 * len(rates), 6.5), squeeze=False)
    colors = {"bounded": "tab:blue", "unbounded": "tab:red"}
    for column, rate in enumerate(rates):
        queue_axes, rss_axes = axes[0][column], axes[1][column]
        for r in (r for r in results if r["rate"] == rate):
            times = [s[0] for s in r["samples"]]
            label = "default bound (1000)" if r["bound"] == "bounded" else "unbounded"
            queue_axes.plot(
                times, [s[1] for s in r["samples"]], color=colors[r["bound"]], label=label
            )
            rss_axes.plot(
                times, [s[2] for s in r["samples"]], color=colors[r["bound"]], label=label
            )
        for a in (queue_axes, rss_axes):
            a.axvline(results[0]["duration"], color="grey", linestyle=":", label="load stops")
        queue_axes.set_title(f"{rate} messages/s, one thread, 20 ms per query")
        queue_axes.set_ylabel("router queue (events)")
        rss_axes.set_ylabel("router RSS (MiB)")
        rss_axes.set_xlabel("time (s)")
        for a in (queue_axes, rss_axes):
            a.grid(alpha=0.3)
            a.legend(loc="upper left", fontsize="small")
    return save_figure(figure, path)


def write_csv(results: list[dict[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["bound", "arrivals", "rate", "at_s", "router_queue", "rss_mib", "pool"])
        for r in sorted(results, key=lambda r: (r["rate"], r["bound"])):
            for at, queue, rss, pool in r["samples"]:
                writer.writerow(
                    [r["bound"], r["arrivals"], r["rate"], f"{at:.2f}", queue, f"{rss:.2f}", pool]
                )
    return path


def write_docs(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    loads = [v for r in results for v in r["load_average"]]
    lines = [
        f"Measured {datetime.date.today().isoformat()} on {machine()}; runs of "
        f"{args.duration:g} s, RSS cap {args.rss_cap_mib:,} MiB; "
        f"`.venv/bin/python scripts/experiment_unbounded_queue.py --duration {args.duration:g} "
        f"--arrivals {args.arrivals} --write`; 1-minute load average {min(loads):.2f} to "
        f"{max(loads):.2f} at the runs' starts and ends (2 cores). Every profiler sample (0.1 s) "
        "is in [figures/unbounded-queue.csv](figures/unbounded-queue.csv).",
        "",
        *table(results),
    ]
    replace_section("unbounded-queue", lines, path=EXPERIMENTS_DOC)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=90.0, help="seconds per run (90)")
    parser.add_argument("--rates", default=",".join(map(str, RATES)), help="messages/s")
    parser.add_argument("--arrivals", choices=bursts.ARRIVALS, default="bursts")
    parser.add_argument("--bounds", choices=(*BOUNDS, "both"), default="both")
    parser.add_argument(
        "--rss-cap-mib", type=int, default=2048, help="stop a run when the router passes this"
    )
    add_out_arguments(parser)
    parser.add_argument("--from-results", type=Path, help="skip the runs: redraw from --out")
    parser.add_argument("--write", action="store_true", help="update docs/experiments.md")
    args = parser.parse_args(argv)
    if args.from_results:
        out = args.from_results
        results = [json.loads(p.read_text()) for p in sorted(out.glob("result-*.json"))]
    else:
        out = script_run("experiment-unbounded-queue", args)
        bounds = BOUNDS if args.bounds == "both" else (args.bounds,)
        results = []
        for rate in (int(r) for r in args.rates.split(",")):
            for bound in bounds:
                started = time.monotonic()
                result = one_run(bound, rate, args.arrivals, args, out)
                results.append(result)
                print(
                    f"{bound:<9} {rate:>5}/s: peak queue {result['peak_queue']}, RSS "
                    f"{result['first_rss_mib'] or 0:.1f} -> {result['peak_rss_mib']:.1f} MiB, "
                    f"capped at {result['capped_at_s']} [{time.monotonic() - started:.0f} s]",
                    flush=True,
                )
    print("\n".join(table(results)))
    target = FIGURE if args.write else out / FIGURE.name
    print(plot(results, target))
    print(write_csv(results, CSV if args.write else out / CSV.name))
    if args.write:
        write_docs(results, args)
        print(EXPERIMENTS_DOC)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
