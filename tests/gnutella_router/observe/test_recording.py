"""Recording a trace in the daemon: what peers send, as they sent it, with timing."""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

import pytest
import structlog
import trio

from gnutella_router.cli.config_flags import config_from_args
from gnutella_router.cli.main import build_parser
from gnutella_router.config import ConfigError, load_config
from gnutella_router.daemon import Daemon
from gnutella_router.observe.recorder import Recorder
from protocol.codec import encode_message
from protocol.constants import MessageType
from protocol.framing import Frame
from protocol.header import encode_header
from protocol.messages import Message, Ping, Pong, Push, Query
from tests.support.peers import Peer, message, recorded, running_daemons
from tests.support.processes import free_port, start, wait_listening
from traffic_models.trace import TraceRecord, read_header, read_trace

RECORDING = {"trace.record": "capture.trace"}


def connection_id(daemon: Daemon, peer: Peer) -> int:
    local = peer.stream.socket.getsockname()[:2]
    for connection in daemon.server.connections.snapshot():
        if connection.peer == local:
            return connection.id
    raise AssertionError("no connection for this peer")


def content(record: TraceRecord) -> tuple[bytes, int, int, int, bytes]:
    return (record.guid, record.payload_type, record.ttl, record.hops, record.payload)


def frame_content(frame: Frame) -> tuple[bytes, int, int, int, bytes]:
    return (frame.guid, frame.payload_type, frame.ttl, frame.hops, frame.payload)


def read(path: Path) -> list[TraceRecord]:
    return list(read_trace(path))  # any damage would be a warning, which fails the test


@pytest.mark.e2e
async def test_the_trace_holds_what_peers_sent_in_order(tmp_path: Path) -> None:
    async with running_daemons(tmp_path, overrides=RECORDING) as (daemon,):
        started = trio.current_time()
        a = await Peer.connect(daemon.address)
        b = await Peer.connect(daemon.address, deflate=True)  # recorded after inflating
        first = [
            message(Ping(), ttl=2),
            message(Query(b"free jazz"), ttl=5, hops=1),
            message(Pong(6346, "10.0.0.1", 3, 4), ttl=1, hops=2),
        ]
        second = [
            message(Query(b"seda router"), ttl=3, hops=4),
            message(Push(b"s" * 16, 1, "10.0.0.2", 6346), ttl=4),
        ]
        await a.send(*first)
        await b.send(second[0])
        await recorded(daemon, 4)
        await trio.sleep(0.25)
        await a.send(second[1])
        await b.send(first[0], first[1])  # duplicates are recorded: they were received
        await recorded(daemon, 7)
        ids = {connection_id(daemon, a): a, connection_id(daemon, b): b}
        elapsed = trio.current_time() - started
        path = daemon.config.trace_path
        assert path == tmp_path / "node0" / "capture.trace"
    records = read(path)
    assert len(records) == 7
    by_connection: dict[int, list[TraceRecord]] = {}
    for record in records:
        by_connection.setdefault(record.connection, []).append(record)
    assert set(by_connection) == set(ids)
    a_id, b_id = (connection_id_of(ids, peer) for peer in (a, b))
    sent_by_a = [Frame.from_message(m) for m in [*first, second[1]]]
    sent_by_b = [Frame.from_message(m) for m in [second[0], first[0], first[1]]]
    assert [content(r) for r in by_connection[a_id]] == [frame_content(f) for f in sent_by_a]
    assert [content(r) for r in by_connection[b_id]] == [frame_content(f) for f in sent_by_b]
    times = [r.at for r in records]
    assert times == sorted(times)
    assert times[0] >= 0
    assert times[-1] <= elapsed + 0.05
    # The sleep between the two rounds shows in the timestamps.
    assert by_connection[a_id][3].at - by_connection[a_id][2].at >= 0.2
    assert by_connection[a_id][2].at - by_connection[a_id][0].at < 0.1
    header = read_header(path)
    assert header.part == 0
    assert abs(header.start_time - time.time()) < 60
    assert header.clock_base <= started  # offset 0 is the recorder's start, in trio's clock


def connection_id_of(ids: dict[int, Peer], peer: Peer) -> int:
    return next(key for key, value in ids.items() if value is peer)


@pytest.mark.e2e
async def test_the_trace_is_complete_when_the_daemon_stops(tmp_path: Path) -> None:
    """No sleeping for a flush: stopping the daemon writes out everything buffered."""
    count = 3000
    async with running_daemons(tmp_path, overrides=RECORDING) as (daemon,):
        peer = await Peer.connect(daemon.address)
        await peer.send(*(message(Query(b"q%d" % i), ttl=1) for i in range(count)))
        await recorded(daemon, count)
        assert daemon.recorder is not None
        recorder = daemon.recorder
        path = daemon.config.trace_path
    assert path is not None
    records = read(path)
    assert len(records) == count
    assert [r.payload[2:] for r in records] == [b"q%d\0" % i for i in range(count)]
    stats = recorder.statistics()
    assert stats.dropped == 0
    assert stats.flushed_bytes == stats.bytes == path.stat().st_size - 40


@pytest.mark.e2e
async def test_frames_before_an_oversized_header_are_recorded(tmp_path: Path) -> None:
    async with running_daemons(tmp_path, overrides=RECORDING) as (daemon,):
        peer = await Peer.connect(daemon.address)
        good = message(Ping(), ttl=1)
        await peer.send(encode_message(good) + encode_header(b"x" * 16, 0x80, 1, 0, 1 << 20))
        await peer.wait_closed()
        await recorded(daemon, 1)
        path = daemon.config.trace_path
    assert path is not None
    assert [content(r) for r in read(path)] == [frame_content(Frame.from_message(good))]


