"""Each shedding policy refuses what it should, counts it, and keeps the router serving."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import trio

from gnutella_router.config.sections import SheddingConfig
from gnutella_router.control.shedding import Shedder
from gnutella_router.control.token_bucket import TokenBucket
from gnutella_router.runtime.stage_queue import StageQueue
from protocol.constants import MessageType
from protocol.framing import Frame
from protocol.messages import Ping, Query
from tests.support.peers import Peer, message, running_daemons
from tests.support.waiting import wait_until


def frames(count: int, message_type: int = MessageType.PING) -> list[Frame]:
    return [Frame(random.randbytes(16), message_type, 3, 0, b"") for _ in range(count)]


def shedder(**settings: object) -> tuple[Shedder, list[str]]:
    shed: list[str] = []
    config = SheddingConfig(**settings)  # type: ignore[arg-type]
    return Shedder(config, count=lambda reason, frame: shed.append(reason), seed=1), shed


def test_red_drops_more_as_the_queue_fills() -> None:
    red, shed = shedder(policy="red", red_min=0.2, red_max=0.8, red_max_p=0.5)
    queue: StageQueue[Frame] = StageQueue("router", 1000)
    kept_low = len(red.admit(1, frames(100), queue, 0.0))
    assert kept_low == 100  # below red_min
    queue.admit(frames(500))
    kept_mid = len(red.admit(1, frames(1000), queue, 0.0))
    queue.admit(frames(300))
    kept_high = len(red.admit(1, frames(1000), queue, 0.0))
    assert kept_mid > kept_high
    assert kept_high <= 10
    assert set(shed) == {"shed-red"}


def test_queries_first_only_drops_queries() -> None:
    policy, shed = shedder(policy="queries-first", queries_first_at=0.5)
    queue: StageQueue[Frame] = StageQueue("router", 100)
    mixed = frames(10) + frames(10, MessageType.QUERY)
    assert policy.admit(1, mixed, queue, 0.0) == mixed  # below the mark
    queue.admit(frames(60))
    kept = policy.admit(1, mixed, queue, 0.0)
    assert [f.payload_type for f in kept] == [MessageType.PING] * 10
    assert shed == ["shed-queries-first"] * 10
    assert policy.waits_at_bound


def test_a_token_bucket_limits_each_connection() -> None:
    bucket = TokenBucket(rate=10.0, burst=20.0, now=0.0)
    assert bucket.take(100, 0.0) == 20
    assert bucket.take(100, 0.5) == 5
    assert bucket.take(100, 10.0) == 20  # never more than the burst


@pytest.mark.e2e
async def test_drop_tail_sheds_instead_of_waiting(tmp_path: Path) -> None:
    overrides = {
        "shedding.policy": "drop-tail",
        "router.queue_threshold": 64,
        "router.batch_size": 16,
        "router.query_delay_ms": 50,
    }
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        source = await Peer.connect(daemon.address)
        sink = await Peer.connect(daemon.address)
        await wait_until(lambda: len(daemon.server.connections) == 2)
        await source.send(*(message(Query(b"overload %d" % i), ttl=2) for i in range(300)))
        await wait_until(lambda: daemon.router.dropped["shed-drop-tail", MessageType.QUERY] > 0)
        assert len(daemon.router.stage.queue) <= 64
        # Still serving. A ping sent while the queue is full is itself shed (that is
        # drop-tail), so ping until one gets through once the queue has room again.
        with trio.fail_after(15):
            while True:
                ping = message(Ping(), ttl=2)
                await source.send(ping)
                arrived = [f for f in await sink.collect(0.5) if f.guid == ping.guid]
                if arrived:
                    break


@pytest.mark.e2e
async def test_a_rate_limited_connection_is_cut_to_its_budget(tmp_path: Path) -> None:
    overrides = {"shedding.rate_limit": 5.0, "shedding.rate_burst": 20.0}
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        source = await Peer.connect(daemon.address)
        sink = await Peer.connect(daemon.address)
        await wait_until(lambda: len(daemon.server.connections) == 2)
        await source.send(*(message(Query(b"burst %d" % i), ttl=2) for i in range(100)))
        got = [f for f in await sink.collect(0.5) if f.payload_type == MessageType.QUERY]
        assert 20 <= len(got) <= 25
        assert daemon.router.dropped["shed-rate-limit", MessageType.QUERY] == 100 - len(got)
