"""One Gnutella link after its handshake, on trio: the thin adapter over its
:class:`~gnutella_router.net.session.PeerSession`.

Theory of operation
-------------------
Everything the link knows and decides lives in its sans-IO session (:mod:`.session`):
the capabilities, the counters, the frame decoder and the inflater, the deflater, the
outgoing queue's verdicts, the Bye sent and received, Hops Flow, the peer's vendor
lists, the abuse meter and kick, and the frames the router still owes back. This module
does the I/O around it: the reader, the writes, a writer task when one is needed, the
cancel scopes and the Bye's deadline. Whenever the session says it has just ended (a
:class:`~gnutella_router.net.session.Close`), the adapter lets its writer send the
final Bye within :data:`BYE_GRACE_SECONDS`, or ends its tasks at once.

The reader reads up to 64 KiB at a time and feeds the session, which inflates if the
peer deflates and cuts the bytes into frames; each piece's frames go to the server in
one batch. The server's ``deliver`` may wait (backpressure: the router's queue is full),
and while it waits the reader does not read, so the peer's TCP window closes instead of
our memory growing.

A connection is the router's :class:`~gnutella_router.routing.link.Link` to one peer, and
what the router's :class:`~gnutella_router.net.outbox.Outbox` writes to. The router
never waits for a peer: the outbox offers messages to the connection's outgoing queue
and returns at once; a queue's verdict that ends the peer ("too slow, close it") is
decided by the session and acted on here (:meth:`Connection.act_on`), not by the
router. When the router ends a batch, the outbox calls :meth:`Connection.flush`, which
takes everything queued as one write from the session (joined, deflated with one sync
flush if negotiated) and offers it to the non-blocking socket straight away
(docs/benchmarks.md measures what this saves over leaving every write to a task). Only
what the kernel does not take is left to a writer task, started then beside the reader
and ended once the queue is empty: the writer is the only code that ever waits on the
socket, and an idle connection has no writer at all, only its reader, one task in one
cancel scope with no nursery of its own (tasks, frames and nurseries were most of what
an idle connection cost; ``scripts/bench_idle_memory.py`` measures it). With a
:class:`~gnutella_router.net.deflate_pool.DeflatePool` (``network.deflate_threads``),
the deflates of one batch's direct writes run side by side on several cores before the
writes are made. A deflating link makes its deflater (a few hundred KB in zlib) only for
a write over 1 KB, sends smaller ones uncompressed within the same stream, and drops the
deflater once it has written nothing for a second or two (see
:class:`~protocol.compression.DeflateCompressor`).

End of stream: a peer that hangs up has often just sent its last messages (gtk-gnutella
sends its Bye and closes at once). The reader stops, but the connection stays open for
the router until the router has finished with every frame read before the end
(:meth:`Connection.frames_done`, counted by the session), so a last query hit is still
routed and a Bye still recorded with its code; only then, or after
:data:`DRAIN_SECONDS`, is it closed.

Closing: :meth:`Connection.close` asks the session, which records the first reason
given. If a Bye is due and the peer announced ``Bye-Packet``, the queue is cleared, the
Bye is written after whatever part of a write the socket has not taken yet (bounded by
a short grace period) and then the socket is closed; otherwise the socket is closed at
once. trio's stream errors never leave this module: they become close reasons.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import structlog
import trio

from gnutella_router.control.abuse import AbuseMeter, Kick, Offence
from gnutella_router.net.deflate_pool import DeflatePool
from gnutella_router.net.outbox import WRITE_SIZE
from gnutella_router.net.outqueue import OutgoingQueue, Verdict
from gnutella_router.net.session import Close, ConnectionStatistics, PeerSession, StreamBroken
from gnutella_router.net.session import format_address as format_address
from protocol.compression import DEFAULT_DEFLATE_LEVEL
from protocol.framing import Frame
from protocol.handshake import Capabilities
from protocol.vendor import Feature, VendorMessageId

__all__ = [
    "BYE_GRACE_SECONDS",
    "DIRECT_WRITES",
    "DRAIN_SECONDS",
    "READ_SIZE",
    "Connection",
    "ConnectionStatistics",
    "Deliver",
    "FrameTap",
    "format_address",
]


class FrameTap(Protocol):
    """Sees every frame a peer sent, as it was read (the trace recorder is one). It is
    called on the reading task and must not block."""

    def record(self, connection_id: int, frames: Sequence[Frame]) -> None: ...


DIRECT_WRITES = os.environ.get("GNUTELLA_ROUTER_DIRECT_WRITES", "1") != "0"
"""Whether :meth:`Connection.flush` may write to the socket itself. Only for measuring
what that saves (docs/benchmarks.md): ``GNUTELLA_ROUTER_DIRECT_WRITES=0`` leaves every
write to a writer task, started by the flush."""

READ_SIZE = 64 * 1024
BYE_GRACE_SECONDS = 2.0
DRAIN_SECONDS = 5.0
"""How long a connection whose peer hung up waits for the router to handle what the
peer sent before it (a last query hit, its Bye) before it closes anyway."""

_connection_ids = itertools.count(1)

Deliver = Callable[["Connection", list[Frame]], Awaitable[None]]
"""Hands one read's frames to the router; each frame's ``source`` is the connection id."""


class Connection:
    """A handshaken TCP peer: the router's :class:`~gnutella_router.routing.link.Link` to
    it, the I/O around its :attr:`session`.

    Slotted, and what most connections never need (a writer task, an abuse meter, a
    logger bound to the connection) is made when it is needed: a router holds thousands
    of these, most of them idle most of the time. ``id``, ``capabilities`` and
    ``outgoing`` are the session's own, held here too: the router and the outbox read
    them for every message they route or offer, and a slot is cheaper than a property.
    """

    __slots__ = (
        "_deferred",
        "_deflate_pool",
        "_drained",
        "_failure",
        "_fd",
        "_home",
        "_log",
        "_read_fd",
        "_scope",
        "_trailing",
        "_unsent",
        "_writer_ended",
        "_writer_running",
        "_writer_scope",
        "capabilities",
        "id",
        "outgoing",
        "recorder",
        "session",
        "stream",
    )

    def __init__(
        self,
        *,
        stream: trio.abc.Stream,
        peer: tuple[str, int],
        role: str,
        capabilities: Capabilities,
        outgoing: OutgoingQueue,
        compress_outgoing: bool,
        decompress_incoming: bool,
        trailing_data: bytes,
        max_payload: int,
        log: structlog.typing.FilteringBoundLogger,
        recorder: FrameTap | None = None,
        abuse: Callable[[], AbuseMeter] | None = None,
        deflate_pool: DeflatePool | None = None,
        deflate_level: int = DEFAULT_DEFLATE_LEVEL,
    ) -> None:
        """``abuse`` makes the meter that counts the peer's offences and decides when it
        is kicked (``None``: never kicked); it is called at the peer's first offence."""
        self.id = next(_connection_ids)
        self.session = PeerSession(
            id=self.id,
            peer=peer,
            role=role,
            capabilities=capabilities,
            outgoing=outgoing,
            compress_outgoing=compress_outgoing,
            decompress_incoming=decompress_incoming,
            max_payload=max_payload,
            now=trio.current_time(),
            abuse=abuse,
            deflate_level=deflate_level,
        )
        """The link's state and decisions, with no I/O: what observers read."""
        self.capabilities = capabilities
        self.outgoing = outgoing
        self.recorder = recorder
        """Gets every read's frames when a trace is being recorded; ``None`` otherwise."""
        self.stream = stream
        self._log = log
        self._deflate_pool = deflate_pool
        self._deferred = False
        """A direct write waits for its deflate at the end of the router's batch."""
        self._trailing = trailing_data
        self._scope = trio.CancelScope()
        """The reader's, entered by :meth:`run`; a close cancels it, or gives it the
        Bye's deadline (before it is entered too)."""
        self._home: trio.Nursery | None = None
        """The nursery :meth:`run`'s task runs in, while it runs: where a writer task
        is started, beside it."""
        self._writer_running = False
        """A writer task holds (or is about to hold) work the socket has not taken."""
        self._writer_scope: trio.CancelScope | None = None
        """The running writer task's, with the reader's deadline."""
        self._writer_ended: trio.Event | None = None
        """Set when a writer task ends, once :meth:`run` waits for that."""
        self._failure: Exception | None = None
        """What a writer task failed with, for :meth:`run` to raise."""
        self._unsent: bytes | memoryview = b""
        """The tail of a direct write that the socket did not take, for the writer."""
        socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        self._read_fd = socket.fileno() if socket is not None else -1
        """The socket the reader reads itself (see run); -1 for other streams."""
        self._fd = self._read_fd if DIRECT_WRITES else -1
        """The socket for direct writes (see flush); -1 for other streams."""
        self._drained: trio.Event | None = None
        """Set when the router has finished with every frame, while the reader waits."""

    @property
    def log(self) -> structlog.typing.FilteringBoundLogger:
        """The server's logger bound to this connection, made for each use: it is used
        a few times in a connection's life, and keeping one bound logger per connection
        would cost every idle connection its context dict."""
        session = self.session
        return self._log.bind(conn=self.id, peer=session.peer_text, role=session.role)

    @property
    def peer(self) -> tuple[str, int]:
        """The peer's address, as the socket has it."""
        return self.session.peer

    @property
    def peer_text(self) -> str:
        return self.session.peer_text

    @property
    def role(self) -> str:
        """``"incoming"`` or ``"outgoing"``: who dialled."""
        return self.session.role

    # ------------------------------------------------------------------ the router's link

    @property
    def closing(self) -> bool:
        return self.session.closing

    @property
    def close_reason(self) -> str | None:
        return self.session.close_reason

    @property
    def flow_controlled(self) -> bool:
        return self.outgoing.flow_controlled

    @property
    def hops_flow(self) -> int:
        return self.session.hops_flow

    @property
    def listen_address(self) -> tuple[str, int] | None:
        return self.session.listen_address

    def frames_done(self, count: int) -> None:
        session = self.session
        session.frames_done(count)
        if self._drained is not None and session.drained:
            self._drained.set()

    def offended(self, offence: Offence, now: float) -> None:
        close = self.session.offended(offence, now)
        if close is not None:
            self._closed(close)

    def kicked(self, kick: Kick) -> None:
        """End the link for abuse the server judged itself (a read deadline)."""
        close = self.session.kicked(kick)
        if close is not None:
            self._closed(close)

    def received_bye(self, code: int, reason: str) -> None:
        close = self.session.received_bye(code, reason)
        if close is not None:
            self._closed(close)

    def received_messages_supported(self, understood: tuple[VendorMessageId, ...]) -> None:
        self.session.received_messages_supported(understood)

    def received_features_supported(self, features: tuple[Feature, ...]) -> None:
        self.session.received_features_supported(features)

    def understands(self, message: VendorMessageId) -> bool:
        return self.session.understands(message)

    def received_hops_flow(self, hops: int) -> None:
        if hops != self.session.hops_flow:
            self.log.debug("hops flow", hops=hops, was=self.session.hops_flow)
        self.session.received_hops_flow(hops)

    def close(self, reason: str, *, bye_code: int | None = None) -> None:
        """Ask the connection to end; the first reason given is the one recorded.

        A Bye is sent only to peers that announced ``Bye-Packet``; either way the
        outgoing queue is dropped and the socket closed soon after.
        """
        close = self.session.close(reason, bye_code=bye_code)
        if close is not None:
            self._closed(close)

    def _closed(self, close: Close) -> None:
        """The session has just ended: let the writer send its Bye, within the grace
        period, or end the tasks now."""
        if close.bye_code is None:
            self._end_tasks()
            return
        # A peer that does not read would keep the writer in send_all for ever.
        deadline = trio.current_time() + BYE_GRACE_SECONDS
        self._scope.deadline = deadline
        if self._writer_scope is not None:
            self._writer_scope.deadline = deadline
        self._start_writer()

    def _end_tasks(self) -> None:
        """Cancel the reader and the writer, if one runs."""
        self._scope.cancel()
        if self._writer_scope is not None:
            self._writer_scope.cancel()

    # ------------------------------------------------------------------ the outbox's end

    @property
    def writer_busy(self) -> bool:
        """Whether a writer holds work the socket has not taken (see :class:`Link`): a
        writer task is running, or a deflate is under way."""
        return self._deferred or self._writer_running

    def act_on(self, verdict: Verdict) -> None:
        """Act on a verdict of the outgoing queue that did not queue an offer: close if
        the session says so (the outbox calls this, see :mod:`.outbox`)."""
        if verdict is not Verdict.DROPPED and verdict is not Verdict.QUEUED:
            close = self.session.act_on(verdict)
            if close is not None:
                self._closed(close)

    def check(self, now: float) -> None:
        """Let the session apply the outgoing queue's time limits and drop the deflate
        state of a link that wrote nothing lately (called about once a second)."""
        close = self.session.check(now, writing=self._deferred or self._writer_running)
        if close is not None:
            self._closed(close)

    def flush(self) -> None:
        """Send what is queued now if no writer is busy; otherwise leave it to the writer.

        The router queues a whole batch and calls this once per connection afterwards.
        When no writer holds work, nothing else is using the socket, so the queued bytes
        go straight to the non-blocking socket: no task switch and no scheduler round
        per batch, which is a good part of a router's latency. Whatever the kernel does
        not take right away is left for a writer task, which is the only code that ever
        waits on the socket.
        """
        session = self.session
        if (
            self._deferred
            or self._writer_running
            or session.closing
            or not self.outgoing.pending_messages
        ):
            return
        if self._fd < 0:
            self._start_writer()
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
        self.session.sent(count, sent)
        if sent == len(data) and not self.outgoing.pending_messages:
            return
        self._unsent = memoryview(data)[sent:]
        self._start_writer()

    def _start_writer(self) -> None:
        """Have a writer task send what the socket has not taken, then the final Bye if
        one is due: started beside the reader, or by :meth:`run` once it runs."""
        if self._writer_running:
            return
        self._writer_running = True
        if self._home is not None:
            self._start_writer_now()

    # ------------------------------------------------------------------ tasks

    async def run(self, deliver: Deliver) -> None:
        """Serve the link until it closes, for whatever reason; never raises stream errors.

        The calling task is the link's reader. A writer task, when one is needed, runs
        beside it in the same nursery, not in a nursery of the link's own: an idle
        connection is then one task with one cancel scope, and no nursery (about 900
        bytes each). :meth:`run` returns only once the writer has ended, and raises what
        a writer task failed with, as a nursery would.

        A socket is read here directly, as trio's ``SocketStream.receive_some`` would
        read it (the same checkpoints, the same errors), but without its three frames
        and its error-translating context manager, which an idle connection would
        otherwise keep for as long as it waits: about 1.5 KB.
        """
        self._home = trio.lowlevel.current_task().parent_nursery
        session = self.session
        fd = self._read_fd
        try:
            with self._scope:
                if self._writer_running:  # asked for before this ran
                    self._start_writer_now()
                try:
                    trailing, self._trailing = self._trailing, b""
                    if not trailing or await self._received(trailing, deliver):
                        while not session.closing:
                            if fd < 0:
                                data = bytes(await self.stream.receive_some(READ_SIZE))
                            else:
                                await trio.lowlevel.checkpoint_if_cancelled()
                                waited = False
                                while True:
                                    try:
                                        data = os.read(fd, READ_SIZE)
                                    except BlockingIOError:
                                        pass  # not awaited in here: the wait would keep it
                                    except OSError as exc:
                                        raise _stream_error(exc) from exc
                                    else:
                                        break
                                    waited = True
                                    await trio.lowlevel.wait_readable(fd)
                                if not waited:
                                    await trio.lowlevel.cancel_shielded_checkpoint()
                            if not data:
                                await self._drain()
                                self.close("peer closed the connection")
                            elif not await self._received(data, deliver):
                                break
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                    self.close(f"connection lost: {exc.__class__.__name__}")
                # Stop reading, but let a pending Bye be written: the writer ends this.
                await trio.sleep_forever()
        finally:
            self._home = None
            session.ended("cancelled")
            with trio.CancelScope(shield=True), trio.move_on_after(0.5):
                if self._writer_running:  # cancelled from outside, or the Bye's time is up
                    self._writer_ended = trio.Event()
                    self._end_tasks()
                    await self._writer_ended.wait()
                await self._aclose_stream()
        if self._failure is not None:
            raise self._failure

    def _start_writer_now(self) -> None:
        assert self._home is not None
        self._home.start_soon(self._write_loop)

    async def _aclose_stream(self) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await self.stream.aclose()

    async def _drain(self) -> None:
        """Wait (bounded) until the router has handled every frame read so far."""
        if not self.session.drained:
            self._drained = trio.Event()
            with trio.move_on_after(DRAIN_SECONDS):
                await self._drained.wait()

    async def _received(self, data: bytes, deliver: Deliver) -> bool:
        """Hand on the frames of one read, a piece at a time; False once the link
        ends."""
        session = self.session
        try:
            frames = session.receive_data(data)
            while True:
                if frames:
                    await self._deliver(frames, deliver)
                if session.closing or not session.more_to_frame:
                    break
                frames = session.next_frames()
        except StreamBroken as broken:
            if broken.frames:
                await self._deliver(broken.frames, deliver)
            if broken.close is not None:
                self._closed(broken.close)
            return False
        return not session.closing

    async def _deliver(self, frames: list[Frame], deliver: Deliver) -> None:
        if self.recorder is not None:
            self.recorder.record(self.id, frames)
        await deliver(self, frames)

    async def _write_loop(self) -> None:
        """Write until nothing is left, then end (or, closing, write the Bye and end
        the link)."""
        scope = self._writer_scope = trio.CancelScope(deadline=self._scope.deadline)
        if self._scope.cancel_called:
            scope.cancel()
        try:
            with scope:
                await self._write(self.stream, self.session)
        except Exception as exc:  # a bug: it costs this link, and run() raises it
            self._failure = exc
            self._end_tasks()
        finally:
            self._writer_scope = None
            self._writer_running = False
            if self._writer_ended is not None:
                self._writer_ended.set()
        if self.session.closing:
            self._end_tasks()  # the Bye is out, or cannot be: the reader ends too

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

    # ------------------------------------------------------------------ observation

    def statistics(self, now: float) -> ConnectionStatistics:
        return self.session.statistics(now)

    def log_summary(self, now: float) -> None:
        """The one line written per connection, at its end (the admin interface and
        dumps have every field)."""
        self.log.info("connection closed", **self.session.summary(now))

    def __repr__(self) -> str:
        return f"<Connection {self.id} {self.role} {self.peer_text}>"


def _stream_error(exc: OSError) -> trio.BrokenResourceError | trio.ClosedResourceError:
    """What trio's ``SocketStream`` turns a socket's error into."""
    if exc.errno == errno.EBADF:
        return trio.ClosedResourceError("this socket was already closed")
    return trio.BrokenResourceError(f"socket connection broken: {exc}")
