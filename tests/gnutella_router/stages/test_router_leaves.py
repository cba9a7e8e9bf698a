"""The router's duties to leaves, without sockets or real time: QRP tables kept from
leaves and sent to ultrapeers, the queries a leaf gets and the ones it starts (dynamic
querying, query status), and pings from leaves.

The router is driven as in ``test_router_rules.py``: frames from fake links whose
outgoing queue is the real, sans-IO threshold queue, on trio's MockClock with autojump.
"""

from __future__ import annotations

import trio
import trio.testing

from protocol.constants import MessageType
from protocol.messages import (
    Message,
    Ping,
    QrpPatch,
    QrpReset,
    Query,
    QueryHit,
    QueryHitResult,
    random_guid,
)
from protocol.qrp import QrpReceiver
from protocol.vendor import QUERY_STATUS_RESPONSE
from tests.support.links import FakeLink, Network, message, types


async def send_table(net: Network, leaf: FakeLink, *words: str) -> None:
    from protocol.qrp import QrpTable, table_messages

    table = QrpTable.of_words(words)
    await net.send(leaf, *(Message(random_guid(), 1, 0, m) for m in table_messages(table)))


async def test_a_leaf_gets_only_the_queries_its_qrp_table_matches(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = Network()
    a, b, _ = net.links
    net.links[2] = leaf = FakeLink(3, ultrapeer=False)
    await net.send(a, message(Query(b"abbey road"), ttl=3), message(Ping(), ttl=3))
    assert leaf.sent() == [], "a leaf without a table gets no queries, and no pings"
    await send_table(net, leaf, "abbey", "road", "beatles")
    matching = message(Query(b"Abbey Road"), ttl=3)
    await net.send(
        a,
        matching,
        message(Query(b"abbey road nowhere"), ttl=3),  # one word it does not have
        message(Query(b"yellow submarine"), ttl=3),
        message(Ping(), ttl=3),
    )
    assert [f.guid for f in leaf.sent()] == [matching.guid]
    assert len(b.sent()) == 6  # ultrapeers get everything
    assert net.dropped("qrp-miss", MessageType.QUERY) == 3


async def test_a_query_by_hash_alone_is_matched_by_its_urn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from protocol.messages import HugeExtension

    urn = "urn:sha1:PLSTHIPQGSSZTS5FJUPAKUZWUGYQYPFB"
    net = Network()
    a, _, _ = net.links
    net.links[2] = leaf = FakeLink(3, ultrapeer=False)
    await send_table(net, leaf, urn.lower())
    by_hash = message(Query(b"\\", extensions=(HugeExtension(urn.encode()),)), ttl=3)
    await net.send(a, by_hash)
    assert [f.guid for f in leaf.sent()] == [by_hash.guid]


async def test_a_copy_with_a_higher_ttl_is_relayed_to_ultrapeers_not_leaves(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The first copy may have come the long way round, with too little TTL left to
    reach as far as the query should: a later copy with more is relayed again (as
    gtk-gnutella does), to ultrapeers only, since leaves were offered it already."""
    net = Network()
    a, b, _ = net.links
    net.links[2] = leaf = FakeLink(3, ultrapeer=False)
    await send_table(net, leaf, "abbey", "road")
    query = message(Query(b"abbey road"), ttl=2, hops=5)
    await net.send(a, query)
    assert [(f.ttl, f.hops) for f in b.sent()] == [(1, 6)]
    assert [f.guid for f in leaf.sent()] == [query.guid]
    await net.send(b, Message(query.guid, 4, 3, query.payload))  # the short way, later
    assert [(f.ttl, f.hops) for f in a.sent()] == [(3, 4)]  # relayed, to the ultrapeer
    assert leaf.sent() == []  # not offered twice
    await net.send(b, Message(query.guid, 4, 3, query.payload))  # no higher than that
    await net.send(a, Message(query.guid, 3, 4, query.payload))
    assert a.sent() == []
    assert b.sent() == []
    assert net.router.relayed_higher_ttl == 1
    assert net.dropped("duplicate", MessageType.QUERY) == 2
    assert net.router.query_routes.lookup(query.guid, 0.0) == a.id  # replies: first path


async def test_a_relay_that_clamps_to_the_first_copy_still_leaves_the_leaf_its_copy(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A query and its higher-TTL repeat in one run, both clamped to the same TTL: the
    relay's copy is byte for byte the first one, yet only the relay is for ultrapeers
    alone; the leaf still gets the first."""
    net = Network()
    a, b, _ = net.links
    net.links[2] = leaf = FakeLink(3, ultrapeer=False)
    await send_table(net, leaf, "abbey", "road")
    first = message(Query(b"abbey road"), ttl=5, hops=2)
    await net.send(a, first, Message(first.guid, 6, 2, first.payload))
    assert [(f.ttl, f.hops) for f in b.sent()] == [(4, 3), (4, 3)]
    assert [(f.guid, f.ttl, f.hops) for f in leaf.sent()] == [(first.guid, 4, 3)]
    assert net.router.relayed_higher_ttl == 1


async def test_a_leafs_ping_is_answered_but_never_broadcast(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = Network()
    _, b, _ = net.links
    net.links[0] = leaf = FakeLink(1, ultrapeer=False)
    await net.send(leaf, message(Ping(), ttl=3))
    assert types(leaf.sent()) == [MessageType.PONG]
    assert b.sent() == []


async def test_a_leafs_bad_qrp_sequence_ends_it_with_bye_413(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from protocol.messages import QrpReset

    net = Network()
    net.links[2] = leaf = FakeLink(3, ultrapeer=False)
    await net.send(leaf, Message(random_guid(), 1, 0, QrpReset(1000, 7)))
    assert leaf.closing
    assert leaf.close_reason is not None
    assert "power of two" in leaf.close_reason
    assert net.router.qrp_receiver(3) is None


def leaf_network(ultrapeers: int) -> tuple[Network, FakeLink, list[FakeLink]]:
    net = Network(links=ultrapeers)
    leaf = FakeLink(100, ultrapeer=False)
    net.links.append(leaf)
    return net, leaf, net.links[:ultrapeers]


async def test_a_leafs_query_probes_three_ultrapeers_at_ttl_1_then_widens(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from gnutella_router.routing.dynamic_query import STEP_SECONDS

    net, leaf, ultrapeers = leaf_network(5)
    net.links.append(other_leaf := FakeLink(101, ultrapeer=False))
    await send_table(net, other_leaf, "abbey", "road")
    query = message(Query(b"abbey road"), ttl=4)
    await net.send(leaf, query)
    assert [f.ttl for f in other_leaf.sent()] == [3]  # the other leaves at once, by QRP
    probed = [[f.ttl for f in u.sent()] for u in ultrapeers]
    assert probed == [[1], [1], [1], [], []]

    for expected_ttl in (2, 3):  # one more ultrapeer each step, a hop further each time
        await trio.sleep(STEP_SECONDS)
        net.router.widen_dynamic_queries(trio.current_time())
        fresh = [f.ttl for u in ultrapeers for f in u.sent()]
        assert fresh == [expected_ttl]
    # Every neighbour had it: those whose copy had less than the highest TTL the leaf's
    # query allows (3) get it again, one a step, the lowest first, which makes them relay
    # it to their ultrapeers.
    for again in range(4):
        await trio.sleep(STEP_SECONDS)
        net.router.widen_dynamic_queries(trio.current_time())
        sent = [[f.ttl for f in u.sent()] for u in ultrapeers]
        assert sent == [[3] if n == again else [] for n in range(5)]
    await trio.sleep(STEP_SECONDS)
    net.router.widen_dynamic_queries(trio.current_time())
    assert all(u.sent() == [] for u in ultrapeers)
    assert net.router.statistics().dynamic_queries == {
        "active": 0,
        "copies": 9,
        "status-requests": 0,  # this leaf did not list Query Status
        "satisfied": 0,
        "exhausted": 1,
        "expired": 0,
        "leaf-gone": 0,
        "cancelled": 0,
    }


async def test_enough_results_stop_the_widening(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from gnutella_router.routing.dynamic_query import STEP_SECONDS

    net, leaf, ultrapeers = leaf_network(5)
    query = message(Query(b"popular"), ttl=4)
    await net.send(leaf, query)
    many = QueryHit(
        6346,
        "192.0.2.9",
        100,
        tuple(QueryHitResult(n, 10, b"popular.ogg") for n in range(150)),
        b"S" * 16,
    )
    await net.send(ultrapeers[0], Message(query.guid, 3, 1, many))
    assert types(leaf.sent()) == [MessageType.QUERY_HIT]
    await trio.sleep(STEP_SECONDS)
    net.router.widen_dynamic_queries(trio.current_time())
    assert [len(u.sent()) for u in ultrapeers] == [1, 1, 1, 0, 0]
    assert net.router.dynamic.counts["satisfied"] == 1


async def test_a_leaf_that_leaves_ends_its_queries(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net, leaf, _ = leaf_network(5)
    await net.send(leaf, message(Query(b"gone soon"), ttl=4))
    leaf.close("bye")
    net.router.widen_dynamic_queries(trio.current_time())
    assert net.router.dynamic.counts["leaf-gone"] == 1
    assert net.router.statistics().dynamic_queries["active"] == 0


async def test_a_query_at_its_last_hop_still_reaches_the_leaves_that_match(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """As in gtk-gnutella: a query arriving with TTL 1 goes no further among ultrapeers,
    but the leaves whose tables match still get it, with TTL 1."""
    net = Network()
    a, b, _ = net.links
    net.links[2] = leaf = FakeLink(3, ultrapeer=False)
    await send_table(net, leaf, "last", "hop")
    query = message(Query(b"last hop"), ttl=1, hops=3)
    await net.send(a, query)
    (copy,) = leaf.sent()
    assert (copy.guid, copy.ttl, copy.hops) == (query.guid, 1, 4)
    assert b.sent() == []


def received_table(link: FakeLink) -> QrpReceiver:
    receiver = QrpReceiver()
    for frame in link.sent():
        payload = frame.message().payload
        assert isinstance(payload, QrpReset | QrpPatch)
        receiver.receive(payload)
    return receiver


async def test_ultrapeers_get_our_leaves_keywords_as_a_last_hop_table(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from gnutella_router.routing.query_routing import LAST_HOP_TABLE_INTERVAL

    net = Network()
    net.links = [
        peer := FakeLink(1, ultrapeer_query_routing="0.1"),
        plain := FakeLink(2),  # did not announce it: gets no table
        leaf := FakeLink(3, ultrapeer=False),
    ]
    await send_table(net, leaf, "abbey", "road")
    net.router.send_last_hop_tables(trio.current_time())
    table = received_table(peer).table
    assert table is not None
    assert table.matches(["abbey", "road"])
    assert not table.matches(["submarine"])
    assert plain.sent() == []

    net.links.append(second := FakeLink(4, ultrapeer=False))
    await send_table(net, second, "submarine")
    net.router.send_last_hop_tables(trio.current_time())
    assert peer.sent() == [], "not again within a minute"
    await trio.sleep(LAST_HOP_TABLE_INTERVAL)
    net.router.send_last_hop_tables(trio.current_time())
    table = received_table(peer).table
    assert table is not None
    assert table.matches(["submarine"])
    assert table.matches(["abbey"])


async def test_an_ultrapeers_last_hop_table_filters_only_its_last_hop_queries(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from protocol.qrp import QrpTable, table_messages

    net = Network()
    a, ultrapeer, _ = net.links
    table = QrpTable.of_words(["wanted"])
    await net.send(ultrapeer, *(Message(random_guid(), 1, 0, m) for m in table_messages(table)))
    last_wanted = message(Query(b"wanted"), ttl=2)
    last_other = message(Query(b"unwanted"), ttl=2)
    far_other = message(Query(b"unwanted far"), ttl=4)
    await net.send(a, last_wanted, last_other, far_other)
    assert [f.guid for f in ultrapeer.sent()] == [last_wanted.guid, far_other.guid]
    assert net.dropped("qrp-miss", MessageType.QUERY) == 1


async def test_a_leaf_that_understands_query_status_is_asked_and_guides_its_query(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from gnutella_router.routing.dynamic_query import STEP_SECONDS
    from protocol.vendor import QUERY_STATUS_REQUEST, query_status_response

    net, leaf, ultrapeers = leaf_network(5)
    leaf.vendor_messages = (QUERY_STATUS_REQUEST, QUERY_STATUS_RESPONSE)
    query = message(Query(b"guided"), ttl=4)
    await net.send(leaf, query)
    (request,) = [f for f in leaf.sent() if f.payload_type == MessageType.VENDOR]
    assert request.guid == query.guid  # asked how many results it kept for this query
    await net.send(leaf, query_status_response(query.guid, 200))  # plenty: stop widening
    await trio.sleep(STEP_SECONDS)
    net.router.widen_dynamic_queries(trio.current_time())
    assert [len(u.sent()) for u in ultrapeers] == [1, 1, 1, 0, 0]
    assert net.router.dynamic.counts["satisfied"] == 1


async def test_a_leaf_can_stop_its_query(autojump_clock: trio.testing.MockClock) -> None:
    from protocol.vendor import STOP_QUERY, query_status_response

    net, leaf, _ = leaf_network(5)
    query = message(Query(b"never mind"), ttl=4)
    await net.send(leaf, query)
    await net.send(leaf, query_status_response(query.guid, STOP_QUERY))  # unasked
    assert net.router.dynamic.counts["cancelled"] == 1
    assert net.router.statistics().dynamic_queries["active"] == 0


async def test_one_leaf_cannot_take_every_dynamic_query(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A leaf sending queries as fast as it can gets its own share of dynamic queries;
    the rest are dropped and counted, and another leaf's query still starts."""
    from gnutella_router.routing.dynamic_query import MAX_DYNAMIC_QUERIES_PER_LEAF

    net = Network()
    net.links[1] = greedy = FakeLink(2, ultrapeer=False)
    net.links[2] = other = FakeLink(3, ultrapeer=False)
    flood = [
        message(Query(b"wanted %d" % i), ttl=3) for i in range(MAX_DYNAMIC_QUERIES_PER_LEAF + 8)
    ]
    await net.send(greedy, *flood)
    assert net.router.dynamic.statistics()["active"] == MAX_DYNAMIC_QUERIES_PER_LEAF
    assert net.dropped("leaf-query-limit", MessageType.QUERY) == 8
    await net.send(other, message(Query(b"mine"), ttl=3))
    assert net.router.dynamic.statistics()["active"] == MAX_DYNAMIC_QUERIES_PER_LEAF + 1
