"""What one Gnutella link knows and decides after its handshake, with no I/O.

Theory of operation
-------------------
A :class:`PeerSession` is a link's state machine in the manner of h11's ``Connection``:
it is fed the bytes the peer sent and hands back frames; it is told what the router saw
of the peer and answers with decisions; it is asked for the bytes to write and told
what was written. It never reads a clock (``now`` is passed in), never touches a socket
and never waits, so every rule of a link is tested by driving it with bytes
(``tests/gnutella_router/net/test_session.py``). The trio adapter,
:class:`gnutella_router.net.connection.Connection`, does the reading and the reader's
cancel scope, and its :class:`~gnutella_router.net.socket_writer.SocketWriter` the
writing, the writer task and the link's end; together they act on what the session
decides.

Reading. :meth:`PeerSession.receive_data` counts the bytes, inflates them if the peer
deflates, cuts them into frames and counts those (``messages_in``); every frame handed
out is owed back by the router (:meth:`PeerSession.frames_done`), which is how a link
whose peer hung up knows when the router has finished with the last of its messages
(:attr:`PeerSession.drained`). An inflating link frames one inflated piece (256 KiB at
most) per call and :meth:`PeerSession.next_frames` the rest, so the adapter can hand on
each piece, and wait for the router's queue, before the next is inflated. A stream that
cannot be read on (a corrupt deflate stream, a decompression bomb, a header announcing
a payload over the limit) closes the session and raises :class:`StreamBroken`, which
carries the :class:`Close` and the whole frames that came before the break.

Deciding. The router reports offences (the abuse meter, made at the first one, may
kick the peer), the peer's Bye, its Hops Flow and its Messages/Features Supported; the
outbox reports the outgoing queue's verdicts (:meth:`PeerSession.act_on`). Every method
that may end the link returns a :class:`Close` when this very call ended it (``None``
otherwise): the adapter then either lets its writer send the final Bye, within a grace
period, or ends its tasks at once. Only the first reason given is recorded.

Writing. :meth:`PeerSession.data_to_send` takes one write's worth from the outgoing
queue, joined and deflated if negotiated, with the number of messages in it; once the
session is closing it hands out the final Bye instead (once), deflated in its turn, so
the Bye follows in the deflate stream whatever was taken before it, even a write whose
deflate the adapter left to a :class:`~gnutella_router.net.deflate_pool.DeflatePool`
(``deflate=False`` and :meth:`PeerSession.deflate`). :meth:`PeerSession.sent` counts
what the socket took.

Cost: a router holds thousands of sessions, most of them idle, so the class is slotted
and what most links never need (the abuse meter, zlib's state) is made when first
needed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from gnutella_router.control.abuse import AbuseMeter, Kick, Offence
from gnutella_router.net.outqueue import OutgoingQueue, OutgoingQueueStatistics, Verdict
from protocol.codec import encode_message
from protocol.compression import DEFAULT_DEFLATE_LEVEL, DeflateCompressor, DeflateDecompressor
from protocol.errors import CompressionError, DeflateRatioError, RemoteProtocolError
from protocol.framing import Frame, FrameDecoder, FrameTooLargeError
from protocol.handshake import Capabilities
from protocol.messages import Bye, Message, random_guid
from protocol.vendor import NO_HOPS_FLOW, Feature, VendorMessageId

MAX_LISTED_BY_PEER = 64
"""How many of the vendor messages and features a peer lists are kept (for dumps): a
peer's lists are its business, our memory is ours."""
BYE_TEXT_LIMIT = 200
"""Most characters of a close reason sent as a Bye's text, or kept from a peer's."""


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclasses.dataclass(frozen=True, slots=True)
class Close:
    """The session has just ended: what the adapter must do about it."""

    reason: str
    bye_code: int | None
    """The code of the Bye that :meth:`PeerSession.data_to_send` hands out next: write
    it (within a grace period), then close the socket. None: no Bye is due (none was
    asked for, or the peer did not announce ``Bye-Packet``): close the socket now."""


