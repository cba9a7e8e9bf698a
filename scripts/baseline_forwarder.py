"""A plain asyncio Gnutella forwarder: the yardstick for ``scripts/bench_router.py``.

This is the least a process can do and still pass the router benchmark's traffic: it
is what a competent single-file script gets out of CPython, with no stages, no queues
of its own, no routing tables and no replies. Figures for ``gnutella-router`` are set
beside this one's, measured in the same run on the same machine, so the ratio says
what the router's design costs (or saves) over a bare loop.

What it does, per connection (listening, the handshake, framing, deflate, flow control
and the command line are the yardsticks' common part, ``scripts/yardstick.py``):

* The 0.6 handshake, minimally (a first line that is not ``GNUTELLA CONNECT/0.6`` is
  answered 400 before the connection is closed).
* Then, per read: cut the bytes into messages with ``struct`` (23-byte header, payload
  length little-endian); drop a message whose (GUID, type) was seen before, in a dict
  that is simply cleared when it reaches 100,000 entries; forward pings and queries
  with TTL - 1 and hops + 1 (never one whose TTL would reach 0) to every other
  connection, as one ``transport.write`` per destination per read. It answers nothing
  (no pongs) and routes nothing else: replies, pushes and Byes are dropped.
* Leaves (peers that announce ``X-Ultrapeer: False``) are sent nothing: the forwarder
  has no QRP tables to choose their queries by, so it stays the least a process does.
* A peer that asks for deflate gets deflated writes; while any destination's buffer is
  over its high mark, every connection stops reading (asyncio's flow control).

Run (loopback only):

    .venv/bin/python scripts/baseline_forwarder.py --listen 127.0.0.1:6347
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from scripts import yardstick
from scripts.yardstick import HEADER, HEADER_SIZE, MAX_PAYLOAD, Hub

SEEN_LIMIT = 100_000
PING = 0x00
QUERY = 0x80
ROUTED = frozenset({PING, QUERY})


class Forwarder(Hub["Peer"]):
    """The live connections, the flow-control gate and the duplicate table."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[bytes, None] = {}


class Peer(yardstick.Peer):
    USER_AGENT = b"baseline-forwarder/1.0"
    BAD_REQUEST = b"GNUTELLA/0.6 400 Bad Request\r\n\r\n"

    def __init__(self, forwarder: Forwarder) -> None:
        super().__init__(forwarder)
        self.forwarder = forwarder

    def messages(self, data: bytes) -> None:
        """Forward this read's new pings and queries to every other ultrapeer."""
        data = self.joined(data)
        seen = self.forwarder.seen
        unpack_from = HEADER.unpack_from
        pack = HEADER.pack
        out: list[bytes] = []
        position = 0
        available = len(data)
        while available - position >= HEADER_SIZE:
            guid, payload_type, ttl, hops, length = unpack_from(data, position)
            if length > MAX_PAYLOAD:
                self.too_large()
                return
            start = position + HEADER_SIZE
            end = start + length
            if end > available:
                break
            key = data[position : position + 17]  # the GUID and the type byte
            position = end
            if key in seen or payload_type not in ROUTED or ttl <= 1:
                continue
            if len(seen) >= SEEN_LIMIT:
                seen.clear()
            seen[key] = None
            out.append(pack(guid, payload_type, ttl - 1, hops + 1, length))
            out.append(data[start:end])
        self.keep_rest(data, position)
        if out:
            chunk = b"".join(out)
            for peer in self.forwarder.peers:
                if peer is not self and not peer.leaf:
                    peer.write(chunk)


def main(argv: Sequence[str] | None = None) -> int:
    def run(args: argparse.Namespace) -> tuple[Forwarder, Callable[[], Peer]]:
        forwarder = Forwarder()
        return forwarder, lambda: Peer(forwarder)

    description = __doc__.splitlines()[0] if __doc__ else None
    return yardstick.main("baseline_forwarder", description, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
