"""The peers: a handshake from a chosen loopback address, the honest peers beside each
attack, and what they measure (the pinger's round trips, the pending queries' hits).

The honest peers are ultrapeers with gtk-gnutella's handshake (``router_bench``'s), as
the router's figures must count for real servents; they read and frame everything the
router sends them, answer its pings, and never deflate.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import trio

from gnutella_router.net.handshaking import next_handshake_event
from protocol.codec import encode_message
from protocol.constants import MessageType
from protocol.errors import HandshakeError, RemoteProtocolError
from protocol.framing import Frame, FrameDecoder
from protocol.handshake import HandshakeComplete, HandshakeRejected, HandshakeResponse, Initiator
from protocol.messages import Message, Ping, Pong, Query, QueryHit, QueryHitResult, random_guid
from scripts.router_attack.settings import (
    HANDSHAKE_TIMEOUT,
    HEARTBEAT_SECONDS,
    HIT_WAIT_SECONDS,
    HONEST_SOURCE,
    AttackError,
)
from scripts.router_bench.peers import GTK_LIKE_HEADERS, peer_headers
from scripts.router_fuzz.wire import (
    STREAM_ERRORS,
    RouterTarget,
    close_quietly,
    open_from,
    trailing_bye,
)

PING = MessageType.PING
PONG = MessageType.PONG
QUERY = MessageType.QUERY
QUERY_HIT = MessageType.QUERY_HIT
LEAF_HEADERS: tuple[tuple[str, str], ...] = (
    *(
        (name, "False" if name == "X-Ultrapeer" else value)
        for name, value in GTK_LIKE_HEADERS
        if name not in ("X-Ultrapeer-Query-Routing", "X-Degree")
    ),
)
"""gtk-gnutella's headers as a leaf: dynamic querying and QRP announced."""


def leaf_headers() -> list[tuple[str, str]]:
    return [*LEAF_HEADERS, ("GUID", random_guid().hex())]


class Refused(Exception):
    """The router answered the handshake with a status other than 200."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"{code} {reason}")
        self.code = code


async def handshake(
    target: RouterTarget,
    source: str,
    headers: Sequence[tuple[str, str]],
    *,
    deflate: bool = False,
) -> tuple[trio.SocketStream, HandshakeComplete]:
    """Connect from ``source`` and do the 0.6 handshake; with ``deflate``, ask for it
    both ways (what we send is then ours to deflate when ``compress_outgoing``).

    Raises:
        Refused: the router answered with another status.
        OSError, HandshakeError, trio.TooSlowError: the connection failed.
    """
    stream = await open_from(target, source)
    try:
        initiator = Initiator()
        asked = [("Accept-Encoding", "deflate")] if deflate else []
        with trio.fail_after(HANDSHAKE_TIMEOUT):
            await stream.send_all(initiator.start([*headers, *asked]))
            event = await next_handshake_event(stream, initiator)
            if isinstance(event, HandshakeRejected):
                raise Refused(event.status_code, event.reason)
            if not isinstance(event, HandshakeResponse):
                raise HandshakeError(f"unexpected handshake event {event!r}")
            await stream.send_all(initiator.confirm(deflate=deflate))
            complete = await next_handshake_event(stream, initiator)
            if not isinstance(complete, HandshakeComplete):
                raise HandshakeError(f"unexpected handshake event {complete!r}")
    except BaseException:
        await close_quietly(stream)
        raise
    return stream, complete


async def try_handshake(
    target: RouterTarget, source: str, headers: Sequence[tuple[str, str]]
) -> tuple[trio.SocketStream | None, str]:
    """A handshake whose failure is an outcome: the stream (or None) and what happened
    ("200", "409", "closed"...)."""
    try:
        stream, _ = await handshake(target, source, headers)
    except Refused as refusal:
        return None, str(refusal.code)
    except trio.TooSlowError:
        return None, "no answer"
    except (HandshakeError, RemoteProtocolError, *STREAM_ERRORS):
        return None, "closed"
    return stream, "200"


async def knock(target: RouterTarget, source: str, headers: Sequence[tuple[str, str]]) -> str:
    """Connect and handshake once more, as a peer that was closed would, and leave at
    once: what the router answered ("200", "403"...)."""
    stream, answer = await try_handshake(target, source, headers)
    if stream is not None:
        await close_quietly(stream)
    return answer


class HonestPeer:
    """A well-behaved servent from the trusted address: reads and frames all it is sent,
    answers the router's pings, and notes the queries and hits that reach it."""

    def __init__(self, name: str, *, leaf: bool = False) -> None:
        self.name = name
        self.leaf = leaf
        self.guid = random_guid()
        self.stream: trio.SocketStream | None = None
        self.decoder = FrameDecoder()
        self.send_lock = trio.Lock()
        self.queries: dict[bytes, Frame] = {}
        """Queries received, by GUID (the last copy)."""
        self.hits: set[bytes] = set()
        """GUIDs of the query hits received."""
        self.pongs: dict[bytes, trio.Event] = {}
        """Pings of ours waiting for their pong, by GUID."""
        self.arrived = trio.Event()
        """Set (and replaced) whenever a query or hit arrives."""
        self.closed_by_router: str | None = None
        self.leaving = False

    async def connect(self, target: RouterTarget, nursery: trio.Nursery) -> None:
        headers = leaf_headers() if self.leaf else peer_headers()
        headers = [(k, self.guid.hex() if k == "GUID" else v) for k, v in headers]
        try:
            self.stream, complete = await handshake(target, HONEST_SOURCE, headers)
        except (Refused, HandshakeError, RemoteProtocolError, trio.TooSlowError) as exc:
            raise AttackError(f"honest peer {self.name} could not connect: {exc}") from exc
        nursery.start_soon(self.read, complete.trailing_data)

    async def send(self, *messages: Message) -> None:
        assert self.stream is not None
        data = b"".join(encode_message(m) for m in messages)
        with contextlib.suppress(*STREAM_ERRORS):
            async with self.send_lock:
                await self.stream.send_all(data)

    async def read(self, trailing: bytes) -> None:
        """Read until the connection ends; an end we did not ask for is the router's."""
        async with trio.open_nursery() as replies:
            await self._read(trailing, replies)

    async def _read(self, trailing: bytes, replies: trio.Nursery) -> None:
        assert self.stream is not None
        tail = bytearray()
        try:
            if trailing:
                self.handle(self.decoder.receive_data(trailing), replies)
            while data := await self.stream.receive_some(1 << 20):
                tail = (tail + data)[-2048:]
                self.handle(self.decoder.receive_data(data), replies)
            if not self.leaving:
                code = trailing_bye(tail)
                self.closed_by_router = "closed" + (f" with Bye {code}" if code else "")
        except (RemoteProtocolError, *STREAM_ERRORS) as exc:
            if not self.leaving:
                self.closed_by_router = f"lost: {exc!r}"

    def handle(self, frames: list[Frame], replies: trio.Nursery) -> None:
        for frame in frames:
            kind = frame.payload_type
            if kind == PONG:
                waiting = self.pongs.pop(frame.guid, None)
                if waiting is not None:
                    waiting.set()
            elif kind == PING and frame.hops == 0:
                pong = Message(frame.guid, 1, 0, Pong(6346, "127.0.0.1", 0, 0))
                replies.start_soon(self.send, pong)  # the reader never waits on a write
            elif kind == QUERY:
                self.queries[frame.guid] = frame
                self.signal()
            elif kind == QUERY_HIT:
                self.hits.add(frame.guid)
                self.signal()

    def signal(self) -> None:
        self.arrived.set()
        self.arrived = trio.Event()

    async def wait_until(self, done: Callable[[], bool]) -> None:
        """Return once ``done()`` is true, looking again whenever a query or hit arrives."""
        while not done():
            await self.arrived.wait()

    async def ping(self) -> float:
        """One TTL-1 ping and its pong: the round trip in seconds."""
        guid = random_guid()
        answered = self.pongs[guid] = trio.Event()
        sent = trio.current_time()
        await self.send(Message(guid, 1, 0, Ping()))
        await answered.wait()
        return trio.current_time() - sent

    async def heartbeat(self) -> None:
        """A TTL-1 ping every :data:`HEARTBEAT_SECONDS`, pong or not: never idle."""
        while True:
            await self.send(Message(random_guid(), 1, 0, Ping()))
            await trio.sleep(HEARTBEAT_SECONDS)

    async def leave(self) -> None:
        self.leaving = True
        if self.stream is not None:
            await close_quietly(self.stream)


