"""Replaying traces into a router: content, order and timing survive; speed and loops."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import pytest
import trio

from gnutella_router.cli.main import main
from gnutella_router.lab.traffic.replay import (
    ReplayError,
    ReplaySummary,
    loop_guid,
    parse_target,
    replay,
)
from protocol.constants import MessageType
from protocol.framing import Frame
from protocol.handshake import NEED_DATA, Acceptor, ConnectRequest, HandshakeComplete
from protocol.messages import Bye, Message, Ping, Pong, Push, Query, QueryHit, QueryHitResult
from tests.support.peers import Peer, message, recorded, running_daemons
from traffic_models.trace import TraceRecord, read_trace, write_trace

RECORDING = {"trace.record": "capture.trace"}
TIMING_TOLERANCE = 0.05
"""Seconds: how far a replayed message's offset may be from the recorded one."""

Content = tuple[bytes, int, int, int, bytes]


def content(record: TraceRecord) -> Content:
    return (record.guid, record.payload_type, record.ttl, record.hops, record.payload)


def by_connection(records: Sequence[TraceRecord]) -> dict[int, list[TraceRecord]]:
    grouped: dict[int, list[TraceRecord]] = {}
    for record in records:
        grouped.setdefault(record.connection, []).append(record)
    return grouped


def read(path: Path | None) -> list[TraceRecord]:
    assert path is not None
    return list(read_trace(path))


def traced(at: float, connection: int, msg: Message) -> TraceRecord:
    frame = Frame.from_message(msg)
    return TraceRecord(
        at, connection, frame.guid, frame.payload_type, frame.ttl, frame.hops, frame.payload
    )


def hit_for(query: Message) -> Message:
    result = QueryHitResult(1, 1000, b"free jazz.ogg")
    return Message(query.guid, 3, 2, QueryHit(6346, "10.0.0.9", 100, (result,), b"h" * 16))


async def replay_into_recording_daemon(
    tmp_path: Path,
    trace: Path,
    expected: int,
    *,
    speed: float = 1.0,
    loops: int = 1,
    peers: int | None = None,
) -> tuple[list[TraceRecord], ReplaySummary]:
    """Replay ``trace`` into a fresh recording daemon; its trace and the summary."""
    async with running_daemons(tmp_path / "b", overrides=RECORDING) as (target,):
        summary = await replay(trace, target.address, speed=speed, loops=loops, peers=peers)
        await recorded(target, expected)
        path = target.config.trace_path
    return read(path), summary


@pytest.mark.e2e
async def test_record_replay_record_round_trip(tmp_path: Path) -> None:
    queries = [message(Query(b"free jazz"), ttl=5, hops=1), message(Query(b"seda"), ttl=3)]
    script: list[tuple[float, int, list[Message]]] = [
        (0.00, 0, [message(Ping(), ttl=2), queries[0]]),
        (0.10, 1, [message(Pong(6346, "10.0.0.1", 3, 4), ttl=1, hops=2)]),
        (0.30, 2, [queries[1], message(Push(b"s" * 16, 1, "10.0.0.2", 6346), ttl=4, hops=3)]),
        (0.35, 0, [hit_for(queries[0])]),
        (0.60, 1, [message(Ping(), ttl=1), message(Query(b"router"), ttl=7, hops=0)]),
        (0.62, 2, [hit_for(queries[1])]),
    ]
    total = sum(len(batch) for _, _, batch in script)
    async with running_daemons(tmp_path / "a", overrides=RECORDING) as (source,):
        peers = [await Peer.connect(source.address) for _ in range(3)]
        start = trio.current_time()
        for at, index, batch in script:
            await trio.sleep_until(start + at)
            await peers[index].send(*batch)
        await recorded(source, total)
        first_path = source.config.trace_path
    first = read(first_path)
    assert len(first) == total
    assert first_path is not None

    second, summary = await replay_into_recording_daemon(tmp_path, first_path, total)
    assert len(second) == total
    # The same messages on the same number of connections, in the same order on each.
    first_groups = by_connection(first)
    second_groups = by_connection(second)
    assert len(second_groups) == len(first_groups) == 3
    by_first_guid = {group[0].guid: group for group in second_groups.values()}
    for group in first_groups.values():
        replayed = by_first_guid[group[0].guid]
        assert [content(r) for r in replayed] == [content(r) for r in group]
    # And at the same moments, relative to the first message.
    replayed_at = {r.guid + bytes([r.payload_type]): r.at - second[0].at for r in second}
    for record in first:
        offset = record.at - first[0].at
        assert replayed_at[record.guid + bytes([record.payload_type])] == pytest.approx(
            offset, abs=TIMING_TOLERANCE
        )
    assert summary.sent == total
    # (Sends more than 10 ms behind their due time are counted as late, which only a
    # busy machine makes happen: the offsets above are what this test holds.)
    assert summary.dropped == 0


