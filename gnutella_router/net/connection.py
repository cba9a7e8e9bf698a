"""One Gnutella link after its handshake: a reader, a writer when needed, and a bounded
outgoing queue.

Theory of operation
-------------------
The reader reads up to 64 KiB at a time, inflates if the peer deflates, cuts the bytes
into frames and hands each read's frames to the server in one batch. The server's
``deliver`` may wait (backpressure: the router's queue is full), and while it waits the
reader does not read, so the peer's TCP window closes instead of our memory growing.

A connection is the router's :class:`~gnutella_router.routing.link.Link` to one peer, and
what the router's :class:`~gnutella_router.net.outbox.Outbox` writes to. The router
never waits for a peer: the outbox offers messages to the connection's outgoing queue
and returns at once; a queue's verdict that ends the peer ("too slow, close it") is
acted on here (:meth:`Connection.act_on`), not by the router. When the router ends a
batch, the outbox calls :meth:`Connection.flush`, which joins everything queued into one
write, deflates it with one sync flush if negotiated, and offers it to the non-blocking
socket straight away (docs/benchmarks.md measures what this saves over leaving every
write to a task). Only what the kernel does not take is left to a writer task, started
then beside the reader and ended once the queue is empty: the writer is the only code
that ever waits on the socket, and an idle connection has no writer at all, only its
reader, one task in one cancel scope with no nursery of its own (tasks, frames and
nurseries were most of what an idle connection cost; ``scripts/bench_idle_memory.py``
measures it). With a
:class:`~gnutella_router.net.deflate_pool.DeflatePool` (``network.deflate_threads``),
the deflates of one batch's direct writes run side by side on several cores before the
writes are made. A deflating link makes its deflater (a few hundred KB in zlib) only for
a write over 1 KB, sends smaller ones uncompressed within the same stream, and drops the
deflater once it has written nothing for a second or two (see
:class:`~protocol.compression.DeflateCompressor`).

End of stream: a peer that hangs up has often just sent its last messages (gtk-gnutella
sends its Bye and closes at once). The reader stops, but the connection stays open for
the router until the router has finished with every frame read before the end
(:meth:`Connection.frames_done` counts them), so a last query hit is still routed and a
Bye still recorded with its code; only then, or after :data:`DRAIN_SECONDS`, is it
closed.

Closing: :meth:`Connection.close` records the first reason given. If a Bye is due and
the peer announced ``Bye-Packet``, the queue is cleared, the Bye is written (bounded by
a short grace period) and then the socket is closed; otherwise the socket is closed at
once. trio's stream errors never leave this module: they become close reasons.
"""

from __future__ import annotations

import contextlib
import dataclasses
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
from gnutella_router.net.outqueue import OutgoingQueue, OutgoingQueueStatistics, Verdict
from protocol.codec import encode_message
from protocol.compression import DeflateCompressor, DeflateDecompressor
from protocol.errors import CompressionError, DeflateRatioError, RemoteProtocolError
from protocol.framing import Frame, FrameDecoder, FrameTooLargeError
from protocol.handshake import Capabilities
from protocol.messages import Bye, Message, random_guid
from protocol.vendor import NO_HOPS_FLOW, Feature, VendorMessageId


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
MAX_LISTED_BY_PEER = 64
"""How many of the vendor messages and features a peer lists are kept (for dumps): a
peer's lists are its business, our memory is ours."""
DRAIN_SECONDS = 5.0
"""How long a connection whose peer hung up waits for the router to handle what the
peer sent before it (a last query hit, its Bye) before it closes anyway."""

_connection_ids = itertools.count(1)

Deliver = Callable[["Connection", list[Frame]], Awaitable[None]]
"""Hands one read's frames to the router; each frame's ``source`` is the connection id."""


