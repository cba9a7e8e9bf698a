"""The profiler: the daemon's queues, pool, memory and rates, sampled over time.

Theory of operation
-------------------
Every ``profiler.interval`` seconds (0.1 s by default) one task on the event loop takes
a :class:`ProfileSample`: every stage's queue length (from the daemon's
:class:`~gnutella_router.runtime.stage.StageRegistry`), the router pool's size and busy
workers, the outgoing queue of each connection (messages and bytes; only the
:data:`MAX_CONNECTIONS_TRACKED` busiest are kept per sample, with totals over all of
them, so a sample stays small with a thousand peers), the process's resident set size
(``VmRSS`` from ``/proc/self/status``) and, per message type, what the router received
per second since the previous sample. Samples go into a ring of ``profiler.samples``
entries, so memory is bounded however long the daemon runs. A sample costs a few
dozen microseconds: reading counters the stages keep anyway and one small ``/proc``
read.

Beside the samples the profiler counts the events that actually flowed between the
stages, for the stage graph (:meth:`Profiler.stage_graph_dot`, Graphviz DOT):

* server -> router: events admitted to the router's queue (frames read from peers);
* router -> connections: messages forwarded or generated onto outgoing queues;
* router -> catcher: hosts learned from pongs; server -> catcher: from X-Try headers;
* catcher -> server: dials.

The host counts come from wrapping the router's and the server's host callbacks when
the profiler starts; the others are the stages' own counters, read at each sample.

At shutdown the daemon writes :meth:`Profiler.to_json` to ``profiler.export`` under
the state directory and the DOT graph beside it (``profile.dot``);
``gnutella-router plot-profile`` (:mod:`.profile_plot`) draws the JSON.
:meth:`Profiler.to_csv` gives one row per sample for spreadsheets.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from gnutella_router.config.sections import ProfilerConfig
from gnutella_router.observe.view import RouterView
from gnutella_router.runtime.stage import Stage
from protocol.constants import message_type_name

MAX_CONNECTIONS_TRACKED = 64
"""Connections kept per sample: the busiest by outgoing bytes."""

FORMAT_VERSION = 1


@dataclasses.dataclass(frozen=True, slots=True)
class ProfileSample:
    at: float
    """Seconds since the profiler started."""
    queues: dict[str, int]
    """Stage name -> queue length."""
    pool_size: int
    busy_workers: int
    blocking: int
    """Router handlers waiting on a thread (the injected query delay)."""
    batch_size: int
    """The router's batch size (the batching controller's choice, or the fixed one)."""
    outgoing_messages: int
    """Messages waiting on every outgoing queue."""
    outgoing_bytes: int
    connections: int
    busiest: dict[str, tuple[int, int]]
    """Connection id -> (messages, bytes) waiting, at most 64 connections."""
    rss_bytes: int
    rates: dict[str, float]
    """Message type -> received per second since the previous sample (nonzero only)."""
    received: int
    dropped: int
    """Router totals so far."""
    admission_rate: float | None = None
    """The response-time controller's query rate (None unless that policy is on)."""
    admission_p90: float | None = None
    """Its last 90th percentile of response times, seconds."""
    admission_classes: dict[str, float] | None = None
    """Each class's rate, with classes on."""
    ttl_cut: int | None = None
    """Hops taken off forwarded queries (degradation), under that policy."""

    def as_dict(self) -> dict[str, object]:
        data = dataclasses.asdict(self)
        data["busiest"] = {k: list(v) for k, v in self.busiest.items()}
        return data


@dataclasses.dataclass(frozen=True, slots=True)
class ProfilerStatistics:
    enabled: bool
    interval: float
    samples: int
    capacity: int
    taken: int
    """Samples taken in all (the ring keeps the last ``capacity``)."""
    peak_router_queue: int
    peak_rss_bytes: int
    peak_outgoing_bytes: int
    edges: dict[str, int]


def read_rss_bytes(pid: int | str = "self") -> int:
    """``VmRSS`` of a process in bytes (0 where /proc is unavailable)."""
    return _status_kib(pid, "VmRSS:") * 1024


def read_peak_rss_bytes(pid: int | str = "self") -> int:
    """``VmHWM`` (the resident set's high-water mark) in bytes."""
    return _status_kib(pid, "VmHWM:") * 1024


def _status_kib(pid: int | str, field: str) -> int:
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(field.encode()):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


