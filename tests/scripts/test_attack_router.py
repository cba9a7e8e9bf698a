"""The hostile-peer suite as a user runs it: three of its cheapest attacks, cut to a second
each, print their figures and stop every router they started; SIGTERM stops a run and its
router; and the pieces that must be exact (the deflate bomb's ratio, the generated
configuration) are.

Nothing here asserts the floors: whether a router meets them on a busy machine is the
suite's own report, not this test's verdict.
"""

from __future__ import annotations

import random
import re
import signal
import subprocess
import sys
import time
import tomllib
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from protocol.framing import FrameDecoder
from scripts.router_attack.abuse import BOMB_MESSAGES, ZLIB_HEADER, bomb_block, raw_block
from scripts.router_attack.target import COMMON_CONFIG, config_text, delta, flatten, merged

RunScript = Callable[..., subprocess.CompletedProcess[str]]
"""The ``run_script`` fixture (tests/scripts/conftest.py)."""
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "attack_router.py"
CHEAP = ("query-flood", "large-hits", "slot-hog")


class _Rng:
    """What :func:`bomb_block` asks of its arena: a seeded GUID."""

    rng = random.Random(1)

    def guid(self) -> bytes:
        return self.rng.randbytes(16)


def gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not Path(f"/proc/{pid}").exists()


def test_the_bomb_inflates_about_700_to_1_into_whole_messages() -> None:
    block, inflated = bomb_block(_Rng())  # type: ignore[arg-type]
    assert 650 <= inflated / len(block) <= 750
    stream = ZLIB_HEADER + block * 3 + raw_block(b"tail")
    data = zlib.decompressobj().decompress(stream)
    assert len(data) == 3 * inflated + 4
    frames = FrameDecoder().receive_data(data[:-4])
    assert len(frames) == 3 * BOMB_MESSAGES
    assert {f.payload_type for f in frames} == {0x31}


def test_the_configuration_trusts_only_the_honest_address_and_adds_the_scenarios() -> None:
    tables = merged(COMMON_CONFIG, {"network": {"idle_timeout": 2.0}})
    parsed = tomllib.loads(config_text(tables))
    assert parsed["network"] == {"trusted": ["127.0.0.1/32"], "idle_timeout": 2.0}
    assert parsed["catcher"] == {"min_connections": 0}


def test_counters_are_compared_flattened() -> None:
    before = flatten({"server": {"kicked": {"qrp-too-soon": 1}, "listening": ["x"]}})
    after = flatten({"server": {"kicked": {"qrp-too-soon": 3}}, "router": {"n": 2}})
    assert delta(before, after) == {"server.kicked.qrp-too-soon": 2.0, "router.n": 2.0}


def test_bad_arguments_are_refused(run_script: RunScript) -> None:
    assert run_script("attack_router.py", "--only", "nope", timeout=60).returncode == 2
    run = run_script("attack_router.py", "--only", "query-flood", "--write", timeout=60)
    assert run.returncode == 2
    assert "--write records a run of every scenario" in run.stderr


@pytest.mark.e2e
def test_a_short_run_prints_its_figures_and_stops_every_router(run_script: RunScript) -> None:
    args = ("--only", ",".join(CHEAP), "--seconds", "1", "--seed", "7", "--timeout", "60")
    run = run_script("attack_router.py", *args, timeout=240)
    assert run.returncode in (0, 1), run.stdout + run.stderr  # 1: a floor not met
    out = run.stdout
    pids = [int(pid) for pid in re.findall(r"router pid (\d+)", out)]
    assert len(pids) == len(CHEAP)
    summary = out.split("\nSummary\n", 1)[1]
    for key in CHEAP:
        block = summary.split(f"\n{key}: ", 1)[1].split("\n\n", 1)[0]
        assert "router RSS" in block
        assert "worst routing stall of an honest ultrapeer's pings <= 100 ms" in block
        assert "honest peers closed: 0" in block
        assert "honest pending routes lost: 0" in block
        assert "one untrusted address holds at most 1 slot(s)" in block
        assert "attacker counted as an offender" in block
        assert "FAILED" not in block, block
    assert "queries over its rate (source-over-rate)" in summary
    assert "answers to 40 handshakes at once from one address" in out
    assert all(gone(pid) for pid in pids)


@pytest.mark.e2e
def test_sigterm_stops_the_run_and_its_router() -> None:
    command = [sys.executable, str(SCRIPT), "--only", "slow-admin"]
    pid = None
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stdout is not None
            assert process.stderr is not None
            for line in process.stdout:
                if "router pid" in line:
                    pid = int(line.split("router pid ", 1)[1].split()[0])
                    break
            assert pid is not None
            time.sleep(3)  # into the attack: the admin's slots held
            process.send_signal(signal.SIGTERM)
            assert process.wait(60) == 130
            assert "interrupted: every router was stopped" in process.stderr.read()
        finally:
            if process.poll() is None:
                process.kill()
    assert gone(pid)
