"""The benchmark's client side: handshaken peers, pre-encoded floods, time-stamped bursts.

Nothing here parses on the throughput path: a source writes pre-built 64 KiB chunks and
a sink counts bytes, so the client costs the machine as little as possible.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import trio

from gnutella_router.net.handshaking import next_handshake_event
from protocol.codec import encode_message
from protocol.constants import HEADER_SIZE, MessageType
from protocol.errors import RemoteProtocolError
from protocol.ggep import GGEPBlock, GGEPExtension
from protocol.handshake import (
    HandshakeComplete,
    HandshakeEvent,
    HandshakeRejected,
    HandshakeResponse,
    Initiator,
)
from protocol.header import HEADER_STRUCT
from protocol.messages import Message, Ping, Query, random_guid
from scripts.runner import RunError

SINKS = 3
SEND_CHUNK = 64 * 1024
RECEIVE_SIZE = 1 << 20
BLAST_MESSAGES = 65_536
"""Messages in the pre-encoded throughput buffer; GUIDs are renewed on every pass."""
SEND_TTL = 2
SEARCH = b"jazz"
"""What the benchmark's queries search for (the text is cut to keep them 30 bytes)."""
MARKED_SEARCH = b"blue"
"""What the marked queries, those the sinks of a run with replies answer, search for."""
MAX_BURST = 1_000
PROBE_INTERVAL = 0.25
USER_AGENT = "bench-router/1.0"
LATENCY_HIGHEST_US = 60_000_000
BYE = MessageType.BYE


BenchError = RunError
"""A run could not be measured (or its server not started); the message says why."""


PROBE_MARK = os.urandom(6)
"""Bytes 9-14 of every probe's GUID in this process: what a peer looks for to know that
a probe reached it."""
PROBE_SEEN = PROBE_MARK + b"\x00" + bytes((MessageType.QUERY,))
"""A probe as a peer receives it: the end of its GUID and its type byte."""
_probes = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Wire:
    """A ping and a query of the same size, encoded with an all-zero GUID; and a marked
    ping and query of that size too, which the sinks of a run with replies answer
    (``router_bench.replies``): the marks are in the payload (the query searches
    ``MARKED_SEARCH``, the ping's GGEP "SCP" is 2), so GUIDs stay as random as a
    network's and a sink finds what to answer with one ``bytes.find``."""

    size: int
    ping: bytes
    query: bytes
    marked_ping: bytes
    marked_query: bytes

    @classmethod
    def build(cls) -> Wire:
        def ping_of(scp: bytes) -> bytes:
            ggep = GGEPBlock((GGEPExtension("SCP", scp),))
            return encode_message(Message(bytes(16), SEND_TTL, 0, Ping(ggep)))

        def query_of(words: bytes) -> bytes:
            return encode_message(Message(bytes(16), SEND_TTL, 0, Query(words)))

        ping = ping_of(b"\x01")
        search_length = len(ping) - HEADER_SIZE - 3  # flags word, text, NUL
        query = query_of((SEARCH * 8)[:search_length])
        marked = query_of((MARKED_SEARCH * 8)[:search_length])
        if not len(ping) == len(query) == len(marked):
            raise BenchError(f"ping is {len(ping)} bytes but query {len(query)}")
        return cls(len(ping), ping, query, ping_of(b"\x02"), marked)

    def probe(self) -> bytes:
        """A query whose GUID ends in :data:`PROBE_MARK`, bytes 0-7 a count: no latency
        run times it (its "send time" is long past), every server broadcasts it (pings
        from a pong-caching peer are answered, not broadcast), and each is new to the
        server's duplicate tables."""
        guid = next(_probes).to_bytes(8, "big") + b"\xff" + PROBE_MARK + b"\x00"
        return guid + self.query[16:]


def message_kinds(count: int, query_share: float, seed: int) -> list[bool]:
    """True for a query, False for a ping, in a seeded order with the exact shares."""
    queries = round(count * query_share)
    kinds = [True] * queries + [False] * (count - queries)
    random.Random(seed).shuffle(kinds)
    return kinds