@dataclasses.dataclass(frozen=True, slots=True)
class ConnectionStatistics:
    """A connection at one instant, as dumps and the profiler see it."""

    id: int
    peer: str
    role: str
    user_agent: str | None
    ultrapeer: bool | None
    bye_packet: bool
    pong_caching: bool
    ggep: bool
    deflate_in: bool
    deflate_out: bool
    listen_address: str | None
    age_seconds: float
    messages_in: int
    bytes_in: int
    messages_out: int
    bytes_out: int
    malformed_in: int
    hops_flow: int
    """Queries of this many hops or more are not sent to the peer (255: no limit)."""
    vendor_messages: tuple[str, ...] | None
    """What the peer's Messages Supported listed (``BEAR/4v1``...); None before it."""
    features: tuple[str, ...] | None
    """What the peer's Features Supported listed (``TLS!/1``...); None before it."""
    outgoing: OutgoingQueueStatistics
    closing: bool
    close_reason: str | None


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Connection:
    """A handshaken TCP peer: the router's :class:`~gnutella_router.routing.link.Link` to it.

    Slotted, and what most connections never need (a writer task, an abuse meter, a
    logger bound to the connection) is made when it is needed: a router holds thousands
    of these, most of them idle most of the time.
    """

    __slots__ = (
        "_abuse",
        "_abuse_meter",
        "_compressor",
        "_decoder",
        "_decompressor",
        "_deferred",
        "_deflate_pool",
        "_delivered",
        "_done",
        "_drained",
        "_failure",
        "_fd",
        "_final",
        "_home",
        "_log",
        "_read_fd",
        "_scope",
        "_trailing",
        "_unsent",
        "_writer_ended",
        "_writer_running",
        "_writer_scope",
        "bye_code_received",
        "bye_code_sent",
        "bytes_in",
        "bytes_out",
        "capabilities",
        "close_reason",
        "closing",
        "connected_at",
        "hops_flow",
        "id",
        "kick",
        "malformed_in",
        "messages_in",
        "messages_out",
        "outgoing",
        "peer",
        "peer_features",
        "peer_text",
        "peer_vendor_messages",
        "recorder",
        "role",
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
    ) -> None:
        """``abuse`` makes the meter that counts the peer's offences and decides when it
        is kicked (``None``: never kicked); it is called at the peer's first offence."""
        self.id = next(_connection_ids)
        self.recorder = recorder
        """Gets every read's frames when a trace is being recorded; ``None`` otherwise."""
        self._abuse = abuse
        self._abuse_meter: AbuseMeter | None = None
        self.kick: Kick | None = None
        """Why the peer was kicked, if it was."""
        self.stream = stream
        self.peer = peer
        self.peer_text = format_address(*peer)
        self.role = role
        self.capabilities = capabilities
        self.outgoing = outgoing
        self._log = log
        self._compressor = DeflateCompressor() if compress_outgoing else None
        self._decompressor = DeflateDecompressor() if decompress_incoming else None
        self._deflate_pool = deflate_pool
        self._deferred = False
        """A direct write waits for its deflate at the end of the router's batch."""
        self._decoder = FrameDecoder(max_payload=max_payload, source=self.id)
        self._trailing = trailing_data
        self._scope = trio.CancelScope()
        """The reader's, entered by :meth:`run`; :meth:`close` cancels it, or gives it
        the Bye's deadline (before it is entered too)."""
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
        self._final: bytes | None = None
        self._unsent: bytes | memoryview = b""
        socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        self._read_fd = socket.fileno() if socket is not None else -1
        """The socket the reader reads itself (see run); -1 for other streams."""
        self._fd = self._read_fd if DIRECT_WRITES else -1
        """The socket for direct writes (see flush); -1 for other streams."""
        self.connected_at = trio.current_time()
        self.closing = False
        self.close_reason: str | None = None
        self.bye_code_sent: int | None = None
        self.bye_code_received: int | None = None
        self.messages_in = 0
        self.bytes_in = 0
        self.messages_out = 0
        self.bytes_out = 0
        self.malformed_in = 0
        self.hops_flow = NO_HOPS_FLOW
        self.peer_vendor_messages: tuple[VendorMessageId, ...] | None = None
        self.peer_features: tuple[Feature, ...] | None = None
        self._delivered = 0
        """Frames handed to the router; it reports back with :meth:`frames_done`."""
        self._done = 0
        self._drained: trio.Event | None = None
        """Set when the router has finished with every frame, while the reader waits."""

    @property
    def log(self) -> structlog.typing.FilteringBoundLogger:
        """The server's logger bound to this connection, made for each use: it is used
        a few times in a connection's life, and keeping one bound logger per connection
        would cost every idle connection its context dict."""
        return self._log.bind(conn=self.id, peer=self.peer_text, role=self.role)

    # ------------------------------------------------------------------ the router's link

    def frames_done(self, count: int) -> None:
        self._done += count
        if self._drained is not None and self._done >= self._delivered:
            self._drained.set()

    @property
    def flow_controlled(self) -> bool:
        return self.outgoing.flow_controlled

    @property
    def partial_bytes(self) -> int:
        """Bytes of a message the peer has begun and not finished (the read deadlines)."""
        return self._decoder.buffered

    @property
    def frames_unfinished(self) -> int:
        """Frames read from the peer that the router has not finished with yet."""
        return self._delivered - self._done

    @property
    def listen_address(self) -> tuple[str, int] | None:
        """Where the peer accepts connections: what it announced, or for a peer we
        dialled, the address we dialled."""
        announced = self.capabilities.listen_address
        return announced or (self.peer if self.role == "outgoing" else None)

    def offended(self, offence: Offence, now: float) -> None:
        if offence is Offence.MALFORMED:
            self.malformed_in += 1
        if self._abuse is None or self.closing:
            return
        meter = self._abuse_meter
        if meter is None:  # the first offence: a fresh meter counts it as it would have
            meter = self._abuse_meter = self._abuse()
        kick = meter.offend(offence, now, self.messages_in)
        if kick is not None:
            self.kick = kick
            self.close(kick.reason, bye_code=kick.bye_code)

    def received_bye(self, code: int, reason: str) -> None:
        self.bye_code_received = code
        self.close(f"peer said Bye {code}: {reason}"[:200])

    def received_messages_supported(self, understood: tuple[VendorMessageId, ...]) -> None:
        if self.peer_vendor_messages is None:  # the first one counts, as in gtk-gnutella
            self.peer_vendor_messages = understood[:MAX_LISTED_BY_PEER]

    def received_features_supported(self, features: tuple[Feature, ...]) -> None:
        if self.peer_features is None:
            self.peer_features = features[:MAX_LISTED_BY_PEER]

    def understands(self, message: VendorMessageId) -> bool:
        return self.peer_vendor_messages is not None and message in self.peer_vendor_messages

    def received_hops_flow(self, hops: int) -> None:
        if hops != self.hops_flow:
            self.log.debug("hops flow", hops=hops, was=self.hops_flow)
        self.hops_flow = hops

    @property
    def writer_busy(self) -> bool:
        """Whether a writer holds work the socket has not taken (see :class:`Link`): a
        writer task is running, or a deflate is under way."""
        return self._deferred or self._writer_running

    def flush(self) -> None:
        """Send what is queued now if no writer is busy; otherwise leave it to the writer.

        The router queues a whole batch and calls this once per connection afterwards.
        When no writer holds work, nothing else is using the socket, so the queued bytes
        go straight to the non-blocking socket: no task switch and no scheduler round
        per batch, which is a good part of a router's latency. Whatever the kernel does
        not take right away is left for a writer task, which is the only code that ever
        waits on the socket.
        """
        if (
            self._deferred
            or self._writer_running
            or self.closing
            or not self.outgoing.pending_messages
        ):
            return
        if self._fd < 0:
            self._start_writer()
            return
        chunks = self.outgoing.take(WRITE_SIZE)
        data = b"".join(chunks)
        compressor = self._compressor
        if compressor is None:
            self._write_now(data, len(chunks))
        elif self._deflate_pool is not None and self._deflate_pool.defer(
            compressor, data, functools.partial(self._write_deflated, len(chunks))
        ):
            self._deferred = True  # no writer is started: the socket is still ours
        else:
            self._write_now(compressor.compress(data), len(chunks))

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
        self.messages_out += count
        self.bytes_out += sent
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

    def act_on(self, verdict: Verdict) -> None:
        """Act on a verdict of the outgoing queue that did not queue an offer: close if
        it says so (the outbox calls this, see :mod:`.outbox`)."""
        if verdict is not Verdict.DROPPED and verdict is not Verdict.QUEUED:
            self._close_for(verdict)

    def check(self, now: float) -> None:
        """Let the outgoing queue apply its time limits, and drop the deflate state of a
        link that wrote nothing since the last check (called about once a second)."""
        self.act_on(self.outgoing.check(now))
        compressor = self._compressor
        if compressor is not None and not self._deferred and not self._writer_running:
            compressor.release_if_idle()

    def _close_for(self, verdict: Verdict) -> None:
        reason = self.outgoing.close_reason or "slow peer"
        if verdict is Verdict.BYE_AND_CLOSE:
            self.close(reason, bye_code=self.outgoing.close_code or 502)
        else:
            self.close(reason)

    def close(self, reason: str, *, bye_code: int | None = None) -> None:
        """Ask the connection to end; the first reason given is the one recorded.

        A Bye is sent only to peers that announced ``Bye-Packet``; either way the
        outgoing queue is dropped and the socket closed soon after.
        """
        if self.closing:
            return
        self.closing = True
        self.close_reason = reason
        self.outgoing.clear()
        if bye_code is not None and self.capabilities.bye_packet:
            bye = Message(random_guid(), 1, 0, Bye(bye_code, _bye_text(reason)))
            self._final = encode_message(bye)
            self.bye_code_sent = bye_code
            # A peer that does not read would keep the writer in send_all for ever.
            deadline = trio.current_time() + BYE_GRACE_SECONDS
            self._scope.deadline = deadline
            if self._writer_scope is not None:
                self._writer_scope.deadline = deadline
            self._start_writer()
        else:
            self._end_tasks()

    def _end_tasks(self) -> None:
        """Cancel the reader and the writer, if one runs."""
        self._scope.cancel()
        if self._writer_scope is not None:
            self._writer_scope.cancel()

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
        fd = self._read_fd
        try:
            with self._scope:
                if self._writer_running:  # asked for before this ran
                    self._start_writer_now()
                try:
                    trailing, self._trailing = self._trailing, b""
                    if not trailing or await self._received(trailing, deliver):
                        while not self.closing:
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
            self.closing = True
            if self.close_reason is None:
                self.close_reason = "cancelled"
            self.outgoing.clear()
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
        if self._done < self._delivered:
            self._drained = trio.Event()
            with trio.move_on_after(DRAIN_SECONDS):
                await self._drained.wait()

    async def _received(self, data: bytes, deliver: Deliver) -> bool:
        self.bytes_in += len(data)
        decompressor = self._decompressor
        if decompressor is None:
            return await self._frame(data, deliver)
        try:
            decompressor.receive_data(data)
            while chunk := decompressor.read():
                if not await self._frame(chunk, deliver):
                    return False
        except DeflateRatioError as exc:
            # A decompression bomb: an offence one occurrence is enough for.
            if self._abuse is not None:
                self.kick = Kick(Offence.DEFLATE_RATIO, 1.0, exc.reason)
            self.close(exc.reason, bye_code=exc.bye_code)
            return False
        except CompressionError as exc:
            self.close(exc.reason, bye_code=exc.bye_code)
            return False
        return True

    async def _frame(self, data: bytes, deliver: Deliver) -> bool:
        try:
            frames = self._decoder.receive_data(data)
        except FrameTooLargeError as exc:
            if exc.frames:
                self.messages_in += len(exc.frames)
                self._delivered += len(exc.frames)
                if self.recorder is not None:
                    self.recorder.record(self.id, exc.frames)
                await deliver(self, list(exc.frames))
            self.close(exc.reason, bye_code=exc.bye_code)
            return False
        except RemoteProtocolError as exc:
            self.close(exc.reason, bye_code=exc.bye_code)
            return False
        if frames:
            self.messages_in += len(frames)
            self._delivered += len(frames)
            if self.recorder is not None:
                self.recorder.record(self.id, frames)
            await deliver(self, frames)
        return not self.closing

    async def _write_loop(self) -> None:
        """Write until nothing is left, then end (or, closing, write the Bye and end
        the link)."""
        stream = self.stream
        outgoing = self.outgoing
        compressor = self._compressor
        scope = self._writer_scope = trio.CancelScope(deadline=self._scope.deadline)
        if self._scope.cancel_called:
            scope.cancel()
        try:
            with scope:
                await self._write(stream, outgoing, compressor)
        except Exception as exc:  # a bug: it costs this link, and run() raises it
            self._failure = exc
            self._end_tasks()
        finally:
            self._writer_scope = None
            self._writer_running = False
            if self._writer_ended is not None:
                self._writer_ended.set()
        if self.closing:
            self._end_tasks()  # the Bye is out, or cannot be: the reader ends too

    async def _write(
        self,
        stream: trio.abc.Stream,
        outgoing: OutgoingQueue,
        compressor: DeflateCompressor | None,
    ) -> None:
        try:
            while not self.closing:
                if self._unsent:
                    # The tail of a direct write (see flush) goes first.
                    unsent, self._unsent = self._unsent, b""
                    await stream.send_all(unsent)
                    self.bytes_out += len(unsent)
                    continue
                chunks = outgoing.take(WRITE_SIZE)
                if not chunks:
                    return  # flush writes directly again
                data = b"".join(chunks)
                if compressor is not None:
                    data = compressor.compress(data)
                await stream.send_all(data)
                self.messages_out += len(chunks)
                self.bytes_out += len(data)
            if self._final is not None:
                final = self._final
                if compressor is not None:
                    final = compressor.compress(final)
                await stream.send_all(final)
                self.messages_out += 1
                self.bytes_out += len(final)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self.close(f"connection lost: {exc.__class__.__name__}")

    # ------------------------------------------------------------------ observation

    def statistics(self, now: float) -> ConnectionStatistics:
        caps = self.capabilities
        listen = format_address(*self.listen_address) if self.listen_address else None
        return ConnectionStatistics(
            id=self.id,
            peer=self.peer_text,
            role=self.role,
            user_agent=caps.user_agent,
            ultrapeer=caps.ultrapeer,
            bye_packet=caps.bye_packet,
            pong_caching=caps.pong_caching,
            ggep=caps.ggep,
            deflate_in=self._decompressor is not None,
            deflate_out=self._compressor is not None,
            listen_address=listen,
            age_seconds=now - self.connected_at,
            messages_in=self.messages_in,
            bytes_in=self.bytes_in,
            messages_out=self.messages_out,
            bytes_out=self.bytes_out,
            malformed_in=self.malformed_in,
            hops_flow=self.hops_flow,
            vendor_messages=_names(self.peer_vendor_messages),
            features=_names(self.peer_features),
            outgoing=self.outgoing.statistics(now),
            closing=self.closing,
            close_reason=self.close_reason,
        )

    def log_summary(self, now: float) -> None:
        """The one line written per connection, at its end: what happened, with the
        counters and Bye codes that stayed zero or absent left out, so it reads at a
        glance (the admin interface and dumps have every field)."""
        stats = self.outgoing.statistics(now)
        fields: dict[str, object] = {
            "messages_in": self.messages_in,
            "bytes_in": self.bytes_in,
            "messages_out": self.messages_out,
            "bytes_out": self.bytes_out,
            "malformed_in": self.malformed_in,
            "dropped_out": {reason: n for reason, n in stats.dropped.items() if n},
            "bye_sent": self.bye_code_sent,
            "bye_received": self.bye_code_received,
            "user_agent": self.capabilities.user_agent,
        }
        self.log.info(
            "connection closed",
            reason=self.close_reason,
            duration=round(now - self.connected_at, 3),
            **{key: value for key, value in fields.items() if value},
        )

    def __repr__(self) -> str:
        return f"<Connection {self.id} {self.role} {self.peer_text}>"


def _stream_error(exc: OSError) -> trio.BrokenResourceError | trio.ClosedResourceError:
    """What trio's ``SocketStream`` turns a socket's error into."""
    if exc.errno == errno.EBADF:
        return trio.ClosedResourceError("this socket was already closed")
    return trio.BrokenResourceError(f"socket connection broken: {exc}")


def _names(
    items: tuple[VendorMessageId, ...] | tuple[Feature, ...] | None,
) -> tuple[str, ...] | None:
    return None if items is None else tuple(map(str, items))


def _bye_text(reason: str) -> str:
    text = " ".join(reason.replace("\x00", " ").split())
    return text[:200]
