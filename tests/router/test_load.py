"""The load client measures what it should: checked against known delays."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from gnutella_router.echo import EchoRouter
from gnutella_router.load import LoadError, LoadSettings, run_load
from protocol.constants import MessageType
from protocol.messages import random_guid
from traffic_models.arrivals import ConstantRate
from traffic_models.generator import TrafficGenerator
from traffic_models.latency import LoadReport, read_stamp, stamp_guid
from traffic_models.mix import PAPER_MIX
from traffic_models.trace import TraceRecord, write_trace
from traffic_models.trace_traffic import TraceTraffic

from .peers import running_daemons


def paper_traffic(rate: float, seed: int = 1) -> TrafficGenerator:
    return TrafficGenerator(mix=PAPER_MIX, arrivals=ConstantRate(rate), seed=seed)


async def load_echo(delay: float, rate: float, duration: float = 2.0) -> LoadReport:
    echo = EchoRouter(delay=delay)
    async with trio.open_nursery() as nursery:
        address = await nursery.start(echo.serve)
        settings = LoadSettings(target=address, peers=3, duration=duration, drain=0.5)
        report = await run_load(settings, paper_traffic(rate))
        nursery.cancel_scope.cancel()
    return report


def test_stamps_round_trip() -> None:
    guid = stamp_guid(123_456_789, 42, 7)
    assert len(guid) == 16
    assert guid[8] == 0xFF
    assert guid[15] == 0
    assert read_stamp(guid, 42) == 123_456_789
    assert read_stamp(guid, 43) is None
    assert read_stamp(bytes(16), 42) is None


async def test_a_known_delay_is_measured_as_such() -> None:
    report = await load_echo(delay=0.030, rate=200)
    one_hop = report.latency["one-hop"]
    for name in ("ping", "query"):
        assert 30_000 <= one_hop[name].p50 <= 40_000, one_hop[name]
        assert one_hop[name].p99 <= 60_000, one_hop[name]
    assert report.received == report.expected  # two sinks, every copy
    assert sum(report.expected.values()) == 2 * sum(report.sent.values())
    # Sends more than 1 ms behind schedule happen (the echo, the sinks and the sender share
    # one event loop here); they are counted, and latency is measured from the schedule.
    assert report.late <= 0.1 * sum(report.sent.values())
    assert 190 <= report.achieved_rate <= 210
    assert report.loss == {"ping": 0.0, "query": 0.0}


async def test_without_delay_the_client_adds_little() -> None:
    report = await load_echo(delay=0.0, rate=1000)
    assert report.latency["one-hop"]["ping"].p50 < 5_000
    assert report.received == report.expected


async def test_the_papers_query_delay_shows_in_query_latency(tmp_path: Path) -> None:
    overrides = {"router.query_delay_ms": 20, "router.threads": 1}
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        settings = LoadSettings(target=daemon.address, peers=3, duration=2.0, drain=0.5)
        report = await run_load(settings, paper_traffic(100))
    one_hop = report.latency["one-hop"]
    assert 20_000 <= one_hop["query"].p50 <= 35_000, one_hop["query"]
    assert one_hop["ping"].p50 < one_hop["query"].p50 - 10_000, one_hop["ping"]
    assert report.received == report.expected
    # The router answers every ping with its own pong: replies timed at the injector.
    assert report.replies.get("pong", 0) == report.sent["ping"]
    assert "target-reply" in report.latency


async def test_responding_sinks_make_round_trips(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        settings = LoadSettings(
            target=daemon.address, peers=3, duration=1.5, drain=0.5, respond=True
        )
        report = await run_load(settings, paper_traffic(200))
    round_trip = report.latency["round-trip"]
    assert round_trip["pong"].count == 2 * report.sent["ping"]  # one pong per sink
    assert 0 < round_trip["query_hit"].count <= 2 * report.sent["query"]
    assert round_trip["pong"].p50 < 20_000


async def test_a_refusing_target_is_a_clear_error(tmp_path: Path) -> None:
    overrides = {"network.max_connections": 1}
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        settings = LoadSettings(target=daemon.address, peers=3, duration=1.0)
        with pytest.raises(LoadError, match="503"):
            await run_load(settings, paper_traffic(100))


def test_report_text_and_json_name_every_figure() -> None:
    report = LoadReport(
        target="127.0.0.1:1",
        duration=1.0,
        peers=2,
        injectors=1,
        sinks=1,
        offered_rate=10.0,
        sent={"ping": 10},
        late=0,
        late_threshold_ms=1.0,
        achieved_rate=10.0,
        received={"ping": 9},
        expected={"ping": 10},
        replies={},
        latency={},
        disconnected=[],
    )
    assert "9 of 10 copies" in report.to_text()
    assert '"loss"' in report.to_json()
    assert report.loss["ping"] == pytest.approx(0.1)


async def test_a_recorded_trace_can_be_the_load(tmp_path: Path) -> None:
    records = [
        TraceRecord(
            at=i * 0.01,
            connection=1,
            guid=random_guid(),
            payload_type=MessageType.QUERY if i % 4 == 0 else MessageType.PING,
            ttl=3,
            hops=0,
            payload=(b"\x80\x00trace load\x00" if i % 4 == 0 else b""),
        )
        for i in range(50)
    ]
    path = tmp_path / "load.trace"
    write_trace(path, records)
    echo = EchoRouter()
    async with trio.open_nursery() as nursery:
        address = await nursery.start(echo.serve)
        settings = LoadSettings(target=address, peers=3, duration=1.0, drain=0.3)
        report = await run_load(settings, TraceTraffic(path, speed=2.0))
        nursery.cancel_scope.cancel()
    # 50 records over 0.49 s, played twice as fast, looped to fill one second: ~4 loops.
    assert 150 <= sum(report.sent.values()) <= 250
    assert report.received == report.expected


@pytest.mark.parametrize("seed", range(5))
def test_folding_values_keeps_the_histogram_exact(seed: int) -> None:
    import random

    from hdrh.histogram import HdrHistogram

    from traffic_models.latency import HIGHEST_TRACKABLE_US, LatencyBook, LatencySummary

    rng = random.Random(seed)
    book = LatencyBook()
    reference = HdrHistogram(1, HIGHEST_TRACKABLE_US, 3)
    for _ in range(5000):
        micros = int(rng.lognormvariate(7, 2)) + 1
        micros = min(micros, HIGHEST_TRACKABLE_US)
        book.record("one-hop", 0, micros * 1000)
        reference.record_value(micros)
    assert book.summaries()["one-hop"]["ping"] == LatencySummary.of(reference)


async def test_a_warmup_is_sent_but_not_timed() -> None:
    echo = EchoRouter()
    async with trio.open_nursery() as nursery:
        address = await nursery.start(echo.serve)
        settings = LoadSettings(target=address, peers=2, duration=1.5, drain=0.3, warmup=1.0)
        report = await run_load(settings, paper_traffic(200))
        nursery.cancel_scope.cancel()
    copies = sum(report.received.values())
    timed = sum(s.count for s in report.latency["one-hop"].values())
    assert copies == sum(report.expected.values()) == 300
    assert 80 <= timed <= 120  # the last half second of 1.5
