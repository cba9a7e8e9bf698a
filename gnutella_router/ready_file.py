"""The ready file: where a started router says it listens, for the programs that start it.

A router told to listen on port 0 picks its ports when it binds, so whoever started it
(the test network's controller, a script) cannot know them in advance, and guessing a
free port first races with every other program on the machine. Once its peer listener
and its admin interface are up, the daemon therefore writes ``ready.json`` into its
state directory: its pid, GUID, listening and advertised addresses and admin address.
The file is written whole (a temporary file renamed over it), so a reader never sees
half of it, and removed when the router stops; a file whose pid is not the process the
reader started is stale (left by a router that was killed) and is ignored.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

READY_FILE = "ready.json"


def write_ready_file(
    state_dir: Path,
    *,
    guid: str,
    listening: list[str],
    advertised: str,
    admin: str | None,
) -> Path:
    """Write ``state_dir/ready.json`` for this process; the path written."""
    path = state_dir / READY_FILE
    temporary = path.with_name(f".{READY_FILE}.{os.getpid()}")
    record = {
        "pid": os.getpid(),
        "guid": guid,
        "listening": listening,
        "advertised": advertised,
        "admin": admin,
    }
    temporary.write_text(json.dumps(record, indent=2) + "\n")
    temporary.replace(path)
    return path


def remove_ready_file(state_dir: Path) -> None:
    """Remove this process's ready file (one another process wrote is left alone)."""
    record = read_ready_file(state_dir)
    if record is not None and record.get("pid") == os.getpid():
        with contextlib.suppress(OSError):
            (state_dir / READY_FILE).unlink()


def read_ready_file(state_dir: Path, pid: int | None = None) -> dict[str, object] | None:
    """The ready record in ``state_dir``, or None when there is none yet (or it belongs
    to another process than ``pid``, when given)."""
    try:
        record = json.loads((state_dir / READY_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    if pid is not None and record.get("pid") != pid:
        return None
    return record
