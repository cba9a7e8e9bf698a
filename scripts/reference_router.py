"""A naive asyncio Gnutella router: the yardstick for ``scripts/bench_query_flood.py``.

Where ``scripts/baseline_forwarder.py`` is the least a process can do to pass the
benchmark's traffic, this is what a straightforward single-file router does: the
routing a Gnutella servent needs and nothing more, written the obvious way, with no
stages, no bounded queues of its own, no counters, no admission or slow-peer policy.
``gnutella-router`` is measured against it to see what its staged design and its
bookkeeping cost (or save) over the plain thing.

Per connection (listening, the handshake, framing, deflate, flow control and the
command line are the yardsticks' common part, ``scripts/yardstick.py``):

* The 0.6 handshake, minimally, as the baseline forwarder's.
* Per read: cut the bytes into messages with ``struct``; drop TTL 0 and TTL + hops over
  15; pings and queries are looked up by GUID in a route table (a dict per type, GUID ->
  the connection it came from): a GUID seen before is a duplicate and dropped, a new one
  is recorded, answered with a pong (pings), and forwarded with TTL - 1 and hops + 1
  (clamped to 7) to every other ultrapeer unless its TTL runs out. Pongs and query hits
  are sent back to the connection their ping or query came from, if it is still open.
  Everything else is dropped.
* What real servents announce is acted on as a router must (read from the handshake,
  :class:`scripts.yardstick.Announced`): a peer that announced ``Pong-Caching`` (every
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
* While any destination's buffer is over its high mark, every connection stops reading
  (asyncio's flow control).

Run (loopback only):

    .venv/bin/python scripts/reference_router.py --listen 127.0.0.1:6347 [--writes per-message]
"""

from __future__ import annotations

import argparse
import struct
from collections.abc import Callable, Sequence

from protocol.codec import parse_payload
from protocol.errors import ProtocolError
from protocol.messages import QrpPatch, QrpReset
from protocol.qrp import QrpReceiver, qrp_hashcode, query_words
from scripts import yardstick
from scripts.yardstick import HEADER, HEADER_SIZE, MAX_PAYLOAD, Announced, Hub

TABLE_LIMIT = 100_000
MAX_TTL = 7
HARD_TTL = 15
PING, PONG, QUERY, QUERY_HIT, QRP = 0x00, 0x01, 0x80, 0x81, 0x30
# Our pong: port 6346, IP 127.0.0.1, no files.
PONG_PAYLOAD = struct.pack("<H4sII", 6346, bytes((127, 0, 0, 1)), 0, 0)


class Router(Hub["Peer"]):
    """The live connections, the flow-control gate and the route tables."""

    def __init__(self, write_per_message: bool = False) -> None:
        super().__init__()
        self.write_per_message = write_per_message
        self.routes: dict[int, dict[bytes, Peer]] = {PING: {}, QUERY: {}}


class Peer(yardstick.Peer):
    USER_AGENT = b"reference-router/1.0"

    def __init__(self, router: Router) -> None:
        super().__init__(router)
        self.router = router
        self.pong_caching = False
        self.qrp: QrpReceiver | None = None
        """A leaf's QRP tables; ``qrp.table`` is its last complete one."""

    def announced(self, announced: Announced) -> None:
        super().announced(announced)
        self.pong_caching = announced.pong_caching or announced.leaf
        if self.leaf:
            self.qrp = QrpReceiver()

    def messages(self, data: bytes) -> None:
        """Route every whole message of this read."""
        data = self.joined(data)
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
                self.too_large()
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
        self.keep_rest(data, position)
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


def main(argv: Sequence[str] | None = None) -> int:
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--writes",
            choices=("per-read", "per-message"),
            default="per-read",
            help="one write per destination per read (default), or one per message",
        )

    def run(args: argparse.Namespace) -> tuple[Router, Callable[[], Peer]]:
        router = Router(args.writes == "per-message")
        return router, lambda: Peer(router)

    description = __doc__.splitlines()[0] if __doc__ else None
    return yardstick.main("reference_router", description, run, argv, add_arguments)


if __name__ == "__main__":
    raise SystemExit(main())
