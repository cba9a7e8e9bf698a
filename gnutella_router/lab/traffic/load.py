"""The load client: open-loop synthetic traffic through a router, and what it measured.

Theory of operation
-------------------
``K`` peers connect to the target with the 0.6 handshake (or 0.4 with ``legacy``); the
first few inject, the others are sinks. A traffic generator (``traffic_models``) says
what is due when; the sender writes everything due in one write per injector, then
sleeps until the next message is due. It never waits for the target to be ready: if a
write blocks because the target stopped reading, the messages due meanwhile go out
late, are counted as late, and their latency is measured from when they were *due*
(see :mod:`traffic_models.latency`): the offered load does not bend to the system under
test, which is what makes the paper's overload experiments meaningful.

Sinks timestamp every copy of our pings and queries that reaches them (one-hop
latency through the router) and, when asked to, answer them like real servents (a pong
per ping, a query hit per query with some probability), so replies travel the reverse
path back to the injectors, where they are timed as round trips. A sink that has said
nothing for a minute also answers the target's own pings (hops 0: its keep-alive and
discovery pings) with a pong, as every servent does, so that a sink that only listens
is not closed as idle.

Before the clock starts, a few probe pings make sure the target has registered every
peer; they are not counted.

After the last message the client *drains*: it keeps reading until every expected copy
has arrived, or nothing has arrived for ``DRAIN_QUIET`` seconds, or ``drain`` seconds
have passed. Without it, copies still in socket buffers when the client hung up would
be reported as lost. When the router's admin interface is reachable, its counters are
read before and after the run, so the report can say how many of our messages the
router received, forwarded and dropped (and why), and how many copies it forwarded
that had not reached us when the client stopped.

:meth:`LoadRun.request_stop` (Ctrl-C in ``gnutella-router load``) ends the sending and
the drain at once; the report is still made, from what was measured so far.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import math
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Protocol

import trio

from gnutella_router import __version__
from gnutella_router.lab.traffic.router_counters import RouterCounterReader
from gnutella_router.net.handshaking import next_handshake_event
from protocol.codec import encode_message
from protocol.constants import MessageType, counts_by_type_name
from protocol.errors import RemoteProtocolError
from protocol.framing import Frame, FrameDecoder
from protocol.handshake import (
    HandshakeComplete,
    HandshakeRejected,
    HandshakeResponse,
    Initiator,
)
from protocol.messages import Message, Ping, random_guid
from traffic_models.generator import Scheduled
from traffic_models.latency import (
    LatencyBook,
    LoadReport,
    read_stamp,
    run_marker,
    stamp_counter,
    stamp_guid,
)
from traffic_models.responder import Responder, keep_alive_pong

PING = MessageType.PING
PONG = MessageType.PONG
QUERY = MessageType.QUERY
QUERY_HIT = MessageType.QUERY_HIT
BROADCAST_TYPES = frozenset({PING, QUERY})
REPLY_TYPES = (PONG, QUERY_HIT)
YOUNG_COLLECTION_THRESHOLD = 20_000
READ_SIZE = 64 * 1024
"""Per read: small enough that decoding one read never keeps the sender waiting long."""
DRAIN_QUIET = 1.0
"""The drain ends when no copy has arrived for this long."""
KEEP_ALIVE_SILENCE = 60.0
"""A sink answers the target's own pings only once it has sent nothing for this long:
enough for a router that closes peers silent for minutes (gnutella-router: 180 s, with
a ping every 30 s), and a run shorter than this sends the router nothing but its load,
so that the router's counters stay exactly the client's.
"""
SEND_SLACK = 0.001
"""The sender wakes this much before the next message is due and sends everything due
within it: timer wake-ups come in whole milliseconds (epoll), so waking on the dot would
make sends up to a millisecond late by construction. A message sent early is stamped
with the moment it was written instead of its scheduled time (see
:mod:`traffic_models.latency`), so the slack never shortens a measured latency."""


@dataclasses.dataclass(frozen=True, slots=True)
class LoadSettings:
    target: tuple[str, int]
    peers: int = 4
    injectors: int = 1
    duration: float = 10.0
    seed: int = 1
    legacy: bool = False
    respond: bool = False
    """Sinks answer like servents, so replies (and their round trips) are measured."""
    respond_to_pings: bool = True
    """With ``respond``: sinks answer pings too (with pongs for a made-up address)."""
    late_threshold_ms: float = 1.0
    drain: float = 5.0
    """Longest to keep listening after the last message, for copies still in flight; the
    drain ends sooner once every copy has arrived or none has for ``DRAIN_QUIET``."""
    admin: tuple[str, int] | None = None
    """The router's admin interface, to reconcile our counts with its own; None: none."""
    token: str = ""
    """The router's admin token, when it has one (its ``/stats`` needs it)."""
    user_agent: str = f"gnutella-router-load/{__version__}"
    progress: bool = False
    warmup: float = 0.0
    """Messages scheduled in the first ``warmup`` seconds are sent and counted but not
    timed: the steady state, without a controller's ramp-up."""

    def __post_init__(self) -> None:
        if self.peers < 2:
            raise ValueError("a load run needs at least 2 peers: one to inject, one to sink")
        if not 1 <= self.injectors < self.peers:
            raise ValueError("injectors must be at least 1 and fewer than peers")
        if not self.duration > 0:
            raise ValueError("duration must be positive")
        if not self.drain >= 0:
            raise ValueError("drain must be 0 or more seconds")
        if not self.warmup >= 0:
            raise ValueError("warmup must be 0 or more seconds")


