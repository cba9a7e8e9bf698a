"""A peer that stops reading is dropped under either policy; everyone else is served."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from gnutella_router.daemon import Daemon
from protocol.constants import MessageType
from protocol.messages import Query
from tests.support.peers import Peer, message, running_daemons
from tests.support.waiting import wait_until

FLOOD = 600
QUERY_TEXT = b"x" * 1000  # 1 KB queries fill a stalled socket quickly


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


async def flood_through_stalled_peer(daemon: Daemon) -> tuple[int, list[int]]:
    """Send FLOOD queries; return how many the healthy sink got and the stalled peer's
    connection ids before it was dropped."""
    source = await Peer.connect(daemon.address)
    healthy = await Peer.connect(daemon.address)
    await Peer.connect(daemon.address, receive_buffer=4096)  # connects, then never reads
    await wait_until(lambda: len(daemon.server.connections) == 3)
    stalled_id = max(c.id for c in daemon.server.connections.snapshot())
    received = 0

    async def drain_healthy() -> None:
        nonlocal received
        while received < FLOOD:
            frame = await healthy.receive(timeout=10)
            if frame.payload_type == MessageType.QUERY:
                received += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain_healthy)
        for _ in range(FLOOD // 50):
            await source.send(*(message(Query(QUERY_TEXT), ttl=2) for _ in range(50)))
            await trio.lowlevel.checkpoint()
    return received, [stalled_id]


@pytest.mark.e2e
async def test_threshold_policy_closes_the_stalled_peer(tmp_path: Path) -> None:
    overrides = {
        "slow_peer.policy": "threshold",
        "slow_peer.threshold_messages": 200,
        "slow_peer.threshold_grace": 0.5,  # closed once its queue stayed full that long
        "router.batch_size": 64,
    }
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        before = rss_bytes()
        received, (stalled_id,) = await flood_through_stalled_peer(daemon)
        assert received == FLOOD
        await wait_until(lambda: daemon.server.connections.get(stalled_id) is None)
        assert len(daemon.server.connections) == 2
        assert rss_bytes() - before < 64 * 1024 * 1024


@pytest.mark.e2e
async def test_flow_control_policy_sheds_then_closes_the_stalled_peer(tmp_path: Path) -> None:
    overrides = {
        "slow_peer.policy": "flow-control",
        "slow_peer.queue_bytes": 65536,
        "network.max_payload": 8192,
        "router.batch_size": 16,
        "slow_peer.flow_control_timeout": 1.0,
    }
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        received, (stalled_id,) = await flood_through_stalled_peer(daemon)
        assert received == FLOOD
        stalled = daemon.server.connections.get(stalled_id)
        assert stalled is not None
        stats = stalled.outgoing.statistics(trio.current_time())
        assert stats.flow_control_entries >= 1
        assert sum(stats.dropped.values()) > 0
        assert stats.peak_bytes <= 65536 + 1100
        await wait_until(lambda: daemon.server.connections.get(stalled_id) is None, timeout=6)
        assert stalled.close_reason is not None
        assert stalled.session.bye_code_sent == 405
