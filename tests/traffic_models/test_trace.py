"""The trace file format (docs/trace-format.md): writing, reading, rotation, summaries."""

from __future__ import annotations

import hashlib
import struct
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gnutella_router.cli.main import main
from protocol.codec import encode_message
from protocol.constants import MessageType
from protocol.framing import Frame
from protocol.messages import Message, Ping, Query
from traffic_models.trace import (
    FILE_HEADER_SIZE,
    RECORD_PREFIX_SIZE,
    TraceFormatError,
    TraceHeader,
    TraceProblem,
    TraceRecord,
    TraceWarning,
    TraceWriter,
    read_header,
    read_trace,
    read_wire,
    trace_files,
    write_trace,
)
from traffic_models.trace_summary import (
    OTHER,
    PlotUnavailableError,
    format_summary,
    plot_summary,
    summarize,
    summarize_trace,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def record(
    at: float,
    *,
    connection: int = 1,
    payload_type: int = MessageType.PING,
    ttl: int = 7,
    hops: int = 0,
    payload: bytes = b"",
    guid: bytes | None = None,
) -> TraceRecord:
    if guid is None:
        guid = hashlib.md5(repr((at, connection, payload_type, payload)).encode()).digest()
    return TraceRecord(at, connection, guid, payload_type, ttl, hops, payload)


def read_all(path: Path, **kwargs: object) -> tuple[list[TraceRecord], list[TraceProblem]]:
    problems: list[TraceProblem] = []
    records = list(read_trace(path, on_problem=problems.append, **kwargs))  # type: ignore[arg-type]
    return records, problems


# ---------------------------------------------------------------------------------------
# The bytes, as the document describes them


class TestKnownAnswer:
    GUID = bytes(range(0x10, 0x20))

    def expected_bytes(self) -> bytes:
        # Written out field by field from docs/trace-format.md, not with the module's
        # own structs.
        header = (
            b"GNUTRACE"  # magic
            + b"\x01\x00"  # version 1, u16 LE
            + b"\x28\x00"  # header size 40, u16 LE
            + b"\x00\x00\x00\x00"  # part 0, u32 LE
            + b"ABCDEFGH"  # trace id
            + struct.pack("<d", 1_700_000_000.5)  # start, f64 LE
            + struct.pack("<d", 100.25)  # clock base, f64 LE
        )
        record = (
            (1_500_000).to_bytes(8, "little")  # 1.5 s after the start, in microseconds
            + (7).to_bytes(4, "little")  # connection 7
            + self.GUID
            + b"\x80"  # QUERY
            + b"\x05"  # TTL 5
            + b"\x02"  # hops 2
            + (5).to_bytes(4, "little")  # payload length
            + b"\x00\x80jaz"  # the payload
        )
        return header + record

    def test_one_record_is_written_as_documented(self, tmp_path: Path) -> None:
        path = tmp_path / "known.trace"
        writer = TraceWriter(
            path, clock_origin=100.25, start_time=1_700_000_000.5, trace_id=b"ABCDEFGH"
        )
        writer.write(101.75, 7, Frame(self.GUID, 0x80, 5, 2, b"\x00\x80jaz"))
        writer.close()
        assert path.read_bytes() == self.expected_bytes()

    def test_the_documented_bytes_read_back(self, tmp_path: Path) -> None:
        path = tmp_path / "by-hand.trace"
        path.write_bytes(self.expected_bytes())
        assert read_header(path) == TraceHeader(1, 0, b"ABCDEFGH", 1_700_000_000.5, 100.25)
        records, problems = read_all(path)
        assert problems == []
        assert records == [TraceRecord(1.5, 7, self.GUID, 0x80, 5, 2, b"\x00\x80jaz")]
        assert records[0].wire() == Frame(self.GUID, 0x80, 5, 2, b"\x00\x80jaz").to_bytes()

    def test_sizes(self) -> None:
        assert FILE_HEADER_SIZE == 40
        assert RECORD_PREFIX_SIZE == 35

    def test_a_longer_header_is_skipped_by_its_size(self, tmp_path: Path) -> None:
        data = bytearray(self.expected_bytes())
        data[10:12] = (48).to_bytes(2, "little")
        data[40:40] = b"\xee" * 8  # a field a later version might add
        path = tmp_path / "future.trace"
        path.write_bytes(bytes(data))
        records, problems = read_all(path)
        assert problems == []
        assert len(records) == 1
        assert records[0].at == 1.5


# ---------------------------------------------------------------------------------------
# Round trips

message_types = st.one_of(
    st.sampled_from([int(t) for t in MessageType]), st.integers(min_value=0, max_value=255)
)
records_strategy = st.builds(
    TraceRecord,
    at=st.integers(min_value=0, max_value=(1 << 42)).map(lambda us: us / 1_000_000),
    connection=st.integers(min_value=0, max_value=(1 << 32) - 1),
    guid=st.binary(min_size=16, max_size=16),
    payload_type=message_types,
    ttl=st.integers(0, 255),
    hops=st.integers(0, 255),
    payload=st.one_of(
        st.binary(max_size=200),
        st.integers(0, 65536).map(lambda n: bytes(n % 251 for n in range(n))),
    ),
)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(records_strategy, max_size=40))
def test_records_survive_a_round_trip(tmp_path: Path, records: list[TraceRecord]) -> None:
    path = tmp_path / "round.trace"
    assert write_trace(path, records) == len(records)
    back, problems = read_all(path)
    assert problems == []
    assert back == records
    wire = list(read_wire(path))
    assert wire == [(r.at, r.connection, r.payload_type, r.wire()) for r in records]


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    records=st.lists(records_strategy, min_size=1, max_size=20),
    batch=st.integers(1, 7),
    buffer_bytes=st.integers(1, 3000),
)
def test_batches_and_flushes_do_not_change_the_records(
    tmp_path: Path, records: list[TraceRecord], batch: int, buffer_bytes: int
) -> None:
    """write_many with any batching and any buffer size gives the same records."""
    path = tmp_path / "batched.trace"
    writer = TraceWriter(path, buffer_bytes=buffer_bytes, flush_bytes=buffer_bytes)
    expected = []
    for start in range(0, len(records), batch):
        group = records[start : start + batch]
        at = group[0].at
        writer.write_many(at, group[0].connection, [r.frame() for r in group])
        expected += [
            TraceRecord(at, group[0].connection, r.guid, r.payload_type, r.ttl, r.hops, r.payload)
            for r in group
        ]
    writer.close()
    back, problems = read_all(path)
    assert problems == []
    assert back == expected
    stats = writer.statistics()
    assert stats.records == len(records)
    assert stats.dropped == 0
    assert (
        stats.bytes
        == stats.flushed_bytes
        == sum(RECORD_PREFIX_SIZE + len(r.payload) for r in records)
    )


