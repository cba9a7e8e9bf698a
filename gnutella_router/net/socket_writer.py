"""The writing end of one link: its socket writes, a writer task when one is needed, and
the link's end (the final Bye, then its tasks).

Theory of operation
-------------------
The router never writes to a peer: it offers messages to the peer's outgoing queue
through the :class:`~gnutella_router.net.outbox.Outbox`, and when it ends a batch the
outbox calls :meth:`SocketWriter.flush` on every peer's writer. That is the only way
queued messages reach the socket, and once the handshake is done this module is the only
code that writes to it.

A flush takes everything queued as one write from the link's sans-IO session
(:meth:`~gnutella_router.net.session.PeerSession.data_to_send`: joined, deflated with one
sync flush if negotiated) and offers it to the non-blocking socket straight away with
``os.write``, unless a writer task still holds an earlier write, in which case that task
takes it: nothing else uses the socket then, so there is no task switch and no scheduler
round per batch, which is a good part of a router's latency (docs/benchmarks.md measures
what this saves over leaving every write to a task; ``GNUTELLA_ROUTER_DIRECT_WRITES=0``
does that). Only what the kernel does not take is left to a writer task, started then
beside the link's reader, in the nursery the reader runs in (:meth:`SocketWriter.attach`),
and ended once the queue is empty: the writer task is the only code that ever waits on
the socket, and an idle link has no writer task at all. Every write tells the session
what was sent (:meth:`~gnutella_router.net.session.PeerSession.sent`).

With a :class:`~gnutella_router.net.deflate_pool.DeflatePool` (``network.deflate_threads``),
a flush inside the outbox's batch hands its deflate to the pool and writes once the pool
has run the batch's deflates side by side; the link counts as busy meanwhile
(:attr:`SocketWriter.busy`), so no other write can overtake it.

The end of the link is decided here too, because it is a matter of what is still to be
written: whenever the session says it has just ended (a
:class:`~gnutella_router.net.session.Close`), either no Bye is due and the reader and
the writer task are cancelled at once, or the writer task sends whatever part of a write
the socket has not taken, then the Bye, within :data:`BYE_GRACE_SECONDS`, and then ends
the reader. trio's stream errors never leave this module: they become close reasons.
"""

from __future__ import annotations

import functools
import os

import trio

from gnutella_router.net.deflate_pool import DeflatePool
from gnutella_router.net.outbox import WRITE_SIZE
from gnutella_router.net.outqueue import Verdict
from gnutella_router.net.session import Close, PeerSession

__all__ = ["BYE_GRACE_SECONDS", "DIRECT_WRITES", "SocketWriter"]

DIRECT_WRITES = os.environ.get("GNUTELLA_ROUTER_DIRECT_WRITES", "1") != "0"
"""Whether :meth:`SocketWriter.flush` may write to the socket itself. Only for measuring
what that saves (docs/benchmarks.md): ``GNUTELLA_ROUTER_DIRECT_WRITES=0`` leaves every
write to a writer task, started by the flush."""

BYE_GRACE_SECONDS = 2.0
"""How long a closing link's writer may take to write the rest of a write and the Bye."""


