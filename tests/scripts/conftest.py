"""Running a script under scripts/ as a user does: its own process, output captured."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"

RunScript = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run_script() -> RunScript:
    """``run_script("bench_x.py", "--flag", ..., timeout=120, env=None)``: the script
    run to its end with this interpreter; its exit status is the caller's to judge."""

    def run(
        name: str, *args: str, timeout: float = 120, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(SCRIPTS / name), *args],
            capture_output=True,
            text=True,
            env=None if env is None else dict(env),
            timeout=timeout,
            check=False,
        )

    return run
