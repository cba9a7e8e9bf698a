"""The matrix benchmark in its quickest mode: its table has a row per cell with every
column filled, and every server it starts is stopped, when it ends by itself and when
it is sent SIGTERM mid-run. No figure is judged: a busy test machine gives any."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_matrix.py"

RunScript = Callable[..., subprocess.CompletedProcess[str]]
"""The ``run_script`` fixture (tests/scripts/conftest.py)."""

SERVERS = ("gnutella-router", "naive router", "plain forwarder")


def started_pids(output: str) -> list[int]:
    return [int(pid) for pid in re.findall(r"\(pid (\d+)\)", output)]


def stopped(pid: int, within: float = 5.0) -> bool:
    """Whether the process has ended (gone, or a zombie whose parent has yet to reap it)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.e2e
def test_the_quick_matrix_prints_a_row_per_cell_and_stops_every_server(
    run_script: RunScript,
) -> None:
    cells = ("gtk-like/query flood/off/0", "minimal/paper mix, replies/on/30")
    run = run_script("bench_matrix.py", "--quick", "--cells", *cells, timeout=50)
    assert run.returncode in (0, 1), run.stdout + run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    out = run.stdout
    rate = r"(?:n/a|[\d,]+)"  # a server whose runs all failed has no figure
    ratio = r"(?:n/a|[\d.]+x)"
    rows = {}
    for label in (
        "gtk-like peers, query flood, deflate off, 0 leaves",
        "minimal peers, paper mix, replies, deflate on, 30 leaves",
    ):
        row = next(line for line in out.splitlines() if line.startswith(label + "  "))
        rows[label] = re.split(r"\s{2,}", row.strip())
    flood, replies = rows.values()
    # cell, the three rates, two ratios, per sink, CPU: no replies, no leaves
    assert len(flood) == 6, flood
    assert re.fullmatch(f"{rate} / {rate} / {rate}", flood[1]), flood
    assert all(re.fullmatch(ratio, text) for text in flood[2:4]), flood
    # and with replies and leaves: ours / naive for each
    assert len(replies) == 8, replies
    assert re.fullmatch(f"{rate} / {rate}", replies[5]), replies
    assert re.fullmatch(f"{rate} / {rate}", replies[6]), replies
    for server in SERVERS:
        assert out.count(f"{server}: stopped by SIGTERM, exit status 0") == 2, out
    assert "The trace model" in out
    pids = started_pids(out)
    assert len(pids) == 2 * len(SERVERS)
    assert all(stopped(pid) for pid in pids)


@pytest.mark.e2e
def test_sigterm_mid_run_kills_every_server_started() -> None:
    process = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--quick", "--cells", "gtk-like/query flood/on/30"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    lines = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "started " in line:
                process.send_signal(signal.SIGTERM)
                break
        rest, _ = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    out = "".join(lines) + rest
    pids = started_pids(out)
    assert len(pids) == len(SERVERS), out
    assert process.returncode == 128 + signal.SIGTERM, out
    assert "terminated: servers killed: " in out
    assert all(stopped(pid) for pid in pids)
