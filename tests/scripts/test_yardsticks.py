"""The benchmarks' yardsticks act on what real servents announce: the naive router
answers a Pong-Caching peer's ping instead of broadcasting it and passes a leaf the
queries its QRP table matches; the plain forwarder broadcasts every ping and sends a
leaf nothing; both deflate to a peer that asks. Their common part
(``scripts/yardstick.py``) answers the handshake as each always has and frames a
message cut across reads."""

from __future__ import annotations

import asyncio
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from protocol.codec import encode_message
from protocol.compression import zlib_header
from protocol.constants import MessageType
from protocol.framing import FrameDecoder
from protocol.messages import Message, Ping, Query
from scripts import baseline_forwarder, reference_router, yardstick
from scripts.router_bench.peers import Peer, Wire, connect, probe_until_reached, use_peers
from scripts.router_bench.replies import LeafPlan
from scripts.runner import baseline_argv, free_port, reference_argv, started

Seen = dict[str, list[tuple[int, bytes]]]
"""Per peer name, the (type, GUID) of every message it received."""


async def collect(peer: Peer, seen: Seen) -> None:
    decoder = FrameDecoder()
    got = seen.setdefault(peer.name, [])
    while True:
        data = await peer.stream.receive_some(65536)
        if not data:
            return
        if peer.inflater is not None:
            data = peer.inflater.decompress(data)
        peer.look_for_probe(data)
        got.extend((frame.payload_type, frame.guid) for frame in decoder.receive_data(data))


async def exchange(address: tuple[str, int]) -> Seen:
    """A gtk-like source, a sink that asks for deflate and a leaf whose table holds the
    benchmark's search word; the source sends a ping and two queries, one the leaf's
    table matches and one it does not."""
    use_peers("gtk-like")
    plan = LeafPlan.build(1, 1.0)
    seen: Seen = {}
    wire = Wire.build()
    source = await connect(address, "source")
    sink = await connect(address, "sink", deflate=True)
    leaf = await connect(address, "leaf", headers=plan.headers())
    await leaf.stream.send_all(plan.tables[0])
    async with trio.open_nursery() as nursery:
        for peer in (source, sink, leaf):
            nursery.start_soon(collect, peer, seen)
        with trio.fail_after(10):
            await probe_until_reached(source, [sink], wire)
        for kind, payload in (
            (b"p", Ping()),
            (b"j", Query(b"jazz")),  # the leaf shares a file named for it
            (b"b", Query(b"blue")),
        ):
            await source.stream.send_all(encode_message(Message(kind * 16, 2, 0, payload)))
        await trio.sleep(0.5)
        nursery.cancel_scope.cancel()
    for peer in (source, sink, leaf):
        await peer.aclose()
    return seen


def run_against(argv: Callable[[int], list[str]]) -> Seen:
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        with started("yardstick", argv(port), port, Path(tmp)) as server:
            return trio.run(exchange, server.address)


PING, PONG, QUERY = int(MessageType.PING), int(MessageType.PONG), int(MessageType.QUERY)


@pytest.mark.e2e
def test_the_naive_router_answers_a_caching_peers_ping_and_routes_queries_by_qrp() -> None:
    seen = run_against(reference_argv)
    assert (PONG, b"p" * 16) in seen["source"]
    assert (PING, b"p" * 16) not in seen["sink"]  # answered, not broadcast
    assert {(QUERY, b"j" * 16), (QUERY, b"b" * 16)} <= set(seen["sink"])  # inflated
    assert (QUERY, b"j" * 16) in seen["leaf"]
    assert (QUERY, b"b" * 16) not in seen["leaf"]


@pytest.mark.e2e
def test_the_plain_forwarder_broadcasts_every_ping_and_sends_leaves_nothing() -> None:
    seen = run_against(baseline_argv)
    assert (PONG, b"p" * 16) not in seen.get("source", [])
    assert {(PING, b"p" * 16), (QUERY, b"j" * 16)} <= set(seen["sink"])  # inflated
    assert seen.get("leaf", []) == []


def test_the_handshake_answer_says_what_it_is_and_deflates_for_who_asks() -> None:
    plain = yardstick.Announced.read(b"GNUTELLA CONNECT/0.6\r\nPong-Caching: 0.1")
    assert (plain.leaf, plain.pong_caching, plain.deflate) == (False, True, False)
    assert plain.answer(b"baseline-forwarder/1.0") == (
        b"GNUTELLA/0.6 200 OK\r\nUser-Agent: baseline-forwarder/1.0\r\nX-Ultrapeer: True\r\n\r\n"
    )
    leaf = yardstick.Announced.read(
        b"GNUTELLA CONNECT/0.6\r\nX-Ultrapeer: False\r\nAccept-Encoding: deflate, gzip"
    )
    assert (leaf.leaf, leaf.pong_caching, leaf.deflate) == (True, False, True)
    assert leaf.answer(b"reference-router/1.0").endswith(
        b"X-Ultrapeer: True\r\nContent-Encoding: deflate\r\n\r\n"
    )
    for level in (1, 6, 9):  # at the level asked for: the stream's header says it
        deflater = leaf.deflater(level)
        head = deflater.compress(b"gnutella " * 100) + deflater.flush(zlib.Z_SYNC_FLUSH)
        assert head[:2] == zlib_header(level)
    assert plain.deflater(1) is None


class Wires(asyncio.Transport):
    """A transport that keeps what is written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False

    def write(self, data: Any) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


HANDSHAKE = b"GNUTELLA CONNECT/0.6\r\nX-Ultrapeer: True\r\n\r\nGNUTELLA/0.6 200 OK\r\n\r\n"


YARDSTICKS: dict[str, tuple[Any, Any]] = {
    "plain forwarder": (baseline_forwarder.Forwarder, baseline_forwarder.Peer),
    "naive router": (reference_router.Router, reference_router.Peer),
}


@pytest.mark.parametrize("kind", sorted(YARDSTICKS))
def test_a_message_cut_across_reads_is_forwarded_once_whole(kind: str) -> None:
    hub_class, peer_class = YARDSTICKS[kind]
    hub = hub_class()
    source, sink = peer_class(hub), peer_class(hub)
    wires = {}
    for peer in (source, sink):
        wires[peer] = Wires()
        peer.connection_made(wires[peer])
        peer.data_received(HANDSHAKE)
        wires[peer].written.clear()
    query = encode_message(Message(b"q" * 16, 3, 0, Query(b"blue")))
    source.data_received(query[:20])  # the header cut short
    assert wires[sink].written == b""  # not whole yet
    source.data_received(query[20:])
    assert wires[sink].written == query[:17] + bytes((2, 1)) + query[19:]  # TTL - 1, hops + 1
    source.data_received(query)  # the same GUID again: a duplicate
    assert wires[sink].written == query[:17] + bytes((2, 1)) + query[19:]
    assert not wires[source].closed
    source.data_received(b"x" * 16 + bytes((0x80, 3, 0)) + (65 * 1024).to_bytes(4, "little"))
    assert wires[source].closed  # a payload over 64 KiB
