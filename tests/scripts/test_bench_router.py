"""The router benchmark as a user runs it, cut to a few seconds: every part of it (peers,
processes, runs, report) works together and it prints its table. Its figures are not
judged here: a busy test machine may well miss the floors, which the exit status says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
def test_a_short_benchmark_runs_to_its_table() -> None:
    arguments = ["--repeats", "1", "--duration", "0.5", "--latency-duration", "0.5"]
    arguments += ["--warmup", "0.2", "--connections", "20", "--skip-baseline"]
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_router.py"), *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode in (0, 1), run.stderr
    assert "Traceback" not in run.stderr
    assert "throughput: routed msgs/s in, per sink" in run.stdout
    assert "memory per idle connection, 20 open" in run.stdout
    assert "stopped by SIGTERM, exit status 0" in run.stdout + run.stderr
