"""A host process: several routers in one OS process, each in a namespace of its own.

Run by a test network's controller as ``python -m gnutella_router.lab.testnet.host``; the
controller's side is :mod:`.shared`.

Theory of operation
-------------------
A router process costs about 43 MiB, nearly all of it the interpreter and the modules,
shared by nothing; a router in a process that holds others costs about 2 MiB. A host
runs many :class:`~gnutella_router.daemon.Daemon` s in one trio run, as the in-process
test network does, but in a process of its own (a test network of a thousand routers
spreads them over a few hosts, and so over the machine's cores). With namespaces, each
router's sockets are made in that router's network namespace
(:mod:`gnutella_router.net.namespace_sockets`): it listens at an address of its own and
its peers see that address when it dials them, as if it were a host of its own.

The controller drives the host over its standard input and output (:mod:`.host_wire`):

* ``start`` (a node's index, its ``router.toml``, the namespace to make its sockets in)
  starts a router and is answered with where it listens, once it listens;
* ``get`` (a node, an admin target such as ``/stats``) is answered with the page, made
  by the router's own admin interface without a socket or HTTP, as the in-process test
  network reads its nodes; ``view`` with what the controller polls every node for
  (its connections and its totals), far cheaper than the whole ``/stats``;
* ``stop`` asks a router to stop its own way (Bye to its peers), ``kill`` ends it at
  once (no Bye, as a crash would), ``dump`` has it write its full dump file;
* each router that ends, for whatever reason, is reported with an ``exited`` event
  (status 0 for a clean stop, 1 for an error, -9 when killed).

The end of the standard input (the controller closed it, or died), SIGTERM, SIGINT or
SIGHUP (the kernel's parent-death signal) stop every router gracefully and end the
process; a second SIGTERM or SIGINT cancels everything at once. The process raises its
open-file limit to the hard limit first: a hundred routers hold a few thousand sockets.
Every log line carries the router's index (``node``), bound in its context.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import resource
import signal
import sys
from pathlib import Path
from typing import Any

import structlog
import trio

from gnutella_router.config import ConfigError, load_config
from gnutella_router.daemon import Daemon
from gnutella_router.lab.testnet.host_wire import MessageReader, WireError, encode
from gnutella_router.logs import configure_logging
from gnutella_router.net.namespace_sockets import (
    Namespace,
    NamespaceError,
    install_socket_factory,
    use_namespace,
)
from gnutella_router.observe.admin import AdminServer
from gnutella_router.observe.dump_files import write_dump_file
from gnutella_router.observe.dumps import dump_connections, jsonable

KILLED = -9
"""The exit status a killed router is reported with (as a process killed by SIGKILL)."""
STOP_SECONDS = 15.0
"""Longest wait for every router's graceful stop at the end, before cancelling them."""
LOCAL_PEER = "127.0.0.1"


@dataclasses.dataclass(slots=True)
class HostedRouter:
    index: int
    daemon: Daemon
    scope: trio.CancelScope
    pages: AdminServer | None = None
    killed: bool = False


