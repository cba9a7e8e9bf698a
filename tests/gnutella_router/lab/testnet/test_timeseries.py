"""The traffic phase's per-second series: rows made from synthetic counters, latency
windows and admin pages, written a row at a time, and taken on a mock clock."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from gnutella_router.lab.testnet.nodes import NetworkNode, NodeError
from gnutella_router.lab.testnet.spread_load import SpreadLoadRun
from gnutella_router.lab.testnet.timeseries import (
    QUEUE_FIELDS,
    CsvSeries,
    SeriesRecorder,
    TrafficCounters,
    latency_rows,
    queue_lengths,
    queue_rows,
    round_robin,
    traffic_row,
)
from gnutella_router.lab.traffic.load import LoadSettings
from protocol.constants import MessageType
from traffic_models.arrivals import ConstantRate
from traffic_models.generator import TrafficGenerator
from traffic_models.latency import LatencyBook, LatencyWindow, WindowedLatencyBook, window_summary
from traffic_models.mix import PAPER_MIX

PING, QUERY, HIT = MessageType.PING, MessageType.QUERY, MessageType.QUERY_HIT


def read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as source:
        return list(csv.DictReader(source))


def spread_run(peers: int = 5) -> SpreadLoadRun:
    """A load run that never connects: the tests set its counters by hand."""
    settings = LoadSettings(target=("127.0.0.1", 1), peers=peers, injectors=1)
    traffic = TrafficGenerator(mix=PAPER_MIX, arrivals=ConstantRate(10), seed=1)
    return SpreadLoadRun(settings, traffic, [], registered=None)  # type: ignore[arg-type]


# --- rows from counters and windows ----------------------------------------------------


def test_a_row_is_the_change_between_two_ticks() -> None:
    before = TrafficCounters(
        offered=10, offered_query=4, offered_ping=6, owed=20, delivered_query=15,
        delivered_ping=5, duplicates=1, hits=2, late=0,
    )  # fmt: skip
    after = TrafficCounters(
        offered=110, offered_query=40, offered_ping=70, owed=230, delivered_query=160,
        delivered_ping=68, duplicates=4, hits=9, late=3,
    )  # fmt: skip
    window = {1_000: 50, 2_000: 40, 100_000: 10}  # 50 copies at 1 ms, 40 at 2, 10 at 100
    row = traffic_row(7, 1.0004, before, after, window)
    assert row == {
        "second": 7,
        "span_s": 1.0,
        "offered": 100,
        "offered_query": 36,
        "offered_ping": 64,
        "owed": 210,
        "delivered": 208,
        "delivered_query": 145,
        "delivered_ping": 63,
        "duplicates": 3,
        "hits": 7,
        "late": 3,
        "latency_samples": 100,
        "p50_ms": 1.0,
        "p90_ms": 2.0,
        "p99_ms": pytest.approx(100.0, rel=1e-3),  # the HDR bucket's highest value
        "max_ms": pytest.approx(100.0, rel=1e-3),
    }
    assert list(row) == [
        "second", "span_s", "offered", "offered_query", "offered_ping", "owed", "delivered",
        "delivered_query", "delivered_ping", "duplicates", "hits", "late", "latency_samples",
        "p50_ms", "p90_ms", "p99_ms", "max_ms",
    ]  # fmt: skip


def test_a_second_without_copies_has_no_latency() -> None:
    row = traffic_row(0, 1.0, TrafficCounters(), TrafficCounters(offered=3), {})
    assert row["offered"] == 3
    assert row["latency_samples"] == 0
    assert [row[k] for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")] == ["", "", "", ""]


def test_counters_owe_pings_only_to_the_sinks_they_reach() -> None:
    run = spread_run(peers=5)  # one injector, four sinks
    run.sent[PING], run.sent[QUERY], run.sent[HIT] = 10, 3, 1
    run.expected[PING], run.expected[QUERY] = 10 * 4, 3 * 4
    run.received[PING], run.received[QUERY] = 9, 12
    run.duplicates[QUERY] = 2
    run.replies[HIT] = 5
    run.late = 4
    assert TrafficCounters.of(run, ping_sinks=1) == TrafficCounters(
        offered=14, offered_query=3, offered_ping=10, owed=12 + 10, delivered_query=12,
        delivered_ping=9, duplicates=2, hits=5, late=4,
    )  # fmt: skip
    assert TrafficCounters.of(run, ping_sinks=4).owed == 12 + 40


def test_a_window_is_taken_whole_and_starts_again() -> None:
    window = LatencyWindow()
    for micros in (5, 5, 700):
        window.record(micros * 1000)
    window.record(-1)  # an instrument error: left out
    window.record(400)  # under a microsecond reads as one, as in the histograms
    assert window.take() == {5: 2, 700: 1, 1: 1}
    assert window.take() == {}


def test_a_window_holds_few_distinct_values_whatever_the_rate() -> None:
    window = LatencyWindow()
    for micros in range(1, 2_000_000, 7):  # 285,715 distinct latencies up to 2 s
        window.record(micros * 1000)
    counts = window.take()
    assert sum(counts.values()) == 285_715
    assert len(counts) < 12_000
    summary = window_summary(counts)
    assert summary is not None
    samples, (p50, _, p99), highest = summary
    assert samples == 285_715
    assert p50 == pytest.approx(1_000_000, rel=2e-3)
    assert p99 == pytest.approx(1_980_000, rel=2e-3)
    assert highest == pytest.approx(2_000_000, rel=2e-3)


def test_the_windowed_book_windows_copies_not_replies() -> None:
    book = WindowedLatencyBook()
    book.record("two-hop", QUERY, 3_000_000)
    book.record("round-trip", HIT, 9_000_000)
    book.record("target-reply", MessageType.PONG, 9_000_000)
    assert book.window.take() == {3000: 1}
    assert set(book.summaries()) == {"two-hop", "round-trip", "target-reply"}  # all kept


def test_latency_rows_are_the_histograms_buckets() -> None:
    book = LatencyBook()
    for micros, count in ((300, 4), (300, 1), (45_000, 2)):
        for _ in range(count):
            book.record("one-hop", PING, micros * 1000)
    book.record("round-trip", HIT, 7_000_000)
    rows = list(latency_rows(book))
    assert [(r["kind"], r["type"], r["count"]) for r in rows] == [
        ("one-hop", "ping", 5),
        ("one-hop", "ping", 2),
        ("round-trip", "query_hit", 1),
    ]
    assert rows[0]["latency_us"] == 300
    assert rows[1]["latency_us"] == pytest.approx(45_000, rel=1e-3)
    assert rows[2]["latency_us"] == pytest.approx(7_000, rel=1e-3)


# --- queues ----------------------------------------------------------------------------


def stages_page(**lengths: int) -> dict[str, Any]:
    return {
        "stages": {
            "admin": {"requests": {}},  # registered, not a stage: no queue
            **{name: {"queue": {"length": n, "threshold": 1000}} for name, n in lengths.items()},
        },
        "governor": None,
    }


def connections_page(*pending: int) -> list[dict[str, Any]]:
    return [
        {"peer": f"127.0.0.1:{i}", "outgoing": {"pending_messages": n}}
        for i, n in enumerate(pending)
    ]


def test_queue_lengths_are_the_stages_and_the_outgoing_queues() -> None:
    lengths = queue_lengths(stages_page(router=12, catcher=0), connections_page(3, 0, 40))
    assert lengths == {"catcher": 0, "outgoing": 43, "router": 12}
    assert queue_rows(5, 2, lengths) == [
        {"second": 5, "node": 2, "queue": "catcher", "length": 0},
        {"second": 5, "node": 2, "queue": "outgoing", "length": 43},
        {"second": 5, "node": 2, "queue": "router", "length": 12},
    ]


def test_queue_lengths_leave_out_what_a_page_lacks() -> None:
    assert queue_lengths(None, None) == {}
    assert queue_lengths({"stages": "nonsense"}, ["not a connection", {"outgoing": None}]) == {
        "outgoing": 0
    }
    assert queue_lengths(stages_page(router=1), {"error": "x"}) == {"router": 1}


def test_round_robin_goes_round_the_network() -> None:
    assert round_robin(3, 0, 50) == ([0, 1, 2], 0)
    assert round_robin(5, 3, 2) == ([3, 4], 0)
    assert round_robin(5, 4, 3) == ([4, 0, 1], 2)
    assert round_robin(0, 4, 3) == ([], 0)


# --- writing ---------------------------------------------------------------------------


def test_a_series_is_on_disk_row_by_row_and_stops_at_its_cap(tmp_path: Path) -> None:
    path = tmp_path / "q.csv"
    series = CsvSeries(path, QUEUE_FIELDS, max_rows=3)
    series.write([])
    assert not path.exists()  # no row, no file
    series.write(queue_rows(0, 1, {"router": 4}))
    assert read(path) == [{"second": "0", "node": "1", "queue": "router", "length": "4"}]
    series.write(queue_rows(1, 1, {"catcher": 0, "outgoing": 2, "router": 5}))
    assert series.full
    assert series.close() == path
    assert [r["queue"] for r in read(path)] == ["router", "catcher", "outgoing"]
    assert CsvSeries(tmp_path / "none.csv", QUEUE_FIELDS, 3).close() is None


def test_a_series_that_cannot_be_written_says_why(tmp_path: Path) -> None:
    series = CsvSeries(tmp_path / "missing" / "q.csv", QUEUE_FIELDS, max_rows=3)
    series.write(queue_rows(0, 0, {"router": 1}))
    assert series.error is not None
    assert "q.csv" in series.error
    series.write(queue_rows(1, 0, {"router": 1}))  # and takes nothing more
    assert series.close() is None


# --- the recorder on a mock clock ------------------------------------------------------


class FakeNode(NetworkNode):
    """Answers ``/stages`` and ``/connections`` with queues that grow every read."""

    kind = "fake"

    def __init__(self, index: int, *, broken: bool = False) -> None:
        super().__init__(index, Path("."))
        self.reads = 0
        self.broken = broken

    async def get(self, target: str) -> Any:
        await trio.sleep(0.01)
        if self.broken:
            raise NodeError("not answering")
        if target == "/stages":
            self.reads += 1
            return stages_page(router=self.index * 100 + self.reads)
        return connections_page(self.reads)

    def running(self) -> bool:
        return True

    async def start(self, nursery: trio.Nursery, config: Any) -> None:
        raise NotImplementedError

    async def write_dump(self) -> None:
        raise NotImplementedError

    def request_stop(self) -> None:
        raise NotImplementedError

    async def wait_stopped(self, grace: float) -> bool:
        raise NotImplementedError


async def test_the_recorder_takes_a_row_a_second_from_the_first_message(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    load = spread_run(peers=3)
    nodes = [FakeNode(0), FakeNode(1), FakeNode(2), FakeNode(3, broken=True)]
    recorder = SeriesRecorder(tmp_path, ping_sinks=1, reads_per_second=2)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(recorder.run, load, nodes)
        await trio.sleep(5.0)  # connecting and probing: before second 0
        started = trio.current_time()
        load.sending.set()
        for second in range(3):  # 10, 20, then 30 queries, each to two sinks
            if second:  # the first batch goes before the recorder has run at all
                await trio.sleep_until(started + second + 0.5)
            load.sent[QUERY] += 10 * (second + 1)
            load.expected[QUERY] += 20 * (second + 1)
            load.received[QUERY] += 20 * (second + 1)
            load.book.record("two-hop", QUERY, (second + 1) * 1_000_000)
        await trio.sleep_until(started + 3.25)  # the drain ends a quarter second in
        nursery.cancel_scope.cancel()
    assert recorder.finish(load) == [
        tmp_path / "timeseries.csv",
        tmp_path / "node-queues.csv",
        tmp_path / "latency.csv",
    ]
    assert recorder.error is None
    rows = read(tmp_path / "timeseries.csv")
    assert [(r["second"], r["span_s"], r["offered"], r["owed"], r["delivered"]) for r in rows] == [
        ("0", "1.0", "10", "20", "20"),
        ("1", "1.0", "20", "40", "40"),
        ("2", "1.0", "30", "60", "60"),
        ("3", "0.25", "0", "0", "0"),
    ]
    assert [float(r["p50_ms"]) for r in rows[:3]] == pytest.approx([1, 2, 3], rel=1e-3)
    assert rows[3]["p50_ms"] == ""
    queues = read(tmp_path / "node-queues.csv")
    # Two nodes a second, round the network; the node that does not answer has no row.
    read_at = [(r["second"], r["node"]) for r in queues if r["queue"] == "router"]
    assert read_at == [("0", "0"), ("0", "1"), ("1", "2"), ("2", "0"), ("2", "1"), ("3", "2")]
    assert {r["queue"] for r in queues} == {"router", "outgoing"}
    assert [r["length"] for r in queues if r["node"] == "0" and r["queue"] == "router"] == [
        "1",
        "2",
    ]
    latency = read(tmp_path / "latency.csv")
    assert sum(int(r["count"]) for r in latency) == 3


async def test_a_recorder_whose_load_never_sent_writes_nothing(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    load = spread_run()
    recorder = SeriesRecorder(tmp_path)
    with trio.move_on_after(3):
        await recorder.run(load, [FakeNode(0)])
    assert recorder.finish(load) == []
    assert not any(tmp_path.iterdir())  # noqa: ASYNC240 (a test's own temporary folder)
