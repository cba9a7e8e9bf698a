"""Replaying a recorded trace into a router over loopback, on the trace's own clock.

Theory of operation
-------------------
``gnutella-router replay TRACE --target HOST:PORT`` opens K peer connections to the
target (the 0.6 handshake as an ultrapeer, no deflate), maps each connection id of the
trace to one of them (in order of first appearance, round-robin when there are fewer
peers than ids) and sends every record's wire bytes, header and payload exactly as
recorded, at its offset in the trace divided by ``--speed``. The first record goes out
at once: the idle time before it is not replayed.

The replay is open loop. One scheduler task walks the trace; a record whose time has
come is appended to its peer's outgoing buffer and the peer's writer task sends what
has gathered in one write. The scheduler never waits for the target: a record it
reaches more than ``late_after`` (10 ms) past its time is sent at once and counted
*late*; a peer whose unsent backlog would pass ``backlog_limit`` (32 MiB), or whose
connection the target closed, has the record counted *dropped* instead. Records due
within half a millisecond are sent together, so the replay may run up to 0.5 ms
early. Each peer also reads and throws away whatever the target sends (pongs, Byes),
so the target never sees it as a slow reader, except the target's own pings, which it
answers with a pong, as servents do, so that a peer the trace leaves quiet for minutes is
not closed as idle.

``--loop N`` plays the trace N times back to back; each pass starts one mean
inter-arrival gap after the previous one's last record, so the long-run rate is the
trace's. Passes after the first rewrite bytes 12 to 14 of every GUID (XOR with the pass
number), so the target does not drop them as duplicates, while a query and the hits
answering it keep sharing a GUID. Bye messages are not replayed (they would end the
peer's connection) and are counted as skipped.

What came back is measured too. Every ping and query the replay sends is remembered
for :data:`~.replay_timing.TIMING_WINDOW` seconds (at most
:data:`~.replay_timing.MAX_TIMED` at once) with the later of
its due time and the moment it was handed over; a copy of it arriving at another of the
replay's peers is timed (``one-hop``: every peer sits on the target), a copy arriving
again at the same peer is counted as a duplicate, and a reply coming back to the peer
that sent its request is timed as ``target-reply`` (the target's own pong, hops 0) or
``round-trip`` (routed from elsewhere: a replayed reply keeps the trace's own delay, so
it says more about the trace than about the target). After the last record the peers
keep reading until nothing of ours has come for :data:`SETTLE_QUIET` seconds (at most
``settle``). When the target's admin interface answers, its counters for the replay
stand beside ours: what it read, dropped (and why: a replayed reply whose request the
target never saw is dropped as ``no-route``) and forwarded.

Targets are loopback only: this is a load tool, and pointing it at someone else's
servent is not something it should make easy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import trio

from gnutella_router import __version__
from gnutella_router.lab.traffic.load import LoadError, open_client_peer
from gnutella_router.lab.traffic.replay_timing import Timing
from gnutella_router.lab.traffic.router_counters import RouterCounterReader
from protocol.constants import MessageType, counts_by_type_name
from protocol.errors import RemoteProtocolError
from protocol.framing import Frame, FrameDecoder
from traffic_models.latency import LatencySummary, RouterCounts, latency_lines
from traffic_models.responder import keep_alive_pong
from traffic_models.trace import TraceProblem, read_wire

DEFAULT_PEER_CAP = 16
"""Most peers opened when ``--peers`` is not given (the daemon's default limit is 32)."""
MAX_PEERS = 256
LATE_AFTER = 0.010
"""Seconds past its time after which a record counts as late."""
EARLY_SLACK = 0.0005
"""Records due within this many seconds are sent now rather than slept for."""
BACKLOG_LIMIT = 32 * 1024 * 1024
"""Unsent bytes one peer may hold before records for it are dropped."""
CONNECT_TIMEOUT = 10.0
DRAIN_TIMEOUT = 10.0
"""Seconds allowed, after the last record, for the peers' buffers to reach the target."""
CHECKPOINT_EVERY = 512
"""Records between forced yields of the scheduler when it is behind."""
RECEIVE_SIZE = 64 * 1024
MAX_LOOPS = 1 << 24
"""Pass numbers must fit the three GUID bytes they are folded into."""
_BYE = int(MessageType.BYE)
SETTLE = 5.0
"""Longest wait after the last record for copies still on their way."""
SETTLE_QUIET = 0.5
"""The wait ends once nothing of ours has arrived for this long."""


class ReplayError(Exception):
    """The replay could not run (bad target, unreadable trace, peers refused)."""


@dataclasses.dataclass(frozen=True, slots=True)
class TracePlan:
    """What a first pass over the trace finds out."""

    records: int
    first: float
    last: float
    connections: tuple[int, ...]
    """Connection ids in order of first appearance."""

    @property
    def span(self) -> float:
        return self.last - self.first

    @property
    def period(self) -> float:
        """Seconds from one pass's first record to the next pass's (at speed 1)."""
        if self.records < 2:
            return self.span
        return self.span * self.records / (self.records - 1)


@dataclasses.dataclass(frozen=True, slots=True)
class ReplaySummary:
    target: str
    peers: int
    loops: int
    speed: float
    sent: int
    """Messages handed to the peers' connections."""
    late: int
    dropped: int
    skipped: int
    """Bye messages, which are not replayed."""
    duration: float
    """Seconds from the first send until every buffer reached the target."""
    errors: tuple[str, ...] = ()
    interrupted: bool = False
    """Stopped early (Ctrl-C): the figures cover what was sent until then."""
    sent_by_type: dict[str, int] = dataclasses.field(default_factory=dict)
    copies: dict[str, int] = dataclasses.field(default_factory=dict)
    """Copies of our pings and queries that reached another of our peers, by type."""
    duplicates: dict[str, int] = dataclasses.field(default_factory=dict)
    """Copies a peer got again (not timed)."""
    replies: dict[str, int] = dataclasses.field(default_factory=dict)
    """Replies that came back to the peer that sent the request, by type."""
    untimed: int = 0
    """Pings and queries sent while :data:`~.replay_timing.MAX_TIMED` were remembered:
    not timed."""
    latency: dict[str, dict[str, LatencySummary]] = dataclasses.field(default_factory=dict)
    """kind (``one-hop``, ``target-reply``, ``round-trip``) -> type -> percentiles (us)."""
    negative_samples: int = 0
    router: RouterCounts | None = None
    """The target's own counters for the replay, when its admin interface was read."""

    def as_json(self) -> dict[str, object]:
        """The summary as JSON-ready data (what a kept replay's ``summary.json`` holds)."""
        data = dataclasses.asdict(self)
        data["rate"] = self.rate
        return data

    @property
    def rate(self) -> float:
        """Messages per second over :attr:`duration`."""
        return self.sent / self.duration if self.duration > 0 else 0.0

    def format(self) -> str:
        lines = [
            f"replayed into {self.target}: {self.peers} peer{'s' * (self.peers != 1)}, "
            f"{self.loops} pass{'es' * (self.loops != 1)}, speed {self.speed:g}",
            f"sent {self.sent} messages in {self.duration:.3f} s "
            f"({self.rate:,.1f} msgs/s); late {self.late}, dropped {self.dropped}, "
            f"Byes skipped {self.skipped}",
        ]
        if self.interrupted:
            lines.insert(0, "INTERRUPTED: the replay was stopped early; partial figures")
        lines.append(
            "came back to our peers: "
            + (_counts(self.copies) if self.copies else "no copies")
            + " (copies of our pings and queries at another peer)"
            + (f"; again at the same peer {_counts(self.duplicates)}" if self.duplicates else "")
            + (f"; replies {_counts(self.replies)}" if self.replies else "")
        )
        if self.untimed:
            lines.append(f"{self.untimed:,} pings and queries sent untimed (too many at once)")
        if self.router is not None:
            lines.extend(self.router.lines(self.sent_by_type))
        if self.latency:
            lines.extend(latency_lines(self.latency))
        if self.negative_samples:
            lines.append(
                f"INSTRUMENT ERROR: {self.negative_samples:,} latency samples below zero "
                "(left out of the figures above)"
            )
        lines += [f"problem: {error}" for error in self.errors]
        return "\n".join(lines)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {count:,}" for name, count in sorted(counts.items()))


class ReplayControl:
    """Lets the caller stop a running :func:`replay` early (Ctrl-C): the schedule ends,
    what was handed to the peers is still flushed, and the summary says it was cut."""

    def __init__(self) -> None:
        self.interrupted = False
        self._scope: trio.CancelScope | None = None

    def request_stop(self) -> None:
        self.interrupted = True
        if self._scope is not None:
            self._scope.cancel()

    def scope(self) -> trio.CancelScope:
        scope = self._scope = trio.CancelScope()
        if self.interrupted:
            scope.cancel()
        return scope


def parse_target(text: str) -> tuple[str, int]:
    """``HOST:PORT`` for a loopback address (``localhost`` means 127.0.0.1).

    Raises:
        ReplayError: not HOST:PORT, or not a loopback address.
    """
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")
    if host.lower() == "localhost":
        host = "127.0.0.1"
    try:
        if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ReplayError(
            f"target {text!r}: expected HOST:PORT, e.g. 127.0.0.1:6346 or [::1]:6346"
        ) from None
    if not address.is_loopback:
        raise ReplayError(
            f"target {text!r} is not a loopback address: only loopback addresses are "
            "allowed, the traffic tools drive routers on this machine (127.0.0.0/8 or ::1)"
        )
    return str(address), int(port_text)


def loop_guid(guid: bytes, loop: int) -> bytes:
    """The GUID a message carries in pass ``loop`` (0 is the trace's own)."""
    if not loop:
        return guid
    mixed = int.from_bytes(guid[12:15], "little") ^ loop
    return guid[:12] + mixed.to_bytes(3, "little") + guid[15:]


def scan_trace(path: Path, on_problem: Callable[[TraceProblem], None] | None = None) -> TracePlan:
    """Count the records, their time range and the connection ids (first pass)."""
    count = 0
    first = last = 0.0
    connections: dict[int, None] = {}
    for at, connection, _, _ in read_wire(path, on_problem=on_problem):
        if not count:
            first = at
        last = at
        count += 1
        connections.setdefault(connection)
    return TracePlan(count, first, last, tuple(connections))


# ---------------------------------------------------------------------------------------
# Peers


class _Peer:
    """One connection to the target: an outgoing buffer, a writer and a reader that
    throws away all but the target's own pings, which it answers (see
    :func:`~traffic_models.responder.keep_alive_pong`)."""

    def __init__(
        self,
        index: int,
        stream: trio.SocketStream,
        backlog_limit: int,
        leftover: bytes = b"",
        timing: Timing | None = None,
    ) -> None:
        self.index = index
        self.timing = timing
        self.stream = stream
        self.leftover = leftover
        """What the target sent right after the handshake, read with it."""
        self.backlog_limit = backlog_limit
        self.buffer = bytearray()
        self.buffered_messages = 0
        self.lost = 0
        """Messages that were buffered when the connection failed."""
        self.error: str | None = None
        self._lot = trio.lowlevel.ParkingLot()
        self._finishing = False

    def offer(self, data: bytes) -> bool:
        if self.error is not None or len(self.buffer) + len(data) > self.backlog_limit:
            return False
        self.buffer += data
        self.buffered_messages += 1
        return True

    def wake(self) -> None:
        self._lot.unpark()

    def finish(self) -> None:
        self._finishing = True
        self._lot.unpark()

    def _broken(self, reason: str) -> None:
        if self.error is None:
            self.error = f"peer {self.index}: {reason}"
        self.lost += self.buffered_messages
        self.buffered_messages = 0
        self.buffer.clear()
        self._lot.unpark()

    async def write_loop(self) -> None:
        try:
            while self.error is None:
                if self.buffer:
                    data = bytes(self.buffer)
                    self.buffer.clear()
                    self.buffered_messages = 0
                    await self.stream.send_all(data)
                elif self._finishing:
                    return
                else:
                    await self._lot.park()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._broken(f"connection lost while sending ({exc.__class__.__name__})")

    async def read_loop(self) -> None:
        decoder = FrameDecoder()
        data = self.leftover
        try:
            while True:
                if data:
                    self._answer(decoder.receive_data(data))
                data = bytes(await self.stream.receive_some(RECEIVE_SIZE))
                if not data:
                    break
            self._broken("the target closed the connection")
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._broken(f"connection lost ({exc.__class__.__name__})")
        except RemoteProtocolError as exc:
            self._broken(f"the target's stream does not frame ({exc.reason})")

    def _answer(self, frames: list[Frame]) -> None:
        """Time what is ours; queue a pong for each of the target's own pings."""
        if self.timing is not None:
            self.timing.arrived(frames, self.index, trio.current_time())
        for frame in frames:
            pong = keep_alive_pong(frame)
            if pong is not None and self.error is None:
                self.buffer += pong
                self._lot.unpark()

    async def aclose(self) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            await self.stream.aclose()


async def _connect(
    target: tuple[str, int], index: int, backlog_limit: int, timing: Timing | None
) -> _Peer:
    try:
        peer = await open_client_peer(
            target,
            f"peer {index}",
            legacy=False,
            user_agent=f"gnutella-router-replay/{__version__}",
        )
    except LoadError as exc:
        raise ReplayError(str(exc)) from None
    return _Peer(index, peer.stream, backlog_limit, peer.leftover, timing)


async def _connect_all(
    target: tuple[str, int], count: int, backlog_limit: int, timing: Timing | None = None
) -> list[_Peer]:
    """Connect ``count`` peers at once; on any failure, close those that connected."""
    peers: list[_Peer | None] = [None] * count
    failures: list[ReplayError] = []

    async def one(index: int) -> None:
        try:
            peers[index] = await _connect(target, index, backlog_limit, timing)
        except ReplayError as exc:
            failures.append(exc)

    try:
        async with trio.open_nursery() as nursery:
            for index in range(count):
                nursery.start_soon(one, index)
        if failures:
            raise failures[0]
    except BaseException:
        for peer in peers:
            if peer is not None:
                with trio.CancelScope(shield=True):
                    await peer.aclose()
        raise
    return [peer for peer in peers if peer is not None]


# ---------------------------------------------------------------------------------------
# The replay


@dataclasses.dataclass(slots=True)
class _Counts:
    sent: int = 0
    late: int = 0
    dropped: int = 0
    skipped: int = 0
    by_type: list[int] = dataclasses.field(default_factory=lambda: [0] * 256)


async def replay(
    path: Path,
    target: tuple[str, int],
    *,
    speed: float = 1.0,
    loops: int = 1,
    peers: int | None = None,
    late_after: float = LATE_AFTER,
    backlog_limit: int = BACKLOG_LIMIT,
    connect_timeout: float = CONNECT_TIMEOUT,
    drain_timeout: float = DRAIN_TIMEOUT,
    settle: float = SETTLE,
    on_problem: Callable[[TraceProblem], None] | None = None,
    control: ReplayControl | None = None,
    admin: tuple[str, int] | None = None,
    token: str = "",
) -> ReplaySummary:
    """Replay the trace at ``path`` into the router at ``target`` (loopback only).

    Args:
        speed: time compression; 2 sends everything in half the time.
        loops: passes over the trace (GUIDs rewritten after the first).
        peers: connections to open; default one per connection id of the trace, at
            most :data:`DEFAULT_PEER_CAP`.
        settle: longest wait after the last record for copies on their way back.
        on_problem: told about parts of the trace that were skipped (first pass only).
        control: lets the caller stop the replay early.
        admin: the target's admin interface, whose counters are set beside ours.
        token: its admin token, when it has one.

    Raises:
        ReplayError: bad arguments, an empty or unreadable trace, or a peer that could
            not connect.
    """
    host, port = target
    try:
        if not ipaddress.ip_address(host).is_loopback:
            raise ReplayError(f"target {host} is not a loopback address")
    except ValueError:
        raise ReplayError(f"target {host!r} is not an IP address") from None
    if not (math.isfinite(speed) and speed > 0):
        raise ReplayError(f"speed {speed}: expected a positive number")
    if not 1 <= loops <= MAX_LOOPS:
        raise ReplayError(f"loop {loops}: expected 1 to {MAX_LOOPS}")
    if peers is not None and not 1 <= peers <= MAX_PEERS:
        raise ReplayError(f"peers {peers}: expected 1 to {MAX_PEERS}")
    try:
        plan = await trio.to_thread.run_sync(scan_trace, path, on_problem)
    except (OSError, ValueError) as exc:
        raise ReplayError(f"cannot read the trace: {exc}") from exc
    if not plan.records:
        raise ReplayError(f"{path}: the trace holds no messages")
    count = peers if peers is not None else min(len(plan.connections), DEFAULT_PEER_CAP)
    timing = Timing()
    counters = RouterCounterReader(admin, token)
    try:
        with trio.fail_after(connect_timeout):
            links = await _connect_all(target, count, backlog_limit, timing)
    except trio.TooSlowError:
        raise ReplayError(f"the peers were not connected within {connect_timeout:g} s") from None
    route = {connection: links[i % count] for i, connection in enumerate(plan.connections)}
    counts = _Counts()
    errors: list[str] = []
    stop = control or ReplayControl()
    try:
        async with trio.open_nursery() as readers:
            for link in links:
                readers.start_soon(link.read_loop)
            await counters.read_before()
            start = trio.current_time()
            with trio.CancelScope() as drain:
                async with trio.open_nursery() as writers:
                    for link in links:
                        writers.start_soon(link.write_loop)
                    with stop.scope():
                        await _schedule(
                            path, plan, route, start, speed, loops, late_after, counts, timing
                        )
                    drain.deadline = trio.current_time() + drain_timeout
                    for link in links:
                        link.finish()
            finished = trio.current_time()
            if drain.cancelled_caught:
                errors.append(f"not everything reached the target within {drain_timeout:g} s")
            with stop.scope():
                await _settle(timing, settle)
            await counters.read_after()
            readers.cancel_scope.cancel()
    finally:
        for link in links:
            await link.aclose()
    for link in links:
        counts.dropped += link.lost
        counts.sent -= link.lost
        if link.error is not None:
            errors.append(link.error)
    return ReplaySummary(
        target=f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
        peers=count,
        loops=loops,
        speed=speed,
        sent=counts.sent,
        late=counts.late,
        dropped=counts.dropped,
        skipped=counts.skipped,
        duration=finished - start,
        errors=tuple(errors),
        interrupted=control is not None and control.interrupted,
        sent_by_type=counts_by_type_name(counts.by_type),
        copies=counts_by_type_name(timing.copies),
        duplicates=counts_by_type_name(timing.duplicates),
        replies=counts_by_type_name(timing.replies),
        untimed=timing.untimed,
        latency=timing.book.summaries(),
        negative_samples=timing.book.negative,
        router=counters.reconcile(
            counts_by_type_name(
                [
                    a + b + c
                    for a, b, c in zip(
                        timing.copies, timing.duplicates, timing.replies, strict=True
                    )
                ]
            )
        ),
    )


async def _settle(timing: Timing, longest: float) -> None:
    """Read on (the readers run) until nothing of ours came for :data:`SETTLE_QUIET`
    seconds, or ``longest`` seconds passed."""
    deadline = trio.current_time() + longest
    quiet_from = trio.current_time()
    while trio.current_time() < deadline:
        last = max(timing.last_arrival, quiet_from)
        if trio.current_time() - last >= SETTLE_QUIET:
            return
        await trio.sleep(0.05)


async def _schedule(
    path: Path,
    plan: TracePlan,
    route: dict[int, _Peer],
    start: float,
    speed: float,
    loops: int,
    late_after: float,
    counts: _Counts,
    timing: Timing,
) -> None:
    """Hand every record to its peer at its time; never waits for the target."""
    current_time = trio.current_time
    dirty: set[_Peer] = set()
    now = current_time()
    handled = 0
    fallback = next(iter(route.values()))
    for loop in range(loops):
        offset = loop * plan.period - plan.first
        # Problems were reported by the first pass; a file that changed since is
        # replayed as it now reads.
        for at, connection, payload_type, wire in read_wire(path, on_problem=_ignore):
            if payload_type == _BYE:
                counts.skipped += 1
                continue
            due = start + (at + offset) / speed
            if due - now > EARLY_SLACK:
                _wake(dirty)
                await trio.sleep_until(due)
                now = current_time()
            elif now - due > late_after:
                counts.late += 1
            if loop:
                wire = loop_guid(wire[:16], loop) + wire[16:]
            peer = route.get(connection, fallback)
            if peer.offer(wire):
                counts.sent += 1
                counts.by_type[payload_type] += 1
                # From the schedule when late, from the hand-over when early: never a
                # stamp in the future (see traffic_models.latency).
                timing.sent(wire, peer.index, min(now, due))
                dirty.add(peer)
            else:
                counts.dropped += 1
            handled += 1
            if handled % CHECKPOINT_EVERY == 0:
                _wake(dirty)
                await trio.lowlevel.checkpoint()
                now = current_time()
    _wake(dirty)


def _wake(peers: set[_Peer]) -> None:
    for peer in peers:
        peer.wake()
    peers.clear()


def _ignore(problem: TraceProblem) -> None:
    """Later passes stay quiet: the first pass (:func:`scan_trace`) reported everything."""


__all__: Sequence[str] = [
    "ReplayControl",
    "ReplayError",
    "ReplaySummary",
    "TracePlan",
    "loop_guid",
    "parse_target",
    "replay",
    "scan_trace",
]
