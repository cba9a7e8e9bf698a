"""The hot path compiled where it can be, and pure Python where it cannot."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import hatch_build
from gnutella_router import native

ROOT = Path(__file__).resolve().parents[2]

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
@pytest.mark.skipif(native.sources_in_use(), reason="the sources asked for in place of compiled")
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
    hashes["gnutella_router/routing/flood.py"] = "0" * 64
    record.write_text(json.dumps({"modules": hashes}))
    assert native.stale_modules() == ["gnutella_router.routing.flood"]
    assert "stale, rebuild with scripts/venv.sh: flood" in native.describe()
    record.write_text("not json")
    assert native.stale_modules() == compiled


def test_a_pure_install_says_why_it_was_not_compiled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = tmp_path / "native_build.json"
    monkeypatch.setattr(native, "RECORD", record)
    # As in an install where the sources run because nothing was compiled, not because
    # GNUTELLA_ROUTER_INTERPRETED asked for them.
    finders = [f for f in sys.meta_path if not isinstance(f, native.SourcesFinder)]
    monkeypatch.setattr(sys, "meta_path", finders)
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


def test_the_variable_asks_for_the_sources_unless_empty_or_zero() -> None:
    assert native.interpreted_asked({native.INTERPRETED_VARIABLE: "1"})
    assert native.interpreted_asked({native.INTERPRETED_VARIABLE: "yes"})
    assert not native.interpreted_asked({native.INTERPRETED_VARIABLE: "0"})
    assert not native.interpreted_asked({native.INTERPRETED_VARIABLE: ""})
    assert not native.interpreted_asked({})


def test_the_sources_finder_finds_each_hot_module_s_source_and_nothing_else() -> None:
    finder = native.SourcesFinder([native.import_name(p) for p in native.HOT_SOURCES])
    for source in native.HOT_SOURCES:
        name = native.import_name(source)
        package = sys.modules[name.rpartition(".")[0]]
        spec = finder.find_spec(name, list(package.__path__))
        assert spec is not None
        assert spec.origin == str(ROOT / source)
    assert finder.find_spec("protocol.header", [str(ROOT / "protocol")]) is None


def test_the_sources_are_refused_once_a_hot_module_ran_compiled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compiled = [state.name for state in native.native_modules() if state.compiled]
    if not compiled:
        pytest.skip("nothing runs compiled here")
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))  # whatever happens, undone
    with pytest.raises(ImportError, match=f"{compiled[0]}.* imported compiled"):
        native.use_sources()
    assert not native.sources_in_use()


def test_with_the_sources_in_use_the_hot_path_is_said_to_be_interpreted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "meta_path", [native.SourcesFinder([]), *sys.meta_path])
    pure = [native.NativeModule(native.import_name(p), False, True) for p in native.HOT_SOURCES]
    assert native.describe(pure) == (
        "hot path: interpreted, from the sources (GNUTELLA_ROUTER_INTERPRETED is set)"
    )


HOT_TESTS = (
    "tests/protocol/test_framing.py",
    "tests/gnutella_router/routing/test_route_table.py",
    "tests/gnutella_router/routing/test_flood.py",
    "tests/gnutella_router/stages/test_one_path.py",
    "tests/gnutella_router/stages/test_router_rules.py",
    "tests/gnutella_router/stages/test_reply_routing.py",
)
"""The hot modules' own tests, run again on their sources: framing (both header
decoders are held to the reference framer), the route table against its model, the run
router's parts, and the routing rules, the run router and the reply run together against
the naive reference router and in the rules' scenarios."""


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_the_hot_modules_tests_pass_on_their_sources_too() -> None:
    """Where the hot path is compiled the suite tests the compiled modules, and the
    sources (what an install without a compiler runs) would go untested: their tests are
    run again in a child process that imports the sources in place of the compiled
    modules (``GNUTELLA_ROUTER_INTERPRETED``), which says so in its header."""
    if not any(state.compiled for state in native.native_modules()):
        pytest.skip("nothing runs compiled here: the suite itself tests the sources")
    # The first failure ends the run, unshrunk: found in seconds, not minutes.
    command = ["-p", "no:cacheprovider", "-x", "--hypothesis-profile=no-shrinking"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *command, "-m", "not e2e", *HOT_TESTS],
        cwd=ROOT,
        env={**os.environ, native.INTERPRETED_VARIABLE: "1"},
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    output = result.stdout + result.stderr
    assert "hot path: interpreted, from the sources" in output, output[-3000:]
    assert result.returncode == 0, output[-3000:]
    assert re.search(r"\b\d+ passed\b", output)
