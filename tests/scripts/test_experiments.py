"""The experiment scripts as a user runs them: they finish, and they leave docs/ alone
unless told to write."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tracked_figures() -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in (ROOT / "docs" / "figures").glob("*.png")}


@pytest.mark.e2e
def test_fig14_without_write_leaves_the_published_figures_alone(tmp_path: Path) -> None:
    before = _tracked_figures()
    experiments_doc = (ROOT / "docs" / "experiments.md").read_bytes()
    script = str(ROOT / "scripts" / "experiment_fig14.py")
    arguments = ["--rates", "100", "--governor", "off", "--duration", "3", "--warmup", "1"]
    run = subprocess.run(
        [sys.executable, script, *arguments, "--out", str(tmp_path)],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "summary.json").is_file()
    assert list(tmp_path.glob("*.png")), "the figures go to the results folder instead"
    assert _tracked_figures() == before
    assert (ROOT / "docs" / "experiments.md").read_bytes() == experiments_doc


@pytest.mark.e2e
@pytest.mark.parametrize("experiment", ["step", "classes", "degrade"])
def test_the_admission_experiments_finish_and_leave_docs_alone(
    tmp_path: Path, experiment: str
) -> None:
    before = _tracked_figures()
    experiments_doc = (ROOT / "docs" / "experiments.md").read_bytes()
    script = str(ROOT / "scripts" / "experiment_admission.py")
    run = subprocess.run(
        [sys.executable, script, experiment, "--duration", "3", "--out", str(tmp_path)],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert (tmp_path / f"result-{experiment}.json").is_file()
    assert (tmp_path / f"admission-{experiment}.png").is_file()
    assert (tmp_path / f"admission-{experiment}.csv").is_file()
    assert _tracked_figures() == before
    assert (ROOT / "docs" / "experiments.md").read_bytes() == experiments_doc
