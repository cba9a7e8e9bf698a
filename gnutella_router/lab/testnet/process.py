"""A router as a child process: ``gnutella-router run``, started, awaited and stopped.

Experiments, benchmarks and tests start real router processes; this is the one way they
do it. :func:`start_router_process` runs ``python -m gnutella_router run`` with a state
directory (and any further flags) and returns once the router accepts connections on
every port it was asked to wait for, or raises :class:`RouterProcessError` naming the
exit status or the timeout (and the log, when there is one). :func:`stop_router_process`
asks with SIGTERM (the router says Bye, saves its host cache and exits 0) and kills
after a grace period, so nothing is left behind on any path; :class:`RouterProcess` is
a context manager that does this at the end of its block. Two helpers serve the test
network's controller, which starts its children from trio: :func:`parent_death_signal`
(a child hears when its parent dies) and :func:`wait_for_exit` (reap without blocking).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import trio

COMMAND = (sys.executable, "-m", "gnutella_router")
"""How a child router is run: the same interpreter, so the same installation."""
EXIT_POLL_SECONDS = 0.05
PR_SET_PDEATHSIG = 1


class RouterProcessError(Exception):
    """The router process exited early or did not accept connections in time."""


class RouterProcess:
    """A running ``gnutella-router run`` child; stopped when its ``with`` block ends."""

    def __init__(self, process: subprocess.Popen[bytes], log_path: Path | None) -> None:
        self.process = process
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, grace: float = 15.0) -> int | None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; the exit status (None if killed)."""
        return stop_router_process(self.process, grace)

    def close(self, grace: float = 15.0) -> int | None:
        """Stop the router and close the pipes to it; the exit status (None if killed)."""
        status = self.stop(grace)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        return status

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def start_router_process(
    state_dir: Path,
    arguments: Sequence[str] = (),
    *,
    log_path: Path | None = None,
    wait_for: Sequence[int] = (),
    timeout: float = 20.0,
    cwd: Path | None = None,
) -> RouterProcess:
    """Start a router with ``--state-dir state_dir`` and ``arguments``.

    Its output goes to ``log_path`` when given, else to pipes the caller may read. With
    ``wait_for`` (ports on 127.0.0.1), return only once the router accepts on each.

    Raises:
        RouterProcessError: it exited first, or did not accept within ``timeout``.
    """
    argv = [*COMMAND, "run", "--state-dir", str(state_dir), *arguments]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if log_path is None:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env, cwd=cwd,
        )  # fmt: skip
    else:
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd=cwd
            )
    router = RouterProcess(process, log_path)
    try:
        _wait_accepting(process, wait_for, timeout, log_path)
    except BaseException:
        router.close(grace=5.0)
        raise
    return router


def stop_router_process(process: subprocess.Popen[bytes], grace: float = 15.0) -> int | None:
    """SIGTERM, then SIGKILL after ``grace`` seconds; the exit status (None if killed)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            return None
    return process.returncode


def _wait_accepting(
    process: subprocess.Popen[bytes], ports: Sequence[int], timeout: float, log: Path | None
) -> None:
    where = f"; see {log}" if log is not None else ""
    deadline = time.monotonic() + timeout
    while ports:
        if process.poll() is not None:
            raise RouterProcessError(f"the router exited with {process.returncode}{where}")
        with contextlib.suppress(OSError):
            for port in ports:
                socket.create_connection(("127.0.0.1", port), 1).close()
            return
        if time.monotonic() > deadline:
            raise RouterProcessError(f"the router did not accept within {timeout:g} s{where}")
        time.sleep(0.05)


def parent_death_signal() -> Callable[[], None] | None:
    """A function for the child to run between fork and exec: SIGHUP it when its
    parent dies. Resolved here, in the parent, so the child only makes one call.

    SIGHUP, not SIGTERM: the parent-death signal can arrive more than once (a child
    with threads gets one per thread), and a router takes a second SIGTERM as "stop at
    once, no Bye", while any number of SIGHUPs is one graceful stop."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGHUP)
        if os.getppid() != parent:  # the parent died before the call: stop at once
            os.kill(os.getpid(), signal.SIGHUP)

    return arm


async def wait_for_exit(process: subprocess.Popen[bytes]) -> int:
    """Wait without blocking trio until ``process`` exits, reap it, return its status.

    On Linux a pidfd becomes readable when the process exits; elsewhere, poll."""
    if process.returncode is None and hasattr(os, "pidfd_open"):
        try:
            descriptor = os.pidfd_open(process.pid)
        except OSError:  # gone already, or an old kernel: polling finds out
            descriptor = -1
        if descriptor >= 0:
            try:
                await trio.lowlevel.wait_readable(descriptor)
            finally:
                os.close(descriptor)
    while True:
        status = process.poll()
        if status is not None:
            return status
        await trio.sleep(EXIT_POLL_SECONDS)  # no pidfd: nothing to wait on but time
