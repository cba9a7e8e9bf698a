"""A naive asyncio Gnutella router: the yardstick for ``scripts/bench_query_flood.py``.

Where ``scripts/baseline_forwarder.py`` is the least a process can do to pass the
benchmark's traffic, this is what a straightforward single-file router does: the
routing a Gnutella servent needs and nothing more, written the obvious way, with no
stages, no bounded queues of its own, no counters, no admission or slow-peer policy.
``gnutella-router`` is measured against it to see what its staged design and its
bookkeeping cost (or save) over the plain thing.

Per connection:

* The 0.6 handshake, minimally (as the baseline forwarder): the client's head, ``200
  OK``, the client's step 3.
* Per read: cut the bytes into messages with ``struct``; drop TTL 0 and TTL + hops over
  15; pings and queries are looked up by GUID in a route table (a dict per type, GUID ->
  the connection it came from): a GUID seen before is a duplicate and dropped, a new one
  is recorded, answered with a pong (pings), and forwarded with TTL - 1 and hops + 1
  (clamped to 7) to every other ultrapeer unless its TTL runs out. Pongs and query hits
  are sent back to the connection their ping or query came from, if it is still open.
  Everything else is dropped.
* What real servents announce is acted on as a router must (read from the handshake,
  :class:`baseline_forwarder.Announced`): a peer that announced ``Pong-Caching`` (every
  real servent does) and a leaf have their pings answered with our pong and not
  broadcast (no pong cache: ours alone); a leaf (``X-Ultrapeer: False``) sends its QRP
  table (parsed by :class:`protocol.qrp.QrpReceiver`) and is passed the queries that
  table matches (the query's words hashed once per read, then looked up in each leaf's
  table), with TTL - 1 but at least 1 (its last hop), and nothing else; a peer that
  asked for deflate gets deflated writes, as from the plain forwarder.
* Writes, two ways (``--writes``): ``per-message``, the obvious way, writes each message
  to each destination as it is routed (asyncio's transport sends at once while its
  buffer is empty, so that is a ``send`` per message per destination); ``per-read``
  (the default) collects a read's messages and gives each destination one
  ``transport.write`` of them all, which is already a batching router's main trick.
* The tables are simply cleared when they reach 100,000 entries.
* The standard asyncio flow control: while any destination's buffer is over its high
  mark, every connection stops reading.

Run (loopback only):

    .venv/bin/python scripts/reference_router.py --listen 127.0.0.1:6347 [--writes per-message]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import struct
import sys
from collections.abc import Callable, Sequence
from typing import Any

from baseline_forwarder import MAX_HEAD, MAX_PAYLOAD, Announced, loopback_address, write

from protocol.codec import parse_payload
from protocol.errors import ProtocolError
from protocol.messages import QrpPatch, QrpReset
from protocol.qrp import QrpReceiver, qrp_hashcode, query_words

HEADER = struct.Struct("<16sBBBI")
HEADER_SIZE = HEADER.size
TABLE_LIMIT = 100_000
MAX_TTL = 7
HARD_TTL = 15
PING, PONG, QUERY, QUERY_HIT, QRP = 0x00, 0x01, 0x80, 0x81, 0x30
# Our pong: port 6346, IP 127.0.0.1, no files.
PONG_PAYLOAD = struct.pack("<H4sII", 6346, bytes((127, 0, 0, 1)), 0, 0)


class Router:
    """Shared state: live connections, route tables, the flow-control gate."""

    def __init__(self, write_per_message: bool = False) -> None:
        self.write_per_message = write_per_message
        self.peers: set[Peer] = set()
        self.routes: dict[int, dict[bytes, Peer]] = {PING: {}, QUERY: {}}
        self.blocked_writers = 0

    def pause_all(self) -> None:
        for peer in self.peers:
            peer.pause_reading()

    def resume_all(self) -> None:
        for peer in self.peers:
            peer.resume_reading()


class Peer(asyncio.Protocol):
    def __init__(self, router: Router) -> None:
        self.router = router
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.step = 1  # 1: reading the request, 3: reading the confirmation, 0: messages
        self.writing_blocked = False
        self.reading_paused = False
        self.open = True
        self.leaf = False
        self.pong_caching = False
        self.deflater: Any = None
        self.qrp: QrpReceiver | None = None
        """A leaf's QRP tables; ``qrp.table`` is its last complete one."""

    def write(self, data: bytes) -> None:
        if self.transport is not None:
            write(self.transport, self.deflater, data)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        router = self.router
        router.peers.discard(self)
        if self.writing_blocked:
            self.writing_blocked = False
            router.blocked_writers -= 1
            if router.blocked_writers == 0:
                router.resume_all()

    def pause_writing(self) -> None:
        self.writing_blocked = True
        self.router.blocked_writers += 1
        if self.router.blocked_writers == 1:
            self.router.pause_all()

    def resume_writing(self) -> None:
        self.writing_blocked = False
        self.router.blocked_writers -= 1
        if self.router.blocked_writers == 0:
            self.router.resume_all()

    def data_received(self, data: bytes) -> None:
        if self.step:
            self.handshake(data)
        else:
            self.route(data)

    def handshake(self, data: bytes) -> None:
        assert self.transport is not None
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_HEAD:
                self.transport.close()
            return
        head = bytes(self.buffer[:end])
        rest = bytes(self.buffer[end + 4 :])
        self.buffer.clear()
        if self.step == 1:
            if not head.startswith(b"GNUTELLA CONNECT/0.6"):
                self.transport.close()
                return
            announced = Announced.read(head)
            self.leaf = announced.leaf
            self.pong_caching = announced.pong_caching or announced.leaf
            self.deflater = announced.deflater()
            if self.leaf:
                self.qrp = QrpReceiver()
            self.transport.write(announced.answer())
            self.step = 3
            if rest:
                self.handshake(rest)
            return
        if not head.startswith(b"GNUTELLA/0.6 200"):
            self.transport.close()
            return
        self.step = 0
        self.router.peers.add(self)
        if self.router.blocked_writers:
            self.pause_reading()
        if rest:
            self.route(rest)

    def route(self, data: bytes) -> None:
        """Route every whole message of this read."""
        buffer = self.buffer
        if buffer:
            buffer += data
            data = bytes(buffer)
            buffer.clear()
        routes = self.router.routes
        peers = self.router.peers
        ultrapeers = [p for p in peers if p is not self and not p.leaf]
        leaves = [
            (p, p.qrp.table)
            for p in peers
            if p is not self and p.qrp is not None and p.qrp.table is not None
        ]
        broadcast: list[bytes] = []
        replies: dict[Peer, list[bytes]] = {}
        hashcodes: dict[bytes, list[int]] = {}
        """Per query payload in this read, its words' QRP hash codes."""
        reply: Callable[[Peer, bytes], None]
        forward: Callable[[bytes], None]
        if self.router.write_per_message:

            def reply(peer: Peer, message: bytes) -> None:
                peer.write(message)

            def forward(message: bytes) -> None:
                for peer in ultrapeers:
                    peer.write(message)

        else:

            def reply(peer: Peer, message: bytes) -> None:
                replies.setdefault(peer, []).append(message)

            def forward(message: bytes) -> None:
                broadcast.append(message)

        position = 0
        available = len(data)
        while available - position >= HEADER_SIZE:
            guid, kind, ttl, hops, length = HEADER.unpack_from(data, position)
            if length > MAX_PAYLOAD:
                assert self.transport is not None
                self.transport.close()
                return
            start = position + HEADER_SIZE
            end = start + length
            if end > available:
                break
            position = end
            if kind == QRP and self.qrp is not None:
                self.take_table(data[start:end])
                continue
            if ttl == 0 or ttl + hops > HARD_TTL:
                continue
            payload = data[start:end]
            if kind in (PING, QUERY):
                table = routes[kind]
                if guid in table:
                    continue
                if len(table) >= TABLE_LIMIT:
                    table.clear()
                table[guid] = self
                if kind == PING:
                    pong = HEADER.pack(guid, PONG, hops + 1, 0, len(PONG_PAYLOAD))
                    reply(self, pong + PONG_PAYLOAD)
                    if self.pong_caching:
                        continue  # answered, not broadcast
                ttl = min(ttl, MAX_TTL - hops)
                if ttl > 1:
                    forward(HEADER.pack(guid, kind, ttl - 1, hops + 1, length) + payload)
                if kind == QUERY and leaves:
                    codes = hashcodes.get(payload)
                    if codes is None:
                        codes = hashcodes[payload] = query_hashcodes(payload)
                    copy = b""
                    for leaf, leaf_table in leaves:
                        if leaf_table.matches_hashcodes(codes):
                            copy = copy or (
                                HEADER.pack(guid, kind, max(ttl - 1, 1), hops + 1, length) + payload
                            )
                            reply(leaf, copy)
            elif kind in (PONG, QUERY_HIT):
                back = routes[PING if kind == PONG else QUERY].get(guid)
                if back is not None and back.open and ttl > 1:
                    reply(back, HEADER.pack(guid, kind, ttl - 1, hops + 1, length) + payload)
        if position < available:
            buffer += data[position:]
        for peer, messages in replies.items():
            peer.write(b"".join(messages))
        if broadcast:
            chunk = b"".join(broadcast)
            for peer in ultrapeers:
                peer.write(chunk)

    def take_table(self, payload: bytes) -> None:
        """A leaf's RESET or PATCH; a broken table is simply dropped."""
        assert self.qrp is not None
        try:
            message = parse_payload(QRP, payload)
            if isinstance(message, QrpReset | QrpPatch):
                self.qrp.receive(message)
        except ProtocolError:
            pass

    def pause_reading(self) -> None:
        if not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.reading_paused and self.transport is not None:
            self.reading_paused = False
            self.transport.resume_reading()


def query_hashcodes(payload: bytes) -> list[int]:
    """The QRP hash codes of a query's search words (none: it matches no table)."""
    end = payload.find(b"\x00", 2)
    text = payload[2 : end if end >= 0 else len(payload)]
    return [qrp_hashcode(word) for word in query_words(text.decode("utf-8", "replace"))]


async def serve(host: str, port: int, write_per_message: bool) -> None:
    router = Router(write_per_message)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Peer(router), host, port)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with server:
        await stop.wait()
    for peer in list(router.peers):
        if peer.transport is not None:
            peer.transport.abort()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--listen",
        type=loopback_address,
        default=("127.0.0.1", 6347),
        metavar="HOST:PORT",
        help="loopback address to accept peers on (default 127.0.0.1:6347)",
    )
    parser.add_argument(
        "--writes",
        choices=("per-read", "per-message"),
        default="per-read",
        help="one write per destination per read (default), or one per message",
    )
    args = parser.parse_args(argv)
    host, port = args.listen
    try:
        asyncio.run(serve(host, port, args.writes == "per-message"))
    except OSError as exc:
        print(f"reference_router: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