def paced_trace(
    path: Path, count: int = 9, gap: float = 0.1, lead: float = 2.0
) -> list[TraceRecord]:
    """``count`` messages ``gap`` apart on two connections, starting ``lead`` s in."""
    records = [
        traced(lead + i * gap, 10 + i % 2, message(Query(b"q%d" % i), ttl=4, hops=i % 3))
        for i in range(count)
    ]
    write_trace(path, records)
    return records


@pytest.mark.parametrize("speed", [1.0, 2.0])
async def test_speed_compresses_time(tmp_path: Path, speed: float) -> None:
    trace = tmp_path / "paced.trace"
    records = paced_trace(trace)
    second, summary = await replay_into_recording_daemon(tmp_path, trace, 9, speed=speed)
    span = 0.8 / speed
    assert second[-1].at - second[0].at == pytest.approx(span, abs=TIMING_TOLERANCE)
    # The idle time before the first record is not replayed.
    assert summary.duration == pytest.approx(span, abs=TIMING_TOLERANCE)
    assert sorted(content(r) for r in second) == sorted(content(r) for r in records)


async def test_loops_send_again_with_fresh_guids(tmp_path: Path) -> None:
    trace = tmp_path / "loop.trace"
    query = message(Query(b"again"), ttl=3)
    records = [
        traced(0.0, 1, message(Ping(), ttl=1)),
        traced(0.05, 1, query),
        traced(0.1, 2, hit_for(query)),
    ]
    write_trace(trace, records)
    second, summary = await replay_into_recording_daemon(tmp_path, trace, 6, loops=2)
    assert summary.sent == 6
    guids = [r.guid for r in second]
    assert len(set(guids)) == 4  # the hit shares its query's GUID, in both passes
    assert sorted(guids) == sorted(
        [r.guid for r in records] + [loop_guid(r.guid, 1) for r in records]
    )
    for record in records:
        renamed = loop_guid(record.guid, 1)
        assert renamed != record.guid
        assert renamed[:12] == record.guid[:12]
        assert renamed[15:] == record.guid[15:]
    first_pass = [r for r in second if r.guid in {x.guid for x in records}]
    second_pass = [r for r in second if r not in first_pass]
    assert [c[1:] for c in map(content, second_pass)] == [c[1:] for c in map(content, first_pass)]
    # The second pass follows the first by one mean gap (0.05 s).
    assert second_pass[0].at - first_pass[0].at == pytest.approx(0.15, abs=TIMING_TOLERANCE)


async def test_fewer_peers_than_connections_share_them(tmp_path: Path) -> None:
    trace = tmp_path / "shared.trace"
    records = paced_trace(trace, count=6, gap=0.01)
    second, summary = await replay_into_recording_daemon(tmp_path, trace, 6, peers=1)
    assert summary.peers == 1
    assert len({r.connection for r in second}) == 1
    assert [content(r) for r in second] == [content(r) for r in records]


async def test_byes_are_not_replayed(tmp_path: Path) -> None:
    trace = tmp_path / "bye.trace"
    records = [
        traced(0.0, 1, message(Ping(), ttl=1)),
        traced(0.01, 1, message(Bye(200, "done"), ttl=1)),
        traced(0.02, 1, message(Query(b"after"), ttl=1)),
    ]
    write_trace(trace, records)
    second, summary = await replay_into_recording_daemon(tmp_path, trace, 2)
    assert [r.payload_type for r in second] == [MessageType.PING, MessageType.QUERY]
    assert summary.skipped == 1
    assert summary.sent == 2


