"""What the two yardstick routers share: listening, the minimal 0.6 handshake, framing,
deflate, asyncio's flow control and the command line.

``scripts/baseline_forwarder.py`` (the plain forwarder) and ``scripts/reference_router.py``
(the naive router) are the figures ``gnutella-router`` is set beside in the benchmarks.
Everything here is what a competent single-file asyncio servent needs anyway; only the
routing differs between them, and each keeps its own: a subclass of :class:`Peer` whose
``messages`` method cuts a read into messages and acts on each, and a subclass of
:class:`Hub` with its tables.

Per connection, the common part:

* The 0.6 handshake, minimally: read the client's head (up to the empty line, at most
  :data:`MAX_HEAD` bytes), answer ``GNUTELLA/0.6 200 OK`` with two headers, read the
  client's step 3. Anything that is not ``GNUTELLA CONNECT/0.6`` and then a 200 closes
  the connection. What the head announced (:class:`Announced`: a leaf, Pong-Caching,
  deflate) is handed to the subclass.
* A peer that asks for deflate (``Accept-Encoding: deflate``) is answered with
  ``Content-Encoding: deflate`` and each write to it is deflated (at ``--deflate-level``,
  by default the level ``gnutella-router`` deflates at, so that a benchmark compares
  routing and not zlib settings; a sync flush per write), as gtk-gnutella asks and
  servents do.
* Framing: the bytes of a read are cut into 23-byte headers and payloads by the
  subclass's own loop (the loop is each yardstick's per-message cost, so it stays
  written out in each, not behind a call per message); a message cut by the end of a
  read waits in the peer's buffer for the next (:meth:`Peer.joined`,
  :meth:`Peer.keep_rest`), and a payload over :data:`MAX_PAYLOAD` closes the connection.
* The standard asyncio flow control, so that memory stays bounded when a reader is
  slower than the writers: while any destination's transport buffer is over its high
  mark, every connection stops reading.

A yardstick listens on a loopback address only, stops on SIGTERM or SIGINT (aborting
its connections) and exits 1 when it cannot listen (:func:`main`).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import signal
import struct
import sys
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from protocol.compression import DEFAULT_DEFLATE_LEVEL

HEADER = struct.Struct("<16sBBBI")
HEADER_SIZE = HEADER.size
MAX_PAYLOAD = 64 * 1024
MAX_HEAD = 8 * 1024

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

    def answer(self, user_agent: bytes) -> bytes:
        """Our handshake answer: with ``Content-Encoding: deflate`` when it accepts it."""
        lines = [b"GNUTELLA/0.6 200 OK", b"User-Agent: " + user_agent, b"X-Ultrapeer: True"]
        if self.deflate:
            lines.append(b"Content-Encoding: deflate")
        return b"\r\n".join(lines) + b"\r\n\r\n"

    def deflater(self, level: int) -> Any:
        """A ``zlib.compressobj`` at ``level`` for what we send, or None."""
        return zlib.compressobj(level) if self.deflate else None


def write(transport: asyncio.Transport, deflater: Any, data: bytes) -> None:
    """One write, deflated (and sync-flushed, so the peer can inflate it all now) when
    ``deflater`` is set."""
    if deflater is not None:
        data = deflater.compress(data) + deflater.flush(zlib.Z_SYNC_FLUSH)
    transport.write(data)


P = TypeVar("P", bound="Peer")


class Hub(Generic[P]):
    """Shared state: the live connections and the flow-control gate (a yardstick's own
    tables go in its subclass)."""

    def __init__(self) -> None:
        self.peers: set[P] = set()
        self.blocked_writers = 0
        self.deflate_level = DEFAULT_DEFLATE_LEVEL
        """What the peers that asked for deflate get it at (``--deflate-level``)."""

    def pause_all(self) -> None:
        for peer in self.peers:
            peer.pause_reading()

    def resume_all(self) -> None:
        for peer in self.peers:
            peer.resume_reading()


class Peer(asyncio.Protocol):
    """One connection: the handshake, then every read to :meth:`messages`."""

    USER_AGENT = b"yardstick/1.0"
    """What our handshake answer says we are."""
    BAD_REQUEST: bytes = b""
    """Written before closing a connection whose first line is not a 0.6 connect."""

    def __init__(self, hub: Hub[Any]) -> None:
        self.hub = hub
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.step = 1  # 1: reading the request, 3: reading the confirmation, 0: messages
        self.writing_blocked = False
        self.reading_paused = False
        self.open = True
        self.leaf = False
        self.deflater: Any = None

    # ---------------------------------------------------------------- for the subclass

    def announced(self, announced: Announced) -> None:
        """The peer's handshake head was read (before our answer): act on it."""
        self.leaf = announced.leaf
        self.deflater = announced.deflater(self.hub.deflate_level)

    def messages(self, data: bytes) -> None:
        """Route every whole message of ``data``, a read after the handshake."""
        raise NotImplementedError

    def write(self, data: bytes) -> None:
        if self.transport is not None:
            write(self.transport, self.deflater, data)

    def joined(self, data: bytes) -> bytes:
        """``data`` after what the last read left of a message cut short."""
        buffer = self.buffer
        if buffer:
            buffer += data
            data = bytes(buffer)
            buffer.clear()
        return data

    def keep_rest(self, data: bytes, position: int) -> None:
        """Keep ``data`` from ``position`` on (a message cut by the end of the read)."""
        if position < len(data):
            self.buffer += data[position:]

    def too_large(self) -> None:
        """A payload over :data:`MAX_PAYLOAD`: the connection is closed."""
        assert self.transport is not None
        self.transport.close()

    # ---------------------------------------------------------------- asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        hub = self.hub
        hub.peers.discard(self)
        if self.writing_blocked:
            self.writing_blocked = False
            hub.blocked_writers -= 1
            if hub.blocked_writers == 0:
                hub.resume_all()

    def pause_writing(self) -> None:
        hub = self.hub
        self.writing_blocked = True
        hub.blocked_writers += 1
        if hub.blocked_writers == 1:
            hub.pause_all()

    def resume_writing(self) -> None:
        hub = self.hub
        self.writing_blocked = False
        hub.blocked_writers -= 1
        if hub.blocked_writers == 0:
            hub.resume_all()

    def data_received(self, data: bytes) -> None:
        if self.step:
            self.handshake(data)
        else:
            self.messages(data)

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
                if self.BAD_REQUEST:
                    self.transport.write(self.BAD_REQUEST)
                self.transport.close()
                return
            announced = Announced.read(head)
            self.announced(announced)
            self.transport.write(announced.answer(self.USER_AGENT))
            self.step = 3
            if rest:
                self.handshake(rest)
            return
        if not head.startswith(b"GNUTELLA/0.6 200"):
            self.transport.close()
            return
        self.step = 0
        self.hub.peers.add(self)
        if self.hub.blocked_writers:
            self.pause_reading()
        if rest:
            self.messages(rest)

    # ---------------------------------------------------------------- flow control

    def pause_reading(self) -> None:
        if not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.reading_paused and self.transport is not None:
            self.reading_paused = False
            self.transport.resume_reading()


