"""Replies in a flood: sinks that answer the marked messages, a source that counts what
comes back, and leaves with QRP tables behind the server.

A router carries replies back along the path of the ping or query they answer (pongs,
query hits), and an ultrapeer passes queries to its leaves by their QRP tables: neither
shows in a flood whose sinks only count bytes and that has no leaves. Doing either at a
million messages a second in the client's one Python process would make the client the
limit, so the work is kept to what C does:

* **Marked messages.** A share of the source's pings and queries are the wire's marked
  ones (:class:`~router_bench.peers.Wire`: the mark is in the payload). A sink finds
  the copies the server forwarded to it with ``bytes.find`` on the copy's header tail
  and payload (type, TTL 1, hops 1, length, payload: no random GUID byte can match
  it), and answers each with a pre-encoded reply given that copy's GUID: a pong for a
  ping, a query hit for a query, as :class:`traffic_models.responder.Responder` does
  (TTL hops + 1, hops + 2 for a hit, hops 0). Replies are handed to a sender task
  through a bounded channel, so a sink never stops reading to write (a server that
  stops reading from everyone while one peer's buffer is full, as asyncio servers do,
  would otherwise deadlock with it); a reply that finds the channel full is counted as
  not sent.
* **Counting what comes back.** The source counts the replies routed back to it the
  same way: ``bytes.count`` of each reply's header tail as the server forwards it (TTL
  - 1, hops 1) and payload.
* **Leaves.** ``LeafPlan.build`` makes the libraries and QRP tables of
  :class:`gnutella_router.lab.traffic.leaf.LeafServent` leaves (Zipf-drawn file names, as
  the test network's leaves), and gives a few of them a file whose name holds the
  word the benchmark's queries search for, so the server must look every query up in
  every leaf's table and pass it to those few. Leaves connect with a leaf's handshake,
  send their tables, and count bytes.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import trio

from gnutella_router.lab.traffic.leaf import LeafServent, SharedFile, draw_library, query_matches
from protocol.codec import encode_message
from protocol.messages import (
    Message,
    Pong,
    QueryHit,
    QueryHitDescriptor,
    QueryHitResult,
    make_guid,
)
from protocol.qrp import query_words
from scripts.router_bench.peers import (
    GTK_LIKE_HEADERS,
    RECEIVE_SIZE,
    SEARCH,
    USER_AGENT,
    Peer,
    Wire,
    final_bye,
    peer_kind,
)
from traffic_models.content import Vocabulary

REPLY_QUEUE = 256
"""Reads' worth of replies a sink holds for its sender before it counts them unsent."""
LEAF_FILES = 20
"""Files each leaf shares, as the test network's leaves (``--leaf-files``)."""
_VENDOR = b"SYNT"
_OPEN_DATA = bytes((0x1C, 0x01))


def _forwarded(template: bytes) -> bytes:
    """What identifies a copy of ``template`` (a message with TTL 2, hops 0) as a server
    forwards it: type, TTL 1, hops 1, length and payload."""
    return bytes((template[16], template[17] - 1, template[18] + 1)) + template[19:]


@dataclass(frozen=True, slots=True)
class Answers:
    """What the sinks answer and how the source recognises what comes back."""

    asked: tuple[bytes, ...]
    """Per marked message kind, a forwarded copy's header tail and payload."""
    replies: tuple[bytes, ...]
    """Per kind, the reply less its GUID (header tail and payload), sent with hops 0."""
    returned: tuple[bytes, ...]
    """Per kind, the reply's header tail and payload as the server routes it on."""

    @classmethod
    def build(cls, wire: Wire) -> Answers:
        pong = Pong(port=20_000, ip="127.0.0.1", files=20, kbytes=40_000)
        hit = QueryHit(
            port=20_000,
            ip="127.0.0.1",
            speed=1000,
            results=(QueryHitResult(1, 3_000_000, b"blue_in_green.mp3"),),
            servent_guid=make_guid(bytes(range(16))),
            descriptor=QueryHitDescriptor(_VENDOR, _OPEN_DATA),
        )
        # A copy arrives with hops 1: a pong goes back with TTL 2, a hit with TTL 3.
        replies = (
            encode_message(Message(bytes(16), 2, 0, pong))[16:],
            encode_message(Message(bytes(16), 3, 0, hit))[16:],
        )
        returned = tuple(bytes((r[0], r[1] - 1, r[2] + 1)) + r[3:] for r in replies)
        return cls((_forwarded(wire.marked_ping), _forwarded(wire.marked_query)), replies, returned)


def marked_slots(count: int, share: float, seed: int) -> list[bool]:
    """Which of ``count`` slots send a marked message: ``share`` of them, spread evenly
    in a seeded order (independent of which slots are queries)."""
    marked = round(count * share)
    slots = [True] * marked + [False] * (count - marked)
    random.Random(f"marked:{seed}").shuffle(slots)
    return slots


@dataclass(slots=True)
class ReplyCounts:
    """Replies a peer sent, could not send, or received routed back."""

    sent: int = 0
    unsent: int = 0
    returned: int = 0


async def answer_and_count(peer: Peer, answers: Answers, counts: ReplyCounts) -> None:
    """A sink: count bytes, answer each marked copy; runs until the connection ends or
    the run is cancelled."""
    send_channel, receive_channel = trio.open_memory_channel[bytes](REPLY_QUEUE)

    async def send_replies() -> None:
        async with receive_channel:
            async for data in receive_channel:
                try:
                    await peer.stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_replies)
        async with send_channel:
            await _read_and_answer(peer, answers, counts, send_channel)
        nursery.cancel_scope.cancel()


