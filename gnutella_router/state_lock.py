"""One router per state directory: an advisory lock held for the daemon's life.

Two routers started from one directory would share its host cache, profile and dumps,
each overwriting the other's. The daemon therefore takes ``flock`` on ``router.lock``
in its state directory before anything else and keeps it until it exits; the kernel
drops the lock when the process dies, however it dies, so a crashed router never
leaves a stale lock behind. The file holds the owner's pid, for the error message.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import IO

LOCK_FILE = "router.lock"


class StateDirectoryBusy(OSError):
    """Another process holds the state directory."""

    def __str__(self) -> str:
        return str(self.strerror)


class StateLock:
    """The held lock; :meth:`release` (or process exit) lets it go."""

    def __init__(self, path: Path, handle: IO[str]) -> None:
        self.path = path
        self._handle: IO[str] | None = handle

    def release(self) -> None:
        if self._handle is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None


def lock_state_directory(directory: Path) -> StateLock:
    """Create ``directory`` if needed and lock it for this process.

    Raises:
        StateDirectoryBusy: another router (the message gives its pid) holds it.
        OSError: the directory or the lock file cannot be created.
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_FILE
    handle = path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        owner = handle.read().strip() or "unknown"
        handle.close()
        raise StateDirectoryBusy(
            0,
            f"state directory {directory} is in use by another router (pid {owner}); "
            "give each router its own --state-dir",
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return StateLock(path, handle)