class Traffic(Protocol):
    """What the load client sends: a synthetic generator or a recorded trace."""

    def schedule(self, duration: float) -> Iterator[Scheduled]: ...


class LoadError(Exception):
    """The run could not start (connection refused, handshake refused, ...)."""


def _seen_before(seen: bytearray, number: int) -> bool:
    """Mark message ``number`` in the bitmap ``seen``; whether it was marked already."""
    index, bit = number >> 3, 1 << (number & 7)
    if index >= len(seen):
        seen.extend(bytes(index + 4096 - len(seen)))
    if seen[index] & bit:
        return True
    seen[index] |= bit
    return False


class ClientPeer:
    """One of the load client's connections: a stream and a framer."""

    def __init__(self, name: str, stream: trio.SocketStream, leftover: bytes) -> None:
        self.name = name
        self.stream = stream
        self.decoder = FrameDecoder()
        self.leftover = leftover
        self.closed: str | None = None
        self.send_lock = trio.Lock()
        self.last_sent = trio.current_time()
        """When the peer last sent anything (its handshake, at first)."""
        self.seen = bytearray()
        """A sink's bitmap of the messages (by number in the run) it has had a copy of:
        one bit per message sent, so bounded by the run."""

    async def send(self, data: bytes) -> None:
        """Write ``data`` whole; the lock keeps a sink's replies and probes from interleaving."""
        async with self.send_lock:
            await self.stream.send_all(data)
            self.last_sent = trio.current_time()