class Blast:
    """The throughput source's buffer: ``count`` messages, each with a unique GUID; with
    ``marked``, those slots send the wire's marked ping or query instead.

    GUID layout: bytes 0-3 random for this process, 4-7 the slot, 8 = 0xFF, 9-12 the
    pass number, 13-14 random, 15 = 0. A pass rewrites bytes 9-12 of every slot with
    four extended-slice assignments, so each pass is fresh to the router's duplicate
    tables at no per-message cost. With ``random_guids``, a pass also draws bytes 0-7
    and 13-14 of every GUID afresh (ten more assignments, in C): GUIDs as random as a
    real network's, which matters where the router deflates (repeated bytes deflate
    several times faster than random ones).
    """

    def __init__(
        self,
        wire: Wire,
        kinds: Sequence[bool],
        *,
        random_guids: bool = False,
        marked: Sequence[bool] = (),
    ) -> None:
        self.random_guids = random_guids
        run = os.urandom(4)
        tail = os.urandom(2)
        parts = []
        marks = [*marked, *[False] * (len(kinds) - len(marked))]
        for slot, (is_query, mark) in enumerate(zip(kinds, marks, strict=True)):
            if mark:
                template = wire.marked_query if is_query else wire.marked_ping
            else:
                template = wire.query if is_query else wire.ping
            guid = run + slot.to_bytes(4, "big") + b"\xff" + bytes(4) + tail + b"\x00"
            parts.append(guid + template[16:])
        self.buffer = bytearray(b"".join(parts))
        self.count = len(kinds)
        self.size = wire.size
        self.passes = 0

    def next_pass(self) -> memoryview:
        self.passes += 1
        for offset, value in enumerate(self.passes.to_bytes(4, "big"), start=9):
            self.buffer[offset :: self.size] = bytes((value,)) * self.count
        if self.random_guids:
            for offset in (*range(8), 13, 14):
                self.buffer[offset :: self.size] = os.urandom(self.count)
        return memoryview(self.buffer)


class Stamper:
    """Latency messages: GUID bytes 0-7 the send time, 8 = 0xFF, 9-14 a sequence, 15 = 0."""

    def __init__(self, wire: Wire, kinds: Sequence[bool]) -> None:
        self.bodies = [(wire.query if k else wire.ping)[16:] for k in kinds]
        self.kinds = list(kinds)
        self.sequence = itertools.count(int.from_bytes(os.urandom(4), "big"))
        self.queries = 0
        """Queries sent so far."""

    def burst(self, count: int, now_ns: int) -> bytes:
        stamp = now_ns.to_bytes(8, "big") + b"\xff"
        bodies = self.bodies
        kinds = self.kinds
        parts = []
        queries = 0
        for _ in range(count):
            n = next(self.sequence)
            parts.append(stamp + (n & 0xFFFF_FFFF_FFFF).to_bytes(6, "big") + b"\x00")
            parts.append(bodies[n % len(bodies)])
            queries += kinds[n % len(kinds)]
        self.queries += queries
        return b"".join(parts)


@dataclass(slots=True)
class Peer:
    """One handshaken connection and what it has received."""

    stream: trio.SocketStream
    name: str
    received: int = 0
    """Bytes received (after inflating, when the server deflates to this peer)."""
    closed: str | None = None
    inflater: Any = None
    """A ``zlib.decompressobj`` when the server deflates to this peer."""
    probed: bool = False
    """A probe (:meth:`Wire.probe`) has reached this peer."""
    probe_tail: bytes = b""

    def look_for_probe(self, data: bytes | bytearray | memoryview) -> None:
        """Whether ``data``, the next bytes received, end a probe (one split across two
        reads is found too)."""
        window = self.probe_tail + bytes(data)
        if PROBE_SEEN in window:
            self.probed = True
            self.probe_tail = b""
        else:
            self.probe_tail = window[1 - len(PROBE_SEEN) :]

    async def aclose(self) -> None:
        with (
            trio.CancelScope(shield=True),
            trio.move_on_after(1.0),
            contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError),
        ):
            await self.stream.aclose()


