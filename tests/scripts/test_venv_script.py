"""scripts/venv.sh says what it is doing before each long, quiet step.

A stand-in for Python records what the script asks of it (making the environment, pip,
the build check) without installing anything, so the order of what the user is told
and what is done can be checked in a second.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "venv.sh"

STAND_IN = """\
#!/bin/sh
# Writes what it was asked into the shared log; makes a venv's python when asked to.
echo "python $*" >> "$STEPS"
echo "stand-in: python $*" >&2
case "$1 $2" in
  "-m venv") mkdir -p "$3/bin" && cp "$0" "$3/bin/python" ;;
esac
exit 0
"""


def test_a_first_install_says_what_it_does_before_doing_it(tmp_path: Path) -> None:
    python = tmp_path / "python3"
    python.write_text(STAND_IN)
    python.chmod(0o755)
    steps = tmp_path / "steps.log"
    venv = tmp_path / "venv"
    done = subprocess.run(
        ["bash", str(SCRIPT), "dev"],
        env={**os.environ, "PYTHON": str(python), "GNUTELLA_VENV": str(venv), "STEPS": str(steps)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # interleaved as written, for the order
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout
    told = done.stdout
    assert f"creating {venv}" in told
    assert "installing gnutella-router (what running needs, the plot, test and lint tools)" in told
    assert "takes a few" in told
    assert "ready in " in told
    asked = steps.read_text().splitlines()
    assert any("-m pip install" in line and "-e" in line for line in asked)
    # Told before done: the stand-in writes each call into the same stream, in order.
    first_pip = told.index("stand-in: python -m pip install")
    assert told.index("installing gnutella-router") < first_pip
    assert told.index("upgrading pip") < first_pip
    assert told.index("installing (pip install -e") < told.index(
        "stand-in: python -m pip install --quiet --disable-pip-version-check -e"
    )


def test_an_environment_that_is_up_to_date_is_left_quiet(tmp_path: Path) -> None:
    python = tmp_path / "python3"
    python.write_text(STAND_IN)
    python.chmod(0o755)
    env = {
        **os.environ,
        "PYTHON": str(python),
        "GNUTELLA_VENV": str(tmp_path / "venv"),
        "STEPS": str(tmp_path / "steps.log"),
    }
    first = subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert first.returncode == 0, first.stderr
    again = subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert again.returncode == 0
    assert "scripts/venv.sh" not in again.stderr  # nothing to do, nothing said