@pytest.mark.e2e
async def test_a_stalled_event_loop_makes_records_late_not_lost(tmp_path: Path) -> None:
    trace = tmp_path / "late.trace"
    records = [traced(i * 0.01, 1, message(Query(b"%d" % i), ttl=1)) for i in range(30)]
    write_trace(trace, records)
    async with running_daemons(tmp_path / "b", overrides=RECORDING) as (target,):

        async def stall() -> None:
            await trio.sleep(0.05)
            time.sleep(0.12)  # noqa: ASYNC251 (blocks the loop on purpose: what is due meanwhile goes out late)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stall)
            summary = await replay(trace, target.address)
        await recorded(target, 30)
    assert summary.sent == 30
    assert 5 <= summary.late <= 20


# ---------------------------------------------------------------------------------------
# A target that never reads: the replay is open loop


async def _silent_target(
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Handshakes as an ultrapeer, then never reads another byte."""

    async def handle(stream: trio.SocketStream) -> None:
        acceptor = Acceptor()
        while True:
            event = acceptor.next_event()
            if event is NEED_DATA:
                acceptor.receive_data(await stream.receive_some(4096))
            elif isinstance(event, ConnectRequest):
                await stream.send_all(acceptor.accept([("X-Ultrapeer", "True")]))
            elif isinstance(event, HandshakeComplete):
                break
        await trio.sleep_forever()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[:2])
    await trio.serve_listeners(handle, listeners)


@pytest.mark.e2e
async def test_a_target_that_stops_reading_does_not_hold_the_replay(tmp_path: Path) -> None:
    trace = tmp_path / "big.trace"
    payload = b"\x00\x80" + b"z" * 8000 + b"\x00"
    records = [
        TraceRecord(i * 0.0001, 1, i.to_bytes(16, "big"), 0x80, 1, 0, payload) for i in range(1500)
    ]
    write_trace(trace, records)  # 12 MB in 0.15 s: more than loopback buffers hold
    async with trio.open_nursery() as nursery:
        address = await nursery.start(_silent_target)
        started = trio.current_time()
        summary = await replay(trace, address, backlog_limit=1_000_000, drain_timeout=0.3)
        elapsed = trio.current_time() - started
        nursery.cancel_scope.cancel()
    assert elapsed < 2.0
    assert summary.dropped > 0
    assert summary.sent + summary.dropped == 1500
    assert any("within 0.3 s" in error for error in summary.errors)


async def _refusing_target(
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Answers every handshake with 503 Busy."""

    async def handle(stream: trio.SocketStream) -> None:
        acceptor = Acceptor()
        while not isinstance(acceptor.next_event(), ConnectRequest):
            acceptor.receive_data(await stream.receive_some(4096))
        await stream.send_all(acceptor.reject(503, "Busy"))

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[:2])
    await trio.serve_listeners(handle, listeners)


@pytest.mark.e2e
async def test_a_refused_handshake_is_a_clear_error(tmp_path: Path) -> None:
    trace = tmp_path / "t.trace"
    paced_trace(trace, count=2)
    async with trio.open_nursery() as nursery:
        address = await nursery.start(_refusing_target)
        with pytest.raises(ReplayError, match=r"peer \d: refused: 503 Busy"):
            await replay(trace, address, connect_timeout=5)
        nursery.cancel_scope.cancel()


@pytest.mark.e2e
async def test_a_target_that_is_not_listening_is_a_clear_error(tmp_path: Path) -> None:
    trace = tmp_path / "t.trace"
    paced_trace(trace, count=2)
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    address = listener.getsockname()[:2]
    listener.close()  # the port is free again and nobody listens on it
    with pytest.raises(ReplayError, match=r"peer \d: cannot connect to 127\.0\.0\.1"):
        await replay(trace, address, connect_timeout=5)


# ---------------------------------------------------------------------------------------
# Arguments and the command line


@pytest.mark.parametrize(
    "text", ["10.0.0.1:6346", "192.0.2.7:6346", "[2001:db8::1]:6346", "example.org:6346"]
)
def test_only_loopback_targets(text: str) -> None:
    with pytest.raises(ReplayError, match=r"loopback|HOST:PORT"):
        parse_target(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:6346", ("127.0.0.1", 6346)),
        ("127.1.2.3:1", ("127.1.2.3", 1)),
        ("[::1]:6346", ("::1", 6346)),
        ("localhost:6347", ("127.0.0.1", 6347)),
    ],
)
def test_loopback_targets(text: str, expected: tuple[str, int]) -> None:
    assert parse_target(text) == expected


