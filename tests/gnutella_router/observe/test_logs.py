"""Log output: JSON lines for machines, the console renderer for people, one stream."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
import structlog

from gnutella_router.logs import configure_logging, get_logger


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def clean_logging() -> Iterator[None]:
    """Give every test structlog's defaults and the root logger as it found it."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()
    root.handlers[:] = handlers
    root.setLevel(level)


def json_lines(stream: io.StringIO) -> list[dict[str, object]]:
    lines = stream.getvalue().splitlines()
    records = [json.loads(line) for line in lines]
    assert all(isinstance(record, dict) for record in records)
    return records


class TestJson:
    def test_one_object_per_line_with_event_level_and_timestamp(self) -> None:
        out = io.StringIO()
        configure_logging("json", stream=out)
        log = get_logger("router")
        log.info("connection_closed", peer="10.0.0.1:6346", bye=200)
        log.warning("queue_full", dropped=3)

        first, second = json_lines(out)
        assert first["event"] == "connection_closed"
        assert first["level"] == "info"
        assert first["component"] == "router"
        assert first["peer"] == "10.0.0.1:6346"
        assert first["bye"] == 200
        assert second["level"] == "warning"
        stamp = datetime.fromisoformat(str(first["timestamp"]))
        assert stamp.utcoffset() == timedelta(0)

    def test_a_logger_made_before_configuration_follows_it(self) -> None:
        """Module-level loggers are created at import time, before main() configures."""
        early = get_logger("server")
        out = io.StringIO()
        configure_logging("json", stream=out)
        early.info("listening")
        assert json_lines(out)[0]["component"] == "server"

    def test_auto_writes_json_when_the_stream_is_not_a_terminal(self) -> None:
        out = io.StringIO()
        configure_logging("auto", stream=out)
        get_logger("catcher").info("started")
        assert json_lines(out)[0]["event"] == "started"

    def test_exceptions_are_structured(self) -> None:
        out = io.StringIO()
        configure_logging("json", stream=out)
        try:
            raise KeyError("missing")
        except KeyError:
            get_logger("router").exception("worker_crashed")
        (record,) = json_lines(out)
        assert record["level"] == "error"
        exception = record["exception"]
        assert isinstance(exception, list)
        assert exception[0]["exc_type"] == "KeyError"

    def test_bound_and_context_values_come_out(self) -> None:
        out = io.StringIO()
        configure_logging("json", stream=out)
        structlog.contextvars.bind_contextvars(run="r1")
        get_logger("io").bind(conn_id=7).info("handshake_done")
        (record,) = json_lines(out)
        assert record["conn_id"] == 7
        assert record["run"] == "r1"


class TestConsole:
    def test_console_renders_readable_lines_without_colour_off_a_terminal(self) -> None:
        out = io.StringIO()
        configure_logging("console", stream=out)
        get_logger("router").info("routing_started", workers=2)
        text = out.getvalue()
        assert "routing_started" in text
        assert "workers=2" in text
        assert "component=router" in text
        assert "\x1b[" not in text
        with pytest.raises(json.JSONDecodeError):
            json.loads(text)

    def test_auto_picks_the_console_in_colour_on_a_terminal(self) -> None:
        out = FakeTerminal()
        configure_logging("auto", stream=out)
        get_logger("router").info("routing_started")
        assert "routing_started" in out.getvalue()
        assert "\x1b[" in out.getvalue()

    def test_exceptions_render_as_tracebacks(self) -> None:
        out = io.StringIO()
        configure_logging("console", stream=out)
        try:
            raise ValueError("boom")
        except ValueError:
            get_logger("router").exception("worker_crashed")
        assert "ValueError" in out.getvalue()
        assert "boom" in out.getvalue()


class TestLevels:
    def test_info_drops_debug(self) -> None:
        out = io.StringIO()
        configure_logging("json", "info", stream=out)
        log = get_logger("router")
        log.debug("per_message_detail")
        log.info("summary")
        assert [r["event"] for r in json_lines(out)] == ["summary"]

    def test_debug_keeps_debug_and_levels_ignore_case(self) -> None:
        out = io.StringIO()
        configure_logging("json", "DEBUG", stream=out)
        get_logger("router").debug("per_message_detail")
        assert json_lines(out)[0]["level"] == "debug"

    def test_error_drops_warnings(self) -> None:
        out = io.StringIO()
        configure_logging("json", "error", stream=out)
        log = get_logger("router")
        log.warning("ignored")
        log.error("kept")
        assert [r["event"] for r in json_lines(out)] == ["kept"]

    @pytest.mark.parametrize(("fmt", "level"), [("xml", "info"), ("json", "trace")])
    def test_unknown_format_or_level_is_refused(self, fmt: str, level: str) -> None:
        with pytest.raises(ValueError, match="expected one of"):
            configure_logging(fmt, level, stream=io.StringIO())


class TestStdlib:
    def test_stdlib_records_come_out_as_json_lines(self) -> None:
        out = io.StringIO()
        configure_logging("json", stream=out)
        logging.getLogger("trio.serve_listeners").error("accept returned %s", "EMFILE")
        (record,) = json_lines(out)
        assert record["event"] == "accept returned EMFILE"
        assert record["level"] == "error"
        assert record["logger"] == "trio.serve_listeners"
        assert "timestamp" in record
        assert "_record" not in record

    def test_stdlib_levels_follow_the_configured_level(self) -> None:
        out = io.StringIO()
        configure_logging("json", "warning", stream=out)
        stdlib = logging.getLogger("some.library")
        stdlib.info("chatter")
        stdlib.warning("worth a look")
        assert [r["event"] for r in json_lines(out)] == ["worth a look"]

    def test_stdlib_exceptions_are_structured(self) -> None:
        out = io.StringIO()
        configure_logging("json", stream=out)
        try:
            raise OSError("too many open files")
        except OSError:
            logging.getLogger("trio").exception("accept failed")
        (record,) = json_lines(out)
        exception = record["exception"]
        assert isinstance(exception, list)
        assert exception[0]["exc_type"] == "OSError"

    def test_stdlib_records_use_the_console_renderer_too(self) -> None:
        out = io.StringIO()
        configure_logging("console", stream=out)
        logging.getLogger("trio").warning("slow accept")
        assert "slow accept" in out.getvalue()
        assert "_record" not in out.getvalue()

    def test_configuring_again_replaces_the_bridge(self) -> None:
        first, second = io.StringIO(), io.StringIO()
        configure_logging("json", stream=first)
        configure_logging("json", stream=second)
        logging.getLogger("trio").error("once")
        assert first.getvalue() == ""
        assert [r["event"] for r in json_lines(second)] == ["once"]
