"""The soak script: its doc block is replaced alone and atomically, and a run of a few
seconds goes end to end (three router processes, the load client, samples, verdict,
report, plot) and leaves nothing running.

The short run's figures are not judged as a soak would be: six seconds is all warm-up
(route tables still filling), so the RSS drift bound is lifted; every other check keeps
its bound, and the exit status must agree with the verdict.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scripts import soak
from traffic_models.latency import LoadReport

ROOT = Path(__file__).resolve().parents[2]

OTHER_SECTION = "<!-- fuzz:start -->\n## Fuzzing\n\nsomeone else's figures\n<!-- fuzz:end -->\n"


def test_a_missing_file_is_created_with_a_title() -> None:
    text = soak.replace_block(None, ["## Soak", "figures"])
    assert text == f"# Robustness\n\n{soak.BEGIN}\n## Soak\nfigures\n{soak.END}\n"


def test_only_the_soak_block_is_replaced() -> None:
    first = soak.replace_block("# Robustness\n\n" + OTHER_SECTION, ["old"])
    assert first.startswith("# Robustness\n\n" + OTHER_SECTION)
    assert first.endswith(f"{soak.BEGIN}\nold\n{soak.END}\n")
    with_more = first + "\ntrailing words\n"
    second = soak.replace_block(with_more, ["new", "lines"])
    assert second == with_more.replace("\nold\n", "\nnew\nlines\n")
    assert OTHER_SECTION in second


def test_the_block_is_written_by_rename(tmp_path: Path) -> None:
    doc = tmp_path / "robustness.md"
    doc.write_text("# Robustness\n\n" + OTHER_SECTION)
    inode = doc.stat().st_ino
    soak.write_block(doc, ["figures"])
    assert doc.stat().st_ino != inode  # a new file renamed over the old one
    assert OTHER_SECTION in doc.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["robustness.md"]  # no temporary left


def test_windows_and_reference_follow_the_run_length() -> None:
    assert soak.Settings().reference == 300.0
    assert soak.Settings().window == 60.0
    short = soak.Settings(minutes=0.1, sample_seconds=1.0)
    assert short.reference == 3.0
    assert short.window == 1.0


def test_each_ping_is_owed_to_one_sink() -> None:
    report = LoadReport(
        target="t", duration=1.0, peers=5, injectors=2, sinks=3, offered_rate=1.0,
        sent={"ping": 10, "query": 2}, late=0, late_threshold_ms=1.0, early=0,
        achieved_rate=1.0, received={}, expected={"ping": 30, "query": 6}, replies={},
        latency={}, disconnected=[],
    )  # fmt: skip
    assert soak.owe_each_ping_once(report).expected == {"ping": 10, "query": 6}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone in all but name; only a running router would be a leak.
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "\nState:\tZ" not in status.read_text()


@pytest.mark.e2e
def test_a_short_soak_reports_its_figures_and_stops_every_router(tmp_path: Path) -> None:
    doc = tmp_path / "robustness.md"
    doc.write_text("# Robustness\n\n" + OTHER_SECTION)
    figures = tmp_path / "soak.json"
    arguments = ["--minutes", "0.1", "--sample-seconds", "1", "--rate", "2000"]
    arguments += ["--max-drift", "1000", "--output", str(doc), "--json", str(figures)]
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "soak.py"), *arguments],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert time.monotonic() - started < 30
    assert figures.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(figures.read_text())
    missed = [text for ok, text in result["checks"] if not ok]
    assert run.returncode == (0 if result["verdict"] == "pass" else 1), run.stderr
    assert result["verdict"] == "pass", missed
    assert "Traceback" not in run.stderr

    for router in result["routers"]:
        assert router["exit_status"] == 0
        assert not _alive(router["pid"]), f"{router['name']} still running"
        assert router["rss_at_reference"] > 0
        assert router["rss_at_end"] > 0
        assert router["fds_at_end"] > router["fds_before_load"]  # the load's peers counted
        assert router["fds_after_load"] == router["fds_before_load"]
    load = result["load"]
    assert sum(load["sent"].values()) > 5_000
    assert load["replies"]["pong"] > 0
    assert load["replies"]["query_hit"] > 0
    assert result["loss_percent"] is not None
    latency = load["latency"]["one-hop"]
    assert latency["ping"]["p50"] <= latency["ping"]["p99"] <= latency["ping"]["max"]
    assert len([s for s in result["samples"] if s["phase"] == "load"]) >= 5

    text = doc.read_text()
    assert text.startswith("# Robustness\n\n" + OTHER_SECTION)
    block = text.split(soak.BEGIN, 1)[1].split(soak.END, 1)[0]
    for words in ("RSS at 3 s", "RSS at end", "drift", "FDs before load", "not arrived"):
        assert words in block
    assert "| one-hop | ping |" in block
    assert "| round-trip | query_hit |" in block
    assert "Verdict: **pass**" in block
    assert "load average" in block
    assert "soak.py --minutes 0.1 --rate 2000 --sample-seconds 1 --max-drift 1000" in block
    assert (tmp_path / "soak.png").stat().st_size > 10_000
    assert "![RSS, open FDs and load over the soak](soak.png)" in block