class SocketWriter:
    """One link's writes to its socket, and its end (see the module).

    Slotted and made with its link: a router holds thousands of links, most of them
    idle, and an idle link's writer is these few fields and no task.
    """

    __slots__ = (
        "_deferred",
        "_deflate_pool",
        "_ended",
        "_fd",
        "_home",
        "_reader",
        "_running",
        "_scope",
        "_unsent",
        "failure",
        "session",
        "stream",
    )

    def __init__(
        self,
        session: PeerSession,
        stream: trio.abc.Stream,
        *,
        fd: int,
        reader: trio.CancelScope,
        deflate_pool: DeflatePool | None = None,
    ) -> None:
        """``fd`` is the socket's descriptor (-1 for a stream that is not a socket: every
        write then goes to a writer task); ``reader`` the cancel scope of the link's
        reader, which the end of the link cancels or bounds."""
        self.session = session
        self.stream = stream
        self._fd = fd if DIRECT_WRITES else -1
        """The socket for direct writes (see flush); -1: every write to a writer task."""
        self._reader = reader
        self._deflate_pool = deflate_pool
        self._deferred = False
        """A direct write waits for its deflate at the end of the router's batch."""
        self._home: trio.Nursery | None = None
        """The nursery the link's reader runs in, while it runs: where a writer task is
        started, beside it."""
        self._running = False
        """A writer task holds (or is about to hold) work the socket has not taken."""
        self._scope: trio.CancelScope | None = None
        """The running writer task's, with the reader's deadline."""
        self._ended: trio.Event | None = None
        """Set when a writer task ends, once :meth:`stopped` waits for that."""
        self.failure: Exception | None = None
        """What a writer task failed with (a bug), for the link's run to raise."""
        self._unsent: bytes | memoryview = b""
        """The tail of a direct write that the socket did not take, for the writer task."""

    # ------------------------------------------------------------------ the outbox's end

    @property
    def busy(self) -> bool:
        """Whether the writer holds work the socket has not taken: a writer task is
        running, or a deflate is under way."""
        return self._deferred or self._running

    @property
    def deflates(self) -> bool:
        """Whether what it writes is deflated (see :data:`.outbox.DEFLATED_WAITS`)."""
        return self.session.compressor is not None

    @property
    def closing(self) -> bool:
        """Whether the link is ending: nothing more will be written but its Bye."""
        return self.session.closing

    def act_on(self, verdict: Verdict) -> None:
        """Act on a verdict of the outgoing queue that did not queue an offer: end the
        link if the session says so (the outbox calls this, see :mod:`.outbox`)."""
        if verdict is not Verdict.DROPPED and verdict is not Verdict.QUEUED:
            close = self.session.act_on(verdict)
            if close is not None:
                self.end(close)

    def flush(self) -> None:
        """Send what is queued now if no writer is busy; otherwise leave it to the writer.

        The router queues a whole batch and the outbox calls this once per link
        afterwards. When no writer holds work, nothing else is using the socket, so the
        queued bytes go straight to the non-blocking socket. Whatever the kernel does
        not take right away is left for a writer task, which is the only code that ever
        waits on the socket.
        """
        session = self.session
        if (
            self._deferred
            or self._running
            or session.closing
            or not session.outgoing.pending_messages
        ):
            return
        if self._fd < 0:
            self._start()
            return
        pool = self._deflate_pool
        compressor = session.compressor
        if compressor is None or pool is None:
            self._write_now(*session.data_to_send(WRITE_SIZE))
            return
        data, count = session.data_to_send(WRITE_SIZE, deflate=False)
        if pool.defer(compressor, data, functools.partial(self._write_deflated, count)):
            self._deferred = True  # no writer is started: the socket is still ours
        else:
            self._write_now(session.deflate(data), count)

    def _write_deflated(self, count: int, data: bytes | Exception) -> None:
        self._deferred = False
        if isinstance(data, Exception):
            self.close(f"deflate failed: {data}")
        else:
            self._write_now(data, count)

    def _write_now(self, data: bytes, count: int) -> None:
        """Offer ``data`` (``count`` messages) to the socket; leave the rest to the writer."""
        try:
            sent = os.write(self._fd, data)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            self.close(f"connection lost: {exc.__class__.__name__}")
            return
        session = self.session
        session.sent(count, sent)
        if sent == len(data) and not session.outgoing.pending_messages:
            return
        self._unsent = memoryview(data)[sent:]
        self._start()

    # ------------------------------------------------------------------ the link's end

    def close(self, reason: str, *, bye_code: int | None = None) -> None:
        """Ask the session to end the link (the first reason given is the one recorded)
        and act on its answer (:meth:`end`)."""
        close = self.session.close(reason, bye_code=bye_code)
        if close is not None:
            self.end(close)

    def end(self, close: Close) -> None:
        """The session has just ended: let the writer task send the Bye, within the
        grace period, or end the link's tasks now."""
        if close.bye_code is None:
            self.end_tasks()
            return
        # A peer that does not read would keep the writer in send_all for ever.
        deadline = trio.current_time() + BYE_GRACE_SECONDS
        self._reader.deadline = deadline
        if self._scope is not None:
            self._scope.deadline = deadline
        self._start()

    def end_tasks(self) -> None:
        """Cancel the reader and the writer task, if one runs."""
        self._reader.cancel()
        if self._scope is not None:
            self._scope.cancel()

    # ------------------------------------------------------------------ the writer task

    def attach(self, nursery: trio.Nursery | None) -> None:
        """The link's reader runs in ``nursery`` from now on: a writer task is started
        there, beside it (at once, if one was asked for before)."""
        self._home = nursery
        if self._running and nursery is not None:
            nursery.start_soon(self._write_loop)

    def detach(self) -> None:
        """The reader has stopped: no writer task is started any more."""
        self._home = None

    async def stopped(self) -> None:
        """End a writer task that still runs (cancelled from outside, or the Bye's time
        is up), and wait until it has."""
        if self._running:
            self._ended = trio.Event()
            self.end_tasks()
            await self._ended.wait()

    def _start(self) -> None:
        """Have a writer task send what the socket has not taken, then the final Bye if
        one is due: started beside the reader, or by :meth:`attach`."""
        if self._running:
            return
        self._running = True
        if self._home is not None:
            self._home.start_soon(self._write_loop)

    async def _write_loop(self) -> None:
        """Write until nothing is left, then end (or, closing, write the Bye and end
        the link)."""
        reader = self._reader
        scope = self._scope = trio.CancelScope(deadline=reader.deadline)
        if reader.cancel_called:
            scope.cancel()
        try:
            with scope:
                await self._write(self.stream, self.session)
        except Exception as exc:  # a bug: it costs this link, and its run raises it
            self.failure = exc
            self.end_tasks()
        finally:
            self._scope = None
            self._running = False
            if self._ended is not None:
                self._ended.set()
        if self.session.closing:
            self.end_tasks()  # the Bye is out, or cannot be: the reader ends too

    async def _write(self, stream: trio.abc.Stream, session: PeerSession) -> None:
        try:
            while True:
                if self._unsent:
                    # The tail of a direct write (see flush) goes first, even before a
                    # Bye: the peer must not read a Bye inside a message.
                    unsent, self._unsent = self._unsent, b""
                    await stream.send_all(unsent)
                    session.sent(0, len(unsent))
                    continue
                data, count = session.data_to_send(WRITE_SIZE)
                if not data:
                    return  # flush writes directly again; or the Bye is out
                await stream.send_all(data)
                session.sent(count, len(data))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self.close(f"connection lost: {exc.__class__.__name__}")