@pytest.mark.e2e
async def test_recording_off_writes_nothing(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        peer = await Peer.connect(daemon.address)
        await peer.send(message(Ping(), ttl=1))
        await peer.receive_matching(lambda f: f.payload_type == MessageType.PONG)
        assert daemon.recorder is None
        assert daemon.server.recorder is None
        assert all(c.recorder is None for c in daemon.server.connections.snapshot())
        assert daemon.config.trace_path is None
    files = [p.name for p in (tmp_path / "node0").iterdir()]
    assert not [name for name in files if "trace" in name]


@pytest.mark.e2e
async def test_rotation_in_the_daemon(tmp_path: Path) -> None:
    overrides = {
        **RECORDING,
        "trace.max_bytes": 1024 * 1024,
        "trace.max_files": 2,
        "trace.buffer_bytes": 1024 * 1024,
    }
    payload = b"\x00\x80" + b"x" * 4000 + b"\x00"
    count = 600  # 4,061 bytes per record: about 2.4 MB, three files' worth
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        peer = await Peer.connect(daemon.address)
        for start in range(0, count, 50):
            batch = [
                Message(i.to_bytes(16, "big"), 1, 0, Query(payload[2:-1]))
                for i in range(start, start + 50)
            ]
            await peer.send(*batch)
            # Paced like a network, not a loopback burst: a burst faster than the disk
            # would (rightly) be dropped once the 1 MiB buffer is full.
            await recorded(daemon, start + 50)
            await buffer_below(daemon, 512 * 1024)
        path = daemon.config.trace_path
        recorder = daemon.recorder
    assert path is not None
    assert recorder is not None
    assert recorder.writer.buffer_bytes == 1024 * 1024
    assert recorder.writer.max_bytes == 1024 * 1024
    names = sorted(p.name for p in path.parent.iterdir() if p.name.startswith("capture"))
    assert names == ["capture.trace", "capture.trace.1"]
    records = read(path)
    indexes = [int.from_bytes(r.guid, "big") for r in records]
    assert indexes == list(range(count - len(records), count))  # the newest, in order
    assert recorder.statistics().files == 3
    assert recorder.statistics().dropped == 0


async def buffer_below(daemon: Daemon, size: int, timeout: float = 5.0) -> None:
    assert daemon.recorder is not None
    with trio.fail_after(timeout):
        while daemon.recorder.statistics().buffered_bytes >= size:
            await trio.sleep(0.005)


async def test_a_recorder_that_cannot_keep_up_drops_and_counts(tmp_path: Path) -> None:
    log = structlog.get_logger("test")
    recorder = Recorder.open(
        tmp_path / "t.trace", max_bytes=1 << 20, max_files=1, log=log, buffer_bytes=1000
    )
    frames = [Frame.from_message(message(Query(b"%d" % i), ttl=1)) for i in range(40)]
    recorder.record(1, frames[:20])  # no flusher running: nothing leaves the buffer
    recorder.record(2, frames[20:])
    stats = recorder.statistics()
    assert stats.records + stats.dropped == 40
    assert stats.dropped > 0
    assert stats.buffered_bytes <= 1000
    await recorder.aclose()
    recorder.record(3, frames[:1])  # after close: counted, not written
    assert recorder.statistics().dropped == stats.dropped + 1
    assert len(read(tmp_path / "t.trace")) == stats.records


def test_trace_settings_are_checked() -> None:
    config = load_config(overrides={"trace.record": "/var/tmp/x.trace", "node.state_dir": "/s"})
    assert config.trace_path == Path("/var/tmp/x.trace")
    assert load_config(
        overrides={"trace.record": "x.trace", "node.state_dir": "/s"}
    ).trace_path == Path("/s/x.trace")
    for key, value, words in [
        ("trace.record", 5, "path"),
        ("trace.record", "a\0b", "NUL"),
        ("trace.max_bytes", 1000, "1048576"),
        ("trace.max_files", 0, "1 to 1000"),
        ("trace.buffer_bytes", 1000, "65536"),
    ]:
        with pytest.raises(ConfigError, match=words) as caught:
            load_config(overrides={key: value})
        assert caught.value.key == key


def test_the_record_flag_is_relative_to_the_current_directory(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["run", "--record", "here.trace", "--state-dir", str(tmp_path)]
    )
    assert isinstance(args, argparse.Namespace)
    config = config_from_args(args)
    assert config.trace.record == os.path.abspath("here.trace")
    assert config.trace_path == Path.cwd() / "here.trace"
    assert config_from_args(build_parser().parse_args(["run"])).trace_path is None


@pytest.mark.e2e
async def test_run_record_in_a_real_process(tmp_path: Path) -> None:
    port = free_port()
    trace = tmp_path / "out.trace"
    process = start(
        ["--listen", f"127.0.0.1:{port}", "--record", str(trace), "--log-format", "json"],
        tmp_path / "state",
    )
    try:
        await wait_listening(port, process)
        peer = await Peer.connect(("127.0.0.1", port))
        sent = [message(Ping(), ttl=1), message(Query(b"one"), ttl=2)]
        await peer.send(*sent)
        await peer.receive_matching(lambda f: f.payload_type == MessageType.PONG)
        process.send_signal(signal.SIGTERM)
        await peer.wait_closed(timeout=5)
        assert await trio.to_thread.run_sync(process.wait, 10) == 0
        await peer.aclose()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    _, stderr = process.communicate()
    events = [json.loads(line) for line in stderr.decode().splitlines() if line]
    closed = next(e for e in events if e["event"] == "trace closed")
    assert closed["records"] == 2
    assert closed["dropped"] == 0
    assert [content(r) for r in read(trace)] == [frame_content(Frame.from_message(m)) for m in sent]