GTK_LIKE_HEADERS: tuple[tuple[str, str], ...] = (
    ("User-Agent", "gtk-gnutella/1.2.3 (2024-03-03; Topless; Linux x86_64)"),
    ("Pong-Caching", "0.1"),
    ("Bye-Packet", "0.1"),
    ("GGEP", "0.5"),
    ("Vendor-Message", "0.2"),
    ("X-Query-Routing", "0.2"),
    ("X-Requeries", "False"),
    ("X-Ultrapeer", "True"),
    ("X-Ultrapeer-Query-Routing", "0.1"),
    ("X-Degree", "46"),
    ("X-Max-TTL", "4"),
    ("X-Dynamic-Querying", "0.1"),
    ("X-Ext-Probes", "0.1"),
    ("X-Features", "sflag/0.1, HSEP/0.2"),
)
"""What gtk-gnutella 1.2.3 announces as an ultrapeer (tests/support/gtk_vectors.py has the
recorded handshake), less what names one host (Node, Remote-IP, X-Token, X-Live-Since)
and Accept-Encoding, which ``connect`` adds when asked to: every real servent announces
Pong-Caching, GGEP and Vendor-Message, so these are the peers a figure must count for."""
MINIMAL_HEADERS: tuple[tuple[str, str], ...] = (
    ("User-Agent", USER_AGENT),
    ("X-Ultrapeer", "True"),
    ("Bye-Packet", "0.1"),
)
"""An ultrapeer that announces nothing else: no pong caching, GGEP or vendor messages."""
PEER_KINDS = {"gtk-like": GTK_LIKE_HEADERS, "minimal": MINIMAL_HEADERS}

_peer_kind = "gtk-like"


def use_peers(kind: str) -> None:
    """Which handshake the benchmark's peers send from now on (a key of PEER_KINDS)."""
    global _peer_kind
    if kind not in PEER_KINDS:
        raise ValueError(f"unknown peer kind {kind!r}: one of {', '.join(PEER_KINDS)}")
    _peer_kind = kind


def peer_kind() -> str:
    return _peer_kind


def pings_answered() -> bool:
    """Whether the current peers announce Pong-Caching: a router answers their pings
    (with its pong, and cached ones at most once a second) and does not broadcast them,
    so only their queries reach the sinks."""
    return any(name == "Pong-Caching" for name, _ in PEER_KINDS[_peer_kind])


def peer_headers() -> list[tuple[str, str]]:
    return [*PEER_KINDS[_peer_kind], ("GUID", random_guid().hex())]


async def _next_event(stream: trio.SocketStream, initiator: Initiator) -> HandshakeEvent:
    try:
        return await next_handshake_event(stream, initiator)
    except RemoteProtocolError as exc:
        raise BenchError(f"handshake failed: {exc}") from exc


async def connect(
    address: tuple[str, int],
    name: str,
    *,
    deflate: bool = False,
    headers: Sequence[tuple[str, str]] | None = None,
) -> Peer:
    """TCP connect and the 0.6 handshake as an ultrapeer of the current kind, or with
    ``headers`` instead (a leaf's); with ``deflate``, asking the server to deflate what
    it sends (we send plain)."""
    stream = await trio.open_tcp_stream(*address)
    try:
        initiator = Initiator()
        asked = [("Accept-Encoding", "deflate")] if deflate else []
        announced = peer_headers() if headers is None else list(headers)
        await stream.send_all(initiator.start([*announced, *asked]))
        event = await _next_event(stream, initiator)
        if isinstance(event, HandshakeRejected):
            raise BenchError(f"handshake refused: {event.status_code} {event.reason}")
        assert isinstance(event, HandshakeResponse), event
        await stream.send_all(initiator.confirm())
        complete = await _next_event(stream, initiator)
        assert isinstance(complete, HandshakeComplete), complete
        if complete.decompress_incoming != deflate:
            raise BenchError(
                "the server deflates although deflate was not asked for"
                if complete.decompress_incoming
                else "the server does not deflate although asked to"
            )
    except BaseException:
        await Peer(stream, name).aclose()
        raise
    if not deflate:
        return Peer(stream, name, received=len(complete.trailing_data))
    inflater = zlib.decompressobj()
    received = len(inflater.decompress(complete.trailing_data))
    return Peer(stream, name, received=received, inflater=inflater)


