"""A plain asyncio Gnutella forwarder: the yardstick for ``scripts/bench_router.py``.

This is the least a process can do and still pass the router benchmark's traffic: it
is what a competent single-file script gets out of CPython, with no stages, no queues
of its own, no routing tables and no replies. Figures for ``gnutella-router`` are set
beside this one's, measured in the same run on the same machine, so the ratio says
what the router's design costs (or saves) over a bare loop.

What it does, per connection:

* The 0.6 handshake, minimally: read the client's head (up to the empty line), answer
  ``GNUTELLA/0.6 200 OK`` with two headers, read the client's step 3. Anything that is
  not ``GNUTELLA CONNECT/0.6`` and then a 200 closes the connection.
* Then, per read: cut the bytes into messages with ``struct`` (23-byte header, payload
  length little-endian); drop a message whose (GUID, type) was seen before, in a dict
  that is simply cleared when it reaches 100,000 entries; forward pings and queries
  with TTL - 1 and hops + 1 (never one whose TTL would reach 0) to every other
  connection, as one ``transport.write`` per destination per read. It answers nothing
  (no pongs) and routes nothing else: replies, pushes and Byes are dropped.
* Leaves (peers that announce ``X-Ultrapeer: False``) are sent nothing: the forwarder
  has no QRP tables to choose their queries by, so it stays the least a process does.
* A peer that asks for deflate (``Accept-Encoding: deflate``) is answered with
  ``Content-Encoding: deflate`` and each write to it is deflated (zlib's default level,
  a sync flush per write), as gtk-gnutella asks and servents do.
* The standard asyncio flow control, so that memory stays bounded when a reader is
  slower than the writers: while any destination's transport buffer is over its high
  mark, every connection stops reading.

Run (loopback only):

    .venv/bin/python scripts/baseline_forwarder.py --listen 127.0.0.1:6347
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import signal
import struct
import sys
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

HEADER = struct.Struct("<16sBBBI")
HEADER_SIZE = HEADER.size
MAX_PAYLOAD = 64 * 1024
MAX_HEAD = 8 * 1024
SEEN_LIMIT = 100_000
PING = 0x00
QUERY = 0x80
ROUTED = frozenset({PING, QUERY})
ANSWER = b"GNUTELLA/0.6 200 OK\r\nUser-Agent: baseline-forwarder/1.0\r\nX-Ultrapeer: True\r\n\r\n"

assert HEADER_SIZE == 23


@dataclass(frozen=True, slots=True)
class Announced:
    """What a peer's handshake said that a yardstick acts on."""

    leaf: bool
    pong_caching: bool
    deflate: bool
    """It accepts deflate: what we send it is deflated."""

    @classmethod
    def read(cls, head: bytes) -> Announced:
        """From the peer's request head (its first line, then ``Name: value`` lines)."""
        headers: dict[bytes, bytes] = {}
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip().lower()
        encodings = {e.strip() for e in headers.get(b"accept-encoding", b"").split(b",")}
        return cls(
            leaf=headers.get(b"x-ultrapeer") == b"false",
            pong_caching=b"pong-caching" in headers,
            deflate=b"deflate" in encodings,
        )

    def answer(self) -> bytes:
        """Our handshake answer: with ``Content-Encoding: deflate`` when it accepts it."""
        if not self.deflate:
            return ANSWER
        return ANSWER[:-2] + b"Content-Encoding: deflate\r\n\r\n"

    def deflater(self) -> Any:
        """A ``zlib.compressobj`` for what we send, or None."""
        return zlib.compressobj() if self.deflate else None


def write(transport: asyncio.Transport, deflater: Any, data: bytes) -> None:
    """One write, deflated (and sync-flushed, so the peer can inflate it all now) when
    ``deflater`` is set."""
    if deflater is not None:
        data = deflater.compress(data) + deflater.flush(zlib.Z_SYNC_FLUSH)
    transport.write(data)


