"""The two good peers and the routing checks between them: what tells a router that
only survives from one that keeps serving its honest peers while it is fuzzed.
"""

from __future__ import annotations

import contextlib
import dataclasses

import trio

from gnutella_router.net.handshaking import next_handshake_event
from protocol.codec import encode_message
from protocol.compression import DeflateCompressor, DeflateDecompressor
from protocol.constants import HEADER_SIZE, MessageType
from protocol.errors import CompressionError, HandshakeError, RemoteProtocolError
from protocol.framing import Frame, FrameDecoder
from protocol.handshake import (
    HandshakeComplete,
    HandshakeRejected,
    Initiator,
)
from protocol.messages import (
    Bye,
    Message,
    Pong,
    Query,
    QueryHit,
    QueryHitResult,
    random_guid,
)
from scripts.router_fuzz.settings import (
    FAILED_CHECKS_NAMED,
    GOOD_SOURCES,
    READ_SIZE,
    WARM_UP_SECONDS,
    Figures,
    FuzzError,
    Settings,
)
from scripts.router_fuzz.wire import STREAM_ERRORS, RouterTarget, close_quietly, open_from

GOOD_HEADERS = (
    ("User-Agent", "fuzz-good-peer/1.0"),
    ("X-Ultrapeer", "True"),
    ("Bye-Packet", "0.1"),
    ("GGEP", "0.5"),
)


class GoodPeer:
    """A well-behaved servent: handshakes, reads and frames all it is sent, answers the
    router's pings and the other good peer's probe queries."""

    def __init__(self, name: str, source: str, deflate: bool) -> None:
        self.name = name
        self.source = source
        self.deflate = deflate
        self.guid = random_guid()
        self.stream: trio.SocketStream | None = None
        self.send_lock = trio.Lock()
        self.compressor: DeflateCompressor | None = None
        self.decompressor: DeflateDecompressor | None = None
        self.decoder = FrameDecoder()
        self.closed = trio.Event()
        self.why_closed = ""

    async def connect(self, target: RouterTarget) -> HandshakeComplete:
        stream = await open_from(target, self.source)
        try:
            initiator = Initiator()
            headers = [*GOOD_HEADERS, ("GUID", self.guid.hex())]
            if self.deflate:
                headers.append(("Accept-Encoding", "deflate"))
            with trio.fail_after(10):
                await stream.send_all(initiator.start(headers))
                event = await next_handshake_event(stream, initiator)
                if isinstance(event, HandshakeRejected):
                    raise FuzzError(
                        f"good peer {self.name} refused: {event.status_code} {event.reason}"
                    )
                await stream.send_all(initiator.confirm(deflate=self.deflate))
                complete = await next_handshake_event(stream, initiator)
                assert isinstance(complete, HandshakeComplete)
        except BaseException:
            await close_quietly(stream)
            raise
        self.stream = stream
        self.compressor = DeflateCompressor() if complete.compress_outgoing else None
        self.decompressor = DeflateDecompressor() if complete.decompress_incoming else None
        self.decoder = FrameDecoder()
        self.closed = trio.Event()
        return complete

    async def send(self, message: Message) -> None:
        data = encode_message(message)
        if self.compressor is not None:
            data = self.compressor.compress(data)
        assert self.stream is not None
        async with self.send_lock:
            await self.stream.send_all(data)

    def frames(self, data: bytes) -> list[Frame]:
        if self.decompressor is None:
            return self.decoder.receive_data(data)
        self.decompressor.receive_data(data)
        frames: list[Frame] = []
        while chunk := self.decompressor.read():
            frames.extend(self.decoder.receive_data(chunk))
        return frames


@dataclasses.dataclass(slots=True)
class Probe:
    guid: bytes
    sender: GoodPeer
    receiver: GoodPeer
    payload: bytes
    sent_at: float
    query_at: float | None = None
    hit_at: float | None = None