# ---------------------------------------------------------------- listening, command line


def loopback_address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    try:
        if not ipaddress.ip_address(host.strip("[]")).is_loopback:
            raise ValueError
        number = int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a loopback HOST:PORT") from None
    return host.strip("[]"), number


async def serve(host: str, port: int, hub: Hub[Any], peer: Callable[[], Peer]) -> None:
    """Accept peers (each made by ``peer``) on ``host:port`` until SIGTERM or SIGINT,
    then abort every connection of ``hub``."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(peer, host, port)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with server:
        await stop.wait()
    for each in list(hub.peers):
        if each.transport is not None:
            each.transport.abort()


def main(
    name: str,
    description: str | None,
    run: Callable[[argparse.Namespace], tuple[Hub[Any], Callable[[], Peer]]],
    argv: Sequence[str] | None = None,
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
) -> int:
    """A yardstick's command line: ``--listen`` (and what ``add_arguments`` adds), then
    :func:`serve` with the hub and the maker of peers that ``run`` makes of the
    arguments. Exit status 1 when it cannot listen."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--listen",
        type=loopback_address,
        default=("127.0.0.1", 6347),
        metavar="HOST:PORT",
        help="loopback address to accept peers on (default 127.0.0.1:6347)",
    )
    parser.add_argument(
        "--deflate-level",
        type=int,
        choices=range(1, 10),
        default=DEFAULT_DEFLATE_LEVEL,
        metavar="1-9",
        help=f"zlib level of deflated links (default {DEFAULT_DEFLATE_LEVEL}: gnutella-router's)",
    )
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args(argv)
    host, port = args.listen
    hub, peer = run(args)
    hub.deflate_level = args.deflate_level
    try:
        asyncio.run(serve(host, port, hub, peer))
    except OSError as exc:
        print(f"{name}: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0
