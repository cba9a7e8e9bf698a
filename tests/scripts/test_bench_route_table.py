"""The route-table benchmark as a user runs it, cut short."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable

RunScript = Callable[..., subprocess.CompletedProcess[str]]
"""The ``run_script`` fixture (tests/scripts/conftest.py)."""


def test_a_short_route_table_benchmark_prints_both_costs_and_what_ran(
    run_script: RunScript,
) -> None:
    run = run_script("bench_route_table.py", "--guids", "4000", "--batch", "200", "--repeats", "1")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("route table: hot path: ")
    assert "4,000 GUIDs a pass" in run.stdout
    assert re.search(r"record_many, runs of 200: \d+ ns per GUID", run.stdout)
    assert re.search(r"a spray beside another connection.s routes: \d+ ns per GUID", run.stdout)
    assert re.search(r"record, one call per GUID: +\d+ ns per GUID", run.stdout)


def test_the_route_table_benchmark_refuses_a_batch_larger_than_the_pass(
    run_script: RunScript,
) -> None:
    run = run_script("bench_route_table.py", "--guids", "10", "--batch", "200", timeout=60)
    assert run.returncode == 2
    assert "--guids must be at least --batch" in run.stderr
