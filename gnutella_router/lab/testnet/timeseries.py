"""Per-second series of a test network's traffic phase: what was offered, what was
delivered and how late, and every node's queue lengths.

Theory of operation
-------------------
``summary.json`` and the other CSV files say what a run did in all; a network that
falls behind half way through, or a node whose queues fill while the rest keep up, is
seen only over time. So two series are taken while the load client runs, from the
moment it starts sending (second 0) until its drain ends:

* ``timeseries.csv``, a row per second: the messages the injector sent in that second
  (``offered``, and by type), the copies the sinks are owed for them (``owed``: every
  sink a query's TTL reaches, and node 0's sink for a ping, since pings stop one hop
  out), the first copies that reached the sinks in it (``delivered``), the duplicate
  copies, the query hits back at the injector and the sends that went out late, and
  the latency percentiles (p50, p90, p99, max, in ms) of the copies that arrived in it.
  The counts are differences of the load client's own counters between two ticks;
  ``span_s`` is the tick's real length (1 s but when the controller was held up; the
  last row, at the end of the drain, is shorter), so a rate is a count over its span.
  Latencies come from the window the load client's latency book fills beside its
  histograms (:class:`~traffic_models.latency.WindowedLatencyBook`), taken whole at
  each tick and read through an HDR histogram: its values are folded to their HDR
  bucket, so a window holds a few thousand distinct values at most whatever the rate.
* ``node-queues.csv``, in long form (``second,node,queue,length``): each stage queue a
  node's ``/stages`` page shows (``router``, ``catcher``) and ``outgoing``, the messages
  waiting in all its connections' outgoing queues (summed from ``/connections``). Each
  node is read about once a second; a network of more than :data:`READS_PER_SECOND`
  nodes that many nodes a second, round the network, so each node every
  ``nodes / READS_PER_SECOND`` seconds, as the status line reads them: being watched
  must not take the CPU the routers need. A round that is slow delays the next round,
  never the traffic series.

Both files are written a row at a time as the rows come (and flushed), so nothing grows
in memory with the run's length; each stops at a cap (:data:`MAX_TRAFFIC_ROWS`,
:data:`MAX_QUEUE_ROWS`) and takes nothing more after it. When the run ends,
``latency.csv`` gets the whole run's latency distributions (the load client's HDR
histograms, a row per recorded bucket: ``kind,type,latency_us,count``), which the
latency CDF (:mod:`.plots`) is drawn from.
"""

from __future__ import annotations

import csv
import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import trio

from gnutella_router.lab.testnet.nodes import NetworkNode, NodeError
from gnutella_router.lab.testnet.spread_load import SpreadLoadRun
from gnutella_router.lab.traffic.load import LoadRun
from protocol.constants import MessageType
from traffic_models.latency import LatencyBook, window_summary

TRAFFIC_FILE = "timeseries.csv"
QUEUES_FILE = "node-queues.csv"
LATENCY_FILE = "latency.csv"
READS_PER_SECOND = 50
"""Nodes whose queues are read per second at most (the status line's budget too)."""
MAX_TRAFFIC_ROWS = 86_400
"""Rows of ``timeseries.csv`` at most: a day of traffic at one a second."""
MAX_QUEUE_ROWS = 2_000_000
"""Rows of ``node-queues.csv`` at most (some 40 MB): three queues of 50 nodes for
about three and a half hours."""
MAX_LATENCY_ROWS = 100_000
"""Rows of ``latency.csv`` at most: an HDR histogram records a few thousand buckets."""
TRAFFIC_FIELDS = (
    "second", "span_s", "offered", "offered_query", "offered_ping", "owed", "delivered",
    "delivered_query", "delivered_ping", "duplicates", "hits", "late", "latency_samples",
    "p50_ms", "p90_ms", "p99_ms", "max_ms",
)  # fmt: skip
QUEUE_FIELDS = ("second", "node", "queue", "length")
LATENCY_FIELDS = ("kind", "type", "latency_us", "count")


@dataclasses.dataclass(frozen=True, slots=True)
class TrafficCounters:
    """The load client's running totals at one tick."""

    offered: int = 0
    offered_query: int = 0
    offered_ping: int = 0
    owed: int = 0
    delivered_query: int = 0
    delivered_ping: int = 0
    duplicates: int = 0
    hits: int = 0
    late: int = 0

    @classmethod
    def of(cls, run: LoadRun, *, ping_sinks: int = 1) -> TrafficCounters:
        """Read from ``run``. Its ``expected`` counts every sink for a ping; only
        ``ping_sinks`` of them are owed one (pings stop one hop from the injector)."""
        sinks = max(1, run.settings.peers - run.settings.injectors)
        ping, query = MessageType.PING, MessageType.QUERY
        return cls(
            offered=sum(run.sent),
            offered_query=run.sent[query],
            offered_ping=run.sent[ping],
            owed=run.expected[query] + run.expected[ping] // sinks * ping_sinks,
            delivered_query=run.received[query],
            delivered_ping=run.received[ping],
            duplicates=sum(run.duplicates),
            hits=run.replies[MessageType.QUERY_HIT],
            late=run.late,
        )


