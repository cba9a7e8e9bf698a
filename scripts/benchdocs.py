"""What every benchmark script shares: naming the machine and the commit, the docs it
writes in, and its part of them.

Each script owns one section of a doc (docs/benchmarks.md by default) between its own
markers and replaces only that, so the scripts can be rerun in any order.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scripts import ROOT

BENCHMARKS_DOC = ROOT / "docs" / "benchmarks.md"
EXPERIMENTS_DOC = ROOT / "docs" / "experiments.md"
ROBUSTNESS_DOC = ROOT / "docs" / "robustness.md"
FIGURES = ROOT / "docs" / "figures"
"""Where the experiments' figures go with ``--write`` (else into their run folder)."""


def save_figure(figure: Any, path: Path, *, dpi: int = 100) -> Path:
    """Write a matplotlib figure to ``path`` (its folder made if need be) and close it."""
    import matplotlib.pyplot as plt  # only the scripts that draw need matplotlib

    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    plt.close(figure)
    return path


def machine() -> str:
    """CPU model, core count, Python and OS: enough to compare figures across runs."""
    cpu = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return (
        f"{cpu}, {os.cpu_count()} cores; CPython {platform.python_version()}; {platform.system()}"
    )


def replace_section(name: str, lines: Sequence[str], path: Path = BENCHMARKS_DOC) -> Path:
    """Replace the section marked ``<!-- NAME:start -->`` .. ``<!-- NAME:end -->``.

    A missing section is appended; a missing file is started with a title.
    """
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    body = "\n".join([start, *lines, end])
    text = path.read_text() if path.exists() else "# Benchmarks\n\n"
    if start in text and end in text:
        before, rest = text.split(start, 1)
        text = before + body + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + body + "\n"
    path.write_text(text)
    return path


def provenance() -> str:
    """``DATE at commit HASH``: when and from what tree a figure was measured, for the
    first line of a section (every section of docs/benchmarks.md names both)."""
    return f"{datetime.date.today().isoformat()} at commit {commit()}"


def commit() -> str:
    """This checkout's commit, marked when tracked files have changes not committed."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True
        ).stdout.strip()

    head = git("rev-parse", "--short", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return f"{head} (with changes not committed)" if dirty else head
