"""Kept runs: a new folder per run, an earlier run replaced only when asked, a manifest."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from gnutella_router import __version__
from gnutella_router.run_folder import (
    RUNS_ENVIRONMENT,
    RunFolderError,
    git_commit,
    make_run_folder,
    runs_root,
    start_run,
)

NOON = datetime.datetime(2026, 11, 28, 12, 0, 5)


def test_each_run_gets_a_new_folder_even_in_the_same_second(tmp_path: Path) -> None:
    first = make_run_folder("load", root=tmp_path, now=NOON)
    second = make_run_folder("load", root=tmp_path, now=NOON)
    other = make_run_folder("testnet", root=tmp_path, now=NOON)
    assert first.name == "load-20261128-120005"
    assert second.name == "load-20261128-120005-2"
    assert other.name == "testnet-20261128-120005"
    assert all(p.is_dir() for p in (first, second, other))


def test_the_runs_root_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RUNS_ENVIRONMENT, str(tmp_path / "elsewhere"))
    assert runs_root() == tmp_path / "elsewhere"
    assert make_run_folder("replay", now=NOON).parent == tmp_path / "elsewhere"
    monkeypatch.delenv(RUNS_ENVIRONMENT)
    assert runs_root() == Path(".gnutella-router") / "runs"


def test_an_out_folder_is_used_when_empty_or_new(tmp_path: Path) -> None:
    assert make_run_folder("load", out=tmp_path / "new" / "deep") == tmp_path / "new" / "deep"
    (tmp_path / "empty").mkdir()
    assert make_run_folder("load", out=tmp_path / "empty") == tmp_path / "empty"
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunFolderError, match="not a folder"):
        make_run_folder("load", out=tmp_path / "file")


def test_an_earlier_run_is_replaced_only_with_overwrite_and_said_first(tmp_path: Path) -> None:
    earlier = tmp_path / "run"
    (earlier / "node-0").mkdir(parents=True)
    (earlier / "manifest.json").write_text("{}")
    (earlier / "queries.csv").write_text("old")
    with pytest.raises(RunFolderError, match="holds an earlier run; give --overwrite"):
        make_run_folder("testnet", out=earlier)
    assert (earlier / "queries.csv").exists()
    said: list[str] = []

    def notice(text: str) -> None:
        said.append(text)
        assert (earlier / "queries.csv").exists()  # told before anything is removed

    assert make_run_folder("testnet", out=earlier, overwrite=True, notice=notice) == earlier
    assert said == [f"replacing the earlier run in {earlier} (--overwrite)"]
    assert list(earlier.iterdir()) == []


def test_overwrite_never_empties_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("precious")
    with pytest.raises(RunFolderError, match="not a run's"):
        make_run_folder("load", out=home, overwrite=True)
    assert (home / "thesis.tex").read_text() == "precious"


def test_the_manifest_says_what_ran_where_and_when(tmp_path: Path) -> None:
    manifest = start_run(
        "load",
        {"rate": 100.0, "trace": Path("/tmp/x.trace")},
        out=tmp_path / "run",
        seed=7,
        command=["gnutella-router", "load", "--rate", "100", "--random-seed", "7"],
    )
    written = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert written["status"] == "running"  # written at the start already
    assert written["ended"] is None
    manifest.finish("ok")
    manifest.finish("failed")  # once only
    data = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert data["kind"] == "load"
    assert data["version"] == __version__
    assert data["build"]
    assert data["command"] == "gnutella-router load --rate 100 --random-seed 7"
    assert data["configuration"] == {"rate": 100.0, "trace": "/tmp/x.trace"}
    assert data["seed"] == 7
    assert data["machine"]["cores"] >= 1
    assert len(data["machine"]["load_average"]) == 3
    assert len(data["load_average_at_end"]) == 3
    assert data["status"] == "ok"
    assert data["started"] <= data["ended"]
    assert data["seconds"] >= 0
    assert data["source"] == git_commit()


def test_the_commit_is_read_from_a_checkout_and_absent_elsewhere(tmp_path: Path) -> None:
    assert git_commit(tmp_path) is None  # not a checkout
    here = Path(__file__).resolve().parents[2]
    if (here / ".git").exists():
        source = git_commit(here)
        assert source is not None
        assert len(source["commit"]) == 40
        assert isinstance(source["changed"], bool)
