"""One Gnutella link after its handshake, on trio: the thin adapter over its
:class:`~gnutella_router.net.session.PeerSession`, and its reader.

Theory of operation
-------------------
Everything the link knows and decides lives in its sans-IO session (:mod:`.session`):
the capabilities, the counters, the frame decoder and the inflater, the deflater, the
outgoing queue's verdicts, the Bye sent and received, Hops Flow, the peer's vendor
lists, the abuse meter and kick, and the frames the router still owes back. This module
does the reading around it and holds the link together: the reader task, its cancel
scope, the end of stream. The writing side is the link's
:class:`~gnutella_router.net.socket_writer.SocketWriter` (:attr:`Connection.writer`),
which the router's :class:`~gnutella_router.net.outbox.Outbox` drives directly: the
writes, a writer task when one is needed, the queue's verdicts that end the peer, and
the end of the link (a Bye within its grace period, or the tasks ended at once), which
is decided there because it is a matter of what is still to be written. Whenever the
session says it has just ended (a :class:`~gnutella_router.net.session.Close`), this
module hands that to the writer (:meth:`SocketWriter.end`).

The reader reads up to 64 KiB at a time and feeds the session, which inflates if the
peer deflates and cuts the bytes into frames; each piece's frames go through the router
stage's door (:class:`~gnutella_router.stages.admission.Door`, handed to :meth:`Connection.run`)
in one batch. The door may wait (backpressure: the router's queue is full), and while it
waits the reader does not read, so the peer's TCP window closes instead of our memory
growing.

A connection is the router's :class:`~gnutella_router.routing.link.Link` to one peer:
what the router reads of the peer and tells it (offences, Bye, vendor messages, frames
done). The router never waits for a peer and never writes to one.

Cost: an idle connection is its reader alone, one task in one cancel scope with no
nursery of its own; a writer task, when the socket lags, runs beside it in the same
nursery (tasks, frames and nurseries were most of what an idle connection cost;
``scripts/bench_idle_memory.py`` measures it). A deflating link makes its deflater (a
few hundred KB in zlib) only for a write over 1 KB, sends smaller ones uncompressed
within the same stream, and drops the deflater once it has written nothing for a second
or two (see :class:`~protocol.compression.DeflateCompressor`).

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
once. trio's stream errors never leave this module or the writer's: they become close
reasons.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import structlog
import trio

from gnutella_router.control.abuse import AbuseMeter, Kick, Offence
from gnutella_router.net.deflate_pool import DeflatePool
from gnutella_router.net.outqueue import OutgoingQueue
from gnutella_router.net.session import ConnectionStatistics, PeerSession, StreamBroken
from gnutella_router.net.session import format_address as format_address
from gnutella_router.net.socket_writer import SocketWriter
from protocol.compression import DEFAULT_DEFLATE_LEVEL
from protocol.framing import Frame
from protocol.handshake import Capabilities
from protocol.vendor import Feature, VendorMessageId

__all__ = [
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


READ_SIZE = 64 * 1024
DRAIN_SECONDS = 5.0
"""How long a connection whose peer hung up waits for the router to handle what the
peer sent before it (a last query hit, its Bye) before it closes anyway."""

_connection_ids = itertools.count(1)

Deliver = Callable[["Connection", list[Frame]], Awaitable[None]]
"""Hands one read's frames to the router stage's door
(:meth:`gnutella_router.stages.admission.Door.admit`); each frame's ``source`` is the
connection id."""


class Connection:
    """A handshaken TCP peer: the router's :class:`~gnutella_router.routing.link.Link` to
    it, the I/O around its :attr:`session`: the reader here, the writes in its
    :attr:`writer`.

    Slotted, and what most connections never need (a writer task, an abuse meter, a
    logger bound to the connection) is made when it is needed: a router holds thousands
    of these, most of them idle most of the time. ``id``, ``capabilities`` and
    ``outgoing`` are the session's own, held here too: the router and the outbox read
    them for every message they route or offer, and a slot is cheaper than a property.
    """

    __slots__ = (
        "_drained",
        "_log",
        "_read_fd",
        "_scope",
        "_trailing",
        "capabilities",
        "id",
        "outgoing",
        "recorder",
        "session",
        "stream",
        "writer",
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
        self._trailing = trailing_data
        self._scope = trio.CancelScope()
        """The reader's, entered by :meth:`run`; the link's end cancels it, or gives it
        the Bye's deadline (before it is entered too)."""
        socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        self._read_fd = socket.fileno() if socket is not None else -1
        """The socket the reader reads itself (see run); -1 for other streams."""
        self.writer = SocketWriter(
            self.session,
            stream,
            fd=self._read_fd,
            reader=self._scope,
            deflate_pool=deflate_pool,
        )
        """The link's writing end, which the outbox drives: its writes and its end."""
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
            self.writer.end(close)

    def kicked(self, kick: Kick) -> None:
        """End the link for abuse the server judged itself (a read deadline)."""
        close = self.session.kicked(kick)
        if close is not None:
            self.writer.end(close)

    def received_bye(self, code: int, reason: str) -> None:
        close = self.session.received_bye(code, reason)
        if close is not None:
            self.writer.end(close)

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
        outgoing queue is dropped and the socket closed soon after (by the writer,
        :meth:`SocketWriter.close`).
        """
        self.writer.close(reason, bye_code=bye_code)

    def check(self, now: float) -> None:
        """Let the session apply the outgoing queue's time limits and drop the deflate
        state of a link that wrote nothing lately (called about once a second)."""
        writer = self.writer
        close = self.session.check(now, writing=writer.busy)
        if close is not None:
            writer.end(close)

    # ------------------------------------------------------------------ tasks

    async def run(self, deliver: Deliver) -> None:
        """Serve the link until it closes, for whatever reason; never raises stream errors.

        The calling task is the link's reader; ``deliver`` is the router stage's door.
        A writer task, when one is needed, runs beside it in the same nursery
        (:meth:`SocketWriter.attach`), not in a nursery of the link's own: an idle
        connection is then one task with one cancel scope, and no nursery (about 900
        bytes each). :meth:`run` returns only once the writer task has ended, and raises
        what a writer task failed with, as a nursery would.

        A socket is read here directly, as trio's ``SocketStream.receive_some`` would
        read it (the same checkpoints, the same errors), but without its three frames
        and its error-translating context manager, which an idle connection would
        otherwise keep for as long as it waits: about 1.5 KB.
        """
        writer = self.writer
        writer.attach(trio.lowlevel.current_task().parent_nursery)
        session = self.session
        fd = self._read_fd
        try:
            with self._scope:
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
            writer.detach()
            session.ended("cancelled")
            with trio.CancelScope(shield=True), trio.move_on_after(0.5):
                await writer.stopped()
                await self._aclose_stream()
        if writer.failure is not None:
            raise writer.failure

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
                self.writer.end(broken.close)
            return False
        return not session.closing

    async def _deliver(self, frames: list[Frame], deliver: Deliver) -> None:
        if self.recorder is not None:
            self.recorder.record(self.id, frames)
        await deliver(self, frames)

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