async def _read_and_answer(
    peer: Peer,
    answers: Answers,
    counts: ReplyCounts,
    replies: trio.MemorySendChannel[bytes],
) -> None:
    sock = peer.stream.socket
    buffer = bytearray(RECEIVE_SIZE)
    view = memoryview(buffer)
    inflater = peer.inflater
    keep = 16 + max(map(len, answers.asked)) - 1
    tail = last = b""
    pairs = tuple(zip(answers.asked, answers.replies, strict=True))
    try:
        while True:
            n = await sock.recv_into(buffer)
            if not n:
                ending = "" if inflater else final_bye(last)
                peer.closed = f"{peer.name} closed by the server{ending}"
                return
            data = bytes(view[:n]) if inflater is None else inflater.decompress(view[:n])
            last = data
            peer.received += len(data)
            if not peer.probed:
                peer.look_for_probe(data)
            # The last bytes of the previous read are kept, so a copy split across two
            # reads is found with its GUID; one that ended inside them was answered
            # then, so only copies that end in the new bytes are looked for.
            window = tail + data
            fresh = len(tail)
            out: list[bytes] = []
            for asked, reply in pairs:
                find = window.find
                at = find(asked, max(16, fresh - len(asked) + 1))
                while at >= 0:
                    out.append(window[at - 16 : at] + reply)
                    at = find(asked, at + len(asked))
            tail = window[-keep:]
            if out:
                try:
                    replies.send_nowait(b"".join(out))
                    counts.sent += len(out)
                except trio.WouldBlock:
                    counts.unsent += len(out)
    except (trio.ClosedResourceError, OSError) as exc:
        peer.closed = f"{peer.name} lost: {exc.__class__.__name__}"


async def count_returned(peer: Peer, answers: Answers, counts: ReplyCounts) -> None:
    """The source: count bytes and the replies routed back to it."""
    sock = peer.stream.socket
    buffer = bytearray(RECEIVE_SIZE)
    view = memoryview(buffer)
    keep = max(map(len, answers.returned)) - 1
    tail = last = b""
    try:
        while True:
            n = await sock.recv_into(buffer)
            if not n:
                peer.closed = f"{peer.name} closed by the server{final_bye(last)}"
                return
            peer.received += n
            last = bytes(view[:n])
            window = tail + last
            counts.returned += sum(window.count(pattern) for pattern in answers.returned)
            # Keep less than a whole pattern, so that none is counted twice.
            tail = window[-keep:]
    except (trio.ClosedResourceError, OSError) as exc:
        peer.closed = f"{peer.name} lost: {exc.__class__.__name__}"


GTK_LIKE_LEAF_HEADERS: tuple[tuple[str, str], ...] = (
    *(
        (name, value)
        for name, value in GTK_LIKE_HEADERS
        if name not in ("X-Ultrapeer", "X-Degree", "X-Ultrapeer-Query-Routing")
    ),
    ("X-Ultrapeer", "False"),
)
"""gtk-gnutella 1.2.3's handshake as a leaf: the ultrapeer's, less what only an
ultrapeer announces, and ``X-Ultrapeer: False``."""
MINIMAL_LEAF_HEADERS: tuple[tuple[str, str], ...] = (
    ("User-Agent", USER_AGENT),
    ("X-Ultrapeer", "False"),
    ("X-Query-Routing", "0.1"),
    ("Bye-Packet", "0.1"),
)
"""A leaf that announces nothing but QRP."""


@dataclass(frozen=True, slots=True)
class LeafPlan:
    """Leaves' QRP tables, encoded once, and which of them the benchmark's queries match."""

    tables: tuple[bytes, ...]
    """Per leaf, its RESET and PATCH messages, joined."""
    matching: tuple[int, ...]
    """The leaves whose tables and libraries hold :data:`~router_bench.peers.SEARCH`."""

    @classmethod
    def build(cls, count: int, share_matching: float, seed: int = 1) -> LeafPlan:
        """``count`` leaves of :data:`LEAF_FILES` Zipf-named files each; ``share_matching``
        of them (at least one when ``count`` is) also share a file named for the
        benchmark's search."""
        vocabulary = Vocabulary()
        rng = random.Random(f"bench-leaves:{seed}")
        wanted = math.ceil(count * share_matching)
        tables = []
        matching = []
        search = SEARCH.decode()
        for index in range(count):
            library = list(draw_library(vocabulary, rng, LEAF_FILES))
            if index < wanted:
                name = f"{search}_standards.mp3".encode()
                keywords = frozenset(query_words(name.decode()))
                library.append(SharedFile(len(library) + 1, name, keywords, 4_000_000))
            leaf = LeafServent(f"leaf{index:02d}", library, seed=seed)
            tables.append(b"".join(leaf.table_messages()))
            if query_matches(query_words(search), leaf.library):
                matching.append(index)
        return cls(tuple(tables), tuple(matching))

    def headers(self) -> list[tuple[str, str]]:
        """A leaf's handshake for the current peer kind."""
        fixed = GTK_LIKE_LEAF_HEADERS if peer_kind() == "gtk-like" else MINIMAL_LEAF_HEADERS
        return [*fixed, ("GUID", random.randbytes(16).hex())]
