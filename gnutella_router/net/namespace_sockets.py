"""Sockets opened in another network namespace, so one process can hold many hosts.

Theory of operation
-------------------
On Linux a socket belongs to the network namespace its creating thread was in when
``socket()`` was called, and stays there for its whole life: it binds, listens, accepts
and connects in that namespace whatever the thread does afterwards. The namespace a
thread is in is per thread and can be changed with ``setns(2)``. So a process whose
routers each have a namespace of their own (an address of its own, on a test network's
bridge) needs no thread or process per router: it steps into a router's namespace just
around each ``socket()`` call and steps back at once (:meth:`Namespace.entered`). The
two ``setns`` calls and the ``socket()`` between them run on the trio thread with no
checkpoint in between, so no other task ever runs while the thread is away from home,
and worker threads (which have namespaces of their own) are never touched.

Which namespace a socket is for is read from a context variable, :data:`CURRENT`. The
task that runs a router sets it (:func:`use_namespace`) before the router starts, and
every task the router starts inherits it: trio copies the starting task's context into
each new task, and ``trio.to_thread`` into the thread. :func:`install_socket_factory`
puts :class:`NamespaceSocketFactory` under ``trio.socket.socket`` for the current trio
run, so everything that opens sockets through trio (listeners,
``trio.open_tcp_stream``, the GWebCache client) opens them where its router lives, with
no change to the code that opens them. Code that opens stdlib sockets directly would
open them in the process's own namespace; none of the router does.

A :class:`Namespace` holds an open descriptor of its namespace (``/run/netns/NAME``, as
``ip netns add`` makes it), so the namespace outlives a removal of its name for as long
as the process holds it: whoever cleans up must stop the process first
(:func:`gnutella_router.lab.testnet.namespaces.remove_leftovers` finds such processes by
these descriptors).
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import os
import socket as stdlib_socket
import sys
from collections.abc import Iterator
from pathlib import Path

import trio

NETNS_DIRECTORY = Path("/run/netns")
"""Where ``ip netns add`` puts a named namespace."""
CLONE_NEWNET = 0x40000000


class NamespaceError(OSError):
    """A namespace could not be opened or entered; the message names it."""


def _setns_function() -> object:
    """``os.setns`` (Python 3.12 and later), or libc's through ctypes."""
    native = getattr(os, "setns", None)
    if native is not None:
        return native
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    setns = libc.setns
    setns.argtypes = (ctypes.c_int, ctypes.c_int)
    setns.restype = ctypes.c_int

    def call(descriptor: int, kind: int) -> None:
        if setns(descriptor, kind) != 0:
            number = ctypes.get_errno()
            raise OSError(number, os.strerror(number))

    return call


_setns = _setns_function()


def _enter(descriptor: int) -> None:
    if _setns is None:
        raise NamespaceError("network namespaces need Linux")
    _setns(descriptor, CLONE_NEWNET)  # type: ignore[operator]


class Namespace:
    """A network namespace, held open, that sockets can be made in."""

    def __init__(self, name: str, descriptor: int) -> None:
        self.name = name
        self._descriptor = descriptor

    @classmethod
    def open(cls, name: str) -> Namespace:
        """The namespace ``ip netns`` knows as ``name``.

        Raises:
            NamespaceError: there is none by that name, or it cannot be opened.
        """
        try:
            descriptor = os.open(NETNS_DIRECTORY / name, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise NamespaceError(exc.errno, f"network namespace {name}: {exc.strerror}") from None
        return cls(name, descriptor)

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """This thread in the namespace for the ``with`` block, then home again. The
        block must not await: other tasks run on the same thread."""
        # Home is whatever namespace this thread is in now (a few microseconds to open;
        # sockets are made once per connection).
        try:
            home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise NamespaceError(exc.errno, f"this thread's namespace: {exc.strerror}") from None
        try:
            try:
                _enter(self._descriptor)
            except OSError as exc:
                raise NamespaceError(
                    exc.errno, f"cannot enter {self.name}: {exc.strerror}"
                ) from None
            try:
                yield
            finally:
                # Failing to get home would leave every later socket of this thread in
                # the wrong namespace: nothing sensible can go on after that.
                try:
                    _enter(home)
                except OSError as exc:  # pragma: no cover - the kernel refused our own
                    os.write(2, f"fatal: cannot return from {self.name}: {exc}\n".encode())
                    os._exit(70)
        finally:
            os.close(home)

    def socket(self, family: int, kind: int, proto: int) -> stdlib_socket.socket:
        """A stdlib socket made in this namespace."""
        with self.entered():
            return stdlib_socket.socket(family, kind, proto)

    def close(self) -> None:
        if self._descriptor >= 0:
            with contextlib.suppress(OSError):
                os.close(self._descriptor)
        self._descriptor = -1

    def __repr__(self) -> str:
        return f"<Namespace {self.name}>"


CURRENT: contextvars.ContextVar[Namespace | None] = contextvars.ContextVar(
    "network_namespace", default=None
)
"""The namespace sockets made in this context belong to; ``None``: the process's own."""


def use_namespace(namespace: Namespace | None) -> None:
    """Make the current task's sockets, and those of every task it starts from now on,
    in ``namespace`` (``None``: the process's own)."""
    CURRENT.set(namespace)


class NamespaceSocketFactory(trio.abc.SocketFactory):
    """``trio.socket.socket`` for a process with routers in several namespaces: each
    socket is made in the namespace of the context that asks for it."""

    def socket(
        self,
        family: stdlib_socket.AddressFamily | int = stdlib_socket.AF_INET,
        type: stdlib_socket.SocketKind | int = stdlib_socket.SOCK_STREAM,
        proto: int = 0,
    ) -> trio.socket.SocketType:
        namespace = CURRENT.get()
        if namespace is None:
            made = stdlib_socket.socket(family, type, proto)
        else:
            made = namespace.socket(family, type, proto)
        return trio.socket.from_stdlib_socket(made)


def install_socket_factory() -> None:
    """Have this trio run make its sockets with :class:`NamespaceSocketFactory`."""
    trio.socket.set_custom_socket_factory(NamespaceSocketFactory())
