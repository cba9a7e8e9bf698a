"""One run of Fig. 14's experiment: a router child process with a generated
configuration, the load client against it, and what is read back (latencies, the
governor's samples, the profiler's export, drops, peak RSS); the configurations the
governor's rules are compared in. The other experiment scripts start their routers
with :func:`experiment_router` and keep their exports with :func:`kept_profile` from
here too."""

from __future__ import annotations

import json
import os
import shutil
import statistics
from contextlib import AbstractContextManager as ContextManager
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import trio

from gnutella_router.lab.traffic.load import LoadRun, LoadSettings
from gnutella_router.observe.profiler import read_peak_rss_bytes
from protocol.constants import MessageType
from protocol.framing import Frame
from scripts.fig14 import bursts
from scripts.runner import Router, RunError, router_started
from traffic_models.generator import TrafficGenerator
from traffic_models.latency import LatencyBook, LatencySummary, read_stamp
from traffic_models.mix import PAPER_MIX

QUICK_DURATION = 30.0
QUICK_WARMUP = 15.0
"""At 1000 msgs/s the governor makes its last addition about 8 s in and the backlog it
inherited is gone a few seconds later: a quick run's steady state must start after that,
or its latency checks judge the ramp-up."""
QUERY_DELAY_MS = 20.0
DEFAULT_SIZING = "littles-law"
RATES = (100, 200, 400, 1000)
BROADCAST = (MessageType.PING, MessageType.QUERY)


ExperimentError = RunError
"""An experiment could not be run: a router did not start, wrote no export ..."""


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


def router_config(governor: bool, *, sizing: str = DEFAULT_SIZING, threads: int = 1) -> str:
    return (
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


def experiment_router(workdir: Path, config: str, **options: Any) -> ContextManager[Router]:
    """The experiments' router (:func:`scripts.runner.router_started`) for a ``with``
    block: ``config`` in a fresh ``workdir``, a free loopback port, JSON log lines."""
    if workdir.exists():
        shutil.rmtree(workdir)
    return router_started(workdir, config, arguments=("--log-format", "json"), **options)


def kept_profile(router: Router, out: Path, name: str) -> dict[str, Any]:
    """The stopped router's profiler export, a copy kept as ``out/profile-NAME.json``;
    :class:`ExperimentError` when it wrote none."""
    try:
        profile = router.profile()
    except RunError as exc:
        raise ExperimentError(f"{name}: {exc}") from None
    shutil.copy(router.state / "profile.json", out / f"profile-{name}.json")
    return profile


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
    load_before = os.getloadavg()[0]
    config = router_config(governor, sizing=sizing, threads=threads)
    with experiment_router(out / name, config) as router:
        settings = LoadSettings(
            target=router.address, peers=4, injectors=1, duration=duration, warmup=warmup
        )
        traffic = TrafficGenerator(
            mix=PAPER_MIX, arrivals=bursts.arrival_process(arrivals, rate), seed=1
        )
        load = WholeRunLoad(settings, traffic)
        report = trio.run(load.run)
        load_after = os.getloadavg()[0]
        peak_rss = read_peak_rss_bytes(router.pid)
        alive = router.alive()
    status = router.exit_status
    profile = kept_profile(router, out, name)
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


# --- the governor's rules compared --------------------------------------------------------

COMPARED = (
    ("littles-law", 'governor on, `sizing = "littles-law"` (the default)', True, "littles-law", 1),
    ("queue-threshold", 'governor on, `sizing = "queue-threshold"`', True, "queue-threshold", 1),
    ("fixed-3", "governor off, `router.threads = 3`", False, DEFAULT_SIZING, 3),
    ("fixed-4", "governor off, `router.threads = 4`", False, DEFAULT_SIZING, 4),
)
"""(key, label, governor on, its rule, initial pool) of each configuration compared."""