async def open_client_peer(
    address: tuple[str, int],
    name: str,
    *,
    legacy: bool,
    user_agent: str,
    receive_buffer: int | None = None,
    headers: Sequence[tuple[str, str]] | None = None,
) -> ClientPeer:
    """Connect and handshake as an ultrapeer (never announcing Pong-Caching, so that the
    target broadcasts our pings instead of answering them from a cache), or with
    ``headers`` instead (a leaf's, for instance).

    ``receive_buffer`` sets SO_RCVBUF before connecting: a peer that reads slowly then
    backs the target up after a few kilobytes, not after the kernel's megabytes.
    """
    try:
        if receive_buffer is None:
            stream = await trio.open_tcp_stream(*address)
        else:
            sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
            sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, receive_buffer)
            await sock.connect(address)
            stream = trio.SocketStream(sock)
    except OSError as exc:
        raise LoadError(f"{name}: cannot connect to {address[0]}:{address[1]}: {exc}") from exc
    initiator = Initiator()
    headers = (
        list(headers)
        if headers is not None
        else [
            ("User-Agent", user_agent),
            ("X-Ultrapeer", "True"),
            ("X-Degree", "32"),
            ("X-Dynamic-Querying", "0.1"),
            ("Bye-Packet", "0.1"),
            ("GGEP", "0.5"),
            ("GUID", random_guid().hex()),
        ]
    )
    try:
        with trio.fail_after(10):
            await stream.send_all(initiator.start(headers, version="0.4" if legacy else "0.6"))
            event = await next_handshake_event(stream, initiator)
            if isinstance(event, HandshakeRejected):
                raise LoadError(f"{name}: refused: {event.status_code} {event.reason}")
            if isinstance(event, HandshakeResponse):
                await stream.send_all(initiator.confirm())
                event = await next_handshake_event(stream, initiator)
            assert isinstance(event, HandshakeComplete)
    except BaseException as exc:
        await _quiet_close(stream)
        if isinstance(exc, trio.TooSlowError):
            raise LoadError(f"{name}: no handshake within 10 s") from exc
        if isinstance(exc, RemoteProtocolError | trio.BrokenResourceError | OSError):
            raise LoadError(f"{name}: handshake failed: {exc}") from exc
        raise
    return ClientPeer(name, stream, event.trailing_data)


