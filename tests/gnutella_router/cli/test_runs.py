"""``gnutella-router runs``: kept runs listed, two compared side by side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gnutella_router.cli.main import main
from gnutella_router.run_folder import start_run


def _load_run(root: Path, name: str, achieved: float, p99: int) -> Path:
    manifest = start_run("load", {"rate": 1000.0}, out=root / name, seed=1, command=["x"])
    report = {
        "sent": {"ping": 850, "query": 150},
        "offered_rate": 1000.0,
        "achieved_rate": achieved,
        "late": 3,
        "late_share": 0.003,
        "loss": {"ping": 0.0, "query": 0.01},
        "latency": {"one-hop": {"query": {"p50": 400, "p99": p99, "count": 150}}},
    }
    manifest.keep("summary.json", json.dumps(report))
    manifest.finish("ok")
    return manifest.folder


def test_runs_are_listed_with_what_ran(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--root", str(tmp_path / "none")]) == 0
    assert "no runs yet" in capsys.readouterr().out
    _load_run(tmp_path, "load-a", 990.0, 900)
    _load_run(tmp_path, "load-b", 995.0, 1800)
    (tmp_path / "not-a-run").mkdir()
    assert main(["runs", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["run", "kind", "status"]
    assert lines[1].startswith("load-a")
    assert " ok " in lines[1]
    assert lines[2].startswith("load-b")
    assert "not-a-run" not in out
    assert "(2 runs under" in out
    assert main(["runs", "--root", str(tmp_path), "list"]) == 0


def test_two_runs_are_compared_figure_by_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _load_run(tmp_path, "load-a", 990.0, 900)
    second = _load_run(tmp_path, "load-b", 995.0, 1800)
    assert main(["runs", "--root", str(tmp_path), "compare", "load-a", str(second)]) == 0
    out = capsys.readouterr().out
    rows = {line.split("  ")[0].strip(): line for line in out.splitlines() if "  " in line}
    assert "2.00x" in rows["one-hop query p99 (us)"]
    assert "900" in rows["one-hop query p99 (us)"]
    assert "1,800" in rows["one-hop query p99 (us)"]
    assert "1,000" in rows["sent"]
    assert "not arrived query" in rows
    assert out.startswith("A: ")
    assert main(["runs", "--root", str(tmp_path), "compare", "load-a", "load-b", "--all"]) == 0
    assert "latency.one-hop.query.count" in capsys.readouterr().out


def test_a_missing_run_is_said_plainly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _load_run(tmp_path, "load-a", 990.0, 900)
    assert main(["runs", "--root", str(tmp_path), "compare", "load-a", "nope"]) == 1
    assert "nope: no such run folder" in capsys.readouterr().err