@pytest.mark.parametrize("text", ["127.0.0.1", "127.0.0.1:0", "127.0.0.1:99999", ":6346"])
def test_malformed_targets(text: str) -> None:
    with pytest.raises(ReplayError, match="HOST:PORT"):
        parse_target(text)


def test_the_command_refuses_a_remote_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.trace"
    paced_trace(trace, count=2)
    assert main(["replay", str(trace), "--target", "192.0.2.1:6346"]) == 1
    assert "not a loopback address" in capsys.readouterr().err


def test_the_command_refuses_an_empty_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "empty.trace"
    write_trace(trace, [])
    assert main(["replay", str(trace), "--target", "127.0.0.1:9"]) == 1
    assert "holds no messages" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags", [["--speed", "0"], ["--speed", "nan"], ["--loop", "0"], ["--peers", "300"]]
)
def test_the_command_checks_its_flags(tmp_path: Path, flags: list[str]) -> None:
    with pytest.raises(SystemExit):
        main(["replay", str(tmp_path / "t"), "--target", "127.0.0.1:6346", *flags])


@pytest.mark.e2e
async def test_the_replay_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "cli.trace"
    paced_trace(trace, count=4, gap=0.01)
    async with running_daemons(tmp_path / "b", overrides=RECORDING) as (target,):
        host, port = target.address
        argv = ["replay", str(trace), "--target", f"{host}:{port}", "--speed", "2", "--loop", "2"]
        status = await trio.to_thread.run_sync(partial(main, argv))
        await recorded(target, 8)
    assert status == 0
    out, err = capsys.readouterr()
    assert "2 peers, 2 passes, speed 2" in out
    assert "sent 8 messages" in out
    assert "late 0, dropped 0, Byes skipped 0" in out
    kept = Path(err.split("results in ")[-1].strip())
    assert kept.name.startswith("replay-")
    assert json.loads((kept / "manifest.json").read_text())["status"] == "ok"
    assert json.loads((kept / "summary.json").read_text())["sent"] == 8


@pytest.mark.e2e
async def test_the_replay_reports_latency_replies_and_the_routers_drops(tmp_path: Path) -> None:
    """What came back is measured: copies of the trace's queries and pings at the other
    peer (timed), the router's own pongs (timed as its replies), and the router's
    counters, which name the drop of a replayed hit whose query it never saw."""
    queries = [message(Query(b"replayed %d" % i), ttl=3, hops=0) for i in range(6)]
    pings = [message(Ping(), ttl=2, hops=0) for _ in range(4)]
    stray = hit_for(message(Query(b"never sent"), ttl=3, hops=0))
    records = [traced(i * 0.02, 1, m) for i, m in enumerate([*queries, *pings])]
    records.append(traced(0.25, 2, stray))
    trace = tmp_path / "mixed.trace"
    write_trace(trace, records)
    async with running_daemons(tmp_path / "b") as (target,):
        summary = await replay(trace, target.address, peers=2, admin=target.admin_address)
    assert summary.sent_by_type == {"ping": 4, "query": 6, "query_hit": 1}
    assert summary.copies == {"ping": 4, "query": 6}  # each reached the other peer once
    one_hop = summary.latency["one-hop"]
    assert one_hop["query"].count == 6
    assert one_hop["ping"].count == 4
    assert summary.replies["pong"] >= 4  # the router answers each ping itself
    assert summary.latency["target-reply"]["pong"].count == summary.replies["pong"]
    assert summary.negative_samples == 0
    assert summary.router is not None
    assert summary.router.note is None
    assert summary.router.dropped.get("no-route") == {"query_hit": 1}
    text = summary.format()
    assert "one-hop query" in text
    assert "dropped by the router, no-route: query_hit 1" in text


def test_what_the_replay_remembers_is_bounded() -> None:
    from gnutella_router.lab.traffic.replay_timing import Timing

    timing = Timing(window=10.0, most=3)
    wires = [bytes([i]) * 16 + bytes([MessageType.QUERY]) for i in range(5)]
    for i, wire in enumerate(wires):
        timing.sent(wire, 0, float(i))
    assert timing.untimed == 2  # the fourth and fifth found the table full
    timing.sent(bytes([9]) * 16 + bytes([MessageType.PING]), 0, 12.5)  # 0, 1, 2 expired
    assert timing.untimed == 2
    assert len(timing._sent) == 1
