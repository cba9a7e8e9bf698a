"""The hot path compiled where it can be, and pure Python where it cannot."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from gnutella_router import native

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import hatch_build  # noqa: E402

COMPILER = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")


def test_the_build_the_runtime_and_the_install_script_name_the_same_modules() -> None:
    as_paths = tuple(
        native.import_name(path).replace(".", "/") + ".py" for path in native.HOT_SOURCES
    )
    assert as_paths == hatch_build.HOT_MODULES
    assert all((ROOT / path).exists() for path in hatch_build.HOT_MODULES)
    # scripts/venv.sh reads the list with sed, one quoted path per line: what it finds
    # must be the whole list, or an edit to a hot module would not rebuild it.
    venv_pattern = re.compile(r'^    "(.*\.py)",$', re.MULTILINE)
    assert "native.py" in (ROOT / "scripts" / "venv.sh").read_text()
    assert tuple(venv_pattern.findall((ROOT / "gnutella_router" / "native.py").read_text())) == (
        native.HOT_SOURCES
    )


@pytest.mark.skipif(COMPILER is None, reason="no C compiler: the build installs pure Python")
@pytest.mark.skipif(
    os.environ.get("GNUTELLA_ROUTER_PURE", "") not in ("", "0"), reason="pure Python asked for"
)
def test_with_a_compiler_every_hot_module_runs_compiled_from_its_current_source() -> None:
    states = native.native_modules()
    assert [state.name for state in states if not state.compiled] == []
    assert native.stale_modules() == []
    assert native.describe().startswith("hot path: compiled with mypyc (framing, rules, flood,")


def test_a_compiled_module_whose_source_changed_is_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled = [state.name for state in native.native_modules() if state.compiled]
    if not compiled:
        pytest.skip("nothing runs compiled here, so nothing can be stale")
    record = tmp_path / "native_build.json"
    monkeypatch.setattr(native, "RECORD", record)
    hashes = {
        path: hashlib.sha256((ROOT / path).read_bytes()).hexdigest()
        for path in hatch_build.HOT_MODULES
    }
    record.write_text(json.dumps({"modules": hashes}))
    assert native.stale_modules() == []
    hashes["gnutella_router/stages/flood.py"] = "0" * 64
    record.write_text(json.dumps({"modules": hashes}))
    assert native.stale_modules() == ["gnutella_router.stages.flood"]
    assert "stale, rebuild with scripts/venv.sh: flood" in native.describe()
    record.write_text("not json")
    assert native.stale_modules() == compiled


def test_a_pure_install_says_why_it_was_not_compiled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = tmp_path / "native_build.json"
    monkeypatch.setattr(native, "RECORD", record)
    pure = [native.NativeModule(native.import_name(p), False, True) for p in native.HOT_SOURCES]
    record.write_text(json.dumps({"modules": {}, "not_compiled": "GNUTELLA_ROUTER_PURE was set"}))
    assert native.describe(pure) == (
        "hot path: pure Python (not compiled: GNUTELLA_ROUTER_PURE was set)"
    )
    record.unlink()
    assert native.describe(pure) == "hot path: pure Python"


@pytest.mark.e2e
def test_without_a_working_compiler_the_build_falls_back_to_pure_python(tmp_path: Path) -> None:
    tree = hatch_build.copy_of_the_sources(ROOT, tmp_path)
    environment = {**os.environ, "CC": str(tmp_path / "no-such-compiler")}
    with pytest.raises(hatch_build.NativeBuildError) as failure:
        hatch_build.compile_hot_path(tree, environment)
    assert "no-such-compiler" in str(failure.value)
    assert hatch_build.compiled_files(tree) == []
    # The record claims nothing compiled and keeps the reason for --version.
    record = json.loads((tree / hatch_build.RECORD).read_text())
    assert record["modules"] == {}
    assert "no-such-compiler" in record["not_compiled"]
