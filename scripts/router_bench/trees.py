"""Other versions of the router, side by side with this one: a revision's sources (or a
copy of the working tree) in a folder, its hot path compiled there by its own build
hook, and the environment that makes a process run from that folder.

A process runs another tree's packages by having the tree first on ``PYTHONPATH`` with
``PYTHONSAFEPATH`` set (:func:`tree_first`): no script folder or working directory is put
before it, which would bring this checkout's own, compiled, modules back. That is how
``bench_compiled.py`` and ``bench_commits.py`` start their routers and
``attack_discovery.py`` its "before" run. A process that takes the router from another
tree but its load from this one (``bench_instructions.py --tree``) has on ``PYTHONPATH``
a folder of links to the tree's shipped packages only (:func:`packages_of`), so this
checkout's ``scripts`` package still comes from here. No script changes its own
``sys.path``.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import hatch_build
from scripts import ROOT
from scripts.router_bench.peers import BenchError
from scripts.runner import router_argv

WORKING_TREE = "working tree"
"""The revision that stands for the working tree as it is, uncommitted changes included."""
_COMPILE_HERE = (
    "import sys, hatch_build; from pathlib import Path\n"
    "try:\n"
    "    hatch_build.compile_hot_path(Path.cwd())\n"
    "except hatch_build.NativeBuildError as exc:\n"
    "    sys.exit(f'cannot compile: {exc}')\n"
)


def tree_first(tree: Path) -> dict[str, str]:
    """The environment that makes a Python process import from ``tree``: first on the
    path, and no script or working directory put before it (``PYTHONSAFEPATH``), which
    would otherwise bring this checkout's own, compiled, modules back."""
    return {"PYTHONPATH": str(tree), "PYTHONSAFEPATH": "1"}


@contextlib.contextmanager
def packages_of(tree: Path) -> Iterator[Path]:
    """For the ``with`` block, a folder holding links to ``tree``'s shipped packages
    (``hatch_build.PACKAGES``) and nothing else: first on ``PYTHONPATH``
    (:func:`tree_first` of it), it makes a process import the router from ``tree`` and
    everything else from where it would anyway."""
    with tempfile.TemporaryDirectory(prefix="packages-") as folder:
        for name in hatch_build.PACKAGES:
            if (tree / name).is_dir():
                (Path(folder) / name).symlink_to((tree / name).resolve(), target_is_directory=True)
        yield Path(folder)


def router_from(tree: Path, port: int, home: Path) -> list[str]:
    """The benchmarks' router command (:func:`scripts.runner.router_argv`) run from
    ``tree``."""
    settings = [f"{key}={value}" for key, value in tree_first(tree).items()]
    return ["env", *settings, *router_argv(port, home, None)]


def version_of(tree: Path) -> str:
    """What ``gnutella-router --version`` says when run from ``tree``."""
    result = subprocess.run(
        [sys.executable, "-m", "gnutella_router", "--version"],
        env={**os.environ, **tree_first(tree)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return (result.stdout or result.stderr).strip()


def export(revision: str, into: Path) -> Path:
    """``revision``'s sources (or the working tree's) in ``into``, nothing compiled."""
    if revision == WORKING_TREE:
        hatch_build.copy_of_the_sources(ROOT, into)
        shutil.copy(ROOT / "hatch_build.py", into / "hatch_build.py")  # compile_in runs it
        return into
    archive = subprocess.run(
        ["git", "archive", "--format=tar", revision],
        cwd=ROOT,
        capture_output=True,
        timeout=120,
        check=False,
    )
    if archive.returncode != 0:
        raise BenchError(f"git archive {revision}: {archive.stderr.decode().strip()}")
    into.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def compile_in(tree: Path) -> None:
    """Compile ``tree``'s hot path with ``tree``'s own build hook (its list of modules)."""
    result = subprocess.run(
        [sys.executable, "-c", _COMPILE_HERE],
        cwd=tree,
        env={**os.environ, **tree_first(tree)},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if result.returncode != 0:
        raise BenchError((result.stderr or result.stdout).strip().splitlines()[-1])
