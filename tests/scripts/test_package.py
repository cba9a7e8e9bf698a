"""The scripts are one package, imported as such: nothing in the tree puts a folder on
``sys.path`` by hand, the package is on the path of the editable install and not in the
wheel, and another tree's router is run through ``PYTHONPATH`` alone."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import hatch_build
from scripts import ROOT
from scripts.router_bench.trees import packages_of, tree_first

CHANGES_THE_PATH = re.compile(r"sys\.path\s*(\.\s*(insert|append|extend)\b|\[[^\]]*\]\s*=|\+=|=)")
"""A call to ``sys.path``'s insert, append or extend, a slice of it assigned, ``+=`` or
``=``."""


def test_no_module_in_the_tree_changes_sys_path() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for folder in ("scripts", "tests", "gnutella_router", "protocol", "traffic_models")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if CHANGES_THE_PATH.search(line) and path != Path(__file__).resolve()
    ]
    assert found == []


def test_the_pattern_finds_what_it_is_for() -> None:
    for line in (
        "sys.path" + ".insert(0, str(ROOT))",  # (spelt apart, so the tree holds no such line)
        "sys.path.append(folder)",
        "sys.path[0:0] = [tree]",
        "sys.path = [tree, *sys.path]",
        "sys.path += [tree]",
    ):
        assert CHANGES_THE_PATH.search(line), line
    assert not CHANGES_THE_PATH.search("for entry in path or sys.path:")


def test_the_scripts_are_on_the_dev_path_and_not_in_the_wheel() -> None:
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"][
        "targets"
    ]["wheel"]
    assert tuple(wheel["packages"]) == hatch_build.PACKAGES
    assert "scripts" not in wheel["packages"]
    assert wheel["dev-mode-dirs"] == ["."]
    assert (ROOT / "scripts" / "__init__.py").is_file()


def test_a_tree_s_packages_come_first_and_the_scripts_still_from_here(tmp_path: Path) -> None:
    tree = tmp_path / "other"
    for name in (*hatch_build.PACKAGES, "scripts"):
        (tree / name).mkdir(parents=True)
        (tree / name / "__init__.py").write_text(f"WHERE = 'the other tree: {name}'\n")
    probe = (
        "import gnutella_router, protocol, scripts; "
        "print(gnutella_router.WHERE); print(protocol.WHERE); print(scripts.__file__)"
    )
    with packages_of(tree) as folder:
        said = subprocess.run(
            [sys.executable, "-c", probe],
            env={**os.environ, **tree_first(folder)},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.splitlines()
    assert said[:2] == ["the other tree: gnutella_router", "the other tree: protocol"]
    assert Path(said[2]) == ROOT / "scripts" / "__init__.py"
    assert not folder.exists()  # the links go with the block
