"""Runs that are kept: a folder of its own for every lab run, and a manifest in it.

Theory of operation
-------------------
A test network, a load run, a replay or an experiment is only worth its figures if they
can be found again and told apart later. So each such run writes into a folder of its
own, made new for it: ``.gnutella-router/runs/KIND-YYYYmmdd-HHMMSS`` (local time; a
``-2``, ``-3``... suffix when two runs start in the same second), under the folder
``$GNUTELLA_ROUTER_RUNS`` names, if set. ``--out DIR`` picks the folder instead; a
folder that already holds anything is refused, unless ``--overwrite`` is given *and*
it holds an earlier run (its ``manifest.json`` or ``summary.json``): then what is in
it is removed first, and the caller is told so before it happens. A folder holding
anything else is never emptied.

Beside the run's own files goes ``manifest.json`` (:class:`Manifest`): what ran
(kind, version, build, git commit and whether the tree had changes, the command line,
the resolved configuration, the random seed), where (cores, load average, Python,
system) and when (start, end, seconds, and how it ended). It is written when the run
starts, so a run that never finishes still says what it was, and again when it ends.
``gnutella-router runs`` lists the folders and compares two.
"""

from __future__ import annotations

import atexit
import dataclasses
import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gnutella_router import __version__

RUNS_ENVIRONMENT = "GNUTELLA_ROUTER_RUNS"
"""Where runs go when ``--out`` is not given, if set (tests point it at a temporary
folder); else :data:`DEFAULT_RUNS`, relative to the current directory."""
DEFAULT_RUNS = Path(".gnutella-router") / "runs"
MANIFEST = "manifest.json"
SUMMARY = "summary.json"
RUN_MARKERS = (MANIFEST, SUMMARY)
"""A folder holding one of these holds an earlier run, which ``--overwrite`` may replace."""
GIT_TIMEOUT = 5.0


class RunFolderError(Exception):
    """The run's folder cannot be used (a sentence for the user)."""


def runs_root() -> Path:
    """Where new run folders go: ``$GNUTELLA_ROUTER_RUNS``, else :data:`DEFAULT_RUNS`."""
    text = os.environ.get(RUNS_ENVIRONMENT)
    return Path(text) if text else DEFAULT_RUNS


def make_run_folder(
    kind: str,
    *,
    out: Path | None = None,
    overwrite: bool = False,
    root: Path | None = None,
    now: datetime.datetime | None = None,
    notice: Any = None,
) -> Path:
    """The folder this run writes into, made (see the module docstring).

    Args:
        kind: ``testnet``, ``load``, ``replay``, ``experiment-fig14``...
        out: the folder the user asked for, or None for a new timestamped one.
        overwrite: an ``out`` that holds an earlier run may be emptied.
        root: where timestamped folders go (default :func:`runs_root`).
        now: the time to name the folder by (default: now, local time).
        notice: called with a sentence *before* an earlier run is removed.

    Raises:
        RunFolderError: ``out`` holds something and may not (or cannot) be replaced, or
            the folder cannot be made.
    """
    try:
        if out is not None:
            return _reuse(out, overwrite, notice)
        base = root if root is not None else runs_root()
        stamp = (now or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
        base.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, 1000):
            folder = base / (f"{kind}-{stamp}" if attempt == 1 else f"{kind}-{stamp}-{attempt}")
            try:
                folder.mkdir()
            except FileExistsError:
                continue
            return folder
        raise RunFolderError(f"no free folder name for {kind}-{stamp} in {base}")
    except OSError as exc:
        raise RunFolderError(f"cannot make the run's folder: {exc}") from exc


def _reuse(out: Path, overwrite: bool, notice: Any) -> Path:
    if out.exists() and not out.is_dir():
        raise RunFolderError(f"--out {out}: not a folder")
    if not out.exists():
        out.mkdir(parents=True)
        return out
    inside = sorted(out.iterdir())
    if not inside:
        return out
    earlier_run = any((out / marker).is_file() for marker in RUN_MARKERS)
    if not overwrite:
        what = "an earlier run" if earlier_run else f"{len(inside)} other files or folders"
        raise RunFolderError(
            f"--out {out} holds {what}; give --overwrite to replace an earlier run, or "
            "another --out (without --out every run gets a new folder)"
        )
    if not earlier_run:
        raise RunFolderError(
            f"--out {out} holds files that are not a run's (no {MANIFEST} or {SUMMARY}): "
            "--overwrite only replaces an earlier run; pick another --out"
        )
    if notice is not None:
        notice(f"replacing the earlier run in {out} (--overwrite)")
    for path in inside:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return out


# --------------------------------------------------------------------------- manifest


def git_commit(where: Path | None = None) -> dict[str, Any] | None:
    """The commit of the git checkout this code runs from, and whether its tree had
    changes; None outside a checkout (an installed package) or without git."""
    folder = where or Path(__file__).resolve().parent.parent
    if not (folder / ".git").exists():
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=GIT_TIMEOUT, check=True,
        ).stdout.strip()  # fmt: skip
        status = subprocess.run(
            ["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=GIT_TIMEOUT, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": head, "changed": bool(status.strip())}


def machine() -> dict[str, Any]:
    """Cores, load average and platform: what the run's figures depend on."""
    try:
        load: list[float] | None = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "cores": os.cpu_count(),
        "load_average": load,
        "python": platform.python_version(),
        "system": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
    }


