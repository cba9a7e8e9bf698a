"""The instruction-count benchmark: its load, and what it says without valgrind."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

RunScript = Callable[..., subprocess.CompletedProcess[str]]
"""The ``run_script`` fixture (tests/scripts/conftest.py)."""


def test_the_counted_load_routes_every_message_to_both_sinks(run_script: RunScript) -> None:
    for load in ("query", "mixed"):
        run = run_script("bench_instructions.py", "--run", "3000", "--made", "6000", "--load", load)
        assert run.returncode == 0, run.stderr
        routed = int(run.stdout.split("routed ")[1])
        sinks = int(run.stdout.split(" bytes written to the sinks")[0])
        source = int(run.stdout.split(", ")[1].split(" to the source")[0])
        # Whole reads: at least what was asked, at most one read more.
        assert 3000 <= routed < 3000 + 64 * 1024 // 23
        if load == "query":
            assert sinks == 2 * 30 * routed  # every 30-byte query copied to both sinks
            assert source == 0
        else:
            # The peers cache pongs: their pings are answered with our pong, one each,
            # and only the queries go on, 30 bytes to each sink.
            assert sinks % 60 == 0
            pings = routed - sinks // 60
            assert 0.75 * routed < pings < 0.95 * routed  # 85 % of the load
            assert source % pings == 0
            assert 37 <= source // pings <= 64


def test_without_valgrind_it_says_so(tmp_path: Path) -> None:
    script = Path(__file__).resolve().parents[2] / "scripts" / "bench_instructions.py"
    run = subprocess.run(
        [sys.executable, str(script), "--messages", "10"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": str(tmp_path)},
        timeout=60,
        check=False,
    )
    assert run.returncode == 1
    assert "valgrind is not installed" in run.stderr
