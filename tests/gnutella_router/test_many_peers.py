"""Three hundred peers from one loopback address against `run --max-connections 400`
and nothing else: a local experiment's crowd is neither refused nor taken for abuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from protocol.constants import MessageType
from protocol.messages import Query
from tests.support.peers import Peer, message
from tests.support.processes import free_port, start, wait_listening

PEERS = 300
SLOW = 30
"""Peers that never read, with a tiny receive buffer: the router must shed them, not stall."""
FLOODERS = 20
QUIET_JSON = ["--log-format", "json", "--log-level", "warning"]
"""Warnings only (kicks and refusals are warnings): 300 connection lines would fill the
stderr pipe, which is read only at the end."""


@pytest.mark.e2e
async def test_three_hundred_loopback_peers_floods_and_slow_readers(tmp_path: Path) -> None:
    port = free_port()
    process = start(
        ["--listen", f"127.0.0.1:{port}", "--max-connections", "400", *QUIET_JSON],
        tmp_path,
    )
    try:
        await wait_listening(port, process)
        address = ("127.0.0.1", port)
        fast: list[Peer] = []
        slow: list[Peer] = []

        async def connect(index: int) -> None:
            if index < SLOW:
                slow.append(await Peer.connect(address, receive_buffer=4096))
            else:
                fast.append(await Peer.connect(address))

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for index in range(PEERS):
                    nursery.start_soon(connect, index)
        assert len(fast) + len(slow) == PEERS  # nobody refused (429, 503) or banned

        arrived: dict[int, bool] = {}

        async def read(peer: Peer) -> None:
            frames = await peer.collect(8.0)
            arrived[id(peer)] = any(
                f.payload_type == MessageType.QUERY and b"final check" in f.payload for f in frames
            )

        async def flood_then_check() -> None:
            async with trio.open_nursery() as flooders:
                for n, peer in enumerate(fast[1 : 1 + FLOODERS]):
                    queries = [message(Query(b"flood %d %d" % (n, i)), ttl=3) for i in range(200)]
                    flooders.start_soon(peer.send, *queries)
            await trio.sleep(1.0)
            await fast[0].send(message(Query(b"final check"), ttl=2))

        async with trio.open_nursery() as nursery:
            for peer in fast:
                nursery.start_soon(read, peer)
            nursery.start_soon(flood_then_check)
        reached = sum(arrived[id(peer)] for peer in fast[1:])
        assert reached == len(fast) - 1
        for peer in fast + slow:
            await peer.aclose()
    finally:
        process.terminate()
        with trio.fail_after(10):
            await trio.to_thread.run_sync(process.wait)
    _, stderr = process.communicate()
    events = [json.loads(line) for line in stderr.decode().splitlines() if line.startswith("{")]
    assert not [e for e in events if e["event"] == "peer kicked"]
    # (The port probe that waited for the router is one refusal: a handshake cut short.)
    assert not [e for e in events if e["event"] == "peer refused" and e["code"] != 400]
    assert process.returncode == 0
