"""What a user installs and reads: one version, a license, completion, a service file."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gnutella_router import __version__
from gnutella_router.cli.main import main

ROOT = Path(__file__).resolve().parents[3]


def test_the_version_is_written_once() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project
    assert project["dynamic"] == ["version"]
    from importlib.metadata import version

    assert version("gnutella-router") == __version__


def test_running_needs_no_development_tools() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # Names only: mypy_extensions (the compiled modules' native int types) is a runtime
    # library of its own, not mypy.
    runtime = {
        re.split(r"[<>=~!;\[ ]", dependency, maxsplit=1)[0].lower()
        for dependency in project["dependencies"]
    }
    for tool in ("matplotlib", "mypy", "ruff", "pytest", "construct-typing"):
        assert tool not in runtime
    assert "trio" in runtime
    assert "mypy_extensions" in runtime
    assert not [d for d in project["dependencies"] if "==" in d]  # compatible, not exact
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_scripts_know_every_command(
    shell: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    for command in ("run", "testnet", "load", "dump", "plot-profile", "echo", "completion"):
        assert command in script


def test_the_service_file_runs_the_router_with_its_own_state() -> None:
    unit = (ROOT / "docs" / "gnutella-router.service").read_text()
    assert "ExecStart=" in unit
    assert "gnutella-router run" in unit
    assert "StateDirectory=gnutella-router" in unit
    assert "--state-dir ${STATE_DIRECTORY}" in unit
    # The router notifies systemd itself and reloads on SIGHUP (tests/.../test_systemd.py).
    assert "Type=notify" in unit
    assert "WatchdogSec=" in unit
    assert "ExecReload=/bin/kill -HUP $MAINPID" in unit
    assert "--config ${CONFIGURATION_DIRECTORY}/router.toml" in unit  # what a reload reads


@pytest.mark.e2e
def test_version_flag() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gnutella_router", "--version"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    version, _, hot_path = result.stdout.strip().partition("; ")
    assert version == f"gnutella-router {__version__}"
    assert hot_path.startswith("hot path: ")
    assert result.returncode == 0
