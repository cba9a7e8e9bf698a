"""Where a test network run talks to the person who started it: notes and a status line.

The status line is rewritten in place on a terminal (so it must fit one line) and
printed as plain lines otherwise, so that a log of a run kept in a file reads well;
a note first ends a status line that is showing, so the two never share a line.
"""

from __future__ import annotations

import shutil
from typing import TextIO


class Console:
    """Notes and the status line, on one stream."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = _isatty(out)
        self._status_shown = False

    def note(self, text: str) -> None:
        self.end_status()
        print(text, file=self.out, flush=True)

    def status(self, line: str) -> None:
        if self.tty:
            width = shutil.get_terminal_size().columns - 1
            print(f"\r{line[:width]}\x1b[K", end="", file=self.out, flush=True)
            self._status_shown = True
        else:
            print(line, file=self.out, flush=True)

    def end_status(self) -> None:
        if self._status_shown:
            print(file=self.out, flush=True)
            self._status_shown = False


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