def final_bye(data: bytes | bytearray) -> str:
    """Describe the Bye that ends ``data`` (the last bytes read before the end), if any."""
    end = len(data)
    for start in range(max(0, end - HEADER_SIZE - 512), end - HEADER_SIZE - 1):
        _, payload_type, _, _, length = HEADER_STRUCT.unpack_from(data, start)
        if payload_type == BYE and start + HEADER_SIZE + length == end and length >= 2:
            payload = bytes(data[start + HEADER_SIZE : end])
            reason = payload[2:].split(b"\x00", 1)[0].decode("utf-8", "replace")
            return f" after Bye {int.from_bytes(payload[:2], 'little')} {reason!r}"
    return ""


async def count_bytes(peer: Peer) -> None:
    """Read and count until the connection ends; one reused buffer, no parsing (a
    deflated stream is inflated, in C, and its inflated bytes counted)."""
    sock = peer.stream.socket
    buffer = bytearray(RECEIVE_SIZE)
    view = memoryview(buffer)
    inflater = peer.inflater
    last = 0
    try:
        while True:
            n = await sock.recv_into(buffer)
            if not n:
                ending = "" if inflater else final_bye(buffer[:last])
                peer.closed = f"{peer.name} closed by the server{ending}"
                return
            if inflater is None:
                peer.received += n
                if not peer.probed:
                    peer.look_for_probe(view[:n])
            else:
                data = inflater.decompress(view[:n])
                peer.received += len(data)
                if not peer.probed:
                    peer.look_for_probe(data)
            last = n
    except (trio.ClosedResourceError, OSError) as exc:
        peer.closed = f"{peer.name} lost: {exc.__class__.__name__}"


async def read_until_probed(peer: Peer, reached: Callable[[], None]) -> None:
    """Read until a probe has arrived, then call ``reached`` and stop."""
    try:
        while not peer.probed:
            data = await peer.stream.receive_some(4096)
            if not data:
                peer.closed = f"{peer.name} closed by the server"
                return
            peer.received += len(data)
            peer.look_for_probe(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
        peer.closed = f"{peer.name} lost: {exc.__class__.__name__}"
        return
    reached()


async def probe_until_reached(sender: Peer, receivers: Sequence[Peer], wire: Wire) -> None:
    """Broadcast probe queries from ``sender`` until every receiver has received one.

    This is how the client knows that the server has registered every connection (its
    own handshake finishes before the server has read the last step), for the router
    and the baselines alike: the receivers look for the probe itself, since a server
    sends new peers messages of its own; no latency run times a probe. Every receiver
    must be reading (``count_bytes`` or another reader that calls
    :meth:`Peer.look_for_probe`).
    """
    for peer in receivers:
        peer.probed = False
        peer.probe_tail = b""
    next_probe = trio.current_time()
    while True:
        missing = [p for p in receivers if not p.probed]
        closed = [p.closed for p in missing if p.closed]
        if closed:
            raise BenchError(f"a connection ended before the probe arrived: {closed[0]}")
        if not missing:
            return
        if trio.current_time() >= next_probe:
            await sender.stream.send_all(wire.probe())
            next_probe = trio.current_time() + PROBE_INTERVAL
        await trio.sleep(0.01)


async def reach(sender: Peer, receivers: Sequence[Peer], wire: Wire) -> None:
    """Probe until every receiver has read one message, then stop reading on them."""
    remaining = [len(receivers)]
    done = trio.Event()

    def reached() -> None:
        remaining[0] -= 1
        if not remaining[0]:
            done.set()

    async with trio.open_nursery() as nursery:
        for peer in receivers:
            peer.probed = False
            nursery.start_soon(read_until_probed, peer, reached)
        with trio.fail_after(60):
            await probe_until_reached(sender, receivers, wire)
        await done.wait()
