"""The profiler samples a running daemon, exports JSON, CSV and DOT, and plots."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from gnutella_router.config import load_config
from gnutella_router.lab.traffic.load import LoadSettings, run_load
from gnutella_router.observe.profiler import MAX_CONNECTIONS_TRACKED, read_rss_bytes
from protocol.constants import MessageType
from tests.support.peers import running_daemons
from traffic_models.arrivals import ConstantRate
from traffic_models.generator import TrafficGenerator
from traffic_models.mix import PAPER_MIX

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

PROFILED = {
    "profiler.enabled": True,
    "profiler.interval": 0.05,
    "profiler.samples": 40,
    "router.query_delay_ms": 5,
}


@pytest.mark.e2e
async def test_a_profiled_daemon_samples_and_exports_at_shutdown(tmp_path: Path) -> None:
    async with running_daemons(tmp_path, overrides=PROFILED) as (daemon,):
        profiler = daemon.profiler
        assert profiler is not None
        traffic = TrafficGenerator(mix=PAPER_MIX, arrivals=ConstantRate(400), seed=5)
        settings = LoadSettings(target=daemon.address, peers=3, duration=2.5, drain=0.5)
        report = await run_load(settings, traffic)
        assert report.received == report.expected
        sent = sum(report.sent.values())
        assert sent > 900
        samples = list(profiler.samples)
        # 3 s at 0.05 s is ~60 samples; the ring keeps the last 40.
        assert profiler.taken > 40
        assert len(samples) == 40
        assert all(b.at > a.at for a, b in itertools.pairwise(samples))
        assert all(s.queues.keys() >= {"router", "catcher"} for s in samples)
        assert all(0 <= s.queues["router"] <= daemon.config.router.queue_threshold for s in samples)
        assert all(s.pool_size == 1 and 0 <= s.busy_workers <= 1 for s in samples)
        assert all(s.connections == 3 for s in samples)
        assert all(len(s.busiest) <= MAX_CONNECTIONS_TRACKED for s in samples)
        rss = [s.rss_bytes for s in samples]
        assert min(rss) > 10 * 2**20
        assert max(rss) < 2 * 2**30
        # Per-type rates (about 340 pings/s and 60 queries/s while the load runs): each
        # is a count over the time since the sample before, so over the ring they add up
        # to no more than the router received, however late a busy machine sampled.
        busy = [s.rates for s in samples if s.rates.get("ping", 0) > 100]
        assert busy, [s.rates for s in samples]
        for name, message_type in (("ping", MessageType.PING), ("query", MessageType.QUERY)):
            counted = sum(
                b.rates.get(name, 0.0) * (b.at - a.at) for a, b in itertools.pairwise(samples)
            )
            assert 0 < counted <= daemon.router.received[message_type] + 1
        statistics = profiler.statistics()
        assert statistics.samples == 40
        assert statistics.capacity == 40
        assert statistics.edges["server->router"] >= sent // 2
        assert statistics.edges["router->connections"] >= sent
        csv_rows = profiler.to_csv().splitlines()
        assert csv_rows[0].startswith("at,queue_catcher,queue_router,pool_size")
        assert len(csv_rows) == 41
    state = tmp_path / "node0"
    exported = json.loads((state / "profile.json").read_text())
    assert len(exported["samples"]) == 40
    assert exported["samples"][-1]["received"] >= sent // 2
    assert exported["statistics"]["peak_rss_bytes"] > 0
    dot = (state / "profile.dot").read_text()
    assert dot.startswith("digraph stages {")
    assert 'server -> router [label="' in dot
    assert 'router -> connections [label="' in dot
    assert "catcher -> server" in dot
    assert dot.rstrip().endswith("}")


@pytest.mark.e2e
async def test_the_graph_counts_hosts_learned_from_pongs(tmp_path: Path) -> None:
    from protocol.messages import Pong
    from tests.support.peers import message, peers

    async with running_daemons(tmp_path, overrides=PROFILED) as (daemon,):
        (origin,) = await peers(daemon, 1)
        await origin.send(message(Pong(6346, "1.2.3.4", 1, 10), ttl=1))
        with trio.fail_after(3):
            assert daemon.profiler is not None
            while daemon.profiler.edges()["router->catcher"] < 1:
                await trio.sleep(0.02)
        assert 'router -> catcher [label="1"]' in daemon.profiler.stage_graph_dot()


def test_the_profiler_is_off_by_default_and_the_flag_turns_it_on() -> None:
    import argparse

    from gnutella_router.cli.config_flags import add_config_arguments, config_from_args

    assert load_config().profiler.enabled is False
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    assert config_from_args(parser.parse_args(["--profile"])).profiler.enabled is True
    assert config_from_args(parser.parse_args([])).profiler.enabled is False


def test_rss_is_read_from_proc() -> None:
    assert read_rss_bytes() > 2**20


@pytest.mark.e2e
async def test_the_plot_command_writes_pngs(tmp_path: Path) -> None:
    async with running_daemons(tmp_path, overrides=PROFILED) as (daemon,):
        await trio.sleep(0.3)
        assert daemon.profiler is not None
    export = tmp_path / "node0" / "profile.json"
    out = tmp_path / "figures"
    result = await trio.to_thread.run_sync(
        lambda: subprocess.run(
            [
                *(sys.executable, "-m", "gnutella_router", "plot-profile"),
                *(str(export), "--out", str(out)),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    )
    assert result.returncode == 0, result.stderr
    for name in ("queues.png", "pool.png", "rss.png"):
        assert (out / name).read_bytes()[:8] == PNG_MAGIC


def test_the_plot_command_refuses_what_is_not_a_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gnutella_router.cli.main import main

    not_a_profile = tmp_path / "x.json"
    not_a_profile.write_text("[1, 2]")
    assert main(["plot-profile", str(not_a_profile)]) == 1
    assert "not a profiler export" in capsys.readouterr().err
    assert main(["plot-profile", str(tmp_path / "missing.json")]) == 1
    assert "No such file or directory" in capsys.readouterr().err


@pytest.mark.e2e
async def test_the_response_time_controller_is_in_the_time_series(tmp_path: Path) -> None:
    overrides = {**PROFILED, "shedding.policy": "response-time"}
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        profiler = daemon.profiler
        assert profiler is not None
        await trio.sleep(0.2)
        samples = list(profiler.samples)
        assert samples
        assert all(s.admission_rate == 200.0 for s in samples)  # its initial rate, idle
        header, first, *_ = profiler.to_csv().splitlines()
        assert header.endswith("admission_rate,admission_p90_seconds,ttl_cut")
        assert first.endswith(",200.0,,0")
