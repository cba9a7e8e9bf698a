"""Which hot modules run compiled, and whether any compiled one is older than its source.

The build (``hatch_build.py``) compiles the routing hot path (:data:`HOT_SOURCES`) with
mypyc where it can. It writes ``native_build.json`` beside this module: the hash of each
source it compiled, or why it compiled nothing. Python imports a compiled module in
place of its source, so after an edit the old code would keep running unseen:
:func:`native_modules` finds that case, so that the daemon can warn and the test suite
can refuse to test code that is not the source.

Both spellings of the hot path can run in one install: with ``GNUTELLA_ROUTER_INTERPRETED=1``
in the environment, importing :mod:`gnutella_router` puts a finder ahead of Python's own
(:func:`use_sources`) that imports each hot module from its ``.py`` source even where a
compiled one lies beside it. The test suite runs a subset of the hot modules' tests that
way (``tests/test_interpreted.py``), so that the interpreted spelling (the one every
install without a compiler runs) is tested where the compiled one is installed; it also
serves to profile the hot path with a Python profiler, which cannot see into compiled
code. The variable must be seen before a hot module is imported: every entry point (the
command line, the test suite) imports :mod:`gnutella_router` first, and if a hot module
was already imported compiled, :func:`use_sources` refuses with an error rather than run
a mixture unseen.

This module is the one list of hot modules: the build hook loads it by path (it must not
import the package it is building), and ``scripts/venv.sh`` reads :data:`HOT_SOURCES`
to know which changes mean a rebuild. It imports nothing outside the standard library.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

HOT_SOURCES = (
    "protocol/framing.py",
    "gnutella_router/routing/rules.py",
    "gnutella_router/routing/flood.py",
    "gnutella_router/routing/reply_runs.py",
    "gnutella_router/routing/route_table.py",
)
"""The modules the build compiles where it can, as paths from the project root (one
per line, as ``scripts/venv.sh`` reads them)."""

RECORD_NAME = "native_build.json"
RECORD = Path(__file__).with_name(RECORD_NAME)
INTERPRETED_VARIABLE = "GNUTELLA_ROUTER_INTERPRETED"
"""Set (to anything but 0) in the environment: the hot modules run from their sources,
compiled or not (:func:`use_sources`)."""


def import_name(source: str) -> str:
    """``protocol/framing.py`` -> ``protocol.framing``."""
    return source.removesuffix(".py").replace("/", ".")


def interpreted_asked(environment: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for the hot modules' sources (:data:`INTERPRETED_VARIABLE`)."""
    return environment.get(INTERPRETED_VARIABLE, "") not in ("", "0")


def _is_compiled(module: ModuleType) -> bool:
    return (module.__file__ or "").endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


class SourcesFinder(importlib.abc.MetaPathFinder):
    """Finds a hot module's ``.py`` source in its package, ahead of the path finder,
    which would take a compiled extension beside it first (see the module)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = frozenset(names)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        leaf = fullname.rpartition(".")[2] + ".py"
        for entry in path or sys.path:
            source = Path(entry) / leaf
            if source.is_file():
                return importlib.util.spec_from_file_location(fullname, source)
        return None


def sources_in_use() -> bool:
    """Whether :func:`use_sources` has put its finder in place in this process."""
    return any(isinstance(finder, SourcesFinder) for finder in sys.meta_path)


def use_sources() -> None:
    """Import every hot module from its source from now on, compiled or not.

    Raises ImportError if one was already imported compiled: the process would run a
    mixture of the two spellings, and a test of "the sources" would not test them.
    """
    if sources_in_use():
        return
    names = [import_name(source) for source in HOT_SOURCES]
    early = [name for name in names if name in sys.modules and _is_compiled(sys.modules[name])]
    if early:
        raise ImportError(
            f"{INTERPRETED_VARIABLE} is set, but {', '.join(early)} was imported compiled "
            "before gnutella_router: import gnutella_router first"
        )
    sys.meta_path.insert(0, SourcesFinder(names))


def source_hash(path: Path) -> str:
    """The hash the record keeps of a source file."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True, slots=True)
class NativeModule:
    """One hot module as imported: ``compiled`` when its extension was loaded, and
    ``current`` unless it is compiled from a source that has changed since."""

    name: str
    compiled: bool
    current: bool


def _record() -> dict[str, object]:
    try:
        record = json.loads(RECORD.read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def native_modules() -> list[NativeModule]:
    """Each hot module's state (importing it if it is not yet)."""
    recorded = _record().get("modules")
    hashes = recorded if isinstance(recorded, dict) else {}
    root = Path(__file__).resolve().parent.parent
    states = []
    for source in HOT_SOURCES:
        name = import_name(source)
        compiled = _is_compiled(importlib.import_module(name))
        current = True
        if compiled:
            path = root / source
            current = path.exists() and hashes.get(source) == source_hash(path)
        states.append(NativeModule(name, compiled, current))
    return states


def stale_modules(states: Sequence[NativeModule] | None = None) -> list[str]:
    """Compiled hot modules whose source changed after they were compiled."""
    states = native_modules() if states is None else states
    return [state.name for state in states if state.compiled and not state.current]


def describe(states: Sequence[NativeModule] | None = None) -> str:
    """One line for ``--version`` and the start log: what runs compiled, or why not."""
    states = native_modules() if states is None else states
    compiled = [state.name.rpartition(".")[2] for state in states if state.compiled]
    if not compiled and sources_in_use():
        return f"hot path: interpreted, from the sources ({INTERPRETED_VARIABLE} is set)"
    if not compiled:
        reason = _record().get("not_compiled")
        return "hot path: pure Python" + (f" (not compiled: {reason})" if reason else "")
    stale = [state.name.rpartition(".")[2] for state in states if not state.current]
    text = f"hot path: compiled with mypyc ({', '.join(compiled)})"
    return text + (f"; stale, rebuild with scripts/venv.sh: {', '.join(stale)}" if stale else "")