def _now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


@dataclasses.dataclass(slots=True)
class Manifest:
    """What ran, where and when; ``manifest.json`` in the run's folder."""

    folder: Path
    kind: str
    configuration: Mapping[str, Any]
    seed: int | None = None
    command: Sequence[str] = dataclasses.field(default_factory=lambda: list(sys.argv))
    started: str = dataclasses.field(default_factory=_now)
    ended: str | None = None
    status: str = "running"
    """``running`` until it ends, then ``ok``, ``failed`` or ``interrupted`` (``ended``
    when a script only says that it ended)."""
    _started_at: float = dataclasses.field(default_factory=time.monotonic)
    _at_start: dict[str, Any] = dataclasses.field(default_factory=machine)
    _source: dict[str, Any] | None = dataclasses.field(default_factory=git_commit)

    def data(self) -> dict[str, Any]:
        from gnutella_router import native

        ended = self.ended is not None
        return {
            "kind": self.kind,
            "version": __version__,
            "build": native.describe(),
            "source": self._source,
            "command": " ".join(shlex.quote(part) for part in self.command),
            "configuration": _plain(self.configuration),
            "seed": self.seed,
            "machine": self._at_start,
            "load_average_at_end": machine()["load_average"] if ended else None,
            "started": self.started,
            "ended": self.ended,
            "seconds": round(time.monotonic() - self._started_at, 3) if ended else None,
            "status": self.status,
        }

    def write(self) -> None:
        """Write ``manifest.json`` (atomically: a reader never sees half of it)."""
        path = self.folder / MANIFEST
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(json.dumps(self.data(), indent=2, sort_keys=True) + "\n")
        temporary.replace(path)

    def keep(self, name: str, text: str) -> Path:
        """Write one of the run's files (``summary.json``, ``report.txt``...) into its
        folder, atomically; its path."""
        path = self.folder / name
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(text if text.endswith("\n") else text + "\n")
        temporary.replace(path)
        return path

    def finish(self, status: str) -> None:
        """The run ended (``ok``, ``failed`` or ``interrupted``): write it down. Once."""
        if self.ended is not None:
            return
        self.ended = _now()
        self.status = status
        self.write()


def start_run(
    kind: str,
    configuration: Mapping[str, Any],
    *,
    out: Path | None = None,
    overwrite: bool = False,
    seed: int | None = None,
    command: Sequence[str] | None = None,
    notice: Any = None,
    finish_at_exit: bool = False,
) -> Manifest:
    """Make the run's folder and write its manifest (``command``: the command line to
    record, by default this process's own); the caller calls
    :meth:`Manifest.finish` at the end (or asks for it at interpreter exit, with the
    status ``ended``, for scripts with many ways out).

    Raises:
        RunFolderError: as :func:`make_run_folder`, or the manifest cannot be written.
    """
    folder = make_run_folder(kind, out=out, overwrite=overwrite, notice=notice)
    manifest = Manifest(folder, kind, configuration, seed, list(command or sys.argv))
    try:
        manifest.write()
    except OSError as exc:
        raise RunFolderError(f"cannot write {folder / MANIFEST}: {exc}") from exc
    if finish_at_exit:
        atexit.register(manifest.finish, "ended")
    return manifest


def add_out_arguments(parser: Any) -> None:
    """``--out DIR`` and ``--overwrite`` on an argparse parser: where a kept run goes."""
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="the run's folder (default: a new one, .gnutella-router/runs/KIND-DATE-TIME, "
        f"under ${RUNS_ENVIRONMENT} if set); refused if it holds anything, unless --overwrite",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="let --out replace the earlier run it holds (never other files)",
    )


def script_run(kind: str, args: Any) -> Path:
    """The kept folder of a script's run under ``scripts/`` (an experiment, say):
    ``args.out`` or a new timestamped folder, emptied of an earlier run only with
    ``args.overwrite``; the manifest records ``vars(args)`` and ``args.seed`` if there
    is one, and is finished (status ``ended``) when the interpreter exits, whichever
    way the script ends. A bad ``--out`` ends the script with status 2 and a sentence.
    """
    try:
        manifest = start_run(
            kind,
            {k: v for k, v in vars(args).items() if not callable(v)},
            out=getattr(args, "out", None),
            overwrite=bool(getattr(args, "overwrite", False)),
            seed=getattr(args, "seed", None),
            notice=lambda text: print(text, flush=True),
            finish_at_exit=True,
        )
    except RunFolderError as exc:
        raise SystemExit(f"{kind}: {exc}") from None
    print(f"raw results in {manifest.folder}", flush=True)
    return manifest.folder


def _plain(value: object) -> Any:
    """Paths, tuples and other values made JSON-ready."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)