class LoadRun:
    """One run: connect, probe, send on schedule, measure, report."""

    def __init__(self, settings: LoadSettings, generator: Traffic) -> None:
        self.settings = settings
        self.generator = generator
        self.run_id = (settings.seed * 7919 + int(time.time())) & 0xFFFF
        self.marker = run_marker(self.run_id)
        self.book = LatencyBook()
        self.sent = [0] * 256
        self.received = [0] * 256
        self.injector_copies = [0] * 256
        self.replies = [0] * 256
        self.routed_replies = [0] * 256
        """Replies at the injectors that the target routed (hops 1 or more), not made."""
        self.answers_sent = [0] * 256
        """Replies the sinks sent (with ``respond``): what the drain waits for too."""
        self.duplicates = [0] * 256
        self.query_hits: dict[bytes, list[int]] = {}
        """Per query GUID: the hits that came back and the first one's latency (ns from
        the query's scheduled send). One entry per query answered: bounded by the run."""
        self.expected = [0] * 256
        self.late = 0
        self.early = 0
        self.bytes_sent = 0
        self.probe_seen: set[str] = set()
        self._counter = itertools.count()
        self._sending_done = trio.Event()
        self.started_ns = 0
        self.timed_from_ns = 0
        self.send_elapsed = 0.0
        self.interrupted = False
        self._last_arrival = 0.0
        self._stop_scope: trio.CancelScope | None = None
        self._router = RouterCounterReader(settings.admin, settings.token)

    def request_stop(self) -> None:
        """End the sending and the drain now; the report is made from what was measured."""
        self.interrupted = True
        if self._stop_scope is not None:
            self._stop_scope.cancel()

    def _stoppable(self) -> trio.CancelScope:
        """A cancel scope that :meth:`request_stop` cancels (at once, if it came first)."""
        scope = self._stop_scope = trio.CancelScope()
        if self.interrupted:
            scope.cancel()
        return scope

    # ------------------------------------------------------------------ the run

    async def run(self) -> LoadReport:
        """Connect, probe, send, drain and report.

        For the run, young garbage collections are made rarer (almost everything the
        client allocates dies young): fewer pauses, so fewer sends late through the
        client's own fault. The previous setting is restored afterwards.
        """
        threshold = gc.get_threshold()
        gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *threshold[1:])
        try:
            return await self._run()
        finally:
            gc.set_threshold(*threshold)

    async def _run(self) -> LoadReport:
        settings = self.settings
        peers: list[ClientPeer] = []
        try:
            failure: LoadError | None = None
            try:
                async with trio.open_nursery() as nursery:
                    for index in range(settings.peers):
                        nursery.start_soon(self._connect_into, peers, index)
            except* LoadError as group:
                first = group.exceptions[0]
                assert isinstance(first, LoadError)
                failure = first
            if failure is not None:
                raise failure
            peers.sort(key=lambda p: p.name)
            injectors = peers[: settings.injectors]
            sinks = peers[settings.injectors :]
            async with trio.open_nursery() as nursery:
                for peer in injectors:
                    nursery.start_soon(self._read, peer, False)
                for index, peer in enumerate(sinks):
                    responder = (
                        Responder(
                            address=("127.0.0.1", 20000 + index),
                            seed=settings.seed + index,
                            answer_pings=settings.respond_to_pings,
                        )
                        if settings.respond
                        else None
                    )
                    nursery.start_soon(self._read, peer, True, responder)
                with self._stoppable():
                    await self._probe(injectors[0], sinks)
                await self._router.read_before()
                if settings.progress:
                    nursery.start_soon(self._show_progress)
                with self._stoppable():
                    await self._send(injectors, len(sinks))
                    await self._drain()
                self._sending_done.set()
                await self._router.read_after()
                nursery.cancel_scope.cancel()
        finally:
            for peer in peers:
                with trio.CancelScope(shield=True):
                    await _quiet_close(peer.stream)
        return self._report(len(sinks), [p for p in peers if p.closed])

    async def _connect_into(self, peers: list[ClientPeer], index: int) -> None:
        name = f"peer{index:03d}"
        settings = self.settings
        peers.append(
            await open_client_peer(
                settings.target, name, legacy=settings.legacy, user_agent=settings.user_agent
            )
        )

    async def _probe(self, injector: ClientPeer, sinks: Sequence[ClientPeer]) -> None:
        """Ping until every sink has seen one of our probes: the target knows them all."""
        with trio.fail_after(10):
            while len(self.probe_seen) < len(sinks):
                # Stamped at 0 (a probe, not counted), each with its own counter: the
                # target drops a repeated GUID as a duplicate, so a sink that registers
                # after the first probe would never see one.
                guid = stamp_guid(0, self.run_id, next(self._counter))
                await injector.send(encode_message(Message(guid, 2, 0, Ping())))
                await trio.sleep(0.05)

    # ------------------------------------------------------------------ sending

    async def _send(self, injectors: Sequence[ClientPeer], sinks: int) -> None:
        settings = self.settings
        schedule = iter(self.generator.schedule(settings.duration))
        late_ns = int(settings.late_threshold_ms * 1e6)
        start_ns = time.perf_counter_ns()
        self.started_ns = start_ns
        self.timed_from_ns = start_ns + int(settings.warmup * 1e9)
        start = trio.current_time()
        sent, expected = self.sent, self.expected
        run = self.run_id
        pending: Scheduled | None = next(schedule, None)
        turn = 0
        count = len(injectors)
        while pending is not None:
            now = trio.current_time() - start
            horizon = now + SEND_SLACK
            now_ns = time.perf_counter_ns()
            batches: list[list[bytes]] = [[] for _ in injectors]
            while pending is not None and pending.at <= horizon:
                due_ns = start_ns + int(pending.at * 1e9)
                if due_ns > now_ns:
                    # Written before it is due: time it from now, not from the future.
                    self.early += 1
                    stamp_ns = now_ns
                else:
                    stamp_ns = due_ns
                data = stamp_guid(stamp_ns, run, next(self._counter)) + pending.data[16:]
                batches[turn].append(data)
                turn = (turn + 1) % count
                message_type = pending.message_type
                sent[message_type] += 1
                if message_type in BROADCAST_TYPES and data[17] >= 2:
                    expected[message_type] += sinks
                if now_ns - due_ns > late_ns:
                    self.late += 1
                pending = next(schedule, None)
            for peer, batch in zip(injectors, batches, strict=True):
                if batch:
                    data = b"".join(batch)
                    self.bytes_sent += len(data)
                    try:
                        await peer.send(data)
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                        peer.closed = peer.closed or f"{peer.name}: {exc.__class__.__name__}"
                        return
            self.send_elapsed = trio.current_time() - start
            if pending is not None:
                await trio.sleep_until(start + pending.at - SEND_SLACK)

    async def _drain(self) -> None:
        """Read on until every expected copy and every reply the sinks sent is in, or
        none came for a while, or time's up."""
        deadline = trio.current_time() + self.settings.drain
        self._last_arrival = trio.current_time()
        while trio.current_time() < deadline:
            # By type: in a network, other routers' pongs come back routed too, and must
            # not stand in for a hit still on its way.
            replies_in = all(self.routed_replies[t] >= self.answers_sent[t] for t in REPLY_TYPES)
            if replies_in and sum(self.received) >= sum(self.expected):
                return
            if trio.current_time() - self._last_arrival >= DRAIN_QUIET:
                return
            await trio.sleep(0.02)

    # ------------------------------------------------------------------ receiving

    async def _read(self, peer: ClientPeer, sink: bool, responder: Responder | None = None) -> None:
        run = self.run_id
        book = self.book
        data = peer.leftover
        try:
            while True:
                if data:
                    arrived = time.perf_counter_ns()
                    self._last_arrival = trio.current_time()
                    frames = peer.decoder.receive_data(data)
                    self._account(frames, arrived, sink, run, book, peer)
                    if responder is not None:
                        await self._answer(peer, frames, responder)
                    if sink:  # the target's own pings: it closes peers that never speak
                        await self._keep_alive(peer, frames)
                data = await peer.stream.receive_some(READ_SIZE)
                if not data:
                    peer.closed = peer.closed or f"{peer.name}: closed by the target"
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            peer.closed = peer.closed or f"{peer.name}: {exc.__class__.__name__}"
        except RemoteProtocolError as exc:
            peer.closed = peer.closed or f"{peer.name}: {exc.reason}"

    def _account(
        self,
        frames: list[Frame],
        arrived: int,
        sink: bool,
        run: int,
        book: LatencyBook,
        peer: ClientPeer,
    ) -> None:
        marker = self.marker
        for frame in frames:
            message_type = frame.payload_type
            due = read_stamp(frame.guid, run, marker)
            if due is None:
                if message_type == MessageType.BYE:
                    peer.closed = f"{peer.name}: Bye from the target"
                continue
            if due == 0:  # a probe
                if sink and message_type == PING:
                    self.probe_seen.add(peer.name)
                continue
            timed = due >= self.timed_from_ns
            if sink:
                if message_type in BROADCAST_TYPES:
                    if _seen_before(peer.seen, stamp_counter(frame.guid)):
                        self.duplicates[message_type] += 1
                        continue
                    self.received[message_type] += 1
                    if timed:
                        book.record(self.copy_kind(frame.hops), message_type, arrived - due)
            elif message_type in BROADCAST_TYPES:
                # Another injector's broadcast: a copy, not a reply to anything of ours.
                self.injector_copies[message_type] += 1
            else:
                self.replies[message_type] += 1
                if frame.hops:
                    self.routed_replies[message_type] += 1
                if message_type == QUERY_HIT:
                    seen = self.query_hits.get(frame.guid)
                    if seen is None:
                        self.query_hits[frame.guid] = [1, arrived - due]
                    else:
                        seen[0] += 1
                if timed:
                    kind = "target-reply" if frame.hops == 0 else "round-trip"
                    book.record(kind, message_type, arrived - due)

    def copy_kind(self, hops: int) -> str:
        """The latency row of a copy at a sink. The sinks are the target's own peers, so
        a first copy crossed the target alone: ``one-hop``, whatever hops the target
        wrote (a stand-in such as ``gnutella-router echo`` leaves hops as they were).
        A spread run labels copies by their hops instead."""
        return "one-hop"

    @staticmethod
    async def _keep_alive(peer: ClientPeer, frames: list[Frame]) -> None:
        """Answer the target's own pings once the peer has been silent for
        :data:`KEEP_ALIVE_SILENCE`. Sinks only: an injector speaks all the time, and its
        reader must never wait for the lock its sender holds while the target is not
        reading (it would stop reading in turn)."""
        if trio.current_time() - peer.last_sent < KEEP_ALIVE_SILENCE:
            return
        pongs = [pong for frame in frames if (pong := keep_alive_pong(frame)) is not None]
        if pongs:
            await peer.send(b"".join(pongs))

    async def _answer(self, peer: ClientPeer, frames: list[Frame], responder: Responder) -> None:
        replies = []
        for frame in frames:
            if frame.payload_type in BROADCAST_TYPES and read_stamp(frame.guid, self.run_id):
                for reply in responder.respond(frame):
                    self.answers_sent[reply.payload_type] += 1
                    replies.append(encode_message(reply))
        if replies:
            await peer.send(b"".join(replies))

    # ------------------------------------------------------------------ reporting

    async def _show_progress(self) -> None:
        start = trio.current_time()
        while not self._sending_done.is_set():
            await trio.sleep(1.0)
            elapsed = trio.current_time() - start
            sent = sum(self.sent)
            received = sum(self.received)
            p99 = self.book.percentile_us("one-hop", QUERY, 99.0) or self.book.percentile_us(
                "one-hop", PING, 99.0
            )
            line = (
                f"\r{elapsed:6.1f} s  sent {sent:>10,} ({sent / elapsed:,.0f}/s)  "
                f"copies {received:>10,}  late {self.late:>8,}  p99 {p99 or 0:>8,} us"
            )
            print(line, end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)

    def _report(self, sinks: int, closed: Sequence[ClientPeer]) -> LoadReport:
        settings = self.settings
        elapsed = self.send_elapsed or settings.duration
        total_sent = sum(self.sent)
        return LoadReport(
            target=f"{settings.target[0]}:{settings.target[1]}",
            duration=settings.duration,
            peers=settings.peers,
            injectors=settings.injectors,
            sinks=sinks,
            offered_rate=total_sent / settings.duration,
            sent=counts_by_type_name(self.sent),
            late=self.late,
            late_threshold_ms=settings.late_threshold_ms,
            early=self.early,
            achieved_rate=total_sent / elapsed if elapsed > 0 else math.nan,
            received=counts_by_type_name(self.received),
            expected=counts_by_type_name(self.expected),
            replies=counts_by_type_name(self.replies),
            latency=self.book.summaries(),
            disconnected=[p.closed for p in closed if p.closed],
            negative_samples=self.book.negative,
            clamped_samples=self.book.clamped,
            interrupted=self.interrupted,
            router=self._router.reconcile(counts_by_type_name(self.copies_at_our_peers())),
            duplicates=counts_by_type_name(self.duplicates),
        )

    def copies_at_our_peers(self) -> list[int]:
        """By type, what of the router's forwarded copies reached the client's peers:
        every copy of a broadcast (first or again, at a sink or another injector) and
        every reply it routed back (see :class:`~traffic_models.latency.RouterCounts`)."""
        return [
            first + again + elsewhere + routed
            for first, again, elsewhere, routed in zip(
                self.received,
                self.duplicates,
                self.injector_copies,
                self.routed_replies,
                strict=True,
            )
        ]


async def _quiet_close(stream: trio.SocketStream) -> None:
    try:
        with trio.move_on_after(0.5):
            await stream.aclose()
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass


async def run_load(settings: LoadSettings, generator: Traffic) -> LoadReport:
    """Run one load test against ``settings.target`` and return what it measured."""
    return await LoadRun(settings, generator).run()
