"""Where a test network run talks to the person who started it: notes and a status line,
or the interactive console.

The status line is rewritten in place on a terminal (so it must fit one line) and
printed as plain lines otherwise, so that a log of a run kept in a file reads well;
a note first ends a status line that is showing, so the two never share a line.

With ``testnet --console`` the terminal is handed to ``gnutella-router console``
(:mod:`gnutella_router.lab.console`) instead, in a process of its own that finds the
network through its record (:mod:`.record`), exactly as a console started by hand
would; the run ends when it is left.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import TextIO

import trio


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


def console_argv(record: Path, script: Path | None = None) -> list[str]:
    """``gnutella-router console`` on the network recorded in ``record`` (its commands
    from ``script``, when given), as this Python runs it."""
    argv = [sys.executable, "-m", "gnutella_router", "console", "--network", str(record)]
    return argv if script is None else [*argv, "--script", str(script)]


async def run_console(record: Path, script: Path | None = None) -> int:
    """Run the console on this process's terminal until it is left; its exit status.
    Cancelled, it is stopped (SIGTERM, then SIGKILL)."""
    process = await trio.run_process(console_argv(record, script), check=False, stdin=None)
    return process.returncode
