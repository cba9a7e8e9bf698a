"""The idle-connection memory benchmark as a user runs it, cut to a few connections:
every kind of run reaches its table, and the servers it started stop cleanly. Its
figures are not judged here (a handful of connections says nothing about RSS); the
mechanisms they measure have tests of their own (tests/gnutella_router/net)."""

from __future__ import annotations

import importlib.util
import ipaddress
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

RunScript = Callable[..., subprocess.CompletedProcess[str]]
"""The ``run_script`` fixture (tests/scripts/conftest.py)."""

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_idle_memory.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_idle_memory", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.e2e
def test_a_short_benchmark_runs_every_kind_to_its_table(run_script: RunScript) -> None:
    run = run_script(
        "bench_idle_memory.py", "--connections", "20", "--repeats", "1", "--settle", "0.2"
    )
    assert run.returncode in (0, 1), run.stderr
    assert "Traceback" not in run.stderr
    for row in ("plain", "deflate both ways", "deflate both ways, peers speak first"):
        assert f"memory per idle connection, 20 open, {row} " in run.stdout
    assert run.stdout.count("stopped by SIGTERM, exit status 0") == 4


@pytest.mark.e2e
def test_the_breakdown_traces_a_router(run_script: RunScript) -> None:
    arguments = ["--breakdown", "--skip-deflate", "--connections", "20", "--settle", "0.2"]
    run = run_script("bench_idle_memory.py", *arguments, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "trio: tasks, nurseries, cancel scopes" in run.stdout
    assert "in all (traced" in run.stdout


def test_each_connection_comes_from_an_address_of_its_own() -> None:
    script = load_script()
    addresses = [script.client_address(index) for index in range(10_000)]
    assert len(set(addresses)) == 10_000
    assert script.WARM_ADDRESS not in addresses
    assert "127.0.0.1" not in addresses  # where the servers listen
    loopback = ipaddress.ip_network("127.0.0.0/8")
    assert all(ipaddress.ip_address(address) in loopback for address in addresses)
