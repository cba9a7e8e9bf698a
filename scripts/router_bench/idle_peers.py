"""Idle peers as gtk-gnutella makes them, for the idle-connection memory benchmark
(``scripts/bench_idle_memory.py``): each from a loopback address of its own, each doing
the 0.6 handshake with the headers gtk-gnutella 1.2.3 sends and then staying silent, or
first saying what gtk-gnutella says right after its handshake.

A router is served by such a peer once it has read the Messages Supported and Features
Supported the router sends a peer that announced ``Vendor-Message`` (:func:`open_gtk_like`
and :func:`read_introductions`); addresses (:func:`client_address`) come 250 per /24 from
127.0.1.2 on, so no per-address limit or ephemeral port range comes near its end.
"""

from __future__ import annotations

import zlib

import trio

from gnutella_router.net.handshaking import next_handshake_event
from gnutella_router.routing.vendor_messages import INTRODUCTIONS
from protocol.errors import RemoteProtocolError
from protocol.handshake import (
    HandshakeComplete,
    HandshakeRejected,
    HandshakeResponse,
    Initiator,
)
from protocol.messages import random_guid
from scripts.router_bench.peers import GTK_LIKE_HEADERS, BenchError, Peer

PER_BLOCK = 250
"""Client addresses used per 127.0.N.0/24."""
WARM_ADDRESS = "127.0.0.2"
"""Where the connection that warms a server up comes from (none of the others does)."""
INTRODUCTION_BYTES = sum(map(len, INTRODUCTIONS))
"""What the router sends a peer that announced ``Vendor-Message``, in bytes."""

GTK_HEADERS = (
    ("Remote-IP", "127.0.0.1"),
    *GTK_LIKE_HEADERS,
    ("X-Live-Since", "Sat, 21 Nov 2026 05:35:53 +0000"),
)
"""gtk-gnutella 1.2.3's step 1 (``tests/support/gtk_vectors.py``): the benchmarks' peers'
headers (:data:`~scripts.router_bench.peers.GTK_LIKE_HEADERS`) with the two that name
a host, less ``Node``, ``X-Token``, ``GUID`` (one is drawn per peer) and
``Accept-Encoding`` (asked for in the deflate runs only)."""


def client_address(index: int) -> str:
    """The loopback address the ``index``-th idle connection comes from."""
    return f"127.0.{1 + index // PER_BLOCK}.{2 + index % PER_BLOCK}"


async def open_gtk_like(
    address: tuple[str, int], local: str, *, deflate: bool, speaks: bool = False
) -> Peer:
    """A connection from ``local`` with gtk-gnutella's handshake headers, registered by
    the server. Against the router that means its introductions have arrived (read,
    and inflated with deflate); the baseline is probed for afterwards."""
    stream = await trio.open_tcp_stream(*address, local_address=local)
    peer = Peer(stream, f"idle connection from {local}")
    try:
        initiator = Initiator()
        asked = [("Accept-Encoding", "deflate")] if deflate else []
        await stream.send_all(
            initiator.start([*GTK_HEADERS, ("GUID", random_guid().hex()), *asked])
        )
        try:
            event = await next_handshake_event(stream, initiator)
            if isinstance(event, HandshakeRejected):
                raise BenchError(f"handshake refused: {event.status_code} {event.reason}")
            assert isinstance(event, HandshakeResponse), event
            await stream.send_all(initiator.confirm(deflate=deflate))
            complete = await next_handshake_event(stream, initiator)
        except RemoteProtocolError as exc:
            raise BenchError(f"handshake failed: {exc}") from exc
        assert isinstance(complete, HandshakeComplete), complete
        if complete.decompress_incoming != deflate or complete.compress_outgoing != deflate:
            raise BenchError(f"deflate {'not ' if deflate else ''}negotiated both ways")
        inflater = zlib.decompressobj() if deflate else None
        peer.inflater = inflater
        peer.received = len(_inflated(inflater, complete.trailing_data))
        if speaks:
            deflater = zlib.compressobj()
            hello = b"".join(INTRODUCTIONS)
            await stream.send_all(deflater.compress(hello) + deflater.flush(zlib.Z_SYNC_FLUSH))
    except BaseException:
        await peer.aclose()
        raise
    return peer


def _inflated(inflater: zlib._Decompress | None, data: bytes) -> bytes:
    return data if inflater is None else inflater.decompress(data)


async def read_introductions(peer: Peer) -> None:
    """Read until the router's Messages Supported and Features Supported are in."""
    try:
        while peer.received < INTRODUCTION_BYTES:
            data = await peer.stream.receive_some(4096)
            if not data:
                raise BenchError(f"{peer.name} closed by the router")
            peer.received += len(_inflated(peer.inflater, data))
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
        raise BenchError(f"{peer.name} lost: {exc.__class__.__name__}") from exc