class RoutingChecks:
    """Every second, a query from each good peer to the other and its hit back."""

    def __init__(self, target: RouterTarget, settings: Settings, figures: Figures) -> None:
        self.target = target
        self.settings = settings
        self.figures = figures
        self.peers = (
            GoodPeer("A", GOOD_SOURCES[0], deflate=True),
            GoodPeer("B", GOOD_SOURCES[1], deflate=False),
        )
        self.probes: dict[bytes, Probe] = {}
        self.sequence = 0
        self.nursery: trio.Nursery
        self.answered = trio.Event()
        """Set (and replaced) whenever a probe's hit comes back."""
        self.overdue: dict[bytes, Probe] = {}
        """Failed probes whose legs may still arrive, late."""
        self.sending = True
        self.passed_after: list[float] = []
        """When each passing check completed (to see routing recover after the fuzzing)."""

    async def start(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        for peer in self.peers:
            complete = await peer.connect(self.target)
            nursery.start_soon(self.read, peer, complete.trailing_data)

    def answer(self, peer: GoodPeer, message: Message) -> None:
        """Send from a task of its own: the reader must never wait on a write."""
        self.nursery.start_soon(self.send_quietly, peer, message)

    async def send_quietly(self, peer: GoodPeer, message: Message) -> None:
        with contextlib.suppress(*STREAM_ERRORS):
            await peer.send(message)

    async def read(self, peer: GoodPeer, trailing: bytes) -> None:
        """Read until the connection ends; a close by the router is a failure, and the
        peer connects again (as a servent would) so the checks can go on."""
        connected: bytes | None = trailing
        while True:
            if connected is not None:
                await self.read_connection(peer, connected)
            await trio.sleep(1.0)
            connected = None
            with contextlib.suppress(FuzzError, HandshakeError, trio.TooSlowError, *STREAM_ERRORS):
                connected = (await peer.connect(self.target)).trailing_data

    async def read_connection(self, peer: GoodPeer, trailing: bytes) -> None:
        assert peer.stream is not None
        try:
            if trailing:  # (b"" would tell the decoder the stream ended)
                self.handle(peer, peer.frames(trailing))
            while data := await peer.stream.receive_some(READ_SIZE):
                self.handle(peer, peer.frames(bytes(data)))
            self.figures.problem(
                f"the router closed good peer {peer.name}'s connection ({peer.why_closed or 'EOF'})"
            )
        except (RemoteProtocolError, CompressionError) as exc:
            self.figures.problem(
                f"the router sent good peer {peer.name} a stream that does not frame: {exc}"
            )
        except STREAM_ERRORS as exc:
            self.figures.problem(
                f"good peer {peer.name}'s connection broke ({peer.why_closed or repr(exc)})"
            )
        finally:
            await close_quietly(peer.stream)

    def handle(self, peer: GoodPeer, frames: list[Frame]) -> None:
        self.figures.good_peer_frames += len(frames)
        now = trio.current_time()
        for frame in frames:
            kind = frame.payload_type
            probe = self.probes.get(frame.guid) or self.overdue.get(frame.guid)
            if kind == MessageType.QUERY and probe is not None and probe.receiver is peer:
                if frame.payload != probe.payload:
                    self.figures.problem("a probe query arrived changed")
                if probe.query_at is None:
                    probe.query_at = now
                    hit = QueryHit(
                        6346, "127.0.0.1", 1000, (QueryHitResult(1, 1, b"probe.ogg"),), peer.guid
                    )
                    self.answer(peer, Message(frame.guid, 2, 0, hit))
            elif kind == MessageType.QUERY_HIT and probe is not None and probe.sender is peer:
                if probe.hit_at is None and probe.query_at is not None:
                    probe.hit_at = now
                    self.answered.set()
                    self.answered = trio.Event()
                    if self.overdue.pop(frame.guid, None) is not None:
                        self.note_late(probe)
            elif kind == MessageType.PING and frame.hops == 0:
                pong = Pong(6346, "127.0.0.1", 0, 0)
                self.answer(peer, Message(frame.guid, 1, 0, pong))
            elif kind == MessageType.BYE:
                with contextlib.suppress(RemoteProtocolError):
                    bye = frame.message().payload
                    assert isinstance(bye, Bye)
                    peer.why_closed = f"Bye {bye.code} {bye.reason}"

    async def send_probes(self) -> None:
        """A fresh query from each good peer to the other."""
        for sender, receiver in (self.peers, self.peers[::-1]):
            self.sequence += 1
            message = Message(random_guid(), 2, 0, Query(b"fuzz probe %d" % self.sequence))
            payload = encode_message(message)[HEADER_SIZE:]
            probe = Probe(message.guid, sender, receiver, payload, trio.current_time())
            self.probes[message.guid] = probe
            with contextlib.suppress(*STREAM_ERRORS):
                await sender.send(message)

    async def warm_up(self) -> None:
        """Probe until one round trip works both ways; these probes are not counted.

        Our side of a handshake ends before the router has read its last step, so the
        router may not yet know the other peer when the first probe arrives, and drop it
        for want of anyone to send it to."""
        with trio.move_on_after(WARM_UP_SECONDS):
            while True:
                await self.send_probes()
                with trio.move_on_after(0.5):
                    await self.all_answered()
                answered = all(p.hit_at is not None for p in self.probes.values())
                self.probes.clear()
                if answered:
                    return
        raise FuzzError(f"routing between the good peers did not work within {WARM_UP_SECONDS} s")

    async def run(self) -> None:
        """Send a probe each way every second and judge the ones past their deadline.

        The seconds are counted from the start, not from the end of the last round, so
        that a busy machine does not thin the checks out (a late round goes at once)."""
        tick = trio.current_time()
        while self.sending:
            await self.send_probes()
            self.judge(trio.current_time())
            tick = max(tick + 1.0, trio.current_time())
            await trio.sleep_until(tick)

    def judge(self, now: float, final: bool = False) -> None:
        """Pass the probes whose hit is back in time; fail those past the deadline, and
        keep watching for their late legs (late is not lost, and the report says which)."""
        deadline = self.settings.check_deadline
        for guid, probe in list(self.probes.items()):
            if probe.hit_at is not None and probe.hit_at - probe.sent_at <= deadline:
                self.figures.checks_passed += 1
                self.figures.check_round_trips.append(probe.hit_at - probe.sent_at)
                self.passed_after.append(probe.hit_at)
            elif probe.hit_at is not None:
                self.fail(probe, f"its hit came back after {probe.hit_at - probe.sent_at:.1f} s")
                self.note_late(probe)
            elif now - probe.sent_at > deadline or final:
                leg = "its query" if probe.query_at is None else "its hit"
                self.fail(probe, f"{leg} had not arrived {now - probe.sent_at:.1f} s later")
                self.overdue[guid] = probe
            else:
                continue
            del self.probes[guid]

    def note_late(self, probe: Probe) -> None:
        assert probe.hit_at is not None
        self.figures.late_round_trips.append(
            f"{probe.sender.name}->{probe.receiver.name} sent at "
            f"{probe.sent_at - self.figures.started:.1f} s: hit back after "
            f"{probe.hit_at - probe.sent_at:.1f} s"
        )

    def fail(self, probe: Probe, why: str) -> None:
        """Count a failed check; the first few are named (the count says the rest)."""
        self.figures.checks_failed += 1
        at = probe.sent_at - self.figures.started
        if self.figures.checks_failed <= FAILED_CHECKS_NAMED:
            self.figures.problem(
                f"routing check {probe.sender.name}->{probe.receiver.name} "
                f"sent at {at:.1f} s failed: {why}"
            )
        elif self.figures.checks_failed == FAILED_CHECKS_NAMED + 1:
            self.figures.problem("more routing checks failed (see the count)")

    async def finish(self) -> None:
        """Stop sending probes, wait for the ones in flight (up to their deadline), then
        judge them all."""
        self.sending = False
        with trio.move_on_after(self.settings.check_deadline):
            await self.all_answered()
        self.judge(trio.current_time(), final=True)

    async def all_answered(self) -> None:
        """Return once every probe sent so far has its hit back."""
        while True:
            answered = self.answered
            if all(p.hit_at is not None for p in self.probes.values()):
                return
            await answered.wait()
