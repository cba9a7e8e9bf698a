"""The benchmarks' yardsticks act on what real servents announce: the naive router
answers a Pong-Caching peer's ping instead of broadcasting it and passes a leaf the
queries its QRP table matches; the plain forwarder broadcasts every ping and sends a
leaf nothing; both deflate to a peer that asks."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from protocol.codec import encode_message
from protocol.constants import MessageType
from protocol.framing import FrameDecoder
from protocol.messages import Message, Ping, Query
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
