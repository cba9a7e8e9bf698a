"""The route-table benchmark as a user runs it, cut short."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_short_route_table_benchmark_prints_both_costs_and_what_ran() -> None:
    script = str(ROOT / "scripts" / "bench_route_table.py")
    run = subprocess.run(
        [sys.executable, script, "--guids", "4000", "--batch", "200", "--repeats", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("route table: hot path: ")
    assert "4,000 GUIDs a pass" in run.stdout
    assert re.search(r"record_new, batches of 200: \d+ ns per GUID", run.stdout)
    assert re.search(r"record, one call per GUID: +\d+ ns per GUID", run.stdout)


def test_the_route_table_benchmark_refuses_a_batch_larger_than_the_pass() -> None:
    script = str(ROOT / "scripts" / "bench_route_table.py")
    run = subprocess.run(
        [sys.executable, script, "--guids", "10", "--batch", "200"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 2
    assert "--guids must be at least --batch" in run.stderr
