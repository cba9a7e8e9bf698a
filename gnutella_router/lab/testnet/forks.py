"""Router processes forked from a warm parent: a node starts in milliseconds.

Theory of operation
-------------------
``python -m gnutella_router run`` spends about 0.35 s of CPU before it listens, nearly
all of it importing the daemon; 200 of them are over a minute of CPU, which on two
cores is most of the time a 200-node network takes to start, and the routers already
up share those cores. The fork server pays the imports once: a process
(:mod:`gnutella_router.cli.fork_server`) started at the beginning of a run imports
everything ``run`` needs, takes its objects out of the garbage collector's reach
(``gc.freeze``, so the children's collections do not write to the pages they share
with it), then forks one child per node on request. Each child is the router the
command line would start: it runs the command line's ``main(["run", "--config",
...])``, in a session of its own, with its output in the node's log and, for
``--netns``, inside the node's network namespace (``setns``). It starts in about 10 ms
of CPU, and shares the server's pages until it writes to them.

:class:`ForkServer` is the controller's side. Requests and answers are JSON lines on
a socket pair:

* ``{"start": ID, "argv": [...], "log": PATH, "namespace": NAME|null}`` asks for a
  router; the server answers ``{"started": ID, "pid": PID}`` or
  ``{"failed": ID, "error": TEXT}``;
* ``{"exited": PID, "status": N}`` tells of a child's end (the server is its parent,
  so only it can reap it); ``N`` is as :attr:`subprocess.Popen.returncode`: the exit
  code, or minus the signal that ended it.

A :class:`ForkedProcess` stands for one child as a :class:`subprocess.Popen` would (pid,
returncode, signals, wait). It signals its child through a pidfd opened as soon as the
pid is known, so a signal never reaches another process that took a recycled pid; an
exit status comes from the server's report.

Nothing outlives the controller: the server is started with the parent-death signal
(SIGHUP when the controller dies, see :func:`~.process.parent_death_signal`) and exits
when its socket closes; each child has the same signal tied to the server, so the end
of the server, however it comes, makes every router still running say Bye and exit.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from gnutella_router.lab.testnet.process import parent_death_signal, wait_for_exit

SERVER_MODULE = "gnutella_router.cli.fork_server"
SERVER_START_TIMEOUT = 30.0
"""Longest wait for the server to import what a router needs and say it is ready."""
ANSWER_TIMEOUT = 30.0
"""Longest wait for the server to answer one start request."""
SERVER_STOP_GRACE = 5.0
MAX_LINE = 1 << 20
"""Longest line either side accepts: far above any request or answer."""


class ForkServerError(Exception):
    """The fork server could not be started, did not answer, or could not fork."""


def available() -> bool:
    """Whether routers can be forked here: Linux, with pidfds (kernel 5.3 and later)."""
    return sys.platform.startswith("linux") and hasattr(os, "pidfd_open")


def encode(message: dict[str, Any]) -> bytes:
    """One message as a line on the wire."""
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


class LineReader:
    """Cuts a byte stream into JSON messages, one per line."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """The whole messages ``data`` completes.

        Raises:
            ForkServerError: a line too long, or one that is not a JSON object.
        """
        self._buffer += data
        messages = []
        while (end := self._buffer.find(b"\n")) >= 0:
            line = bytes(self._buffer[:end])
            del self._buffer[: end + 1]
            try:
                message = json.loads(line)
            except ValueError:
                raise ForkServerError(f"not a JSON line: {line[:80]!r}") from None
            if not isinstance(message, dict):
                raise ForkServerError(f"not a JSON object: {line[:80]!r}")
            messages.append(message)
        if len(self._buffer) > MAX_LINE:
            raise ForkServerError(f"a line longer than {MAX_LINE} bytes")
        return messages


class ForkedProcess:
    """A router the fork server started; see the module docstring."""

    def __init__(self, pid: int, server_gone: trio.Event) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._reported = trio.Event()
        self._server_gone = server_gone
        try:
            self._pidfd = os.pidfd_open(pid)
        except OSError:  # already reaped: its exit report is on its way
            self._pidfd = -1

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, signum: int) -> None:
        """Signal the child, unless it has exited (then nothing happens).

        Raises:
            ProcessLookupError: it has just exited.
        """
        if self.returncode is None and self._pidfd >= 0:
            signal.pidfd_send_signal(self._pidfd, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    async def wait(self) -> int:
        """Its exit status, once it has exited and the server has said so.

        Should the server be gone, the status went with it; the child then got SIGHUP
        from the kernel (its parent-death signal), which is what is reported."""
        try:
            if self._pidfd >= 0 and self.returncode is None:
                await trio.lowlevel.wait_readable(self._pidfd)  # readable once it exits
            while self.returncode is None and not self._server_gone.is_set():
                with trio.move_on_after(0.5):
                    await self._reported.wait()
        finally:
            if self._pidfd >= 0:
                os.close(self._pidfd)
                self._pidfd = -1
        if self.returncode is None:
            self.returncode = -signal.SIGHUP
        return self.returncode

    def exited(self, status: int) -> None:
        """The server reaped the child with ``status``."""
        if self.returncode is None:
            self.returncode = status
        self._reported.set()


class ForkServer:
    """The controller's side of the fork server; see the module docstring.

    :meth:`start` it in a nursery that outlives every router it forks, :meth:`spawn`
    routers, and :meth:`close` it once they have stopped (it is closed on every path
    by the caller's ``finally``; should that not run, its socket closing ends it).
    """

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None
        self._stream: trio.SocketStream | None = None
        self._ready = trio.Event()
        self._settled = trio.Event()
        """Set once the server is ready, or gone."""
        self._ids = itertools.count(1)
        self._answers: dict[int, dict[str, Any]] = {}
        self._answered: dict[int, trio.Event] = {}
        self._children: dict[int, ForkedProcess] = {}
        self._early_exits: dict[int, int] = {}
        self._send_lock = trio.Lock()
        self._gone = trio.Event()
        self.problem: str | None = None
        """Why the server stopped answering, once it has."""

    async def start(self, nursery: trio.Nursery) -> None:
        """Start the server and wait until it has imported the router and is ready.

        Raises:
            ForkServerError: it exited or did not get ready in time (its log says why).
        """
        ours, theirs = socket.socketpair()
        try:
            self.process = self._launch(theirs)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.pid = self.process.pid
        self._stream = trio.SocketStream(trio.socket.from_stdlib_socket(ours))
        nursery.start_soon(self._read)
        with trio.move_on_after(SERVER_START_TIMEOUT):
            await self._settled.wait()
        if not self._ready.is_set():
            await self.close()
            raise ForkServerError(
                f"the fork server did not get ready ({self.problem or 'timed out'}); "
                f"see {self.log_path}"
            )

    def _launch(self, theirs: socket.socket) -> subprocess.Popen[bytes]:
        with self.log_path.open("ab") as log:
            # From the trio thread, as every child of the controller: the parent-death
            # signal fires when the thread that started the process ends.
            return subprocess.Popen(
                [sys.executable, "-m", SERVER_MODULE, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=parent_death_signal(),
            )

    async def spawn(
        self, argv: Sequence[str], log: Path, namespace: str | None = None
    ) -> ForkedProcess:
        """Fork a router that runs the command line with ``argv``, its output appended to
        ``log`` (an absolute path: the server's working directory is not the caller's
        concern), in network namespace ``namespace`` if given.

        Raises:
            ForkServerError: the server is gone, did not answer, or could not fork.
            ValueError: ``log`` is relative.
        """
        if not log.is_absolute():
            raise ValueError(f"the log path must be absolute, not {log}")
        if self._stream is None or self._gone.is_set():
            raise ForkServerError(f"the fork server is not running ({self.problem})")
        ident = next(self._ids)
        answered = self._answered[ident] = trio.Event()
        request = {
            "start": ident,
            "argv": list(argv),
            "log": str(log),
            "namespace": namespace,
        }
        try:
            async with self._send_lock:
                await self._stream.send_all(encode(request))
            with trio.move_on_after(ANSWER_TIMEOUT):
                await answered.wait()  # set by the reader when the server is gone, too
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise ForkServerError(f"the fork server is gone: {exc}") from None
        finally:
            self._answered.pop(ident, None)
        answer = self._answers.pop(ident, None)
        if answer is None:
            raise ForkServerError(f"the fork server did not answer ({self.problem or 'timed out'})")
        if "pid" not in answer:
            raise ForkServerError(f"the fork server could not fork: {answer.get('error')}")
        pid = int(answer["pid"])
        child = self._children[pid] = ForkedProcess(pid, self._gone)
        early = self._early_exits.pop(pid, None)
        if early is not None:
            child.exited(early)
        return child

    async def _read(self) -> None:
        assert self._stream is not None
        lines = LineReader()
        try:
            while data := await self._stream.receive_some(65536):
                for message in lines.feed(data):
                    self._take(message)
            self.problem = "it closed its socket"
        except (trio.BrokenResourceError, trio.ClosedResourceError, ForkServerError) as exc:
            self.problem = str(exc) or exc.__class__.__name__
        finally:
            self._gone.set()
            self._settled.set()
            for event in self._answered.values():  # no answer will come
                event.set()

    def _take(self, message: dict[str, Any]) -> None:
        if "ready" in message:
            self._ready.set()
            self._settled.set()
        elif "started" in message or "failed" in message:
            ident = int(message.get("started", message.get("failed", 0)))
            event = self._answered.get(ident)
            if event is not None:
                self._answers[ident] = message
                event.set()
            elif "pid" in message:
                # Forked after its caller gave up waiting: nobody would stop it. It was
                # forked moments ago, too recently for its pid to be another's.
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(message["pid"]), signal.SIGKILL)
        elif "exited" in message:
            pid, status = int(message["exited"]), int(message["status"])
            child = self._children.pop(pid, None)
            if child is not None:
                child.exited(status)
            else:  # reaped before its start was answered
                self._early_exits[pid] = status

    async def close(self) -> None:
        """Stop the server: its socket closed, it exits (SIGKILL after a grace period).
        Shielded: it runs to the end however the run is being cancelled."""
        with trio.CancelScope(shield=True):
            if self._stream is not None:
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await self._stream.aclose()
            process = self.process
            if process is None:
                return
            with trio.move_on_after(SERVER_STOP_GRACE):
                await wait_for_exit(process)
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await wait_for_exit(process)
