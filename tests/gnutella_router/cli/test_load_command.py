"""``gnutella-router load`` as a user runs it: values checked, schedules run their length,
Ctrl-C gives a partial report, and our counts stand beside the router's own."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from gnutella_router.cli.main import main
from gnutella_router.lab.traffic.echo import EchoRouter
from gnutella_router.lab.traffic.load import LoadSettings, run_load
from tests.support.peers import running_daemons
from tests.support.processes import free_port
from traffic_models.arrivals import ConstantRate
from traffic_models.generator import TrafficGenerator
from traffic_models.mix import PAPER_MIX

COMMAND = [sys.executable, "-m", "gnutella_router"]


@pytest.mark.parametrize(
    ("arguments", "complaint"),
    [
        (["--rate", "0"], "--rate: '0': expected a positive number"),
        (["--rate", "-5"], "--rate: '-5': expected a positive number"),
        (["--duration", "-1"], "--duration: '-1': expected a positive number"),
        (["--peers", "1"], "--peers: '1': expected a whole number 2 to 1024"),
        (["--drain", "nan"], "--drain: 'nan': expected a number"),
        (["--target", "10.0.0.1:6346"], "only loopback addresses are allowed"),
    ],
)
def test_nonsense_is_refused_in_one_line(
    arguments: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["load", "--target", "127.0.0.1:1", *arguments]
    if "--target" in arguments:
        argv = ["load", *arguments]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert complaint in capsys.readouterr().err


def test_a_missing_output_folder_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Port 1 on loopback refuses connections: had the run started, the error would differ.
    status = main(["load", "--target", "127.0.0.1:1", "--json", str(tmp_path / "no" / "x.json")])
    assert status == 2
    assert "does not exist" in capsys.readouterr().err


def test_help_shows_every_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["load", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for shown in ("(default: 1000.0)", "(default: 4)", "(default: 5.0)", "(default: auto)"):
        assert shown in text, shown


async def _echo_report(tmp_path: Path, *arguments: str) -> dict[str, object]:
    echo = EchoRouter()
    out = tmp_path / "report.json"
    async with trio.open_nursery() as nursery:
        address = await nursery.start(echo.serve)
        argv = ["load", "--target", f"127.0.0.1:{address[1]}", "--admin", "off", "--quiet"]
        status = await trio.to_thread.run_sync(main, [*argv, "--json", str(out), *arguments])
        nursery.cancel_scope.cancel()
    assert status == 0
    report: dict[str, object] = json.loads(out.read_text())
    return report


@pytest.mark.e2e
async def test_a_ramp_runs_its_own_length(tmp_path: Path) -> None:
    report = await _echo_report(tmp_path, "--arrivals", "ramp:1.5s@100-300")
    assert report["duration"] == pytest.approx(1.5)
    sent = report["sent"]
    assert isinstance(sent, dict)
    # The integral of a 100 -> 300 msgs/s ramp over 1.5 s is 300 messages.
    assert 290 <= sum(sent.values()) <= 310


@pytest.mark.e2e
async def test_an_explicit_duration_still_wins(tmp_path: Path) -> None:
    report = await _echo_report(tmp_path, "--arrivals", "ramp:4s@100-300", "--duration", "1")
    assert report["duration"] == pytest.approx(1.0)


@pytest.mark.e2e
def test_ctrl_c_prints_a_partial_report_and_exits_130(tmp_path: Path) -> None:
    port = free_port()
    echo = subprocess.Popen(
        [*COMMAND, "echo", "--listen", f"127.0.0.1:{port}"], stderr=subprocess.PIPE
    )
    try:
        assert echo.stderr is not None
        echo.stderr.readline()
        kept = tmp_path / "run"
        arguments = ["--rate", "200", "--duration", "60", "--quiet", "--admin", "off"]
        load = subprocess.Popen(
            [*COMMAND, "load", "--target", f"127.0.0.1:{port}", *arguments, "--out", str(kept)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            # The manifest is written just before the run starts: past the imports, which
            # take seconds on a busy machine (a Ctrl-C then is an ordinary interrupt).
            deadline = time.monotonic() + 60
            while not (kept / "manifest.json").exists():
                assert time.monotonic() < deadline, "the load never started"
                assert load.poll() is None, "the load ended early"
                time.sleep(0.05)
            time.sleep(1.5)  # connected and sending by then
            started = time.monotonic()
            load.send_signal(signal.SIGINT)
            out, err = load.communicate(timeout=20)
            assert time.monotonic() - started < 10
        finally:
            if load.poll() is None:
                load.kill()
                load.communicate()
    finally:
        echo.terminate()
        echo.communicate(timeout=10)
    assert load.returncode == 130, err
    assert b"INTERRUPTED: partial figures" in out
    assert b"copies reached the sinks" in out
    assert b"Traceback" not in err


@pytest.mark.e2e
async def test_our_counts_stand_beside_the_routers_own(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        assert daemon.admin_address is not None
        settings = LoadSettings(
            target=daemon.address, peers=3, duration=1.0, admin=daemon.admin_address
        )
        traffic = TrafficGenerator(mix=PAPER_MIX, arrivals=ConstantRate(200), seed=3)
        report = await run_load(settings, traffic)
    assert report.router is not None
    assert report.router.note is None
    # Every message we sent was read by the router, and every copy it forwarded reached
    # one of our peers by the end of the drain.
    assert report.router.received == report.sent
    assert report.router.forwarded == report.router.copies_at_our_peers
    assert report.received == report.expected
    text = report.to_text()
    assert "router counters" in text
    assert "dropped by the router: none" in text


@pytest.mark.e2e
async def test_an_unreachable_admin_interface_is_said_plainly(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        settings = LoadSettings(
            target=daemon.address, peers=2, duration=0.3, admin=("127.0.0.1", free_port())
        )
        traffic = TrafficGenerator(mix=PAPER_MIX, arrivals=ConstantRate(50), seed=3)
        report = await run_load(settings, traffic)
    assert report.router is not None
    assert report.router.note is not None
    assert "cannot reach the admin interface" in report.router.note


@pytest.mark.e2e
async def test_replies_the_router_routed_back_are_not_counted_as_lost(tmp_path: Path) -> None:
    """With answering sinks the router forwards pongs and hits back to the injector: those
    reach our peers as replies, and must be counted there, not reported as lost."""
    async with running_daemons(tmp_path) as (daemon,):
        assert daemon.admin_address is not None
        settings = LoadSettings(
            target=daemon.address,
            peers=3,
            duration=1.0,
            respond=True,
            admin=daemon.admin_address,
        )
        traffic = TrafficGenerator(mix=PAPER_MIX, arrivals=ConstantRate(200), seed=3)
        report = await run_load(settings, traffic)
    assert report.router is not None
    forwarded = report.router.forwarded
    assert forwarded.get("pong", 0) > 0
    assert forwarded.get("query_hit", 0) > 0
    assert report.router.copies_at_our_peers == forwarded
    # The router's own pongs (one per ping it got) are its own, not forwarded copies.
    assert report.router.generated.get("pong", 0) >= report.sent["ping"]
    text = report.to_text()
    assert "not at our peers" not in text
    assert "lost" not in text


@pytest.mark.e2e
async def test_load_reads_a_guarded_routers_counters_with_the_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "load-token-1234"
    async with running_daemons(tmp_path, overrides={"admin.token": token}) as (daemon,):
        assert daemon.admin_address is not None
        admin = f"127.0.0.1:{daemon.admin_address[1]}"
        argv = ["load", "--target", f"127.0.0.1:{daemon.address[1]}", "--admin", admin]
        argv += ["--rate", "50", "--duration", "0.3", "--quiet", "--drain", "0.5"]
        monkeypatch.delenv("GNUTELLA_ADMIN_TOKEN", raising=False)
        assert await trio.to_thread.run_sync(main, argv) == 0
        without = capsys.readouterr().out
        assert "401" in without
        assert "give --token or set GNUTELLA_ADMIN_TOKEN" in without
        assert await trio.to_thread.run_sync(main, [*argv, "--token", token]) == 0
        assert "dropped by the router: none" in capsys.readouterr().out
        monkeypatch.setenv("GNUTELLA_ADMIN_TOKEN", token)
        assert await trio.to_thread.run_sync(main, argv) == 0
        assert "dropped by the router: none" in capsys.readouterr().out


@pytest.mark.e2e
async def test_a_load_run_is_kept_in_a_folder_of_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    echo = EchoRouter()
    out = tmp_path / "kept"
    async with trio.open_nursery() as nursery:
        address = await nursery.start(echo.serve)
        argv = ["load", "--target", f"127.0.0.1:{address[1]}", "--admin", "off", "--quiet"]
        argv += ["--rate", "100", "--duration", "0.3", "--random-seed", "5", "--out", str(out)]
        assert await trio.to_thread.run_sync(main, argv) == 0
        assert f"results in {out}" in capsys.readouterr().err
        assert await trio.to_thread.run_sync(main, argv) == 2  # not over it unasked
        assert "give --overwrite" in capsys.readouterr().err
        assert await trio.to_thread.run_sync(main, [*argv, "--overwrite"]) == 0
        nursery.cancel_scope.cancel()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "load"
    assert manifest["status"] == "ok"
    assert manifest["seed"] == 5
    assert manifest["configuration"]["peers"] == 4
    assert manifest["command"].startswith("gnutella-router load --target")
    summary = json.loads((out / "summary.json").read_text())
    assert sum(summary["sent"].values()) == 30
    assert "copies reached the sinks" in (out / "report.txt").read_text()


def test_the_old_seed_spelling_still_works_with_a_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from gnutella_router.cli.main import build_parser

    args = build_parser().parse_args(["load", "--target", "127.0.0.1:1", "--seed", "9"])
    assert args.random_seed == 9
    assert "--seed is deprecated here, use --random-seed" in capsys.readouterr().err
    args = build_parser().parse_args(["load", "--target", "127.0.0.1:1", "--random-seed", "9"])
    assert args.random_seed == 9
    assert capsys.readouterr().err == ""
    for old in (["sample", "x", "--seed", "3"], ["decode", "--seed", "3"]):
        assert build_parser().parse_args(old).random_seed == 3
    assert build_parser().parse_args(["testnet", "--seed-value", "4"]).random_seed == 4
    # In testnet, --seed stays what it is in run: a peer's address.
    assert build_parser().parse_args(["testnet", "--seed", "127.0.0.1:6346"]).seed == [
        "127.0.0.1:6346"
    ]
