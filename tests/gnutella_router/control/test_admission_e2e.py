"""Class-based admission and degradation through a real router on loopback."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from gnutella_router.control.response_time import LEAF_QUERIES, OTHERS, QUERIES
from gnutella_router.observe.dumps import dump_stages
from gnutella_router.observe.metrics import metrics_registry, render_metrics
from protocol.constants import MessageType
from protocol.messages import Ping, Query, QueryHit, QueryHitResult
from tests.support.peers import DEFAULT_HEADERS, Peer, message, running_daemons
from tests.support.waiting import wait_until

LEAF_HEADERS = tuple(
    ("X-Ultrapeer", "False") if name == "X-Ultrapeer" else (name, value)
    for name, value in DEFAULT_HEADERS
)


HIT = QueryHit(
    port=6346,
    ip="10.0.0.9",
    speed=1000,
    results=(QueryHitResult(file_index=1, file_size=10, name=b"seda.ogg"),),
    servent_guid=b"\x01" * 16,
)


@pytest.mark.e2e
async def test_queries_are_shed_by_class_while_pings_and_hits_pass(tmp_path: Path) -> None:
    overrides = {
        "shedding.policy": "response-time",
        "shedding.response_time_classes": True,
        "shedding.response_time_initial_rate": 5.0,
        "shedding.response_time_min_rate": 1.0,
    }
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        source = await Peer.connect(daemon.address)
        sink = await Peer.connect(daemon.address)
        leaf = await Peer.connect(daemon.address, headers=LEAF_HEADERS)
        await wait_until(lambda: len(daemon.server.connections) == 3)
        queries = [message(Query(b"overload %d" % i), ttl=3) for i in range(100)]
        pings = [message(Ping(), ttl=2) for _ in range(20)]
        await source.send(*queries, *pings)
        await leaf.send(*(message(Query(b"leaf %d" % i), ttl=3) for i in range(50)))
        router = daemon.router
        await wait_until(lambda: router.dropped["shed-admission", MessageType.QUERY] >= 140)
        arrived = await sink.collect(0.5)
        got_pings = {f.guid for f in arrived if f.payload_type == MessageType.PING}
        assert got_pings == {p.guid for p in pings}  # every ping passed
        forwarded = [f for f in arrived if f.payload_type == MessageType.QUERY]
        assert 1 <= len(forwarded) <= 10  # a burst of one a class, and the rate after
        assert router.dropped["shed-admission", MessageType.PING] == 0
        # A hit for a query that got through is routed back, the queries' class shedding.
        sent = {q.guid for q in queries}
        guid = next(f.guid for f in forwarded if f.guid in sent)  # the bucket's first token
        await sink.send(message(HIT, ttl=3, guid=guid))
        with trio.fail_after(3):
            back = await source.receive_matching(
                lambda f: f.payload_type == MessageType.QUERY_HIT and f.guid == guid
            )
        assert back.guid == guid
        admission = dump_stages(daemon)["admission"]
        assert isinstance(admission, dict)
        classes = {c["name"]: c for c in admission["classes"]}
        assert classes[QUERIES]["refused"] >= 90
        assert classes[LEAF_QUERIES]["refused"] >= 40
        assert classes[OTHERS]["refused"] == 0
        assert classes[OTHERS]["admitted"] >= 21  # the pings and the hit
        text = render_metrics(metrics_registry(daemon)).decode()
        assert 'class="queries"' in text


@pytest.mark.e2e
async def test_an_overloaded_router_degrades_the_ttl_of_what_it_forwards(tmp_path: Path) -> None:
    overrides = {
        "shedding.policy": "response-time",
        "shedding.response_time_target_ms": 5.0,
        "shedding.response_time_samples": 5,
        "shedding.response_time_interval": 0.05,
        "shedding.degrade_ttl_by": 3,
        "router.query_delay_ms": 20,
    }
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        source = await Peer.connect(daemon.address)
        sink = await Peer.connect(daemon.address)
        await wait_until(lambda: len(daemon.server.connections) == 2)
        router = daemon.router
        ttls: list[int] = []
        with trio.fail_after(20):
            index = 0
            while router.statistics().degraded_queries == 0 or min(ttls, default=6) == 6:
                await source.send(*(message(Query(b"q %d" % (index + i))) for i in range(5)))
                index += 5
                ttls += [f.ttl for f in await sink.collect(0.1) if f.payload_type == 0x80]
        assert min(ttls) < 6  # 7 - 1, less the cut
        statistics = router.statistics()
        assert statistics.degraded_hops >= statistics.degraded_queries >= 1
        admission = dump_stages(daemon)["admission"]
        assert isinstance(admission, dict)
        assert admission["quality"] < 1.0
