"""Which hot modules run compiled, and whether any compiled one is older than its source.

The build (``hatch_build.py``) compiles the routing hot path with mypyc where it can
and records a hash of each source it compiled in ``native_build.json`` beside this
module. Python imports a compiled module in place of its source, so after an edit the
old code would keep running unseen: :func:`stale_modules` finds that case, so that the
daemon can warn and the test suite can refuse to test code that is not the source.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import json
from dataclasses import dataclass
from pathlib import Path

HOT_MODULES = (
    "protocol.framing",
    "gnutella_router.stages.flood",
    "gnutella_router.net.route_table",
)
"""The modules the build tries to compile (``hatch_build.HOT_MODULES``, by import name)."""

RECORD = Path(__file__).with_name("native_build.json")


@dataclass(frozen=True, slots=True)
class NativeModule:
    """One hot module as imported: ``compiled`` when its extension was loaded, and
    ``current`` unless it is compiled from a source that has changed since."""

    name: str
    compiled: bool
    current: bool


def _recorded_hashes() -> dict[str, str]:
    try:
        modules = json.loads(RECORD.read_text())["modules"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {str(path): str(digest) for path, digest in dict(modules).items()}


def native_modules() -> list[NativeModule]:
    """Each hot module's state (importing it if it is not yet)."""
    recorded = _recorded_hashes()
    root = Path(__file__).resolve().parent.parent
    states = []
    for name in HOT_MODULES:
        module = importlib.import_module(name)
        location = Path(module.__file__ or "")
        compiled = location.name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
        current = True
        if compiled:
            relative = name.replace(".", "/") + ".py"
            source = root / relative
            digest = hashlib.sha256(source.read_bytes()).hexdigest() if source.exists() else ""
            current = recorded.get(relative) == digest
        states.append(NativeModule(name, compiled, current))
    return states


def stale_modules() -> list[str]:
    """Compiled hot modules whose source changed after they were compiled."""
    return [state.name for state in native_modules() if state.compiled and not state.current]


def describe() -> str:
    """One line for ``--version`` and the start log: what runs compiled."""
    states = native_modules()
    compiled = [state.name.rpartition(".")[2] for state in states if state.compiled]
    if not compiled:
        return "hot path: pure Python"
    stale = [state.name.rpartition(".")[2] for state in states if not state.current]
    text = f"hot path: compiled with mypyc ({', '.join(compiled)})"
    return text + (f"; stale, rebuild with scripts/venv.sh: {', '.join(stale)}" if stale else "")