def traffic_row(
    second: int,
    span: float,
    before: TrafficCounters,
    after: TrafficCounters,
    latencies: Mapping[int, int],
) -> dict[str, object]:
    """One row of ``timeseries.csv``: what happened between the ticks ``before`` and
    ``after``, ``span`` seconds apart, the first at ``second``; ``latencies`` is the
    window of copy latencies (microseconds -> copies) that arrived in between."""
    change = {
        field.name: getattr(after, field.name) - getattr(before, field.name)
        for field in dataclasses.fields(TrafficCounters)
    }
    summary = window_summary(latencies)
    samples, (p50, p90, p99), highest = summary if summary else (0, [None] * 3, None)
    return {
        "second": second,
        "span_s": round(span, 3),
        "offered": change["offered"],
        "offered_query": change["offered_query"],
        "offered_ping": change["offered_ping"],
        "owed": change["owed"],
        "delivered": change["delivered_query"] + change["delivered_ping"],
        "delivered_query": change["delivered_query"],
        "delivered_ping": change["delivered_ping"],
        "duplicates": change["duplicates"],
        "hits": change["hits"],
        "late": change["late"],
        "latency_samples": samples,
        "p50_ms": _ms(p50),
        "p90_ms": _ms(p90),
        "p99_ms": _ms(p99),
        "max_ms": _ms(highest),
    }


def _ms(micros: int | None) -> object:
    return "" if micros is None else round(micros / 1000, 3)


def queue_lengths(stages: Any, connections: Any) -> dict[str, int]:
    """A node's queue lengths by name, from its ``/stages`` and ``/connections`` pages:
    each stage with a queue, and ``outgoing``, the messages its connections' outgoing
    queues hold between them. What a page lacks is left out."""
    lengths: dict[str, int] = {}
    table = stages.get("stages") if isinstance(stages, dict) else None
    for name, stage in (table or {}).items() if isinstance(table, dict) else ():
        queue = stage.get("queue") if isinstance(stage, dict) else None
        if isinstance(queue, dict) and isinstance(queue.get("length"), int):
            lengths[str(name)] = queue["length"]
    if isinstance(connections, list):
        pending = 0
        for connection in connections:
            outgoing = connection.get("outgoing") if isinstance(connection, dict) else None
            if isinstance(outgoing, dict) and isinstance(outgoing.get("pending_messages"), int):
                pending += outgoing["pending_messages"]
        lengths["outgoing"] = pending
    return dict(sorted(lengths.items()))


def queue_rows(second: int, node: int, lengths: Mapping[str, int]) -> list[dict[str, object]]:
    """``node-queues.csv`` rows of one node at ``second``."""
    return [
        {"second": second, "node": node, "queue": name, "length": length}
        for name, length in lengths.items()
    ]


def latency_rows(book: LatencyBook) -> Iterable[dict[str, object]]:
    """``latency.csv`` rows: every recorded bucket of every histogram in ``book``."""
    for kind, name, micros, count in book.recorded():
        yield {"kind": kind, "type": name, "latency_us": micros, "count": count}


def round_robin(count: int, start: int, most: int) -> tuple[list[int], int]:
    """The next ``most`` of ``count`` positions from ``start``, wrapping round (each
    once at most), and where the round after begins."""
    if count <= 0:
        return [], 0
    taken = min(count, most)
    return [(start + i) % count for i in range(taken)], (start + taken) % count


class CsvSeries:
    """A CSV file written a row at a time, flushed after each batch, stopping at
    ``max_rows``. The file is made at its first row: a series with none leaves none. A
    write that fails ends the series (``error`` says why); the run goes on."""

    def __init__(self, path: Path, fields: Sequence[str], max_rows: int) -> None:
        self.path = path
        self.fields = list(fields)
        self.max_rows = max_rows
        self.rows = 0
        self.error: str | None = None
        self._file: TextIO | None = None
        self._writer: csv.DictWriter[str] | None = None

    @property
    def full(self) -> bool:
        return self.rows >= self.max_rows

    def write(self, rows: Iterable[Mapping[str, object]]) -> None:
        if self.error is not None:
            return
        try:
            for row in rows:
                if self.full:
                    break
                if self._writer is None:
                    self._file = self.path.open("w", newline="")
                    self._writer = csv.DictWriter(self._file, fieldnames=self.fields)
                    self._writer.writeheader()
                self._writer.writerow(row)
                self.rows += 1
            if self._file is not None:
                self._file.flush()
        except OSError as exc:
            self.error = f"{self.path.name}: {exc}"
            self.close()

    def close(self) -> Path | None:
        """Close the file; its path if it holds a row."""
        if self._file is not None:
            try:
                self._file.close()
            except OSError as exc:
                self.error = self.error or f"{self.path.name}: {exc}"
            self._file = None
            self._writer = None
        return self.path if self.rows else None