class Profiler:
    """Samples one daemon into a bounded ring; ``await nursery.start(profiler.serve)``."""

    def __init__(self, daemon: RouterView, config: ProfilerConfig) -> None:
        self.daemon = daemon
        self.config = config
        self.samples: collections.deque[ProfileSample] = collections.deque(maxlen=config.samples)
        self.taken = 0
        self.started_at: float | None = None
        self.hosts_from_router = 0
        self.hosts_from_server = 0
        self.peak_router_queue = 0
        self.peak_rss_bytes = 0
        self.peak_outgoing_bytes = 0
        self._last_received = list(daemon.router.received)
        self._last_at: float | None = None
        self._hooked = False

    # ------------------------------------------------------------------ running

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Sample every ``interval`` seconds until cancelled."""
        self.hook()
        self.started_at = trio.current_time()
        self._last_at = self.started_at
        task_status.started()
        while True:
            await trio.sleep(self.config.interval)
            self.sample(trio.current_time())

    def hook(self) -> None:
        """Count hosts passed from the router and the server to the catcher."""
        if self._hooked:
            return
        self._hooked = True
        replies, server = self.daemon.router.replies, self.daemon.server
        learned_one = replies.on_host_learned
        if learned_one is not None:

            def count_one(host: str, port: int, source: str, connection_id: int) -> None:
                self.hosts_from_router += 1
                learned_one(host, port, source, connection_id)

            replies.on_host_learned = count_one
        learned_many: Callable[[list[tuple[str, int]], str, str], None] | None = (
            server.on_hosts_learned
        )
        if learned_many is not None:

            def count_many(hosts: list[tuple[str, int]], source: str, teller: str) -> None:
                self.hosts_from_server += len(hosts)
                learned_many(hosts, source, teller)

            server.on_hosts_learned = count_many

    def sample(self, now: float) -> ProfileSample:
        """Take one sample at trio time ``now`` and keep it in the ring."""
        daemon = self.daemon
        router = daemon.router
        stage = router.stage
        if self.started_at is None:
            self.started_at = now
        queues: dict[str, int] = {}
        for name in daemon.registry:
            source = daemon.registry[name]
            if isinstance(source, Stage):
                queues[name] = len(source.queue)
        connections = daemon.server.connections.snapshot()
        depths = [(c.id, c.session.pending_messages, c.session.pending_bytes) for c in connections]
        total_messages = sum(d[1] for d in depths)
        total_bytes = sum(d[2] for d in depths)
        if len(depths) > MAX_CONNECTIONS_TRACKED:
            depths.sort(key=lambda d: d[2], reverse=True)
            depths = depths[:MAX_CONNECTIONS_TRACKED]
        elapsed = now - self._last_at if self._last_at is not None else 0.0
        received = router.received
        rates: dict[str, float] = {}
        if elapsed > 0:
            last = self._last_received
            for message_type, count in enumerate(received):
                if count != last[message_type]:
                    rates[message_type_name(message_type)] = round(
                        (count - last[message_type]) / elapsed, 1
                    )
        self._last_received = list(received)
        self._last_at = now
        rss = read_rss_bytes()
        sample = ProfileSample(
            at=round(now - self.started_at, 4),
            queues=queues,
            pool_size=stage.pool_size,
            busy_workers=stage._busy,
            blocking=stage._blocking,
            batch_size=stage.batch_size,
            outgoing_messages=total_messages,
            outgoing_bytes=total_bytes,
            connections=len(connections),
            busiest={str(i): (m, b) for i, m, b in depths},
            rss_bytes=rss,
            rates=rates,
            received=sum(received),
            dropped=router.total_dropped(),
            **self._admission(),
        )
        self.samples.append(sample)
        self.taken += 1
        self.peak_router_queue = max(self.peak_router_queue, queues.get("router", 0))
        self.peak_rss_bytes = max(self.peak_rss_bytes, rss)
        self.peak_outgoing_bytes = max(self.peak_outgoing_bytes, total_bytes)
        return sample

    def _admission(self) -> dict[str, Any]:
        shedder = self.daemon.router.shedder
        if shedder is None or shedder.controller is None:
            return {}
        state = shedder.controller.state()
        return {
            "admission_rate": round(state.rate, 3),
            "admission_p90": state.p90_seconds,
            "admission_classes": {c.name: round(c.rate, 3) for c in state.classes}
            if len(state.classes) > 1
            else None,
            "ttl_cut": state.ttl_cut,
        }

    # ------------------------------------------------------------------ views

    def edges(self) -> dict[str, int]:
        """Events seen flowing between stages, as ``"a->b" -> count``."""
        daemon = self.daemon
        router = daemon.router
        return {
            "server->router": router.stage.queue.admitted,
            "router->connections": sum(router.forwarded) + sum(router.generated),
            "router->catcher": self.hosts_from_router,
            "server->catcher": self.hosts_from_server,
            "catcher->server": daemon.catcher.dials,
        }

    def stage_graph_dot(self) -> str:
        """The stage graph as Graphviz DOT, each edge labelled with its event count.

        Edges with no events yet are drawn dashed: the path exists but was not used.
        """
        lines = [
            "digraph stages {",
            "  rankdir=LR;",
            '  node [shape=box, fontname="Helvetica"];',
            '  connections [shape=ellipse, label="peer connections"];',
        ]
        for edge, count in self.edges().items():
            source, target = edge.split("->")
            style = "" if count else ", style=dashed"
            lines.append(f'  {source} -> {target} [label="{count}"{style}];')
        lines.append("}")
        return "\n".join(lines) + "\n"

    def statistics(self) -> ProfilerStatistics:
        return ProfilerStatistics(
            enabled=self.config.enabled,
            interval=self.config.interval,
            samples=len(self.samples),
            capacity=self.config.samples,
            taken=self.taken,
            peak_router_queue=self.peak_router_queue,
            peak_rss_bytes=self.peak_rss_bytes,
            peak_outgoing_bytes=self.peak_outgoing_bytes,
            edges=self.edges(),
        )

    def as_dict(self) -> dict[str, Any]:
        governor = self.daemon.governor
        batching = self.daemon.batching
        offset = self.started_at or 0.0
        return {
            "format": FORMAT_VERSION,
            "pid": os.getpid(),
            "interval": self.config.interval,
            "capacity": self.config.samples,
            "taken": self.taken,
            "statistics": dataclasses.asdict(self.statistics()),
            "router": dataclasses.asdict(self.daemon.router.statistics()),
            "router_stage": dataclasses.asdict(self.daemon.router.stage.statistics()),
            "governor": None
            if governor is None
            else {
                "added": governor.added,
                "removed": governor.removed,
                "reverted": governor.reverted,
                "samples": [
                    {**dataclasses.asdict(s), "at": round(s.at - offset, 4)}
                    for s in governor.samples
                ],
            },
            "batching": None
            if batching is None
            else {
                "decreased": batching.decreased,
                "increased": batching.increased,
                "resets": batching.resets,
                "samples": [
                    {**dataclasses.asdict(s), "at": round(s.at - offset, 4)}
                    for s in batching.samples
                ],
            },
            "samples": [s.as_dict() for s in self.samples],
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), separators=(",", ":"))

    def to_csv(self) -> str:
        """One row per sample: time, queues, pool, outgoing totals, RSS, rates."""
        samples = list(self.samples)
        stages = sorted({name for s in samples for name in s.queues})
        types = sorted({name for s in samples for name in s.rates})
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(
            [
                "at",
                *(f"queue_{name}" for name in stages),
                "pool_size",
                "busy_workers",
                "blocking",
                "batch_size",
                "connections",
                "outgoing_messages",
                "outgoing_bytes",
                "rss_bytes",
                *(f"rate_{name}" for name in types),
                "received",
                "dropped",
                "admission_rate",
                "admission_p90_seconds",
                "ttl_cut",
            ]
        )
        for s in samples:
            writer.writerow(
                [
                    s.at,
                    *(s.queues.get(name, 0) for name in stages),
                    s.pool_size,
                    s.busy_workers,
                    s.blocking,
                    s.batch_size,
                    s.connections,
                    s.outgoing_messages,
                    s.outgoing_bytes,
                    s.rss_bytes,
                    *(s.rates.get(name, 0.0) for name in types),
                    s.received,
                    s.dropped,
                    "" if s.admission_rate is None else s.admission_rate,
                    "" if s.admission_p90 is None else s.admission_p90,
                    "" if s.ttl_cut is None else s.ttl_cut,
                ]
            )
        return out.getvalue()

    def export_paths(self, state_dir: Path) -> tuple[Path, Path]:
        """Where :meth:`write` puts the JSON and the DOT graph."""
        path = state_dir / self.config.export
        return path, path.with_suffix(".dot")

    def write(self, state_dir: Path) -> tuple[Path, Path]:
        """Take a last sample and write the JSON export and the DOT graph."""
        if self.started_at is not None:
            self.sample(trio.current_time())
        json_path, dot_path = self.export_paths(state_dir)
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(self.to_json() + "\n")
        dot_path.write_text(self.stage_graph_dot())
        return json_path, dot_path
