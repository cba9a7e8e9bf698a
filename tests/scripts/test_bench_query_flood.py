"""The query-flood and deflate benchmarks as a user runs them, cut short, and the profile
reader that splits a routed message's cost by part of the path."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from scripts.profile_budget import budget

ROOT = Path(__file__).resolve().parents[2]

RunScript = Callable[..., subprocess.CompletedProcess[str]]
"""The ``run_script`` fixture (tests/scripts/conftest.py)."""

SHORT = ("--repeats", "1", "--duration", "0.5", "--warmup", "0.2")
"""One run per server, each half a second after a short warm-up."""


@pytest.mark.e2e
def test_a_short_query_flood_runs_all_four_servers_to_its_table(run_script: RunScript) -> None:
    """The router, the naive router writing both ways and the plain forwarder each pass
    queries to both sinks and stop cleanly; the aim is judged against the naive router
    that writes per read."""
    run = run_script("bench_query_flood.py", *SHORT)
    assert run.returncode in (0, 1), run.stderr
    assert "Traceback" not in run.stderr
    servers = (
        "gnutella-router",
        "naive router, a write per message",
        "naive router, a write per read",
        "plain forwarder",
    )
    for server in servers:
        assert f"{server}, run 1:" in run.stdout
        assert f"{server}, run 1: 0 queries/s" not in run.stdout
        assert f"{server}: stopped by SIGTERM, exit status 0" in run.stdout
    assert "the naive router, a write per read" in run.stdout, run.stdout
    assert "aim 1.5x: " in run.stdout, run.stdout


@pytest.mark.e2e
def test_with_minimal_peers_the_query_flood_runs_as_before(run_script: RunScript) -> None:
    """Peers that announce no Pong-Caching: the same queries, the same table."""
    run = run_script("bench_query_flood.py", *SHORT, "--peers", "minimal")
    assert run.returncode in (0, 1), run.stderr
    assert "Traceback" not in run.stderr
    assert "1 source, 2 sinks, minimal peers" in run.stdout
    for server in ("gnutella-router", "naive router, a write per read", "plain forwarder"):
        assert f"{server}, run 1:" in run.stdout
        assert f"{server}: stopped by SIGTERM, exit status 0" in run.stdout
    assert "the naive router, a write per read" in run.stdout, run.stdout
    assert "aim 1.5x: " in run.stdout, run.stdout


@pytest.mark.e2e
def test_a_short_deflate_benchmark_runs_both_routers_to_its_ratio(run_script: RunScript) -> None:
    """All four routers (two levels, deflates in turn or side by side) take the deflated
    sinks (the handshake asks for deflate and the sinks count inflated bytes), stop
    cleanly, and each is set beside the defaults."""
    from scripts.bench_deflate import VARIANTS

    run = run_script("bench_deflate.py", *SHORT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(VARIANTS) == 4
    for router, (level, threads) in VARIANTS.items():
        assert f"{router}, run 1:" in run.stdout
        assert f"{router}: stopped by SIGTERM, exit status 0" in run.stdout
        (row,) = [
            line
            for line in run.stdout.splitlines()
            if f"`deflate_level = {level}`, `deflate_threads = {threads}`" in line
        ]
        assert row.rstrip().endswith("x"), row  # a ratio to the defaults, not "n/a"


def test_the_written_section_says_which_runs_failed_and_how_many_each_median_counts() -> None:
    from scripts.bench_query_flood import _failure_notes
    from scripts.router_bench.report import CLOSED_BY_THE_SERVER
    from scripts.router_bench.runs import ThroughputRun
    from scripts.router_bench.servers import Cpu, Problems

    run = ThroughputRun(per_sink=1.0, slowest_sink=1.0, accepted=1.0, cpu=Cpu(None, 0.0, None))
    problems = Problems()
    assert _failure_notes(problems, {"a": [run, run], "b": [run, run]}, 2) == []
    problems.retried.append("a, run 1: sink 1 closed by the server")
    problems.fail("a, run 2: sink 1 closed by the server")
    notes = _failure_notes(problems, {"a": [run], "b": [run, run]}, 2)
    assert notes == [
        "- Repeated after a failure: a, run 1: sink 1 closed by the server.",
        "- Failed: a, run 2: sink 1 closed by the server.",
        "- a: the median of 1 run, not 2.",
        f"- {CLOSED_BY_THE_SERVER}",
        "",
    ]


def test_each_sample_is_charged_to_its_innermost_recognised_part() -> None:
    lines = [
        "main (x.py:1);Stage._work (s.py:2);GnutellaRouter._flush_broadcasts (r.py:3);"
        "SocketWriter.flush (w.py:4) 5",
        "main (x.py:1);FloodPath.route (f.py:9);RouteTable.record_new (t.py:3) 3",
        "main (x.py:1);Connection._read_loop (c.py:1);FrameDecoder.receive_data (f.py:2) 2",
        "main (x.py:1);something_else (y.py:1) 1",
        "not a sample line",
    ]
    counts, total = budget(lines)
    assert total == 11
    assert counts["writes (one os.write per destination per batch)"] == 5
    assert counts["duplicates and reverse routes (route tables)"] == 3
    assert counts["framing (the decoder, a Frame per message)"] == 2
    assert counts["other"] == 1


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler to compile with")
def test_a_short_compiled_benchmark_runs_both_routers_under_both_loads(
    run_script: RunScript,
) -> None:
    """Each copy runs what it should (its ``--version`` says so) and both routers stop
    cleanly after a run of each load."""
    run = run_script("bench_compiled.py", *SHORT, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    for router in ("pure Python", "compiled"):
        assert f"{router}, run 1:" in run.stdout
        assert f"{router}: stopped by SIGTERM, exit status 0" in run.stdout
    assert "pure Python: gnutella-router" in run.stdout
    from gnutella_router import native

    # The list of hot modules is native's own (it grows), not written out again here.
    hot = ", ".join(Path(source).stem for source in native.HOT_SOURCES)
    assert f"hot path: compiled with mypyc ({hot})" in run.stdout
    assert run.stdout.count("x  ") >= 2, run.stdout
