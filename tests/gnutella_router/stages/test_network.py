"""Five daemons in one mesh: flooding, reverse paths, pushes, duplicates and horizons.

Topology (a line with one chord, so node 3 hears every broadcast twice)::

    edge - n0 - n1 - n2 - n3 - n4
                  \\________/

Every node also has a sink peer that records what reaches it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from gnutella_router.daemon import Daemon
from protocol.constants import MessageType
from protocol.messages import Push, Query, QueryHit, QueryHitResult, random_guid
from tests.support.peers import Peer, message, running_daemons
from tests.support.waiting import of_type, wait_until

LINKS = [(0, 1), (1, 2), (2, 3), (3, 4), (1, 3)]


async def build_mesh(daemons: list[Daemon]) -> tuple[Peer, list[Peer]]:
    for a, b in LINKS:
        await daemons[a].server.dial(*daemons[b].address, timeout=5)
    degree = [0] * len(daemons)
    for a, b in LINKS:
        degree[a] += 1
        degree[b] += 1
    for daemon, expected in zip(daemons, degree, strict=True):
        await wait_for_connections(daemon, expected)
    edge = await Peer.connect(daemons[0].address)
    sinks = [await Peer.connect(d.address) for d in daemons]
    for index, daemon in enumerate(daemons):
        await wait_for_connections(daemon, degree[index] + 1 + (index == 0))
    return edge, sinks


async def wait_for_connections(daemon: Daemon, count: int) -> None:
    await wait_until(lambda: len(daemon.server.connections) == count)


def duplicates(daemons: list[Daemon], message_type: int) -> int:
    return sum(d.router.dropped["duplicate", message_type] for d in daemons)


@pytest.mark.e2e
async def test_query_floods_once_and_replies_retrace_the_path(tmp_path: Path) -> None:
    async with running_daemons(tmp_path, 5) as daemons:
        edge, sinks = await build_mesh(daemons)

        query = message(Query(b"five node search"), ttl=7)
        await edge.send(query)
        for sink in sinks:
            copy = await sink.receive_matching(of_type(MessageType.QUERY))
            assert copy.guid == query.guid
        await trio.sleep(0.3)
        for index, sink in enumerate(sinks):
            again = [f for f in await sink.collect(0.05) if f.guid == query.guid]
            assert again == [], f"sink {index} got the query more than once"
        assert duplicates(daemons, MessageType.QUERY) >= 1

        # The farthest node answers; the hit must come back to the edge only.
        servent = random_guid()
        hit = QueryHit(6346, "10.4.4.4", 100, (QueryHitResult(1, 10, b"found.txt"),), servent)
        await sinks[4].send(message(hit, ttl=7, guid=query.guid))
        back = await edge.receive_matching(of_type(MessageType.QUERY_HIT))
        assert back.guid == query.guid
        # n4 -> n3 -> n1 -> n0 -> edge, or one hop more if n3 heard the query via n2 first:
        # either way the reverse of the path the query took to n4.
        assert back.hops in (4, 5)
        for index in range(4):
            stray = [f for f in await sinks[index].collect(0.1) if f.payload_type == 0x81]
            assert stray == [], f"sink {index} saw a hit that was not its own"

        # A push for that servent reaches the node that answered, and only it.
        push = message(Push(servent, 1, "10.0.0.1", 6346), ttl=7)
        await edge.send(push)
        arrived = await sinks[4].receive_matching(of_type(MessageType.PUSH))
        assert arrived.guid == push.guid
        for index in range(4):
            stray = [f for f in await sinks[index].collect(0.1) if f.payload_type == 0x40]
            assert stray == [], f"sink {index} saw a push for another servent"


@pytest.mark.e2e
async def test_ttl_limits_the_horizon(tmp_path: Path) -> None:
    async with running_daemons(tmp_path, 5) as daemons:
        edge, sinks = await build_mesh(daemons)
        short = message(Query(b"short reach"), ttl=2)
        await edge.send(short)
        near = await sinks[0].receive_matching(of_type(MessageType.QUERY))
        assert (near.ttl, near.hops) == (1, 1)
        await trio.sleep(0.3)
        for index in range(1, 5):
            seen = [f for f in await sinks[index].collect(0.05) if f.guid == short.guid]
            assert seen == [], f"a TTL 2 query reached node {index}'s sink"
        # Node 1 received it with TTL 1 and did not pass it on.
        assert daemons[1].router.received[MessageType.QUERY] == 1
        assert daemons[2].router.received[MessageType.QUERY] == 0
