"""The discovery attack script: its plan, and the script as a user runs it, cut short,
against this checkout (the after side must hold the attacker to its shares)."""

from __future__ import annotations

import collections
import subprocess
import sys
from pathlib import Path

import pytest

from gnutella_router.discovery.ranges import classify_address
from scripts import attack_discovery

ROOT = Path(__file__).resolve().parents[2]


def test_the_attack_sends_what_its_docstring_says() -> None:
    hosts = attack_discovery.attack_hosts()
    assert len(hosts) == len(set(hosts)) == 10_000
    kinds = collections.Counter(classify_address(host)[1] or "public" for host, _ in hosts)
    assert kinds == {"private": 6000, "public": 4000}
    assert sum(host == attack_discovery.VICTIM for host, _ in hosts) == 88
    honest = attack_discovery.honest_hosts()
    assert len({classify_address(host) for host, _ in honest}) == 300
    assert all(classify_address(host)[1] is None for host, _ in honest)
    assert not set(honest) & set(hosts)
    assert hosts == attack_discovery.attack_hosts()  # the same every run


@pytest.mark.e2e
def test_a_short_run_holds_the_attacker_to_its_shares(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "attack_discovery.py"), "--seconds", "2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "... to non-public addresses: 0 (none)" in run.stdout
    assert "... honest clients refused during 300 idle connections: 0 of 20" in run.stdout
