"""The experiment scripts as a user runs them: they finish, and they leave docs/ alone
unless told to write; the admission experiment redraws any subcommand from a kept
result."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import experiment_admission

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


MEASURED = {
    "date": "2026-11-25",
    "machine": "a test machine",
    "load_average": [0.5, 0.25],
    "rerun": ".venv/bin/python scripts/experiment_admission.py floor",
}


@pytest.mark.parametrize(
    ("delivered", "status", "verdict"), [(44.4, 0, "held"), (10.0, 1, "MISSED")]
)
def test_a_kept_floor_result_is_reported_again_with_when_it_was_measured(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    delivered: float,
    status: int,
    verdict: str,
) -> None:
    result = {"duration": 30.0, "delivered_per_second": delivered, "p90_ms": 219.0, "shed": 4673}
    (tmp_path / "result-floor.json").write_text(json.dumps({**result, "measured": MEASURED}))
    experiments_doc = (ROOT / "docs" / "experiments.md").read_bytes()
    assert experiment_admission.main(["floor", "--from-results", str(tmp_path)]) == status
    out = capsys.readouterr().out
    assert "Measured 2026-11-25 on a test machine" in out
    assert "load average 0.50 at the start, 0.25 at the end" in out
    assert "`.venv/bin/python scripts/experiment_admission.py floor --write`" in out
    assert f"| {delivered:.1f}/s | 219 ms | 4,673 queries | {verdict} |" in out
    assert (ROOT / "docs" / "experiments.md").read_bytes() == experiments_doc


def test_a_kept_step_result_is_drawn_again_into_its_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = {"at": 0.1, "queue": 3, "admission_rate": 50.0, "admission_p90_ms": 90.0}
    run = {
        "key": "response-time",
        **{kind: {"mean_ms": 80.0, "p99_ms": 190.0, "max_ms": 200.0} for kind in ("ping", "query")},
        "hit": None,
        "queries_delivered_per_s": 44.1,
        "hits_per_s": 12.6,
        "shed": {"shed-admission": 3687},
        "degraded": 0,
        "max_ttl_cut": 0,
        "peak_queue": 1000,
        "median_queue_overloaded": 270,
        "series": [{**sample, "ttl_cut": 0}, {**sample, "at": 0.2, "ttl_cut": None}],
    }
    step = {"low": 100.0, "high": 1000.0, "before": 15.0, "after": 35.0, "runs": [run]}
    (tmp_path / "result-step.json").write_text(json.dumps({**step, "measured": MEASURED}))
    before = _tracked_figures()
    assert experiment_admission.main(["step", "--from-results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "over the last 25 s of overload" in out
    assert (
        "| response-time | 80.0 / 190 | 80.0 / 190 | - | 44.1 | 12.6 | shed-admission 3,687 |"
        in out
    )
    assert (tmp_path / "admission-step.png").stat().st_size > 0
    assert (tmp_path / "admission-rate.png").stat().st_size > 0
    assert _tracked_figures() == before
