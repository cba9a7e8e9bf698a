"""Test network nodes as OS processes: ``gnutella-router run``, started, watched, stopped.

Theory of operation
-------------------
A :class:`ChildNode` is one router process. :meth:`ChildNode.start` writes the node's
configuration to ``node-<i>/router.toml`` (so a node can be rerun by hand), starts
``python -m gnutella_router run --config node-<i>/router.toml`` with its output in
``node-<i>/router.log``, and waits until the router's ready file
(:mod:`gnutella_router.ready_file`) names this process: only then are its ports known
(every node binds port 0, so no port is guessed and nothing races for one). From then
on the controller reads the node only through its admin interface, over HTTP.

Every child is started

* in a session of its own, so the Ctrl-C a terminal sends to its foreground group
  reaches the controller only, which then collects the nodes' state before it stops
  them; and
* on Linux, with ``PR_SET_PDEATHSIG`` = SIGHUP, so that if the controller itself dies
  (``kill -9``), the kernel tells every child to stop, and each says Bye and exits on
  its own: no router outlives the run that started it. The signal is tied to the
  *thread* that started the child, so children are started from the trio thread, which
  lives as long as the run (trio's own ``open_process`` starts them from worker threads,
  which end when idle, and would take their children with them).

A watcher task awaits each process. An exit the controller did not ask for is a
:class:`~gnutella_router.lab.testnet.nodes.NodeFailure` (exit status or signal, and the
last lines of the node's log), handed to the ``on_failure`` callback; the network
decides whether the run goes on. Stopping is SIGTERM (the router says Bye to its
peers, saves its host cache and exits 0), then SIGKILL after a grace period; on any
exit path of the controller, :func:`stop_children` does that for every child still
running, shielded from cancellation.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import trio

from gnutella_router.config import Config, config_as_toml, parse_host_port
from gnutella_router.lab.testnet.forks import ForkedProcess, ForkServer, ForkServerError
from gnutella_router.lab.testnet.nodes import NetworkNode, NodeError, NodeFailure
from gnutella_router.lab.testnet.process import COMMAND, parent_death_signal, wait_for_exit
from gnutella_router.observe.admin_client import FetchError, fetch
from gnutella_router.ready_file import read_ready_file

CONFIG_FILE = "router.toml"
LOG_FILE = "router.log"
LOG_TAIL_LINES = 8
START_TIMEOUT = 30.0
"""Longest wait for a child to listen; starting many children on few cores is slow."""
READY_POLL_SECONDS = 0.05
ADMIN_TIMEOUT = 10.0
STOP_GRACE = 10.0
T = TypeVar("T")
ChildProcess = subprocess.Popen[bytes] | ForkedProcess
"""A child started with its own interpreter, or forked by the fork server."""


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> tuple[str, ...]:
    """The last ``lines`` non-empty lines of a log file (nothing when there is none)."""
    try:
        with path.open("rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 64 * 1024))
            text = log.read().decode("utf-8", "replace")
    except OSError:
        return ()
    kept: deque[str] = deque(maxlen=lines)
    for line in text.splitlines():
        if line.strip():
            kept.append(line.rstrip())
    return tuple(kept)


def describe_exit(status: int | None) -> str:
    """``exited with status 1`` or ``was killed by SIGKILL``."""
    if status is None:
        return "is still running"
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"was killed by {name}"
    return f"exited with status {status}"


class ChildNode(NetworkNode):
    """A router in its own process (see the module docstring).

    ``prefix`` is put before the command: ``("ip", "netns", "exec", NAME)`` runs the
    router inside a network namespace. ``token`` is the admin token the node requires
    (needed when its admin interface listens beyond loopback).
    """

    kind = "process"

    def __init__(
        self,
        index: int,
        state_dir: Path,
        *,
        on_failure: Callable[[NodeFailure], None] | None = None,
        prefix: Sequence[str] = (),
        token: str = "",
        start_timeout: float = START_TIMEOUT,
        limiter: trio.CapacityLimiter | None = None,
        forks: ForkServer | None = None,
        namespace: str | None = None,
    ) -> None:
        super().__init__(index, Path(os.path.abspath(state_dir)))
        self.on_failure = on_failure
        self.prefix = tuple(prefix)
        self.forks = forks
        """Where the router is forked from (:mod:`.forks`); None: started with its own
        interpreter, after ``prefix``."""
        self.namespace = namespace
        """The network namespace a forked router enters (``prefix`` does it otherwise)."""
        self.token = token
        self.start_timeout = start_timeout
        self.limiter = limiter
        self.process: ChildProcess | None = None
        self.exit_status: int | None = None
        self.stopping = False
        self._exited = trio.Event()

    @property
    def log_path(self) -> Path:
        return self.state_dir / LOG_FILE

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    async def start(self, nursery: trio.Nursery, config: Config) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        config_path = self.state_dir / CONFIG_FILE
        config_path.write_text(config_as_toml(config))
        arguments = ["run", "--config", str(config_path), "--log-format", "console"]
        if self.forks is not None:
            try:
                self.process = await self.forks.spawn(arguments, self.log_path, self.namespace)
            except ForkServerError as exc:
                self.failure = NodeFailure(self.index, f"did not start: {exc}", kind=self.label)
                raise NodeError(self.failure.describe()) from None
            nursery.start_soon(self._watch, self.process)
        else:
            self._launch(nursery, [*self.prefix, *COMMAND, *arguments])
        record = await self._until_ready(self._wait_ready)
        self.address = _address(_first(record.get("listening")))
        admin = record.get("admin")
        self.admin_address = _address(admin) if isinstance(admin, str) else None
        guid = record.get("guid")
        self.guid = guid if isinstance(guid, str) else None

    def _launch(self, nursery: trio.Nursery, argv: Sequence[str]) -> None:
        with self.log_path.open("ab") as log:
            # Started from this (the main) thread, not from a worker thread as trio's
            # open_process does: the parent-death signal fires when the thread that
            # started the child ends, and worker threads end when idle.
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=parent_death_signal(),
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        nursery.start_soon(self._watch, self.process)

    async def _until_ready(self, ready: Callable[[ChildProcess], Awaitable[T]]) -> T:
        """``ready(process)``, or the failure named and the process killed."""
        assert self.process is not None
        try:
            return await ready(self.process)
        except NodeError as exc:
            self.failure = NodeFailure(
                self.index, str(exc), self.exit_status, log_tail(self.log_path), self.label
            )
            await self._stop_now()
            raise NodeError(self.failure.describe()) from None

    async def restart(self, nursery: trio.Nursery, config: Config) -> None:
        """Start the node again after it stopped (churn): a new process, same folder.

        Raises:
            NodeError: it is still running, or did not come up again.
        """
        if self.running():
            raise NodeError(f"node-{self.index} is still running")
        self.process = None
        self.exit_status = None
        self.failure = None
        self.stopping = False
        self._exited = trio.Event()
        await self.start(nursery, config)

    def kill(self) -> None:
        """SIGKILL, as a crashed host: no Bye, nothing saved (the exit is expected)."""
        self.stopping = True
        if self.running() and self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()

    async def _wait_ready(self, process: ChildProcess) -> dict[str, object]:
        with trio.move_on_after(self.start_timeout):
            while True:
                if self._exited.is_set():
                    raise NodeError(f"{describe_exit(self.exit_status)} before it listened")
                record = read_ready_file(self.state_dir, process.pid)
                if record is not None:
                    return record
                await trio.sleep(READY_POLL_SECONDS)
        raise NodeError(f"did not listen within {self.start_timeout:g} s")

    async def _watch(self, process: ChildProcess) -> None:
        status = await _exit_of(process)
        self.exit_status = status
        self._exited.set()
        if not self.stopping and self.address is not None:
            self.failure = NodeFailure(
                self.index, describe_exit(status), status, log_tail(self.log_path), self.label
            )
            if self.on_failure is not None:
                self.on_failure(self.failure)

    async def get(self, target: str) -> Any:
        if self.admin_address is None or self._exited.is_set():
            raise NodeError(f"node-{self.index} is not running")
        try:
            return await trio.to_thread.run_sync(
                _fetch, self.admin_address, target, self.token,
                abandon_on_cancel=True, limiter=self.limiter,
            )  # fmt: skip
        except FetchError as exc:
            raise NodeError(f"node-{self.index}: {exc}") from None

    def running(self) -> bool:
        return self.process is not None and not self._exited.is_set()

    async def write_dump(self) -> None:
        if self.running() and self.process is not None:
            self.process.send_signal(signal.SIGUSR1)

    def request_stop(self) -> None:
        self.stopping = True
        if self.running() and self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)

    async def wait_stopped(self, grace: float) -> bool:
        if self.process is None:
            return True
        with trio.move_on_after(grace):
            await self._exited.wait()
        if self._exited.is_set():
            return self.exit_status == 0
        await self._stop_now()
        return False

    async def _stop_now(self) -> None:
        """SIGKILL its whole process group and reap it, shielded: neither the process
        nor anything it started (a wrapper's servent) may outlive us. The child leads a
        session, and so a process group, of its own (``start_new_session``)."""
        self.stopping = True
        process = self.process
        if process is None:
            return
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                kill_group(process.pid)
            self.exit_status = await _exit_of(process)
            self._exited.set()
            kill_group(process.pid)  # what it started and left behind, if anything


class ServentNode(ChildNode):
    """A foreign servent (gtk-gnutella, or anything that speaks Gnutella 0.6) as a node.

    ``command`` is a template: ``{port}`` becomes the port it must listen on, ``{dir}``
    a folder of its own (its ``node`` folder) and ``{host}`` the address it listens at.
    It is ready once it accepts TCP connections there. It has no admin interface: what
    it does is seen from the routers' side, through their connections to it.
    """

    kind = "servent"
    label = "servent"

    def __init__(
        self,
        index: int,
        state_dir: Path,
        command: str,
        address: tuple[str, int],
        **options: Any,
    ) -> None:
        super().__init__(index, state_dir, **options)
        self.command = command
        self.listen = address

    def argv(self) -> list[str]:
        host, port = self.listen
        try:
            text = self.command.format(port=port, dir=self.state_dir, host=host)
        except (KeyError, IndexError, ValueError) as exc:
            raise NodeError(
                f"--servent {self.command!r}: only {{port}}, {{dir}} and {{host}} may be "
                f"filled in ({exc})"
            ) from None
        return [*self.prefix, *shlex.split(text)]

    async def start(self, nursery: trio.Nursery, config: Config | None = None) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._launch(nursery, self.argv())
        await self._until_ready(self._accepting)
        self.address = self.listen

    async def _accepting(self, process: ChildProcess) -> None:
        host, port = self.listen
        with trio.move_on_after(self.start_timeout):
            while True:
                if self._exited.is_set():
                    raise NodeError(f"{describe_exit(self.exit_status)} before it listened")
                try:
                    stream = await trio.open_tcp_stream(host, port)
                except OSError:
                    await trio.sleep(READY_POLL_SECONDS)
                    continue
                await stream.aclose()
                return
        raise NodeError(f"did not listen on {host}:{port} within {self.start_timeout:g} s")

    async def get(self, target: str) -> Any:
        raise NodeError(f"{self.label}-{self.index} has no admin interface")

    async def wait_stopped(self, grace: float) -> bool:
        """As a router's, and then nothing of its group is left: a wrapper that exited
        without its servent leaves no orphan behind."""
        stopped = await super().wait_stopped(grace)
        if self.process is not None:
            kill_group(self.process.pid)
        return stopped

    async def write_dump(self) -> None:
        """A foreign servent writes no dump."""


def kill_group(leader: int) -> None:
    """SIGKILL every process left in the group ``leader`` leads (none: nothing done)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader, signal.SIGKILL)


async def stop_children(nodes: Iterable[NetworkNode], grace: float = STOP_GRACE) -> None:
    """SIGTERM every child still running, then SIGKILL those not gone within ``grace``
    seconds; shielded, so that it runs to the end even when the run is being cancelled."""
    children = [n for n in nodes if isinstance(n, ChildNode) and n.process is not None]
    with trio.CancelScope(shield=True):
        for child in children:
            child.request_stop()
        async with trio.open_nursery() as nursery:
            for child in children:
                nursery.start_soon(child.wait_stopped, grace)


async def _exit_of(process: ChildProcess) -> int:
    """Wait until ``process`` exits (reaped); its status."""
    if isinstance(process, ForkedProcess):
        return await process.wait()
    return await wait_for_exit(process)


def _fetch(address: tuple[str, int], target: str, token: str) -> object:
    return fetch(address, target, token=token, timeout=ADMIN_TIMEOUT)


def _first(value: object) -> str:
    if isinstance(value, list) and value and isinstance(value[0], str):
        return value[0]
    raise NodeError("the ready file names no listening address")


def _address(text: object) -> tuple[str, int]:
    if not isinstance(text, str):
        raise NodeError("the ready file names no address")
    return parse_host_port(text, key="ready file")
