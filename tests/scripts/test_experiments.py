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
@pytest.mark.parametrize(
    ("script", "arguments", "written"),
    [
        (
            "experiment_admission.py",
            ["step", "--only", "response-time", "--before", "2", "--after", "11"],
            ["admission-step.png", "admission-rate.png", "response-time/series.csv"],
        ),
        (
            "experiment_admission.py",
            ["classes", "--duration", "3"],
            ["admission-classes.png", "admission-classes.csv", "result-classes.json"],
        ),
        (
            "experiment_admission.py",
            ["degrade", "--duration", "3"],
            ["admission-degrade.png", "admission-degrade.csv", "result-degrade.json"],
        ),
        (
            "experiment_governor.py",
            ["--steps", "3s@100,5s@400"],
            ["governor-steps.png", "governor-steps.csv"],
        ),
    ],
)
def test_the_controller_experiments_finish_and_leave_docs_alone(
    tmp_path: Path, script: str, arguments: list[str], written: list[str]
) -> None:
    before = _tracked_figures()
    experiments_doc = (ROOT / "docs" / "experiments.md").read_bytes()
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), *arguments, "--out", str(tmp_path)],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    for name in written:
        assert (tmp_path / name).stat().st_size > 0, name
    assert _tracked_figures() == before
    assert (ROOT / "docs" / "experiments.md").read_bytes() == experiments_doc


def _run(script: str, arguments: list[str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), *arguments],
        capture_output=True,
        timeout=120,
        check=False,
    )


@pytest.mark.e2e
def test_fig14_bursts_beside_constant_go_to_the_results_folder(tmp_path: Path) -> None:
    before = _tracked_figures()
    experiments_doc = (ROOT / "docs" / "experiments.md").read_bytes()
    arguments = ["--arrivals", "both", "--rates", "100", "--governor", "off"]
    run = _run(
        "experiment_fig14.py",
        [*arguments, "--duration", "3", "--warmup", "1", "--out", str(tmp_path)],
    )
    assert run.returncode == 0, run.stderr
    rows = (tmp_path / "fig14-arrivals.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in rows[1:]] == ["bursts", "constant"]
    assert (tmp_path / "fig14-bursts-latency.png").is_file()
    assert b"10 every 100 ms" in run.stdout
    assert _tracked_figures() == before
    assert (ROOT / "docs" / "experiments.md").read_bytes() == experiments_doc


@pytest.mark.e2e
def test_the_unbounded_queue_grows_past_the_default_bound(tmp_path: Path) -> None:
    before = _tracked_figures()
    arguments = ["--bounds", "unbounded", "--rates", "1000", "--duration", "4"]
    run = _run("experiment_unbounded_queue.py", [*arguments, "--out", str(tmp_path)])
    assert run.returncode == 0, run.stderr
    rows = (tmp_path / "unbounded-queue.csv").read_text().splitlines()[1:]
    # One thread serves about 330 messages/s here; at 1000/s the backlog passes the
    # default bound of 1000 within a few seconds.
    assert max(int(row.split(",")[4]) for row in rows) > 1000
    assert _tracked_figures() == before