class Pinger:
    """The honest ultrapeer whose pings time the router: a TTL-1 ping, its pong (the
    router's own, answered on its routing path), 1 ms, the next; as in
    ``scripts/bench_dump_stall.py``."""

    def __init__(self, peer: HonestPeer) -> None:
        self.peer = peer
        self.trips: list[tuple[float, float]] = []
        self.waiting_since: float | None = None

    async def run(self) -> None:
        while True:
            self.waiting_since = trio.current_time()
            rtt = await self.peer.ping()
            self.trips.append((self.waiting_since, self.waiting_since + rtt))
            self.waiting_since = None
            await trio.sleep(0.001)

    def overlapping(self, start: float, end: float) -> list[float]:
        """Round trips that overlapped ``start``..``end``; a ping still unanswered counts
        for as long as it has waited."""
        trips = [b - a for a, b in self.trips if b >= start and a <= end]
        if self.waiting_since is not None and self.waiting_since <= end:
            trips.append(trio.current_time() - self.waiting_since)
        return trips


class PendingQueries:
    """Queries one honest peer leaves pending before the attack, and their hits, sent by
    another honest peer after it: a route the attack made the router forget is a hit
    that no longer comes back."""

    def __init__(self, asker: HonestPeer, answerer: HonestPeer, count: int) -> None:
        self.asker = asker
        self.answerer = answerer
        self.guids = {random_guid() for _ in range(count)}

    async def send(self) -> set[bytes]:
        """Send the queries; the GUIDs of those that reached the answerer."""
        queries = [
            Message(guid, 3, 0, Query(b"honest pending %d" % n))
            for n, guid in enumerate(sorted(self.guids))
        ]
        await self.asker.send(*queries)
        with trio.move_on_after(HIT_WAIT_SECONDS):
            await self.answerer.wait_until(lambda: self.guids <= self.answerer.queries.keys())
        return self.guids & self.answerer.queries.keys()

    async def answer(self, delivered: set[bytes]) -> int:
        """Hit every delivered query; how many of the hits never came back."""
        hit = QueryHit(
            6346, "127.0.0.1", 1000, (QueryHitResult(1, 1000, b"honest.ogg"),), self.answerer.guid
        )
        await self.answerer.send(*(Message(guid, 3, 0, hit) for guid in sorted(delivered)))
        with trio.move_on_after(HIT_WAIT_SECONDS):
            await self.asker.wait_until(lambda: delivered <= self.asker.hits)
        return len(delivered - self.asker.hits)