def test_wire_is_the_message_as_sent() -> None:
    message = Message(b"g" * 16, 3, 4, Query(b"free jazz"))
    frame = Frame.from_message(message)
    traced = TraceRecord(
        0.0, 1, frame.guid, frame.payload_type, frame.ttl, frame.hops, frame.payload
    )
    assert traced.wire() == encode_message(message)
    assert traced.frame() == frame


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        (record(-1.0), "negative"),
        (record(float("nan")), "negative"),
        (record(1.0, guid=b"short"), "16 bytes"),
        (record(1.0, ttl=256), "TTL"),
        (record(1.0, connection=1 << 32), "32 bits"),
    ],
)
def test_write_trace_refuses_bad_records(tmp_path: Path, bad: TraceRecord, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        write_trace(tmp_path / "bad.trace", [record(0.5), bad])


# ---------------------------------------------------------------------------------------
# Damage


def some_records(count: int = 20) -> list[TraceRecord]:
    return [
        record(i * 0.01, connection=i % 3, payload=bytes(range(i % 40)), hops=i % 4)
        for i in range(count)
    ]


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(1, RECORD_PREFIX_SIZE + 19 - 1))
def test_a_cut_short_final_record_is_reported_and_skipped(tmp_path: Path, cut: int) -> None:
    records = some_records()
    path = tmp_path / "cut.trace"
    write_trace(path, records)
    assert len(records[-1].payload) == 19
    data = path.read_bytes()
    path.write_bytes(data[:-cut])
    back, problems = read_all(path)
    assert back == records[:-1]
    assert len(problems) == 1
    assert "cut short" in problems[0].message
    wire_problems: list[TraceProblem] = []
    wire = list(read_wire(path, on_problem=wire_problems.append))
    assert [w[3] for w in wire] == [r.wire() for r in records[:-1]]
    assert wire_problems == problems
    assert problems[0].offset == len(data) - RECORD_PREFIX_SIZE - 19
    assert problems[0].path == path