class SeriesRecorder:
    """Takes the traffic phase's series into ``results`` (see the module docstring):
    :meth:`run` alongside the load client, :meth:`finish` once it is done."""

    def __init__(
        self,
        results: Path,
        *,
        ping_sinks: int = 1,
        reads_per_second: int = READS_PER_SECOND,
        interval: float = 1.0,
    ) -> None:
        self.traffic = CsvSeries(results / TRAFFIC_FILE, TRAFFIC_FIELDS, MAX_TRAFFIC_ROWS)
        self.queues = CsvSeries(results / QUEUES_FILE, QUEUE_FIELDS, MAX_QUEUE_ROWS)
        self.latency = CsvSeries(results / LATENCY_FILE, LATENCY_FIELDS, MAX_LATENCY_ROWS)
        self.ping_sinks = ping_sinks
        self.reads_per_second = reads_per_second
        self.interval = interval
        self.error: str | None = None
        """Why the series stopped early, when it did (the run itself goes on)."""
        self._start: float | None = None
        self._last: tuple[float, TrafficCounters] = (0.0, TrafficCounters())
        self._next_node = 0

    async def run(self, load: SpreadLoadRun, nodes: Sequence[NetworkNode]) -> None:
        """From the load client's first message until cancelled; never raises but
        :class:`trio.Cancelled` (a fault here must not cost the run)."""
        try:
            await load.sending.wait()
            # From zero: the load client counts nothing before its first message (its
            # probes are not counted), and it may send a batch before this task runs.
            self._start = trio.current_time()
            self._last = (self._start, TrafficCounters())
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._tick_traffic, load)
                nursery.start_soon(self._read_queues, nodes)
        except Exception as exc:
            self.error = f"{exc.__class__.__name__}: {exc}"

    async def _tick_traffic(self, load: SpreadLoadRun) -> None:
        assert self._start is not None
        while not self.traffic.full:
            elapsed = self._last[0] - self._start
            await trio.sleep_until(
                self._start + (math.floor(elapsed / self.interval + 1e-9) + 1) * self.interval
            )
            self.take(load)

    def take(self, load: SpreadLoadRun) -> None:
        """Write the row from the last tick until now."""
        assert self._start is not None
        now = trio.current_time()
        then, before = self._last
        after = TrafficCounters.of(load, ping_sinks=self.ping_sinks)
        second = math.floor((then - self._start) / self.interval + 1e-9)
        self.traffic.write(
            [traffic_row(second, now - then, before, after, load.book.window.take())]
        )
        self._last = (now, after)

    async def _read_queues(self, nodes: Sequence[NetworkNode]) -> None:
        assert self._start is not None
        while not self.queues.full:
            began = trio.current_time()
            second = math.floor((began - self._start) / self.interval + 1e-9)
            running = [n for n in nodes if n.running()]
            picked, self._next_node = round_robin(
                len(running), self._next_node, self.reads_per_second
            )
            read: dict[int, dict[str, int]] = {}
            async with trio.open_nursery() as nursery:
                for position in picked:
                    nursery.start_soon(_read_node, running[position], read)
            self.queues.write(
                row for index in sorted(read) for row in queue_rows(second, index, read[index])
            )
            await trio.sleep_until(began + self.interval)

    def finish(self, load: SpreadLoadRun | None) -> list[Path]:
        """The last (shorter) traffic row, ``latency.csv``, every file closed; the
        files that hold rows."""
        if load is not None and self._start is not None:
            if trio.current_time() - self._last[0] > 0.001 and not self.traffic.full:
                self.take(load)
            self.latency.write(latency_rows(load.book))
        written = [self.traffic.close(), self.queues.close(), self.latency.close()]
        self.error = self.error or next(
            (s.error for s in (self.traffic, self.queues, self.latency) if s.error), None
        )
        return [path for path in written if path is not None]


async def _read_node(node: NetworkNode, into: dict[int, dict[str, int]]) -> None:
    """``node``'s queue lengths into ``into``; nothing when it cannot answer (its death
    is reported by the run)."""
    try:
        stages = await node.get("/stages")
        connections = await node.get("/connections")
    except NodeError:
        return
    into[node.index] = queue_lengths(stages, connections)
