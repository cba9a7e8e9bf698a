"""The console's two faces: a terminal with line editing, and a script runner.

Interactive, it is the standard library's :class:`cmd.Cmd` over GNU readline (or
libedit): the prompt, Emacs-style editing, Tab completion from :func:`.commands.
completions` (commands, node names, keywords, the GUIDs met so far), and a history kept
in a file between sessions (at most :data:`HISTORY_LENGTH` lines). Ctrl-C abandons the
line being typed, or the command running, and gives the prompt back; Ctrl-D, ``quit``
and ``exit`` leave. ``cmd`` and readline ship with Python, start instantly and behave
predictably under a pseudo-terminal, which is all a command language of a dozen commands
needs; a full-screen toolkit (prompt_toolkit) would add a dependency and terminal
queries (cursor-position requests) that get in the way of scripted terminals, for
nothing the console uses.

A script (``--script FILE``, or commands piped in) is the same language without a
terminal: each command is echoed after the prompt, then its output, on stdout, so a
session can be kept and rerun as it is; the first command that fails stops it, with
its line number and the reason on stderr, and the exit status 1.
"""

from __future__ import annotations

import cmd
import os
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import TextIO

from gnutella_router.lab.console.commands import CommandError, completions, parse
from gnutella_router.lab.console.session import Session
from gnutella_router.lab.console.targets import ConsoleError

__all__ = ["HISTORY_LENGTH", "PROMPT", "Shell", "default_history", "run_script"]

PROMPT = "gnutella> "
HISTORY_LENGTH = 1000
"""Lines the history file keeps."""


def default_history() -> Path:
    """``$XDG_STATE_HOME/gnutella-router/console_history`` (``~/.local/state`` by default)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "gnutella-router" / "console_history"


def run_script(
    session: Session, lines: Iterable[str], *, out: TextIO, err: TextIO, name: str = "script"
) -> int:
    """Run the commands of ``lines``; 0 when every one was carried out, 1 at the first
    that was not (the rest are not run)."""
    for number, line in enumerate(lines, start=1):
        try:
            command = parse(line)
        except CommandError as exc:
            print(f"{name}:{number}: {exc}", file=err, flush=True)
            return 1
        if command is None:
            continue
        print(f"{PROMPT}{line.strip()}", file=out, flush=True)
        if command.name == "quit":
            return 0
        try:
            text = session.run(command)
        except ConsoleError as exc:
            print(f"{name}:{number}: {exc}", file=err, flush=True)
            return 1
        if text:
            print(text, file=out, flush=True)
    return 0


class Shell(cmd.Cmd):
    """The interactive console on a terminal; see the module notes."""

    prompt = PROMPT

    def __init__(
        self,
        session: Session,
        *,
        history: Path | None,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
    ) -> None:
        super().__init__(stdin=stdin, stdout=stdout)
        self.session = session
        self.history = history
        self.stderr = stderr
        self._readline: ModuleType | None = None
        self._matches: list[str] = []

    def interact(self, greeting: str) -> int:
        """Read and carry out commands until ``quit``, ``exit`` or Ctrl-D; 0."""
        self._setup_readline()
        self.intro = greeting
        try:
            while True:
                try:
                    self.cmdloop()
                    return 0
                except KeyboardInterrupt:
                    self.stdout.write("\n")  # the terminal itself shows the ^C
                    self.intro = None
        finally:
            self._save_history()

    # ------------------------------------------------------------------ cmd's hooks

    def onecmd(self, line: str) -> bool:
        """Carry out one line; True to leave."""
        try:
            command = parse(line)
        except CommandError as exc:
            self._error(str(exc))
            return False
        if command is None:
            return False
        if command.name == "quit":
            if line.strip() == "EOF":
                self.stdout.write("\n")  # Ctrl-D left the cursor after the prompt
            return True
        try:
            text = self.session.run(command)
        except ConsoleError as exc:
            self._error(str(exc))
            return False
        if text:
            self.stdout.write(text + "\n")
        return False

    def emptyline(self) -> bool:
        """An empty line does nothing (``cmd`` would repeat the last command)."""
        return False

    def _complete(self, text: str, state: int) -> str | None:
        """readline's completer: the ``state``-th way to complete the current word."""
        if state == 0:
            readline = self._readline
            line = text
            if readline is not None:
                line = readline.get_line_buffer()[: readline.get_endidx()]
            # Python's readline appends nothing to a completed word: the space that ends
            # a word (readline's own habit) comes with each match.
            self._matches = [
                f"{word} "
                for word in completions(
                    line, nodes=self.session.network.names(), guids=reversed(self.session.guids)
                )
            ]
        return self._matches[state] if state < len(self._matches) else None

    # ------------------------------------------------------------------ readline

    def _setup_readline(self) -> None:
        try:
            import readline
        except ImportError:  # a Python built without it: no editing, no history
            return
        self._readline = readline
        self.completekey = ""  # cmd's own readline set-up (GNU only) is replaced by this
        readline.set_completer(self._complete)
        if "libedit" in (readline.__doc__ or ""):
            readline.parse_and_bind("bind ^I rl_complete")
        else:
            readline.parse_and_bind("tab: complete")
        # Node names (node-1) and addresses (127.0.0.1:6347) are whole words.
        readline.set_completer_delims(" \t\n")
        readline.set_history_length(HISTORY_LENGTH)
        if self.history is not None and self.history.is_file():
            try:
                readline.read_history_file(self.history)
            except OSError as exc:
                self._error(f"history not read from {self.history}: {exc}")

    def _save_history(self) -> None:
        readline = self._readline
        if readline is None or self.history is None:
            return
        try:
            self.history.parent.mkdir(parents=True, exist_ok=True)
            readline.write_history_file(self.history)
        except OSError as exc:
            self._error(f"history not written to {self.history}: {exc}")

    def _error(self, message: str) -> None:
        stream = self.stderr if self.stderr is not None else self.stdout
        stream.write(f"error: {message}\n")
        stream.flush()