class Forwarder:
    """Shared state: the live connections, the duplicate table, the flow-control gate."""

    def __init__(self) -> None:
        self.peers: set[Peer] = set()
        self.seen: dict[bytes, None] = {}
        self.blocked_writers = 0

    def pause_all(self) -> None:
        for peer in self.peers:
            peer.pause_reading()

    def resume_all(self) -> None:
        for peer in self.peers:
            peer.resume_reading()


class Peer(asyncio.Protocol):
    def __init__(self, forwarder: Forwarder) -> None:
        self.forwarder = forwarder
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.step = 1  # 1: reading the request, 3: reading the confirmation, 0: messages
        self.writing_blocked = False
        self.reading_paused = False
        self.leaf = False
        self.deflater: Any = None

    # ---------------------------------------------------------------- asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        forwarder = self.forwarder
        forwarder.peers.discard(self)
        if self.writing_blocked:
            self.writing_blocked = False
            forwarder.blocked_writers -= 1
            if forwarder.blocked_writers == 0:
                forwarder.resume_all()

    def pause_writing(self) -> None:
        forwarder = self.forwarder
        self.writing_blocked = True
        forwarder.blocked_writers += 1
        if forwarder.blocked_writers == 1:
            forwarder.pause_all()

    def resume_writing(self) -> None:
        forwarder = self.forwarder
        self.writing_blocked = False
        forwarder.blocked_writers -= 1
        if forwarder.blocked_writers == 0:
            forwarder.resume_all()

    def data_received(self, data: bytes) -> None:
        if self.step:
            self.handshake(data)
        else:
            self.forward(data)

    # ---------------------------------------------------------------- handshake

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
                self.transport.write(b"GNUTELLA/0.6 400 Bad Request\r\n\r\n")
                self.transport.close()
                return
            announced = Announced.read(head)
            self.leaf = announced.leaf
            self.deflater = announced.deflater()
            self.transport.write(announced.answer())
            self.step = 3
            if rest:
                self.handshake(rest)
            return
        if not head.startswith(b"GNUTELLA/0.6 200"):
            self.transport.close()
            return
        self.step = 0
        self.forwarder.peers.add(self)
        if self.forwarder.blocked_writers:
            self.pause_reading()
        if rest:
            self.forward(rest)

    # ---------------------------------------------------------------- messages

    def forward(self, data: bytes) -> None:
        buffer = self.buffer
        if buffer:
            buffer += data
            data = bytes(buffer)
            buffer.clear()
        seen = self.forwarder.seen
        unpack_from = HEADER.unpack_from
        pack = HEADER.pack
        out: list[bytes] = []
        position = 0
        available = len(data)
        while available - position >= HEADER_SIZE:
            guid, payload_type, ttl, hops, length = unpack_from(data, position)
            if length > MAX_PAYLOAD:
                assert self.transport is not None
                self.transport.close()
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
        if position < available:
            buffer += data[position:]
        if out:
            chunk = b"".join(out)
            for peer in self.forwarder.peers:
                if peer is not self and not peer.leaf and peer.transport is not None:
                    write(peer.transport, peer.deflater, chunk)

    # ---------------------------------------------------------------- flow control

    def pause_reading(self) -> None:
        if not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.reading_paused and self.transport is not None:
            self.reading_paused = False
            self.transport.resume_reading()


def loopback_address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    try:
        if not ipaddress.ip_address(host.strip("[]")).is_loopback:
            raise ValueError
        number = int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a loopback HOST:PORT") from None
    return host.strip("[]"), number


async def serve(host: str, port: int) -> None:
    forwarder = Forwarder()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Peer(forwarder), host, port)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with server:
        await stop.wait()
    for peer in list(forwarder.peers):
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
    args = parser.parse_args(argv)
    host, port = args.listen
    try:
        asyncio.run(serve(host, port))
    except OSError as exc:
        print(f"baseline_forwarder: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