def test_by_default_damage_is_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "cut.trace"
    write_trace(path, some_records())
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.warns(TraceWarning, match="cut short"):
        back = list(read_trace(path))
    assert len(back) == 19


def test_a_corrupt_length_ends_the_file_with_a_report(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.trace"
    records = some_records()
    write_trace(path, records)
    data = bytearray(path.read_bytes())
    fifth = FILE_HEADER_SIZE + sum(RECORD_PREFIX_SIZE + len(r.payload) for r in records[:5])
    data[fifth + 31 : fifth + 35] = (1 << 30).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    back, problems = read_all(path)
    assert back == records[:5]
    assert [p.offset for p in problems] == [fifth]
    wire_problems: list[TraceProblem] = []
    assert len(list(read_wire(path, on_problem=wire_problems.append))) == 5
    assert wire_problems == problems
    assert "exceeds" in problems[0].message


def test_a_file_that_is_not_a_trace_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "capture.bin"
    path.write_bytes(encode_message(Message(b"a" * 16, 1, 0, Ping())) * 3)
    with pytest.raises(TraceFormatError, match="not a trace"):
        list(read_trace(path))


def test_an_unknown_version_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "v9.trace"
    write_trace(path, some_records(2))
    data = bytearray(path.read_bytes())
    data[8:10] = (9).to_bytes(2, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError, match="version 9"):
        list(read_trace(path))


@pytest.mark.parametrize("size", [0, 5, FILE_HEADER_SIZE - 1])
def test_a_cut_short_header_is_reported_not_fatal(tmp_path: Path, size: int) -> None:
    path = tmp_path / "early-crash.trace"
    write_trace(path, [])
    path.write_bytes(path.read_bytes()[:size])
    back, problems = read_all(path)
    assert back == []
    assert len(problems) == 1
    assert "header is cut short" in problems[0].message


# ---------------------------------------------------------------------------------------
# Rotation and bounds


def fill(writer: TraceWriter, count: int, payload: int = 100) -> list[TraceRecord]:
    written = []
    for i in range(count):
        frame = Frame(i.to_bytes(16, "little"), MessageType.QUERY, 5, 1, bytes(payload))
        writer.write(i / 1000, i % 5, frame)
        written.append(
            TraceRecord(i / 1000, i % 5, frame.guid, frame.payload_type, 5, 1, frame.payload)
        )
    return written


@pytest.mark.parametrize("max_files", [1, 2, 3, 5])
def test_rotation_keeps_the_newest_files(tmp_path: Path, max_files: int) -> None:
    path = tmp_path / "rotating.trace"
    max_bytes = 2000
    writer = TraceWriter(path, max_bytes=max_bytes, max_files=max_files, flush_bytes=500)
    written = fill(writer, 200)  # 135 bytes each: 14 per file, 15 files in all
    writer.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    expected = ["rotating.trace"] + [f"rotating.trace.{n}" for n in range(1, max_files)]
    assert names == sorted(expected)
    for file in tmp_path.iterdir():
        assert file.stat().st_size <= max_bytes
    assert trace_files(path) == [
        *(path.with_name(f"rotating.trace.{n}") for n in range(max_files - 1, 0, -1)),
        path,
    ]
    back, problems = read_all(path)
    assert problems == []
    per_file = (max_bytes - FILE_HEADER_SIZE) // 135
    assert back == written[-len(back) :]  # a contiguous run ending with the newest
    assert per_file == 14
    assert len(back) == 200 % per_file + per_file * (max_files - 1)
    parts = [read_header(p).part for p in trace_files(path)]
    assert parts == sorted(parts)
    assert parts[-1] == writer.statistics().files - 1
    assert writer.statistics().files == -(-200 // per_file)
    only_live, _ = read_all(path, rotated=False)
    assert only_live == back[-len(only_live) :]
    assert len(only_live) == 200 % per_file


def test_opening_a_trace_replaces_an_earlier_one(tmp_path: Path) -> None:
    path = tmp_path / "t.trace"
    writer = TraceWriter(path, max_bytes=1000, max_files=4)
    fill(writer, 40)
    writer.close()
    assert len(trace_files(path)) == 4
    fresh = TraceWriter(path)
    assert fresh.replaced == 4
    fresh.write(0.5, 1, Frame(b"n" * 16, 0, 1, 0, b""))
    fresh.close()
    assert trace_files(path) == [path]
    back, _ = read_all(path)
    assert [r.guid for r in back] == [b"n" * 16]


def test_a_stray_file_of_another_trace_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "t.trace"
    write_trace(tmp_path / "other.trace", some_records(3))
    write_trace(path, some_records(4))
    (tmp_path / "other.trace").rename(tmp_path / "t.trace.1")
    back, problems = read_all(path)
    assert len(back) == 4
    assert [p.path.name for p in problems] == ["t.trace.1"]
    assert "another trace" in problems[0].message


def test_a_full_buffer_drops_and_counts(tmp_path: Path) -> None:
    path = tmp_path / "bounded.trace"
    writer = TraceWriter(path, buffer_bytes=1000, auto_flush=False)
    fill(writer, 10)  # 135 bytes each: 7 fit
    stats = writer.statistics()
    assert (stats.records, stats.dropped, stats.buffered_bytes) == (7, 3, 7 * 135)
    assert writer.pending_bytes == 7 * 135
    writer.write_pending(writer.take_pending())  # as the recorder's thread does
    assert writer.pending_bytes == 0
    fill(writer, 2)
    writer.close()
    fill(writer, 1)  # after close: dropped
    stats = writer.statistics()
    assert (stats.records, stats.dropped, stats.flushed_bytes) == (9, 4, 9 * 135)
    back, _ = read_all(path)
    assert len(back) == 9


def test_a_failed_write_stops_the_writer_and_counts_the_loss(tmp_path: Path) -> None:
    class Full:
        def write(self, data: bytes) -> int:
            raise OSError(28, "No space left on device")

        def close(self) -> None:
            pass

    writer = TraceWriter(tmp_path / "full.trace", auto_flush=False)
    fill(writer, 3)
    assert writer._file is not None
    writer._file.close()
    writer._file = Full()  # type: ignore[assignment]
    with pytest.raises(OSError, match="No space"):
        writer.write_pending(writer.take_pending())
    fill(writer, 2)
    writer.close()
    stats = writer.statistics()
    assert stats.failed is not None
    assert "No space" in stats.failed
    assert (stats.records, stats.dropped) == (3, 5)


# ---------------------------------------------------------------------------------------
# Summaries


def hand_made() -> list[TraceRecord]:
    return [
        record(0.10, payload_type=MessageType.PING, ttl=7, hops=0, connection=1),
        record(0.20, payload_type=MessageType.PONG, ttl=6, hops=1, connection=1, payload=b"p" * 14),
        record(0.90, payload_type=MessageType.PONG, ttl=6, hops=1, connection=2, payload=b"q" * 14),
        record(
            1.50, payload_type=MessageType.QUERY, ttl=5, hops=2, connection=2, payload=b"\0\x80x"
        ),
        record(2.10, payload_type=MessageType.QUERY_HIT, ttl=5, hops=2, connection=3),
        record(2.20, payload_type=MessageType.PUSH, ttl=7, hops=0, connection=3),
        record(3.95, payload_type=MessageType.VENDOR, ttl=1, hops=0, connection=1),
        record(3.99, payload_type=MessageType.PONG, ttl=6, hops=1, connection=1, payload=b"r" * 14),
    ]


def test_summary_counts_and_histograms() -> None:
    summary = summarize(hand_made(), bucket=1.0)
    assert summary.records == 8
    assert summary.connections == 3
    assert summary.bytes == 8 * 23 + 14 * 3 + 3
    assert summary.first == 0.10
    assert summary.last == 3.99
    assert summary.duration == pytest.approx(3.89)
    assert summary.counts == {0x00: 1, 0x01: 3, 0x80: 1, 0x81: 1, 0x40: 1, 0x31: 1}
    assert summary.ttl == {7: 2, 6: 3, 5: 2, 1: 1}
    assert summary.hops == {0: 3, 1: 3, 2: 2}
    assert summary.per_bucket == {
        0: {0x00: 1, 0x01: 2},
        1: {0x80: 1},
        2: {0x81: 1, 0x40: 1},
        3: {0x31: 1, 0x01: 1},
    }
    times, series = summary.bucket_series()
    assert times == [0.0, 1.0, 2.0, 3.0]
    assert series == {
        0x01: [2, 0, 0, 1],
        0x00: [1, 0, 0, 0],
        0x80: [0, 1, 0, 0],
        0x81: [0, 0, 1, 0],
        0x40: [0, 0, 1, 0],
        OTHER: [0, 0, 0, 1],
    }
    times, series = summary.bucket_series(2)
    assert times == [0.0, 2.0]
    assert series[0x01] == [2, 1]


def test_half_second_buckets() -> None:
    summary = summarize(hand_made(), bucket=0.5)
    assert sorted(summary.per_bucket) == [0, 1, 3, 4, 7]
    assert summary.per_bucket[1] == {0x01: 1}


def test_the_printed_summary(tmp_path: Path) -> None:
    path = tmp_path / "hand.trace"
    write_trace(path, hand_made(), start_time=0.0)
    text = format_summary(summarize_trace(path))
    assert "trace started 1970-01-01 00:00:00 UTC" in text
    assert "8 messages, 229 bytes, 3 connections, 3.890 s" in text
    lines = text.splitlines()
    pong = next(line for line in lines if line.startswith("PONG "))
    assert pong.split()[:3] == ["PONG", "3", "37.5%"]
    rates = lines.index("rates per 1 s bucket, msgs/s")
    assert lines[rates + 1].split() == [
        "from",
        "s",
        "PONG",
        "PING",
        "QUERY",
        "QUERY_HIT",
        "PUSH",
        "other",
        "total",
    ]
    assert lines[rates + 3].split() == ["0", "2.0", "1.0", "0.0", "0.0", "0.0", "0.0", "3.0"]
    ttl = lines.index("TTL histogram")
    assert [line.split()[:2] for line in lines[ttl + 3 : ttl + 7]] == [
        ["1", "1"],
        ["5", "2"],
        ["6", "3"],
        ["7", "2"],
    ]


def test_a_long_trace_is_printed_in_coarser_buckets() -> None:
    records = [record(i * 0.5) for i in range(200)]  # 100 s
    text = format_summary(summarize(records, bucket=1.0), max_rows=10)
    assert "rates per 10 s bucket, msgs/s (coarsened from 1 s to fit 10 rows)" in text


def test_the_png_is_a_png(tmp_path: Path) -> None:
    png = tmp_path / "trace.png"
    plot_summary(summarize(hand_made(), bucket=0.5), png)
    data = png.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 10_000


def test_without_matplotlib_the_plot_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(PlotUnavailableError, match=r"pip install 'gnutella-router\[plots\]'"):
        plot_summary(summarize(hand_made()), tmp_path / "no.png")
    assert not (tmp_path / "no.png").exists()


def test_the_trace_summary_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "hand.trace"
    write_trace(path, hand_made())
    png = tmp_path / "out.png"
    assert main(["trace-summary", str(path), "--bucket", "0.5", "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert "rates per 0.5 s bucket" in out
    assert f"wrote {png}" in out
    assert png.read_bytes().startswith(PNG_MAGIC)


def test_the_trace_summary_command_refuses_a_non_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "junk"
    path.write_bytes(b"hello world, not a trace")
    assert main(["trace-summary", str(path)]) == 1
    assert "not a trace file" in capsys.readouterr().err
