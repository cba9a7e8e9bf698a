"""Sockets to the router under test: opening from a chosen loopback source, resets,
quiet closes, and :class:`Drain`, which reads a connection while it lives and notes the
Bye that ended it. Shared by the frame fuzzing, the handshake fuzzing and the good
peers.
"""

from __future__ import annotations

import contextlib
import socket
import struct

import trio

from protocol.compression import DeflateDecompressor
from protocol.constants import HEADER_SIZE, MessageType
from protocol.errors import CompressionError
from protocol.header import HEADER_STRUCT
from scripts.router_fuzz.settings import LOOPBACK, READ_SIZE, TAIL_KEPT


class RouterTarget:
    """Where the router listens, and which loopback source addresses this host can use."""

    def __init__(self, address: tuple[str, int], spread_sources: bool) -> None:
        self.address = address
        self.spread_sources = spread_sources

    def source(self, wanted: str) -> str:
        return wanted if self.spread_sources else LOOPBACK


def can_bind(address: str) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
    return True


async def open_from(target: RouterTarget, source: str) -> trio.SocketStream:
    """A TCP connection to the router from ``source`` (a loopback address)."""
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
    try:
        await sock.bind((target.source(source), 0))
        await sock.connect(target.address)
    except BaseException:
        sock.close()
        raise
    return trio.SocketStream(sock)


def reset(stream: trio.SocketStream) -> None:
    """Close with SO_LINGER 0: the kernel sends RST instead of FIN."""
    with contextlib.suppress(OSError):
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stream.socket.close()


async def close_quietly(stream: trio.SocketStream) -> None:
    with (
        trio.CancelScope(shield=True),
        trio.move_on_after(0.5),
        contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError),
    ):
        await stream.aclose()


STREAM_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


def trailing_bye(data: bytes | bytearray) -> int | None:
    """The code of the Bye that ends ``data`` (the last bytes read), if one does."""
    end = len(data)
    for start in range(max(0, end - HEADER_SIZE - 600), end - HEADER_SIZE - 1):
        _, payload_type, _, _, length = HEADER_STRUCT.unpack_from(data, start)
        if payload_type == MessageType.BYE and length >= 2 and start + HEADER_SIZE + length == end:
            return int.from_bytes(data[start + HEADER_SIZE : start + HEADER_SIZE + 2], "little")
    return None


def status_code(answer: bytes) -> int | None:
    """The code of a ``GNUTELLA/0.6 NNN`` answer, if ``answer`` starts with one."""
    first = answer.split(b"\n", 1)[0]
    parts = first.split()
    if len(parts) >= 2 and first.startswith(b"GNUTELLA/") and parts[1].isdigit():
        return int(parts[1])
    if first.strip() == b"GNUTELLA OK":
        return 200
    return None


class Drain:
    """Reads everything the router sends on a connection, so it is never a slow peer,
    and remembers how the connection ended."""

    def __init__(self, stream: trio.SocketStream, inflate: bool, initial: bytes) -> None:
        self.stream = stream
        self.decompressor = DeflateDecompressor() if inflate else None
        self.tail = bytearray()
        self.ended = trio.Event()
        self.how: str | None = None
        if initial:
            self._take(initial)

    def _take(self, data: bytes) -> None:
        if self.decompressor is not None:
            try:
                self.decompressor.receive_data(data)
                while chunk := self.decompressor.read():
                    self.tail += chunk
            except CompressionError:
                self.how = "the router's deflate stream is corrupt"
        else:
            self.tail += data
        if len(self.tail) > TAIL_KEPT:
            del self.tail[:-TAIL_KEPT]

    async def run(self) -> None:
        try:
            while True:
                data = await self.stream.receive_some(READ_SIZE)
                if not data:
                    self.how = self.how or "closed"
                    return
                self._take(bytes(data))
        except trio.ClosedResourceError:
            self.how = self.how or "closed by us"
        except (trio.BrokenResourceError, OSError):
            self.how = self.how or "reset"
        finally:
            self.ended.set()

    def bye_code(self) -> int | None:
        return trailing_bye(self.tail)
