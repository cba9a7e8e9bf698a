"""The injected per-query delay runs in worker threads and leaves routing consistent."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from protocol.constants import MessageType
from protocol.messages import Ping, Query, QueryHit, QueryHitResult, random_guid
from tests.support.peers import Peer, message, peers, running_daemons
from tests.support.waiting import of_type

DELAY_MS = 500


async def arrival_order(threads: int, tmp_path: Path) -> list[int]:
    overrides = {"router.query_delay_ms": DELAY_MS, "router.threads": threads}
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        source, sink = await peers(daemon, 2)
        await source.send(message(Query(b"slow to route"), ttl=2), message(Ping(), ttl=2))
        first = await sink.receive(timeout=5)
        second = await sink.receive(timeout=5)
        return [first.payload_type, second.payload_type]


async def test_one_worker_makes_pings_wait_behind_queries(tmp_path: Path) -> None:
    assert await arrival_order(1, tmp_path) == [MessageType.QUERY, MessageType.PING]


async def test_a_second_worker_lets_pings_overtake(tmp_path: Path) -> None:
    assert await arrival_order(2, tmp_path) == [MessageType.PING, MessageType.QUERY]


@pytest.mark.e2e
async def test_the_route_exists_while_the_query_is_delayed(tmp_path: Path) -> None:
    overrides = {"router.query_delay_ms": DELAY_MS}
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        origin, responder = await peers(daemon, 2)
        query = message(Query(b"answered early"), ttl=2)
        await origin.send(query)
        await trio.sleep(0.1)  # the query is now in its delay, not yet forwarded
        hit = QueryHit(1, "10.0.0.1", 1, (QueryHitResult(1, 1, b"a"),), random_guid())
        await responder.send(message(hit, ttl=3, guid=query.guid))
        back = await origin.receive_matching(of_type(MessageType.QUERY_HIT))
        assert back.guid == query.guid
        forwarded = await responder.receive_matching(of_type(MessageType.QUERY))
        assert forwarded.guid == query.guid
        assert daemon.router.stage.statistics().blocking_in_progress == 0


@pytest.mark.e2e
async def test_delayed_queries_run_in_parallel_up_to_the_pool_size(tmp_path: Path) -> None:
    overrides = {"router.query_delay_ms": DELAY_MS, "router.threads": 4}
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        source, sink = await peers(daemon, 2)
        started = trio.current_time()
        await source.send(*(message(Query(b"parallel %d" % i), ttl=2) for i in range(4)))
        for _ in range(4):
            await sink.receive_matching(of_type(MessageType.QUERY), timeout=5)
        # Four delays of 0.5 s on four threads: about one delay, far from four.
        assert trio.current_time() - started < 3 * DELAY_MS / 1000
        # Each query was handed back to the queue by the workers before it; handled once.
        assert daemon.router.stage.events == 4


__all__ = ["Peer"]


@pytest.mark.e2e
async def test_stopping_during_a_query_delay_is_clean(tmp_path: Path) -> None:
    overrides = {"router.query_delay_ms": 2000, "router.threads": 2}
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        source, _ = await peers(daemon, 2)
        await source.send(message(Query(b"still sleeping at shutdown"), ttl=2))
        with trio.fail_after(3):
            while not daemon.router.stage.statistics().blocking_in_progress:
                await trio.sleep(0.01)
    # Leaving the block stopped the daemon while a worker slept: no error escaped.
