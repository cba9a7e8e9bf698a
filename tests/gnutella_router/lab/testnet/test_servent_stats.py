"""A foreign servent's own drop counters: the wrapper's stats command, gtk-gnutella's
``stats drop`` output (a sample recorded from gtk-gnutella 1.2.3 in a test network of
three routers), and the report's line."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from gnutella_router.lab.testnet.children import ServentNode
from gnutella_router.lab.testnet.report import drops_text
from gnutella_router.lab.testnet.servent_stats import drop_counters, stats_command
from gnutella_router.lab.testnet.servents import ServentSet

SAMPLE = Path(__file__).resolve().parents[3] / "fixtures" / "gtk-gnutella-1.2.3-stats-drop.txt"


def test_the_recorded_sample_parses_in_gtk_gnutellas_order() -> None:
    counters = drop_counters(SAMPLE.read_text())
    assert len(counters) == 51  # every reason of gtk-gnutella 1.2.3's drop.lst
    assert list(counters)[:3] == ["bad_size", "too_small", "too_large"]
    assert list(counters)[-1] == "network_crossing"
    assert {reason: n for reason, n in counters.items() if n} == {
        "throttle": 2978,
        "duplicate": 524,
        "query_too_short": 17,
    }


def test_pretty_numbers_count_and_other_lines_are_skipped() -> None:
    text = "100 Welcome to gtk-gnutella/1.2.3\nduplicate 1,234\nspam 0\n100 OK\n"
    assert drop_counters(text) == {"duplicate": 1234, "spam": 0}


@pytest.mark.parametrize(
    "text", ["", '400-Error for: "stats drop"\n400 Malformed command\n', "no servent here\n"]
)
def test_output_without_counters_is_an_error(text: str) -> None:
    with pytest.raises(ValueError, match="no drop counters"):
        drop_counters(text)


def test_the_stats_command_is_read_from_the_last_ready_line() -> None:
    log = (
        "gtk-servent: starting\n"
        "ready: gtk-gnutella pid 7 listening on 127.0.0.1:6346; "
        "stats: env A=1 '/a b/w.sh' stats /d\n"
    )
    assert stats_command(log) == ["env", "A=1", "/a b/w.sh", "stats", "/d"]
    assert stats_command("ready: gtk-gnutella pid 7 listening on 127.0.0.1:6346\n") is None
    assert stats_command("ready: x; stats: 'unclosed\n") is None
    assert stats_command("nothing ready\n") is None


def test_the_report_line_lists_the_reasons_that_count() -> None:
    drops = {"total": 13, "by_reason": {"duplicate": 3, "throttle": 10}, "reasons": 51}
    assert drops_text(drops) == "13 dropped: throttle 10, duplicate 3"
    assert drops_text({"total": 0, "by_reason": {}, "reasons": 51}) == (
        "nothing dropped (of 51 reasons counted)"
    )


def servent_with(tmp_path: Path, log: str) -> tuple[ServentSet, ServentNode]:
    servents = ServentSet("unused {port}", 1, 2, tmp_path, seed=1)
    (node,) = servents.create([("127.0.0.1", 1)], start_timeout=1.0)
    node.state_dir.mkdir(parents=True)
    node.log_path.write_text(log)
    return servents, node


def ready_with(command: str) -> str:
    return f"ready: a servent listening on 127.0.0.1:1; stats: {command}\n"


async def test_a_servents_counters_are_read_with_its_wrappers_command(tmp_path: Path) -> None:
    servents, node = servent_with(tmp_path, ready_with(f"cat {shlex.quote(str(SAMPLE))}"))
    await servents.read_servent_drops(node)
    assert servents.drop_errors == {}
    (row,) = servents.report([], [])
    assert row["drops"] == {
        "total": 2978 + 524 + 17,
        "by_reason": {"throttle": 2978, "duplicate": 524, "query_too_short": 17},
        "reasons": 51,
    }
    assert (node.state_dir / "stats-drop.txt").read_text() == SAMPLE.read_text()


@pytest.mark.parametrize(
    ("command", "error"),
    [
        ("false", "exited with 1"),
        (f"{shlex.quote(sys.executable)} -c 'print(\"hello\")'", "no drop counters"),
        ("/nonexistent/stats-command", "No such file"),
    ],
)
async def test_a_stats_command_that_fails_is_reported_not_fatal(
    tmp_path: Path, command: str, error: str
) -> None:
    servents, node = servent_with(tmp_path, ready_with(command))
    await servents.read_servent_drops(node)
    (row,) = servents.report([], [])
    assert row["drops"] is None
    assert error in row["drops_error"]


async def test_a_wrapper_that_offers_no_stats_is_skipped_cleanly(tmp_path: Path) -> None:
    servents, node = servent_with(tmp_path, "ready: a servent listening on 127.0.0.1:1\n")
    await servents.read_servent_drops(node)
    (row,) = servents.report([], [])
    assert (row["drops"], row["drops_error"]) == (None, None)