class StreamBroken(Exception):
    """The peer's bytes cannot be read on: the session has closed (:attr:`close`, None
    if it was closing already); the whole frames that came before the break
    (:attr:`frames`) are still to be handed on, and are counted as read."""

    def __init__(self, reason: str, close: Close | None, frames: list[Frame]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.close = close
        self.frames = frames


@dataclasses.dataclass(frozen=True, slots=True)
class ConnectionStatistics:
    """A link at one instant, as dumps and the profiler see it."""

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


class PeerSession:
    """One handshaken peer's link state and decisions, fed bytes and ``now`` (see the
    module). Its counters and state are read by the adapter and observers and written
    only by its own methods."""

    __slots__ = (
        "_abuse",
        "_abuse_meter",
        "_compressor",
        "_decoder",
        "_decompressor",
        "_delivered",
        "_done",
        "_final",
        "_kick",
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
        "malformed_in",
        "messages_in",
        "messages_out",
        "outgoing",
        "peer",
        "peer_features",
        "peer_text",
        "peer_vendor_messages",
        "role",
    )

    def __init__(
        self,
        *,
        id: int,
        peer: tuple[str, int],
        role: str,
        capabilities: Capabilities,
        outgoing: OutgoingQueue,
        compress_outgoing: bool,
        decompress_incoming: bool,
        max_payload: int,
        now: float,
        abuse: Callable[[], AbuseMeter] | None = None,
        deflate_level: int = DEFAULT_DEFLATE_LEVEL,
    ) -> None:
        """``abuse`` makes the meter that counts the peer's offences and decides when it
        is kicked (``None``: never kicked); it is called at the peer's first offence.
        ``now`` is when the link came up; ``deflate_level`` is zlib's level for what we
        send, when ``compress_outgoing``."""
        self.id = id
        """The link id: every frame read carries it (:attr:`Frame.source`)."""
        self.peer = peer
        self.peer_text = format_address(*peer)
        self.role = role
        """``"incoming"`` or ``"outgoing"``: who dialled."""
        self.capabilities = capabilities
        """What the peer announced in its handshake."""
        self.outgoing = outgoing
        """The bounded queue the outbox offers this peer's messages to."""
        self.connected_at = now
        self._abuse = abuse
        self._abuse_meter: AbuseMeter | None = None
        self._kick: Kick | None = None
        self._compressor = DeflateCompressor(deflate_level) if compress_outgoing else None
        self._decompressor = DeflateDecompressor() if decompress_incoming else None
        self._decoder = FrameDecoder(max_payload=max_payload, source=id)
        self._final: bytes | None = None
        """The Bye still to hand out, encoded, once closing."""
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
        """Frames handed out; the router reports back with :meth:`frames_done`."""
        self._done = 0

    # ------------------------------------------------------------------ reading

    def receive_data(self, data: bytes) -> list[Frame]:
        """Count ``data`` as read and return the frames it completes, in stream order.

        On an inflating link, only the first inflated piece is framed here: call
        :meth:`next_frames` while :attr:`more_to_frame` for the rest.

        Raises:
            StreamBroken: the stream cannot be read on; the session is closed.
        """
        self.bytes_in += len(data)
        decompressor = self._decompressor
        if decompressor is None:
            return self._frame(data)
        try:
            decompressor.receive_data(data)
        except CompressionError as exc:
            raise self._broken(exc.reason, exc.bye_code) from exc
        return self.next_frames()

    @property
    def more_to_frame(self) -> bool:
        """Whether bytes already received wait to be inflated (see :meth:`next_frames`)."""
        decompressor = self._decompressor
        return decompressor is not None and decompressor.has_pending and not self.closing

    def next_frames(self) -> list[Frame]:
        """Inflate the next piece of what was received and return the frames it
        completes (none, when the piece ends inside a message).

        Raises:
            StreamBroken: as :meth:`receive_data`.
        """
        decompressor = self._decompressor
        if decompressor is None or self.closing:
            return []
        try:
            chunk = decompressor.read()
        except DeflateRatioError as exc:
            # A decompression bomb: an offence one occurrence is enough for.
            if self._abuse is not None:
                self._kick = Kick(Offence.DEFLATE_RATIO, 1.0, exc.reason)
            raise self._broken(exc.reason, exc.bye_code) from exc
        except CompressionError as exc:
            raise self._broken(exc.reason, exc.bye_code) from exc
        return self._frame(chunk) if chunk else []

    def _frame(self, data: bytes) -> list[Frame]:
        try:
            frames = self._decoder.receive_data(data)
        except FrameTooLargeError as exc:
            before = list(exc.frames)
            self._handed_out(len(before))
            raise self._broken(exc.reason, exc.bye_code, before) from exc
        except RemoteProtocolError as exc:
            raise self._broken(exc.reason, exc.bye_code) from exc
        if frames:
            self._handed_out(len(frames))
        return frames

    def _handed_out(self, count: int) -> None:
        self.messages_in += count
        self._delivered += count

    def _broken(
        self, reason: str, bye_code: int | None, frames: list[Frame] | None = None
    ) -> StreamBroken:
        return StreamBroken(reason, self.close(reason, bye_code=bye_code), frames or [])

    @property
    def partial_bytes(self) -> int:
        """Bytes of a message the peer has begun and not finished (the read deadlines)."""
        return self._decoder.buffered

    # ------------------------------------------------------------------ the router's reports

    def frames_done(self, count: int) -> None:
        """The router has finished with ``count`` more of the frames handed out."""
        self._done += count

    @property
    def frames_unfinished(self) -> int:
        """Frames handed out that the router has not finished with yet."""
        return self._delivered - self._done

    @property
    def drained(self) -> bool:
        """Whether the router has finished with every frame handed out."""
        return self._done >= self._delivered

    def offended(self, offence: Offence, now: float) -> Close | None:
        """The router dropped a message of the peer for ``offence``: count it; a
        :class:`Close` when the abuse meter kicks the peer for it."""
        if offence is Offence.MALFORMED:
            self.malformed_in += 1
        if self._abuse is None or self.closing:
            return None
        meter = self._abuse_meter
        if meter is None:  # the first offence: a fresh meter counts it as it would have
            meter = self._abuse_meter = self._abuse()
        kick = meter.offend(offence, now, self.messages_in)
        return None if kick is None else self.kicked(kick)

    def kicked(self, kick: Kick) -> Close | None:
        """End the link for abuse (the server's read deadlines judge some offences
        themselves): the kick is recorded, for the ban that follows."""
        if self.closing:
            return None
        self._kick = kick
        return self.close(kick.reason, bye_code=kick.bye_code)

    @property
    def kick(self) -> Kick | None:
        """Why the peer was kicked, if it was."""
        return self._kick

    def received_bye(self, code: int, reason: str) -> Close | None:
        """The peer said Bye: its code is remembered and the link ends, with no Bye back."""
        self.bye_code_received = code
        return self.close(f"peer said Bye {code}: {reason}"[:BYE_TEXT_LIMIT])

    def received_messages_supported(self, understood: tuple[VendorMessageId, ...]) -> None:
        if self.peer_vendor_messages is None:  # the first one counts, as in gtk-gnutella
            self.peer_vendor_messages = understood[:MAX_LISTED_BY_PEER]

    def received_features_supported(self, features: tuple[Feature, ...]) -> None:
        if self.peer_features is None:
            self.peer_features = features[:MAX_LISTED_BY_PEER]

    def understands(self, message: VendorMessageId) -> bool:
        return self.peer_vendor_messages is not None and message in self.peer_vendor_messages

    def received_hops_flow(self, hops: int) -> None:
        self.hops_flow = hops

    @property
    def listen_address(self) -> tuple[str, int] | None:
        """Where the peer accepts connections: what it announced, or for a peer we
        dialled, the address we dialled."""
        announced = self.capabilities.listen_address
        return announced or (self.peer if self.role == "outgoing" else None)

    # ------------------------------------------------------------------ the outgoing queue

    def act_on(self, verdict: Verdict) -> Close | None:
        """Act on a verdict of the outgoing queue that did not queue an offer: a verdict
        that ends the peer closes the session (with the queue's reason and Bye code)."""
        if verdict is Verdict.DROPPED or verdict is Verdict.QUEUED:
            return None
        reason = self.outgoing.close_reason or "slow peer"
        if verdict is Verdict.BYE_AND_CLOSE:
            return self.close(reason, bye_code=self.outgoing.close_code or 502)
        return self.close(reason)

    def check(self, now: float, *, writing: bool = False) -> Close | None:
        """Let the outgoing queue apply its time limits, and drop the deflate state of a
        link that wrote nothing since the last check, unless a write is under way
        (``writing``). Called about once a second."""
        close = self.act_on(self.outgoing.check(now))
        compressor = self._compressor
        if compressor is not None and not writing:
            compressor.release_if_idle()
        return close

    @property
    def flow_controlled(self) -> bool:
        """Whether the peer's queue is clogged and shedding."""
        return self.outgoing.flow_controlled

    @property
    def pending_messages(self) -> int:
        """Messages waiting in the outgoing queue."""
        return self.outgoing.pending_messages

    @property
    def pending_bytes(self) -> int:
        """Bytes waiting in the outgoing queue."""
        return self.outgoing.pending_bytes

    def outgoing_statistics(self, now: float) -> OutgoingQueueStatistics:
        """The outgoing queue's statistics alone (cheaper than :meth:`statistics`)."""
        return self.outgoing.statistics(now)

    # ------------------------------------------------------------------ writing

    @property
    def compressor(self) -> DeflateCompressor | None:
        """The outgoing deflate stream, if negotiated: for a deflate pool to run
        :meth:`deflate`'s work on another thread."""
        return self._compressor

    def data_to_send(self, limit: int, *, deflate: bool = True) -> tuple[bytes, int]:
        """The next write and the number of messages in it; ``(b"", 0)`` when nothing
        is due.

        Open: up to ``limit`` bytes of queued messages (at least one, however large),
        joined. Closing: the final Bye, once, if one is due, and nothing else. Deflated
        if negotiated, unless ``deflate`` is False: the caller then deflates the bytes
        itself (:meth:`deflate`, or a deflate pool), before taking any more.
        """
        if self.closing:
            final = self._final
            if final is None:
                return b"", 0
            self._final = None
            return (self.deflate(final) if deflate else final), 1
        chunks = self.outgoing.take(limit)
        if not chunks:
            return b"", 0
        data = b"".join(chunks)
        compressor = self._compressor
        if deflate and compressor is not None:
            data = compressor.compress(data)
        return data, len(chunks)

    def deflate(self, data: bytes) -> bytes:
        """``data`` through the outgoing deflate stream (as it is, without one)."""
        compressor = self._compressor
        return data if compressor is None else compressor.compress(data)

    def sent(self, count: int, nbytes: int) -> None:
        """The socket took ``nbytes`` more bytes, which began ``count`` more messages."""
        self.messages_out += count
        self.bytes_out += nbytes

    # ------------------------------------------------------------------ ending

    def close(self, reason: str, *, bye_code: int | None = None) -> Close | None:
        """End the link; the first reason given is the one recorded (None when already
        closing).

        The outgoing queue is dropped. A Bye of ``bye_code`` is due only to peers that
        announced ``Bye-Packet``; it is then what :meth:`data_to_send` hands out next.
        """
        if self.closing:
            return None
        self.closing = True
        self.close_reason = reason
        self.outgoing.clear()
        if bye_code is None or not self.capabilities.bye_packet:
            return Close(reason, None)
        bye = Message(random_guid(), 1, 0, Bye(bye_code, _bye_text(reason)))
        self._final = encode_message(bye)
        self.bye_code_sent = bye_code
        return Close(reason, bye_code)

    def ended(self, reason: str) -> None:
        """The socket is closed: nothing more is sent. ``reason`` is recorded if none
        was; whatever is still queued (offered after the close) is dropped."""
        self.closing = True
        if self.close_reason is None:
            self.close_reason = reason
        self._final = None
        self.outgoing.clear()

    # ------------------------------------------------------------------ observation

    def statistics(self, now: float) -> ConnectionStatistics:
        caps = self.capabilities
        listen = self.listen_address
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
            listen_address=format_address(*listen) if listen else None,
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

    def summary(self, now: float) -> dict[str, object]:
        """The fields of the one line logged per link at its end: the counters and Bye
        codes that stayed zero or absent are left out, so it reads at a glance."""
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
        return {
            "reason": self.close_reason,
            "duration": round(now - self.connected_at, 3),
            **{key: value for key, value in fields.items() if value},
        }


def _names(
    items: tuple[VendorMessageId, ...] | tuple[Feature, ...] | None,
) -> tuple[str, ...] | None:
    return None if items is None else tuple(map(str, items))


def _bye_text(reason: str) -> str:
    text = " ".join(reason.replace("\x00", " ").split())
    return text[:BYE_TEXT_LIMIT]
