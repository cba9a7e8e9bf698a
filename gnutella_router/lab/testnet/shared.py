"""Routers that share OS processes: the controller's side of :mod:`.host`.

Theory of operation
-------------------
``testnet --routers-per-process K`` runs the network's routers K to a process: node i
lives in host ``i // K``, an OS process (``python -m gnutella_router.lab.testnet.host``)
started when its first node starts. With ``--netns`` each router's sockets are made in
the node's own namespace, so every node keeps an address of its own at a fraction of
the memory of a process per node (about 2 MiB a router against 43 MiB;
docs/benchmarks.md measures both).

To the controller each router is a :class:`SharedNode`, a
:class:`~gnutella_router.lab.testnet.nodes.NetworkNode` like the others: it starts, answers
admin pages (``/connections``, ``/stats``, ``/dump``), writes dumps and stops. Its
configuration is written to ``node-I/router.toml``, as a router process's is (and can be
run by hand with ``gnutella-router run --config``). Where a router process would be
reached over HTTP, a shared node's pages come over its host's pipes, made by the router's
own admin interface without a socket; and the poll for its connections and totals is
one small request (``view``) instead of ``/connections`` and the whole ``/stats``: a
thousand nodes read every second cost the machine far less that way.

:class:`HostProcess` is one host: the process, a task that reads its replies and events
(:mod:`.host_wire`) and hands each reply to the request waiting for it, a task that
writes the commands queued for it, and a task that awaits the process's exit. A router
that ends is reported by its host (``exited``); a host that dies takes its routers with
it, and each is reported as failed, with the end of the host's log. :class:`HostPool`
holds a run's hosts; :meth:`HostPool.stop` ends every host on every exit path of the
run, shielded: the end of its input (every router says Bye), then SIGTERM, then SIGKILL.
A host also gets SIGHUP from the kernel when the controller dies, and stops its routers.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from gnutella_router.config import Config, config_as_toml
from gnutella_router.lab.testnet.children import CONFIG_FILE, describe_exit, log_tail
from gnutella_router.lab.testnet.host_wire import MessageReader, WireError, encode
from gnutella_router.lab.testnet.nodes import (
    NetworkNode,
    NodeError,
    NodeFailure,
    NodeView,
    connections_from_page,
)
from gnutella_router.lab.testnet.process import parent_death_signal, wait_for_exit

HOST_COMMAND = (sys.executable, "-m", "gnutella_router.lab.testnet.host")
DEFAULT_ROUTERS_PER_PROCESS = 100
QUEUED_COMMANDS_PER_ROUTER = 8
"""Commands waiting to be written to one host at most, per router it holds (the
controller has a few at a time for each: its pages, a stop)."""
KILL_GRACE = 3.0
"""After a router did not stop in its grace period and was told to end at once, how
long its host is given to report it gone."""
HOST_STOP_GRACE = 20.0


class HostProcess:
    """One host process and the conversation with it; see the module docstring."""

    def __init__(
        self,
        number: int,
        log_path: Path,
        *,
        routers: int = 1,
        log_format: str = "console",
        on_exit: Callable[[HostProcess], None] | None = None,
    ) -> None:
        """``routers``: how many it will hold at most."""
        self.number = number
        self.log_path = log_path
        self.log_format = log_format
        self.on_exit = on_exit
        self.process: subprocess.Popen[bytes] | None = None
        self.exit_status: int | None = None
        self.exited = trio.Event()
        self.nodes: dict[int, SharedNode] = {}
        self._starting = trio.Lock()
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[trio.Event, list[tuple[dict[str, Any], bytes]]]] = {}
        self._commands, self._queued = trio.open_memory_channel[bytes](
            QUEUED_COMMANDS_PER_ROUTER * max(routers, 64)
        )
        self._input: trio.lowlevel.FdStream | None = None

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def running(self) -> bool:
        return self.process is not None and not self.exited.is_set()

    async def ensure_started(self, nursery: trio.Nursery) -> None:
        """Start the process (once; later calls return at once)."""
        async with self._starting:
            if self.process is not None:
                if self.exited.is_set():
                    raise NodeError(f"host-{self.number} {describe_exit(self.exit_status)}")
                return
            process = self.process = self._spawn()
            assert process.stdin is not None
            assert process.stdout is not None
            self._input = trio.lowlevel.FdStream(os.dup(process.stdin.fileno()))
            process.stdin.close()
            replies = trio.lowlevel.FdStream(os.dup(process.stdout.fileno()))
            process.stdout.close()
            nursery.start_soon(self._write_commands, self._input)
            nursery.start_soon(self._read_replies, replies)
            nursery.start_soon(self._watch, process)

    def _spawn(self) -> subprocess.Popen[bytes]:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [*HOST_COMMAND, "--log-format", self.log_format]
        with self.log_path.open("ab") as log:
            # From the trio thread, which lives as long as the run: the parent-death
            # signal fires when the thread that started the child ends.
            return subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
                preexec_fn=parent_death_signal(),
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    # ------------------------------------------------------------------ commands

    def send(self, op: str, node: int, **fields: object) -> None:
        """Queue a command that is not answered (stop, kill, dump); returns at once."""
        self._queue(encode({"op": op, "node": node, **fields}))

    async def request(self, op: str, node: int, **fields: object) -> tuple[dict[str, Any], bytes]:
        """Send a command and wait for its answer: the reply's header and body.

        Raises:
            NodeError: the host answered with an error, or is gone.
        """
        if not self.running():
            raise NodeError(f"host-{self.number} is not running")
        ident = next(self._ids)
        done = trio.Event()
        slot: list[tuple[dict[str, Any], bytes]] = []
        self._waiting[ident] = (done, slot)
        try:
            self._queue(encode({"id": ident, "op": op, "node": node, **fields}))
            await done.wait()
        finally:
            self._waiting.pop(ident, None)
        if not slot:
            raise NodeError(f"host-{self.number} {describe_exit(self.exit_status)}")
        header, body = slot[0]
        if "error" in header:
            raise NodeError(str(header["error"]))
        return header, body

    def _queue(self, data: bytes) -> None:
        try:
            self._commands.send_nowait(data)
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            raise NodeError(f"host-{self.number} takes no more commands") from None

    def close_input(self) -> None:
        """No more commands: the host stops its routers and exits once they are gone."""
        self._commands.close()

    async def _write_commands(self, stream: trio.lowlevel.FdStream) -> None:
        try:
            async with self._queued:
                async for data in self._queued:
                    await stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the host is gone; _watch reports it
        finally:
            with contextlib.suppress(OSError, trio.ClosedResourceError):
                await stream.aclose()

    async def _read_replies(self, stream: trio.lowlevel.FdStream) -> None:
        reader = MessageReader(stream)
        try:
            while (message := await reader.next()) is not None:
                header, body = message
                if header.get("event") == "exited":
                    node = self.nodes.get(int(header.get("node", -1)))
                    if node is not None:
                        node.ended(_status(header.get("status")), header.get("error"))
                    continue
                waiting = self._waiting.get(header.get("id", -1))
                if waiting is not None:
                    waiting[1].append((header, body))
                    waiting[0].set()
        except (WireError, trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            with contextlib.suppress(OSError), self.log_path.open("a") as log:
                print(f"controller: host-{self.number}'s replies broke off: {exc}", file=log)
        finally:
            with contextlib.suppress(OSError, trio.ClosedResourceError):
                await stream.aclose()

    async def _watch(self, process: subprocess.Popen[bytes]) -> None:
        self.exit_status = await wait_for_exit(process)
        self.exited.set()
        self._commands.close()
        for done, _ in list(self._waiting.values()):
            done.set()  # empty slots: "the host is gone"
        gone = f"its host process (host-{self.number}) {describe_exit(self.exit_status)}"
        for node in self.nodes.values():
            node.ended(None, gone)
        if self.on_exit is not None:
            self.on_exit(self)

    async def stop(self, grace: float = HOST_STOP_GRACE) -> None:
        """End the host: its input closed (its routers say Bye), then SIGTERM, then
        SIGKILL; shielded, so it runs to the end even when the run is being cancelled
        (and awaiting the process itself: the task that watches it may be gone)."""
        process = self.process
        if process is None:
            return
        with trio.CancelScope(shield=True):
            self.close_input()
            for sig in (None, signal.SIGTERM, signal.SIGKILL):
                if sig is not None and process.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        process.send_signal(sig)
                with trio.move_on_after(grace if sig is None else 5.0):
                    self.exit_status = await wait_for_exit(process)
                if process.returncode is not None:
                    break
            self.exit_status = await wait_for_exit(process)
            self.exited.set()


def _status(value: object) -> int | None:
    return value if isinstance(value, int) else None


class SharedNode(NetworkNode):
    """A router in a host process, shared with others (see the module docstring)."""

    kind = "shared"

    def __init__(
        self,
        index: int,
        state_dir: Path,
        host: HostProcess,
        *,
        namespace: str | None,
        on_failure: Callable[[NodeFailure], None] | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        super().__init__(index, state_dir)
        self.host = host
        self.namespace = namespace
        self.on_failure = on_failure
        self.start_timeout = start_timeout
        self.exit_status: int | None = None
        self.stopping = False
        self._started = False
        self._exited = trio.Event()
        host.nodes[index] = self

    @property
    def pid(self) -> int | None:
        return self.host.pid

    async def start(self, nursery: trio.Nursery, config: Config) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        config_path = self.state_dir / CONFIG_FILE
        config_path.write_text(config_as_toml(config))
        try:
            await self.host.ensure_started(nursery)
            with trio.fail_after(self.start_timeout):
                header, _ = await self.host.request(
                    "start", self.index, config=str(config_path.resolve()), netns=self.namespace
                )
            listening = header["listening"][0]
            self.address = (str(listening[0]), int(listening[1]))
            admin = header.get("admin")
            self.admin_address = None if admin is None else (str(admin[0]), int(admin[1]))
            guid = header.get("guid")
            self.guid = guid if isinstance(guid, str) else None
        except trio.TooSlowError:
            self._fail(f"did not listen within {self.start_timeout:g} s")
        except NodeError as exc:
            self._fail(f"did not start: {exc}")
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            self._fail(f"did not start: its host answered {exc!r}")
        self._started = True

    def _fail(self, reason: str) -> None:
        self.failure = NodeFailure(
            self.index, reason, None, log_tail(self.host.log_path), self.label
        )
        raise NodeError(self.failure.describe())

    def ended(self, status: int | None, error: object) -> None:
        """Its host reports it gone (``status`` None: the host itself is gone)."""
        if self._exited.is_set() or not self._started:
            return
        self.exit_status = status
        self._exited.set()
        if not self.stopping:
            reason = describe_exit(status) if status is not None else str(error)
            if status is not None and error:
                reason += f": {error}"
            self.failure = NodeFailure(
                self.index, reason, status, log_tail(self.host.log_path), self.label
            )
            if self.on_failure is not None:
                self.on_failure(self.failure)

    async def get(self, target: str) -> Any:
        if not self.running():
            raise NodeError(f"node-{self.index} is not running")
        header, body = await self.host.request("get", self.index, target=target)
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise NodeError(f"node-{self.index} {target}: not JSON: {exc}") from None
        if header.get("status") != 200:
            error = data.get("error") if isinstance(data, dict) else None
            raise NodeError(f"node-{self.index} {target}: {error or header.get('status')}")
        return data

    def running(self) -> bool:
        return self._started and not self._exited.is_set()

    async def refresh(self, *, totals: bool = True) -> NodeView:
        """Its connections and totals in one small request (``view``): the controller
        polls every node once a second, and the whole ``/stats`` of a thousand routers
        took most of a core to make."""
        if not self.running():
            raise NodeError(f"node-{self.index} is not running")
        _, body = await self.host.request("view", self.index)
        try:
            view = json.loads(body)
            connections = connections_from_page(view["connections"])
            received, dropped = int(view["received"]), int(view["dropped"])
        except (ValueError, KeyError, TypeError) as exc:
            raise NodeError(f"node-{self.index}: a view that does not read: {exc!r}") from None
        if not totals:
            received, dropped = self.view.received, self.view.dropped
        self.view = NodeView(connections, received, dropped)
        return self.view

    async def write_dump(self) -> None:
        if self.running():
            self.host.send("dump", self.index)

    def request_stop(self) -> None:
        self.stopping = True
        if self.running():
            with contextlib.suppress(NodeError):
                self.host.send("stop", self.index)

    def kill(self) -> None:
        """End it at once, as a crashed host: no Bye, nothing saved."""
        self.stopping = True
        if self.running():
            with contextlib.suppress(NodeError):
                self.host.send("kill", self.index)

    async def wait_stopped(self, grace: float) -> bool:
        if not self._started:
            return True
        with trio.move_on_after(grace):
            await self._exited.wait()
        if not self._exited.is_set():
            self.kill()
            with trio.move_on_after(KILL_GRACE):
                await self._exited.wait()
            return False
        return self.exit_status == 0


class HostPool:
    """A run's host processes, ``per_process`` routers each."""

    def __init__(self, per_process: int, results: Path, *, log_format: str = "console") -> None:
        if per_process < 1:
            raise ValueError("--routers-per-process must be 1 or more")
        self.per_process = per_process
        self.results = results
        self.log_format = log_format
        self.hosts: dict[int, HostProcess] = {}

    def host_for(self, index: int) -> HostProcess:
        number = index // self.per_process
        host = self.hosts.get(number)
        if host is None:
            host = self.hosts[number] = HostProcess(
                number,
                self.results / f"host-{number}.log",
                routers=self.per_process,
                log_format=self.log_format,
            )
        return host

    async def stop(self, grace: float = HOST_STOP_GRACE) -> None:
        """Stop every host (see :meth:`HostProcess.stop`), all at once, shielded."""
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for host in self.hosts.values():
                    nursery.start_soon(host.stop, grace)
