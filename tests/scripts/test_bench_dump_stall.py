"""The dump-stall benchmark as a user runs it, on small tables, and interrupted."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

RunScript = Callable[..., subprocess.CompletedProcess[str]]
"""The ``run_script`` fixture (tests/scripts/conftest.py)."""
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_dump_stall.py"
SMALL = ("--queries", "2000", "--pings", "1000")


@pytest.mark.e2e
def test_a_small_run_measures_every_dump(run_script: RunScript) -> None:
    run = run_script("bench_dump_stall.py", *SMALL, "--baseline", "0.5", timeout=180)
    assert run.returncode in (0, 1), run.stderr  # 1: the aim missed on a busy machine
    out = run.stdout
    assert "route tables filled: {'ping': 1000, 'query': 2000, 'push': 0}" in out
    for dump in ("GET /dump?limit=100000", "GET /routes?limit=100000", "SIGUSR1"):
        assert f"{dump}" in out
    assert "worst routing stall" in out


def test_the_full_flood_is_the_only_one_written(run_script: RunScript) -> None:
    run = run_script("bench_dump_stall.py", *SMALL, "--write", timeout=60)
    assert run.returncode == 2
    assert "--write records runs with the full flood only" in run.stderr
    run = run_script("bench_dump_stall.py", "--queries", "100001", timeout=60)
    assert run.returncode == 2


@pytest.mark.e2e
def test_sigterm_stops_the_run_and_its_router() -> None:
    command = [sys.executable, str(SCRIPT), *SMALL, "--baseline", "60"]
    pid = None
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stdout is not None
            assert process.stderr is not None
            for line in process.stdout:
                if "router pid" in line:
                    pid = int(line.split("router pid ", 1)[1].split(",")[0])
                if "route tables filled" in line:
                    break
            assert pid is not None
            process.send_signal(signal.SIGTERM)  # while it pings, before any dump
            assert process.wait(60) == 130
            assert "interrupted: the routers were stopped" in process.stderr.read()
        finally:
            if process.poll() is None:
                process.kill()
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists()
