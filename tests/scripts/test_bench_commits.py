"""How scripts/bench_commits.py gets the two versions it compares (the runs themselves
are bench_compiled's, tested with it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from scripts.router_bench.peers import BenchError
from scripts.router_bench.trees import WORKING_TREE, export

ROOT = Path(__file__).resolve().parents[2]


def _in_a_git_checkout() -> bool:
    if shutil.which("git") is None:
        return False
    result = subprocess.run(
        ["git", "rev-parse", "--verify", "HEAD"], cwd=ROOT, capture_output=True, check=False
    )
    return result.returncode == 0


@pytest.mark.skipif(not _in_a_git_checkout(), reason="needs this checkout's git history")
def test_a_revision_is_exported_whole_and_uncompiled(tmp_path: Path) -> None:
    tree = export("HEAD", tmp_path / "base")
    for name in ("hatch_build.py", "pyproject.toml", "gnutella_router/native.py"):
        assert (tree / name).is_file(), name
    assert not list(tree.rglob("*.so"))


def test_the_working_tree_is_copied_as_it_is(tmp_path: Path) -> None:
    tree = export(WORKING_TREE, tmp_path / "head")
    for source in ("gnutella_router/routing/route_table.py", "hatch_build.py"):
        assert (tree / source).read_bytes() == (ROOT / source).read_bytes()
    assert not list(tree.rglob("*.so"))


@pytest.mark.skipif(not _in_a_git_checkout(), reason="needs this checkout's git history")
def test_an_unknown_revision_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BenchError, match="git archive no-such-revision"):
        export("no-such-revision", tmp_path / "base")
