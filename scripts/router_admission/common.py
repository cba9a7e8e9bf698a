"""What the admission experiments share: one way to write a router's configuration,
and one load client that also counts each arrival by second.

Every router is ``gnutella-router run`` on a free loopback port (started and stopped by
``fig14/runs.py``'s :func:`~scripts.fig14.runs.experiment_router`) with the paper's
bottleneck: ``router.threads = 1`` and, unless
told otherwise, ``router.query_delay_ms = 20`` (about 50 queries/s of capacity); the
governor off and the profiler sampling every 0.1 s, so that what the controller does is
in its export. The load client runs in this process (one injector, three sinks) and
times every message from its *scheduled* send time, so a router that stops reading
shows in the latencies rather than in the client's pace.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path
from typing import Any

import trio

from gnutella_router.lab.traffic.load import LoadRun, LoadSettings
from protocol.constants import MessageType
from protocol.framing import Frame
from traffic_models.arrivals import ArrivalProcess
from traffic_models.generator import TrafficGenerator
from traffic_models.latency import LoadReport, read_stamp
from traffic_models.mix import PAPER_MIX, MessageMix

TARGET_MS = 100.0
"""The response-time controller's target p90, in every experiment that runs it."""
QUERY, PING, PONG, HIT = (
    int(MessageType.QUERY),
    int(MessageType.PING),
    int(MessageType.PONG),
    int(MessageType.QUERY_HIT),
)
NAMES = {QUERY: "query", PING: "ping", PONG: "pong", HIT: "hit"}


def shedding(policy: str, extra: str = "") -> str:
    """The ``[shedding]`` lines of ``policy``: with ``response-time``, its target, then
    ``extra`` (more settings of the section, one a line)."""
    text = f'policy = "{policy}"\n'
    if policy == "response-time":
        text += f"response_time_target_ms = {TARGET_MS}\n"
    return text + extra


def config_text(shedding_lines: str, *, delay: bool = True, seeds: str | None = None) -> str:
    """A router's configuration: one thread, 20 ms a query unless ``delay`` is false, the
    governor off, the profiler at 0.1 s and ``shedding_lines`` as ``[shedding]``.

    ``seeds`` (``'"HOST:PORT"'`` items) has the router keep one outgoing connection, to
    those; ``""`` turns its dialling off; ``None`` leaves the catcher at its defaults
    (no seeds).
    """
    text = "[router]\nthreads = 1\n"
    if delay:
        text += "query_delay_ms = 20\n"
    text += "\n[governor]\nenabled = false\n\n[profiler]\nenabled = true\ninterval = 0.1\n\n"
    text += f"[shedding]\n{shedding_lines}"
    if seeds is not None:
        text += f"\n[catcher]\nmin_connections = {1 if seeds else 0}\nseeds = [{seeds}]\n"
    return text


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


def run_load(
    port: int,
    arrivals: ArrivalProcess,
    duration: float,
    respond: bool,
    mix: MessageMix = PAPER_MIX,
    *,
    warmup: float = 0.0,
    drain: float = 2.0,
) -> tuple[SeriesLoad, LoadReport]:
    """Offer ``mix`` at ``arrivals`` to the router on ``port`` for ``duration`` seconds
    from four peers (one injecting, three sinks; answering when ``respond``): the client,
    with its per-second counts, and its report (latencies of what was scheduled after
    ``warmup``)."""
    settings = LoadSettings(
        target=("127.0.0.1", port),
        peers=4,
        injectors=1,
        duration=duration,
        warmup=warmup,
        respond=respond,
        drain=drain,
    )
    load = SeriesLoad(settings, TrafficGenerator(mix=mix, arrivals=arrivals, seed=1))
    report = trio.run(load.run)
    return load, report


def p90(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, -(-len(ordered) * 9 // 10) - 1)]


def median(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def write_csv(path: Path, header: list[str], rows: list[list[Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows([["" if v is None else v for v in row] for row in rows])
    return path


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} ms"


def controller_series(profile: dict[str, Any]) -> list[dict[str, Any]]:
    """The profiler's samples that carry the controller's state."""
    return [s for s in profile["samples"] if s.get("admission_rate") is not None]
