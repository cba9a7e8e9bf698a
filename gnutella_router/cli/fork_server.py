"""The fork server's own process: ``python -m gnutella_router.cli.fork_server FD``.

The test network starts it (:mod:`gnutella_router.lab.testnet.forks` says why and speaks
its protocol) with one end of a socket pair as ``FD``. It imports what ``gnutella-router
run`` needs, says it is ready, and then, until that socket closes, forks a router for
each request and reports each one's exit. It runs no event loop: one thread waits on
the socket and on SIGCHLD (through the signal wakeup descriptor), so that a fork never
copies a lock another thread holds.

A child becomes its router in this order: it leaves the server's descriptors and
signal handlers behind, starts a session of its own (a terminal's Ctrl-C reaches the
controller only), asks the kernel for SIGHUP when the server dies, points its standard
output and error at the node's log, enters the node's network namespace if it has
one, and runs the command line's ``main`` with the request's arguments; its exit
status is ``main``'s. Whatever goes wrong on the way is written to the log and ends the
child with status 1; the server itself never stops for one child's sake.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import io
import os
import selectors
import signal
import socket
import sys
import traceback
from typing import Any, NoReturn

from gnutella_router.cli.main import main as command_line
from gnutella_router.lab.testnet.forks import MAX_LINE, ForkServerError, LineReader, encode
from gnutella_router.lab.testnet.process import PR_SET_PDEATHSIG

WARM = (
    "gnutella_router.cli.config_flags",
    "gnutella_router.config",
    "gnutella_router.daemon",
    "gnutella_router.logs",
)
"""What ``run`` imports only once it runs: imported here once, not in every child."""

CLONE_NEWNET = 0x40000000
NAMESPACES = "/run/netns"
"""Where ``ip netns`` keeps a handle on each named network namespace."""


def enter_namespace(name: str) -> None:
    """Move this process into the network namespace ``ip netns`` calls ``name``.

    Raises:
        OSError: no such namespace, or no right to enter it.
    """
    if "/" in name or name in (".", ".."):
        raise OSError(f"not a namespace name: {name!r}")
    descriptor = os.open(os.path.join(NAMESPACES, name), os.O_RDONLY | os.O_CLOEXEC)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(descriptor, CLONE_NEWNET) != 0:
            error = ctypes.get_errno()
            raise OSError(error, f"cannot enter namespace {name}: {os.strerror(error)}")
    finally:
        os.close(descriptor)


def die_with(parent: int) -> None:
    """SIGHUP this process when ``parent`` dies (at once, if it already has)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGHUP)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGHUP)


def become_router(request: dict[str, Any], server: int, inherited: list[int]) -> NoReturn:
    """In the forked child: set up as the module docstring says, then run the router."""
    status = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for descriptor in inherited:
            os.close(descriptor)
        os.setsid()
        die_with(server)
        log = os.open(str(request["log"]), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        nothing = os.open(os.devnull, os.O_RDONLY)
        os.dup2(nothing, 0)
        os.close(nothing)
        if isinstance(sys.stdout, io.TextIOWrapper):
            sys.stdout.reconfigure(line_buffering=True)
        namespace = request.get("namespace")
        if namespace:
            enter_namespace(str(namespace))
        status = command_line([str(a) for a in request["argv"]])
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        status = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(status)


def fork_router(request: dict[str, Any], inherited: list[int]) -> dict[str, Any]:
    """Fork a child for ``request`` (which closes the server's ``inherited``
    descriptors); the answer to send."""
    ident = request.get("start")
    if not isinstance(request.get("argv"), list) or not isinstance(request.get("log"), str):
        return {"failed": ident, "error": "a request needs argv (a list) and log (a path)"}
    sys.stdout.flush()
    sys.stderr.flush()
    server = os.getpid()
    try:
        pid = os.fork()
    except OSError as exc:
        return {"failed": ident, "error": f"fork: {exc}"}
    if pid == 0:
        become_router(request, server, inherited)
    return {"started": ident, "pid": pid}


def reap(control: socket.socket) -> None:
    """Report every child that has exited."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        control.sendall(encode({"exited": pid, "status": os.waitstatus_to_exitcode(status)}))


def serve(control: socket.socket) -> None:
    """Answer requests until the controller closes the socket."""
    for name in WARM:
        importlib.import_module(name)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
    # Everything imported so far is shared with every child: keep the collector from
    # touching it (a collection in a child would copy the pages it writes to).
    gc.collect()
    gc.freeze()
    control.sendall(encode({"ready": os.getpid()}))
    lines = LineReader()
    with selectors.DefaultSelector() as selector:
        selector.register(control, selectors.EVENT_READ)
        selector.register(wake_read, selectors.EVENT_READ)
        while True:
            for key, _ in selector.select():
                if key.fileobj == wake_read:
                    with contextlib.suppress(BlockingIOError):
                        while os.read(wake_read, 4096):
                            pass
                    continue
                data = control.recv(MAX_LINE)
                if not data:
                    return
                for request in lines.feed(data):
                    answer = fork_router(request, [control.fileno(), wake_read, wake_write])
                    control.sendall(encode(answer))
            reap(control)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m gnutella_router.cli.fork_server FD", file=sys.stderr)
        return 2
    control = socket.socket(fileno=int(argv[0]))
    try:
        serve(control)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the controller is gone: so are we, and our children hear of it
    except ForkServerError as exc:
        print(f"fork server: a bad request: {exc}", file=sys.stderr)
        return 1
    finally:
        control.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
