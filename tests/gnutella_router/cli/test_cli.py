"""The command line's decode job, as a user runs it."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from gnutella_router.cli.main import main
from protocol.codec import encode_message
from protocol.constants import MessageType
from protocol.header import encode_header
from protocol.messages import Bye, Message, Pong, Query


def test_decode_prints_the_builtin_sample(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["decode", "--count", "30", "--seed", "7"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# sample capture: 30 messages")
    assert lines[-1] == "# 30 messages"
    body = lines[1:-1]
    assert len(body) == 30
    assert {line.split()[0] for line in body} <= {"PING", "PONG", "QUERY", "QUERY_HIT", "PUSH"}


def test_decode_shows_malformed_messages_and_keeps_going(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = tmp_path / "capture.bin"
    capture.write_bytes(
        encode_message(Message(b"a" * 16, 7, 0, Query(b"free jazz")))
        + encode_header(b"b" * 16, MessageType.PONG, 1, 0, 2)
        + b"??"
        + encode_message(Message(b"c" * 16, 1, 0, Bye(200, "Servent shutdown")))
    )
    assert main(["decode", str(capture)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "text='free jazz'" in out[0]
    assert "MALFORMED" in out[1]
    assert "code=200 reason='Servent shutdown'" in out[2]
    assert out[-1] == "# 3 messages"


def test_decode_reports_an_unrecoverable_stream(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = tmp_path / "bad.bin"
    good = encode_message(Message(b"a" * 16, 1, 0, Pong(6346, "127.0.0.1", 1, 2)))
    capture.write_bytes(good + encode_header(b"x" * 16, 0x80, 1, 0, 1 << 20) + b"zz")
    assert main(["decode", str(capture)]) == 1
    captured = capsys.readouterr()
    assert "127.0.0.1:6346" in captured.out
    assert "exceeds the maximum" in captured.err


def test_sample_writes_a_decodable_capture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sample.bin"
    assert main(["sample", str(path), "--count", "50"]) == 0
    assert main(["decode", str(path), "--limit", "5"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "# 50 messages"
    assert len(out) == 1 + 5 + 1


def test_decode_reads_the_routers_own_traces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from traffic_models.trace import TraceRecord, write_trace

    path = tmp_path / "run.trace"
    write_trace(
        path,
        [
            TraceRecord(0.5, 3, bytes(16), MessageType.PING, 7, 0, b""),
            TraceRecord(0.75, 4, bytes(range(16)), MessageType.QUERY, 5, 1, b"\x80\x00jazz\x00"),
        ],
    )
    assert main(["decode", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("# 2 messages (trace")
    assert "conn=3" in lines[0]
    assert "PING" in lines[0]
    assert "conn=4" in lines[1]
    assert "QUERY" in lines[1]
    assert "jazz" in lines[1]


def test_a_missing_file_is_one_line_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["decode", str(tmp_path / "nothing.bin")]) == 1
    err = capsys.readouterr().err
    assert (
        err.strip()
        == f"gnutella-router decode: {tmp_path / 'nothing.bin'}: No such file or directory"
    )
    assert main(["sample", str(tmp_path / "no" / "such" / "out.bin")]) == 1
    assert "No such file or directory" in capsys.readouterr().err


@pytest.mark.e2e
def test_decode_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    import subprocess
    import sys

    command = [sys.executable, "-m", "gnutella_router", "decode", "--count", "20000"]
    decode = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert decode.stdout is not None
    decode.stdout.readline()
    decode.stdout.close()  # as `| head -1` does
    _, err = decode.communicate(timeout=60)
    assert decode.returncode == 0
    assert b"Traceback" not in err
    assert b"BrokenPipe" not in err


def _every_parser() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    def walk(
        parser: argparse.ArgumentParser, name: str
    ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
        yield name, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    yield from walk(sub, f"{name} {sub_name}")

    from gnutella_router.cli.main import build_parser

    return walk(build_parser(), "gnutella-router")


def test_every_help_line_gives_its_default_once() -> None:
    """A help text that says its default in words must not get ``(default: X)`` added
    too (it printed ``(default 1) (default: 1.0)``), nor ``(default: None)``."""
    twice = []
    for name, parser in _every_parser():
        formatter = parser._get_formatter()
        for action in parser._actions:
            if not action.help or action.help == argparse.SUPPRESS:
                continue
            text = formatter._expand_help(action)
            if text.lower().count("default") > 1 or "(default: None)" in text:
                twice.append(f"{name} {'/'.join(action.option_strings)}: {text}")
    assert not twice, "\n".join(twice)
    load = dict(_every_parser())["gnutella-router load"].format_help()
    assert "(default: 1000.0)" in " ".join(load.split())  # still shown where not said
