"""Which hot modules run compiled, and whether any compiled one is older than its source.

The build (``hatch_build.py``) compiles the routing hot path (:data:`HOT_SOURCES`) with
mypyc where it can. It writes ``native_build.json`` beside this module: the hash of each
source it compiled, or why it compiled nothing. Python imports a compiled module in
place of its source, so after an edit the old code would keep running unseen:
:func:`native_modules` finds that case, so that the daemon can warn and the test suite
can refuse to test code that is not the source.

This module is the one list of hot modules: the build hook loads it by path (it must not
import the package it is building), and ``scripts/venv.sh`` reads :data:`HOT_SOURCES`
to know which changes mean a rebuild. It imports nothing outside the standard library.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

HOT_SOURCES = (
    "protocol/framing.py",
    "gnutella_router/stages/rules.py",
    "gnutella_router/stages/flood.py",
    "gnutella_router/stages/reply_runs.py",
    "gnutella_router/net/route_table.py",
)
"""The modules the build compiles where it can, as paths from the project root (one
per line, as ``scripts/venv.sh`` reads them)."""

RECORD_NAME = "native_build.json"
RECORD = Path(__file__).with_name(RECORD_NAME)


def import_name(source: str) -> str:
    """``protocol/framing.py`` -> ``protocol.framing``."""
    return source.removesuffix(".py").replace("/", ".")


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
        location = Path(importlib.import_module(name).__file__ or "")
        compiled = location.name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
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
    if not compiled:
        reason = _record().get("not_compiled")
        return "hot path: pure Python" + (f" (not compiled: {reason})" if reason else "")
    stale = [state.name.rpartition(".")[2] for state in states if not state.current]
    text = f"hot path: compiled with mypyc ({', '.join(compiled)})"
    return text + (f"; stale, rebuild with scripts/venv.sh: {', '.join(stale)}" if stale else "")
