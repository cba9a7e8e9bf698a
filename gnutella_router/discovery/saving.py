"""Replacing a file so that a crash leaves the old one or the new one, never half of each.

The host cache is saved every minute and at shutdown; a router killed mid-save (``kill
-9``, a power cut, a full disk) must find one whole file at its next start. So the text
is written beside the old file, flushed to disk, renamed over it, and the directory is
synced so that the rename itself survives. A writer killed before the rename leaves a
temporary file, which :func:`remove_leftovers` deletes at the next start.
"""

from __future__ import annotations

import contextlib
import glob
import os
import tempfile
from pathlib import Path

__all__ = ["remove_leftovers", "write_atomically"]


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable; best effort, as not every platform allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_leftovers(path: Path) -> int:
    """Delete the temporary files a killed writer of ``path`` left behind; how many.

    :func:`write_atomically` cleans up after itself unless the process dies mid-write
    (``kill -9``, a power cut); only the owner of the state directory may call this,
    when no write of its own is under way.
    """
    removed = 0
    for leftover in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()
            removed += 1
    return removed


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a crash leaves the old or the new file.

    Written to a temporary file in the same directory, flushed to disk, renamed over
    the old one, and the directory synced so the rename itself survives a power cut.
    """
    directory = path.parent
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp_name)
        raise
    _fsync_directory(directory)