class Host:
    """The routers of one host process, and the conversation with its controller."""

    def __init__(self, out: trio.abc.SendStream) -> None:
        self.out = out
        self.routers: dict[int, HostedRouter] = {}
        self.starting: set[int] = set()
        self._writing = trio.Lock()
        self._stopping = False
        self._changed = trio.Event()
        """Set when a router is gone, or did not start."""

    async def send(self, header: dict[str, Any], body: bytes = b"") -> None:
        # The controller may be gone; the end of stdin stops us then.
        async with self._writing:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await self.out.send_all(encode(header, body))

    async def serve(self, commands: trio.abc.ReceiveStream) -> None:
        """Answer commands until the input ends, then stop every router."""
        reader = MessageReader(commands)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_signals, nursery)
            async with trio.open_nursery() as routers:
                while True:
                    try:
                        message = await reader.next()
                    except (WireError, trio.BrokenResourceError) as exc:
                        print(f"host: bad command stream: {exc}", file=sys.stderr)
                        message = None
                    if message is None:
                        break
                    header, _ = message
                    routers.start_soon(self._command, routers, header)
                self.stop_all()
                with trio.move_on_after(STOP_SECONDS):
                    await self._all_gone()
                routers.cancel_scope.cancel()
            nursery.cancel_scope.cancel()

    async def _all_gone(self) -> None:
        while self.routers or self.starting:
            self._changed = trio.Event()
            await self._changed.wait()

    def _change(self) -> None:
        self._changed.set()

    def stop_all(self) -> None:
        self._stopping = True
        for router in self.routers.values():
            router.daemon.request_stop()

    async def _watch_signals(self, nursery: trio.Nursery) -> None:
        watched = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        with trio.open_signal_receiver(*watched) as signals:
            async for signum in signals:
                if signum == signal.SIGHUP or not self._stopping:
                    self.stop_all()
                else:
                    nursery.cancel_scope.cancel()  # a second SIGTERM: at once
                    return

    async def _command(self, routers: trio.Nursery, header: dict[str, Any]) -> None:
        ident = header.get("id")
        op = header.get("op")
        node = header.get("node")
        if not isinstance(node, int):
            await self.send({"id": ident, "error": "a command names its node by index"})
            return
        if op == "start":
            await self._start(routers, ident, node, header)
            return
        router = self.routers.get(node)
        if router is None:
            if ident is not None:
                await self.send({"id": ident, "error": f"node-{node} is not running here"})
            return
        if op == "get":
            await self._get(ident, router, str(header.get("target", "/")))
        elif op == "view":
            await self._view(ident, router)
        elif op == "stop":
            router.daemon.request_stop()
        elif op == "kill":
            router.killed = True
            router.scope.cancel()
        elif op == "dump":
            try:
                await write_dump_file(router.daemon, router.daemon.config.state_path)
            except OSError as exc:
                print(f"host: node-{node}: dump not written: {exc}", file=sys.stderr)
        elif ident is not None:
            await self.send({"id": ident, "error": f"unknown command {op!r}"})

    async def _start(
        self, routers: trio.Nursery, ident: object, node: int, header: dict[str, Any]
    ) -> None:
        if node in self.routers or node in self.starting or self._stopping:
            await self.send({"id": ident, "error": f"node-{node} cannot be started now"})
            return
        self.starting.add(node)
        try:
            config = load_config(Path(str(header.get("config"))))
            namespace_name = header.get("netns")
            namespace = Namespace.open(str(namespace_name)) if namespace_name else None
        except (ConfigError, NamespaceError) as exc:
            self.starting.discard(node)
            self._change()
            await self.send({"id": ident, "error": str(exc)})
            return
        router: HostedRouter | None = None
        failure: BaseException | None = None
        try:
            router = await routers.start(self._run_router, node, config, namespace)
        except* Exception as group:
            failure = _first_leaf(group)
        finally:
            self.starting.discard(node)
            self._change()
        if router is None:
            error = f"{failure.__class__.__name__}: {failure}" if failure else "did not start"
            await self.send({"id": ident, "error": error})
            return
        daemon = router.daemon
        admin = daemon.admin_address
        await self.send(
            {
                "id": ident,
                "listening": [list(a) for a in daemon.server.listen_addresses],
                "admin": None if admin is None else list(admin),
                "guid": daemon.guid.hex(),
            }
        )

    async def _run_router(
        self,
        node: int,
        config: Any,
        namespace: Namespace | None,
        *,
        task_status: trio.TaskStatus[HostedRouter] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        # Set in this task's context: every task the router starts inherits both.
        use_namespace(namespace)
        structlog.contextvars.bind_contextvars(node=node)
        daemon = Daemon(config)
        router = HostedRouter(node, daemon, trio.CancelScope())
        status, error = 0, None
        started = False
        try:
            with router.scope:
                async with trio.open_nursery() as inside:
                    await inside.start(daemon.run)
                    pages = daemon.registry["admin"]
                    router.pages = pages if isinstance(pages, AdminServer) else None
                    self.routers[node] = router
                    started = True
                    task_status.started(router)
        except* Exception as group:
            if not started:
                raise
            status, error = 1, repr(_first_leaf(group))
        finally:
            self.routers.pop(node, None)
            self._change()
            if namespace is not None:
                namespace.close()
        if started:
            if router.killed:
                status = KILLED
            with trio.CancelScope(shield=True):
                await self.send({"event": "exited", "node": node, "status": status, "error": error})

    async def _get(self, ident: object, router: HostedRouter, target: str) -> None:
        if router.pages is None:
            await self.send({"id": ident, "error": "the router has no admin interface"})
            return
        token = router.daemon.config.admin.token
        headers = [(b"authorization", b"Bearer " + token.encode())] if token else []
        reply = await router.pages.answer("GET", target, headers, LOCAL_PEER)
        await self.send({"id": ident, "status": reply.status}, reply.body)

    async def _view(self, ident: object, router: HostedRouter) -> None:
        """What the controller polls a node for (its connections, as ``/connections``
        lists them, and its totals): a small part of ``/stats``, whose whole costs a
        router about half a millisecond to make, a thousand times a second."""
        daemon = router.daemon
        view = {
            "connections": dump_connections(daemon),
            "received": sum(daemon.router.received),
            "dropped": daemon.router.total_dropped(),
        }
        body = json.dumps(jsonable(view), separators=(",", ":")).encode()
        await self.send({"id": ident, "status": 200}, body)


def _first_leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def _raise_file_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def _main() -> None:
    install_socket_factory()
    commands = trio.lowlevel.FdStream(sys.stdin.fileno())
    replies = trio.lowlevel.FdStream(sys.stdout.fileno())
    await Host(replies).serve(commands)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gnutella_router.lab.testnet.host",
        description="Run several routers in this process for a test network's controller, "
        "which drives it over standard input and output (see the module's docstring).",
    )
    parser.add_argument("--log-format", choices=("auto", "console", "json"), default="console")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    configure_logging(args.log_format, args.log_level)
    _raise_file_limit()
    try:
        trio.run(_main)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
