"""The batching controller with the router held saturated, beside the fixed batch of 250.

Run from the repository root, in the project's virtual environment (unattended; about
five minutes with the defaults, two router runs):

    .venv/bin/python scripts/experiment_batching.py            # print the comparison
    .venv/bin/python scripts/experiment_batching.py --write  # also docs/experiments.md, figure, CSV
    .venv/bin/python scripts/experiment_batching.py --sweep  # fixed batches 250 .. 8, a flood each

What is run. Twice, one router each time (a ``gnutella-router run`` child on a free
loopback port, one worker, no injected delay, backpressure, the profiler at 0.25 s): the
batching controller on (its defaults, a sample a second), then off (``router.batch_size
= 250`` fixed, the old default). Both get the same steps (``--steps``, like the paper's
Figure 9 of an oscillating load): the load client (one injector, four peers, the paper's
mix) offers a light load throughout, and during the steps marked ``+N`` N flood
processes are started beside it, each a separate process that connects as an ultrapeer
and writes pre-encoded 64 KiB chunks of queries (every GUID unique) as fast as the
router reads them: a load the router cannot keep up with, at almost no cost per message
to the sender, so that the router stage's queue stays at its threshold and every batch
is full. The flood's queries carry TTL 1: the router reads, frames, queues, checks and
records a route for each, but forwards none, so the load client's peers are not buried
under copies and still time the light load's messages, one hop, through the saturated
router. That makes the router's work per message small and the per-batch cost a larger
share of it than with forwarding: the most favourable case for large batches.

What is shown: over time, the batch size, the router's output rate (messages received
per second, from the profiler) and the light load's one-hop latency (median per second)
for both runs, the flood periods shaded (``batching-steps.png``); the controller's
samples as CSV (``batching-steps.csv``: rate, mean batch, per-batch cost, whether the
sample was bound by the batch, the action and why). Side by side: the batch the
controller held at the end of each flood, the median output rate while flooded (the
first 3 s of each flood left out), the light load's one-hop latency p50/p99 while
flooded and while not, the router's CPU per thousand messages received
(``/proc/PID/stat``), and the share of flooded controller samples that were bound by
the batch (saturated, batches full): the check that the load did what it is for.

``--sweep`` runs instead one router per fixed batch (``SWEEP``, batching off) through
one flood each (``SWEEP_STEPS``): the throughput, latency and CPU per message that the
controller's search meets at each batch size (about three minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import matplotlib

from scripts.benchdocs import EXPERIMENTS_DOC, FIGURES

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import trio

from gnutella_router.lab.traffic.load import LoadSettings
from gnutella_router.run_folder import add_out_arguments, script_run
from protocol.constants import MessageType
from protocol.framing import Frame
from scripts.benchdocs import machine, replace_section, save_figure
from scripts.fig14.runs import ExperimentError, WholeRunLoad, experiment_router
from scripts.router_bench.peers import (
    BLAST_MESSAGES,
    SEND_CHUNK,
    Blast,
    Wire,
    connect,
    count_bytes,
    message_kinds,
)
from scripts.runner import cpu_seconds, run_to_end
from traffic_models.arrival_text import parse_arrivals
from traffic_models.generator import TrafficGenerator
from traffic_models.latency import read_stamp
from traffic_models.mix import PAPER_MIX

STEPS = "20s@2000,45s@2000+1,20s@2000,45s@2000+1,15s@2000"
SWEEP = (250, 200, 160, 100, 50, 25, 8)
SWEEP_STEPS = "3s@2000,15s@2000+1,2s@2000"
FLOOD_TTL = 1
SETTLE = 3.0
"""Seconds at the start of each flood left out of the flooded medians (the queue filling)."""
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
BROADCAST = (MessageType.PING, MessageType.QUERY)
SCRIPT = Path(__file__).resolve()


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    seconds: float
    rate: float
    floods: int


def parse_steps(text: str) -> list[Step]:
    """``SECONDSs@RATE[+FLOODS],...``: the light load's rate and the flood processes."""
    steps = []
    for part in text.split(","):
        try:
            length, _, rest = part.partition("@")
            rate, _, floods = rest.partition("+")
            steps.append(Step(float(length.removesuffix("s")), float(rate), int(floods or 0)))
        except ValueError as exc:
            raise ExperimentError(f"bad step {part!r}: want SECONDSs@RATE[+FLOODS]") from exc
    return steps


# ---------------------------------------------------------------- the flood process


def flood_wire(ttl: int) -> Wire:
    """The benchmark's same-size pings and queries, with ``ttl`` in byte 17 of the header."""
    wire = Wire.build()
    templates = (wire.ping, wire.query, wire.marked_ping, wire.marked_query)
    return Wire(wire.size, *(t[:17] + bytes((ttl,)) + t[18:] for t in templates))


async def flood(address: tuple[str, int], seconds: float, ttl: int, seed: int) -> dict[str, Any]:
    """Write queries to ``address`` as fast as it reads them for ``seconds``; what was sent."""
    wire = flood_wire(ttl)
    blast = Blast(wire, message_kinds(BLAST_MESSAGES, 1.0, seed))
    peer = await connect(address, "flood")
    sent = 0
    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(count_bytes, peer)  # what the router sends back is read, not kept
        with trio.move_on_after(seconds):
            while True:
                view = blast.next_pass()
                for offset in range(0, len(view), SEND_CHUNK):
                    chunk = view[offset : offset + SEND_CHUNK]
                    await peer.stream.send_all(chunk)
                    sent += len(chunk)
        nursery.cancel_scope.cancel()
    ended = time.perf_counter()
    await peer.aclose()
    return {"started": started, "ended": ended, "sent": sent // wire.size, "closed": peer.closed}


async def flood_process(
    address: tuple[str, int], at: float, step: Step, index: int, records: list[dict[str, Any]]
) -> None:
    """At trio time ``at``, run one flood process for the step; keep what it reports."""
    await trio.sleep_until(at)
    argv = [
        sys.executable,
        str(SCRIPT),
        "--flood",
        f"{address[0]}:{address[1]}",
        "--flood-seconds",
        str(step.seconds),
        "--flood-seed",
        str(index + 1),
    ]
    output = await run_to_end(argv, "a flood process")
    records.append(json.loads(output.strip().splitlines()[-1]))


# ---------------------------------------------------------------- one router run


class TimedLoad(WholeRunLoad):
    """The load client, also keeping each one-hop arrival's scheduled time and latency."""

    def __init__(self, settings: LoadSettings, generator: TrafficGenerator) -> None:
        super().__init__(settings, generator)
        self.due: list[int] = []
        self.latency: list[int] = []
        self.sending = trio.Event()

    async def _send(self, *args: Any) -> None:
        # The base class stamps its start (``started_ns``) before its first checkpoint.
        self.sending.set()
        await super()._send(*args)

    def _account(self, frames: list[Frame], arrived: int, sink: bool, run: int, *rest: Any) -> None:
        super()._account(frames, arrived, sink, run, *rest)
        if sink:
            for frame in frames:
                if frame.payload_type in BROADCAST:
                    due = read_stamp(frame.guid, run, self.marker)
                    if due:
                        self.due.append(due)
                        self.latency.append(arrived - due)


async def loaded(load: TimedLoad, steps: list[Step], address: tuple[str, int]) -> Any:
    """The load client's run, with the steps' flood processes started on its clock."""
    records: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(start_floods, load, steps, address, records)
        report = await load.run()
    return report, records


async def start_floods(
    load: TimedLoad, steps: list[Step], address: tuple[str, int], records: list[dict[str, Any]]
) -> None:
    await load.sending.wait()  # the load client connects and probes first
    origin = trio.current_time() - (time.perf_counter_ns() - load.started_ns) / 1e9
    async with trio.open_nursery() as nursery:
        at = origin
        for step in steps:
            for index in range(step.floods):
                nursery.start_soon(flood_process, address, at, step, index, records)
            at += step.seconds


def percentiles(values: np.ndarray[Any, Any]) -> list[float] | None:
    if not len(values):
        return None
    return [float(np.percentile(values, 50)) / 1e6, float(np.percentile(values, 99)) / 1e6]


def run(
    name: str,
    auto: bool,
    args: argparse.Namespace,
    out: Path,
    *,
    batch: int = 250,
    steps_text: str = "",
) -> dict[str, Any]:
    steps = parse_steps(steps_text or args.steps)
    config = (
        f"[router]\nthreads = 1\nbatch_size = {batch}\n\n"
        f"[batching]\nenabled = {'true' if auto else 'false'}\ninterval = {args.interval}\n\n"
        "[profiler]\nenabled = true\ninterval = 0.25\n"
    )
    load_before = os.getloadavg()[0]
    with experiment_router(out / name, config) as router:
        launched = time.perf_counter()
        duration = sum(s.seconds for s in steps)
        settings = LoadSettings(
            target=router.address, peers=4, injectors=1, duration=duration, warmup=0.0
        )
        light = ",".join(f"{s.seconds:g}s@{s.rate:g}" for s in steps)
        arrivals = parse_arrivals(f"steps:{light}", seed=1)
        load = TimedLoad(settings, TrafficGenerator(mix=PAPER_MIX, arrivals=arrivals, seed=1))
        report, records = trio.run(loaded, load, steps, router.address)
        cpu = cpu_seconds(router.pid)
        load_after = os.getloadavg()[0]
    try:
        profile = router.profile()
    except ExperimentError as exc:
        raise ExperimentError(f"{name}: {exc}") from None
    samples = profile["samples"]
    # The profiler's clock starts as the router starts, just before it accepts.
    floods = sorted((r["started"] - launched, r["ended"] - launched) for r in records)
    closed = [r["closed"] for r in records if r["closed"]]
    if closed:
        raise ExperimentError(f"{name}: a flood connection ended early: {closed[0]}")

    def flooded(at: float, settle: float = 0.0, after: float = 0.0) -> bool:
        return any(start + settle <= at <= end + after for start, end in floods)

    series = [
        (s["at"], s["batch_size"], sum(s["rates"].values()), s["queues"].get("router", 0))
        for s in samples
    ]
    flooded_rates = [rate for at, _, rate, _ in series if flooded(at, SETTLE)]
    controller = (profile.get("batching") or {}).get("samples", [])
    judged = [s for s in controller if flooded(s["at"], SETTLE)]
    # Each arrival's scheduled time, on the router's clock, to tell flooded from light.
    load_origin = (load.started_ns / 1e9) - launched
    due = np.array(load.due, dtype=np.float64) / 1e9 - load.started_ns / 1e9 + load_origin
    latency = np.array(load.latency, dtype=np.float64)
    in_flood = np.array([flooded(t, SETTLE) for t in due], dtype=bool)
    near = np.array([flooded(t, -SETTLE, SETTLE) for t in due], dtype=bool)  # edges: neither
    seconds = np.floor(due).astype(np.int64)
    per_second = [
        (float(sec) + 0.5, float(np.median(latency[seconds == sec])) / 1e6)
        for sec in np.unique(seconds)
    ]
    total = samples[-1]["received"] if samples else 0
    return {
        "name": name,
        "auto": auto,
        "batch": batch,
        "series": series,
        "floods": floods,
        "flood_sent": sum(r["sent"] for r in records),
        "controller": controller,
        "bound_share": sum(s["bound"] for s in judged) / len(judged) if judged else None,
        "mean_batch_fill": (
            statistics.median(s["mean_batch"] / max(1, s["batch_size"]) for s in judged)
            if judged
            else None
        ),
        "end_batches": [
            next((b for at, b, _, _ in reversed(series) if at <= end), 0) for _, end in floods
        ],
        "changes": {
            k: (profile.get("batching") or {}).get(k, 0)
            for k in ("decreased", "increased", "resets")
        },
        "received": total,
        "delivered": sum(report.received.values()),
        "expected": sum(report.expected.values()),
        "late": report.late,
        "flooded_rate": statistics.median(flooded_rates) if flooded_rates else 0.0,
        "flooded_rate_spread": (
            [float(np.percentile(flooded_rates, q)) for q in (10, 90)] if flooded_rates else None
        ),
        "latency_flooded_ms": percentiles(latency[in_flood]),
        "latency_light_ms": percentiles(latency[~near]),
        "latency_per_second": per_second,
        "cpu_seconds": cpu,
        "cpu_ms_per_1000": None if cpu is None or not total else cpu * 1e6 / total,
        "load_average": [load_before, load_after],
    }


# ---------------------------------------------------------------- the comparison


def label(r: dict[str, Any]) -> str:
    return "controller" if r["auto"] else "fixed 250"


def pair(values: list[float] | None) -> str:
    return "-" if values is None else f"{values[0]:.1f} / {values[1]:.1f}"


def lines_of(results: list[dict[str, Any]]) -> list[str]:
    rows = [
        "| batch | batch at the end of each flood | median rate flooded (msgs/s; p10-p90) "
        "| light load's one-hop p50 / p99 flooded (ms) | same, not flooded (ms) "
        "| router CPU ms per 1000 msgs | messages received | flooded samples bound by the batch "
        "| changes (decreased / increased / resets) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        cpu = r["cpu_ms_per_1000"]
        spread = r["flooded_rate_spread"]
        changes = r["changes"]
        bound = r["bound_share"]
        rows.append(
            f"| {label(r)} | {', '.join(str(b) for b in r['end_batches'])} "
            f"| {r['flooded_rate']:,.0f}"
            + ("" if spread is None else f" ({spread[0]:,.0f}-{spread[1]:,.0f})")
            + f" | {pair(r['latency_flooded_ms'])} | {pair(r['latency_light_ms'])} "
            f"| {'-' if cpu is None else f'{cpu:.2f}'} | {r['received']:,} "
            f"| {'-' if bound is None else f'{bound:.0%}'} "
            f"| {changes['decreased']} / {changes['increased']} / {changes['resets']} |"
        )
    auto = next((r for r in results if r["auto"]), None)
    fixed = next((r for r in results if not r["auto"]), None)
    if auto and fixed and fixed["flooded_rate"] and fixed["cpu_ms_per_1000"]:
        ratios = [
            f"median rate flooded {auto['flooded_rate'] / fixed['flooded_rate']:.2f}x",
            f"CPU per message {auto['cpu_ms_per_1000'] / fixed['cpu_ms_per_1000']:.2f}x",
        ]
        a, f = auto["latency_flooded_ms"], fixed["latency_flooded_ms"]
        if a and f and f[0] and f[1]:
            ratios.append(f"one-hop p50 / p99 flooded {a[0] / f[0]:.2f}x / {a[1] / f[1]:.2f}x")
        rows += [
            "",
            "Controller / fixed: "
            + ", ".join(ratios)
            + ". 1-minute load average at the start and end of each run: "
            + "; ".join(
                f"{r['name']} {r['load_average'][0]:.2f} -> {r['load_average'][1]:.2f}"
                for r in results
            )
            + ".",
        ]
    return rows


def sweep_lines(sweep: list[dict[str, Any]]) -> list[str]:
    """Fixed batches through a flood alone: the throughput the controller's search meets."""
    top = next((r["flooded_rate"] for r in sweep if r["batch"] == max(SWEEP)), 0.0)
    rows = [
        f"| fixed batch | median rate flooded (msgs/s; p10-p90) | / batch {max(SWEEP)} "
        "| light load's one-hop p50 / p99 flooded (ms) | router CPU ms per 1000 msgs |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in sweep:
        spread = r["flooded_rate_spread"]
        cpu = r["cpu_ms_per_1000"]
        rows.append(
            f"| {r['batch']} | {r['flooded_rate']:,.0f}"
            + ("" if spread is None else f" ({spread[0]:,.0f}-{spread[1]:,.0f})")
            + f" | {r['flooded_rate'] / top:.2f} | {pair(r['latency_flooded_ms'])} "
            f"| {'-' if cpu is None else f'{cpu:.2f}'} |"
            if top
            else f"| {r['batch']} | - | - | - | - |"
        )
    return rows


def plot(results: list[dict[str, Any]], path: Path) -> Path:
    figure, (batch_axes, rate_axes, latency_axes) = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    for r, color in zip(results, ("tab:blue", "tab:grey"), strict=False):
        times = [s[0] for s in r["series"]]
        batch_axes.step(
            times, [s[1] for s in r["series"]], where="post", color=color, label=label(r)
        )
        rate_axes.plot(times, [s[2] for s in r["series"]], color=color, label=label(r), lw=0.7)
        latency = r["latency_per_second"]
        latency_axes.plot(
            [t for t, _ in latency], [v for _, v in latency], color=color, label=label(r), lw=0.8
        )
    for axes in (batch_axes, rate_axes, latency_axes):
        for start, end in results[0]["floods"] if results else []:
            axes.axvspan(start, end, color="tab:orange", alpha=0.08, lw=0)
        axes.grid(alpha=0.3)
        axes.legend(loc="upper right", fontsize=8)
    batch_axes.set_ylabel("router batch size")
    batch_axes.set_ylim(0, 270)
    rate_axes.set_ylabel("messages received / s")
    latency_axes.set_ylabel("light load's one-hop\nlatency, median per s (ms)")
    latency_axes.set_yscale("log")
    latency_axes.set_xlabel("time since the router started (s); shaded: flood processes on")
    batch_axes.set_title("The batching controller with the router saturated, beside a fixed batch")
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


def flood_main(args: argparse.Namespace) -> int:
    host, _, port = args.flood.rpartition(":")
    result = trio.run(flood, (host, int(port)), args.flood_seconds, FLOOD_TTL, args.flood_seed)
    print(json.dumps(result), flush=True)
    return 0


def sweep_main(args: argparse.Namespace) -> int:
    """Each fixed batch of ``SWEEP`` through one flood (``SWEEP_STEPS``), one router each."""
    out = args.from_results or script_run("experiment-batching-sweep", args)
    sweep = []
    for batch in SWEEP:
        path = out / f"result-sweep-{batch}.json"
        if not args.from_results:
            result = run(f"sweep-{batch}", False, args, out, batch=batch, steps_text=SWEEP_STEPS)
            path.write_text(json.dumps(result))
            print(f"  batch {batch}: {result['flooded_rate']:,.0f} msgs/s", flush=True)
        sweep.append(json.loads(path.read_text()))
    table = sweep_lines(sweep)
    print("\n".join(table))
    if args.write:
        replace_section(
            "batching-sweep",
            [
                f"Measured {datetime.date.today().isoformat()} on {machine()}; "
                "`.venv/bin/python scripts/experiment_batching.py --sweep --write` (a router per "
                f"batch, steps `{SWEEP_STEPS}`, batching off).",
                "",
                *table,
            ],
            path=EXPERIMENTS_DOC,
        )
        print(EXPERIMENTS_DOC)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", default=STEPS, help=f"SECONDSs@RATE[+FLOODS],... (default {STEPS})"
    )
    parser.add_argument("--interval", type=float, default=1.0, help="controller sample (s)")
    parser.add_argument("--only", choices=("auto", "fixed"), help="run one of the two")
    parser.add_argument(
        "--sweep",
        action="store_true",
        help=f"instead: fixed batches {', '.join(map(str, SWEEP))} through one flood each",
    )
    add_out_arguments(parser)
    parser.add_argument("--write", action="store_true", help="update docs/experiments.md")
    parser.add_argument("--from-results", type=Path, help="skip the runs: redraw an earlier --out")
    parser.add_argument("--flood", help=argparse.SUPPRESS)  # HOST:PORT: be a flood process
    parser.add_argument("--flood-seconds", type=float, default=10.0, help=argparse.SUPPRESS)
    parser.add_argument("--flood-seed", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.flood:
        return flood_main(args)
    parse_steps(args.steps)
    if args.sweep:
        return sweep_main(args)
    if args.from_results:
        out = args.from_results
        results = [
            json.loads((out / f"result-{n}.json").read_text())
            for n in ("auto", "fixed")
            if (out / f"result-{n}.json").exists()
        ]
    else:
        out = script_run("experiment-batching", args)
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
                f"`.venv/bin/python scripts/experiment_batching.py --write` (steps `{args.steps}`, "
                f"a controller sample every {args.interval:g} s).",
                "",
                *table,
                "",
                "![The batching controller with the router saturated](figures/batching-steps.png)",
                "",
                f"The controller's samples: [{CSV_NAME}](figures/{CSV_NAME}).",
            ],
            path=EXPERIMENTS_DOC,
        )
        print(EXPERIMENTS_DOC)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
