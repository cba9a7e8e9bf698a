"""The routing rules of GnutellaRouter, without sockets or real time.

The router is driven directly (:meth:`GnutellaRouter.handle`) with frames from fake
links: objects with what the router uses of a connection, whose outgoing queue is the
real, sans-IO threshold queue, so what a link "sent" is what the router queued for it.
Time is trio's MockClock with autojump, so route expiry is tested in virtual seconds.
"""

from __future__ import annotations

import msgspec
import trio
import trio.testing

from gnutella_router.control.abuse import Offence
from gnutella_router.net.threshold_queue import ThresholdQueue
from protocol.codec import encode_message
from protocol.constants import MessageType
from protocol.framing import Frame, FrameDecoder
from protocol.header import encode_header
from protocol.messages import Bye, Message, Ping, Pong, Push, Query, random_guid
from protocol.vendor import (
    HOPS_FLOW,
    NO_HOPS_FLOW,
    QUERY_STATUS_RESPONSE,
    Feature,
    VendorMessageId,
    features_supported,
    hops_flow,
    messages_supported,
    parse_features_supported,
    parse_messages_supported,
)
from tests.support.links import FakeLink, Network, hit, message, types


async def test_a_ping_is_answered_and_broadcast_to_every_other_link(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = Network()
    a, b, c = net.links
    ping = message(Ping(), ttl=3)
    await net.send(a, ping)
    (pong,) = a.sent()
    assert (pong.payload_type, pong.guid, pong.hops) == (MessageType.PONG, ping.guid, 0)
    for other in (b, c):
        (copy,) = other.sent()
        assert (copy.guid, copy.ttl, copy.hops) == (ping.guid, 2, 1)


async def test_a_repeated_guid_is_dropped_and_counted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = Network()
    a, b, _ = net.links
    query = message(Query(b"jazz"), ttl=3)
    await net.send(a, query)
    await net.send(b, query)  # the same query by another path: not forwarded again
    assert net.dropped("duplicate", MessageType.QUERY) == 1
    assert len(net.links[2].sent()) == 1


async def test_ttl_rules(autojump_clock: trio.testing.MockClock) -> None:
    net = Network()
    a, b, _ = net.links
    await net.send(a, message(Query(b"dead"), ttl=0))
    await net.send(a, message(Query(b"far too far"), ttl=10, hops=6))  # 16 > 15
    await net.send(a, message(Query(b"last hop"), ttl=1))  # recorded, not forwarded
    loud = message(Query(b"clamped"), ttl=12, hops=0)
    await net.send(a, loud)
    assert net.dropped("ttl-zero", MessageType.QUERY) == 1
    assert net.dropped("hard-ttl-limit", MessageType.QUERY) == 1
    (copy,) = b.sent()
    assert copy.guid == loud.guid
    assert (copy.ttl, copy.hops) == (6, 1)  # clamped to max_ttl 7 - hops, then one hop


async def test_hits_follow_their_query_back_and_pushes_their_servent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = Network()
    asker, answerer, bystander = net.links
    query = message(Query(b"song"), ttl=3)
    await net.send(asker, query)
    answerer.sent(), bystander.sent()  # the broadcast copies
    await net.send(answerer, message(hit(b"S" * 16), ttl=5, guid=query.guid))
    assert types(asker.sent()) == [MessageType.QUERY_HIT]
    assert bystander.sent() == []
    # The hit taught the router where servent S is: a push for it goes that way.
    push = message(Push(b"S" * 16, 1, "192.0.2.5", 6346), ttl=5)
    await net.send(asker, push)
    assert types(answerer.sent()) == [MessageType.PUSH]
    assert bystander.sent() == []
    # A hit for a query never seen has nowhere to go.
    await net.send(answerer, message(hit(), ttl=5))
    assert net.dropped("no-route", MessageType.QUERY_HIT) == 1


async def test_routes_expire_in_two_generations(autojump_clock: trio.testing.MockClock) -> None:
    net = Network()
    pinger, answerer, _ = net.links
    ping = message(Ping(), ttl=2)
    await net.send(pinger, ping)
    pinger.sent()
    await trio.sleep(net.router.config.ping_route_seconds * 2 + 1)  # virtual seconds
    await net.send(answerer, message(Pong(6346, "192.0.2.7", 1, 1), ttl=2, guid=ping.guid))
    assert pinger.sent() == []
    assert net.dropped("no-route", MessageType.PONG) == 1


async def test_a_pong_is_routed_back_to_its_pinger(autojump_clock: trio.testing.MockClock) -> None:
    net = Network()
    pinger, answerer, bystander = net.links
    ping = message(Ping(), ttl=2)
    await net.send(pinger, ping)
    pinger.sent(), bystander.sent()
    await net.send(answerer, message(Pong(6346, "192.0.2.7", 1, 1), ttl=2, guid=ping.guid))
    assert types(pinger.sent()) == [MessageType.PONG]
    assert bystander.sent() == []


async def test_bye_and_unknown_types(autojump_clock: trio.testing.MockClock) -> None:
    net = Network()
    a, b, _ = net.links
    await net.send(a, message(Bye(200, "relayed"), ttl=1, hops=1))
    assert net.dropped("bye-relayed", MessageType.BYE) == 1
    assert not a.closing
    # A relayed Bye is ignored whatever it holds: a malformed one closes nothing either.
    await net.router.handle([Frame(bytes(16), MessageType.BYE, 2, 3, b"\x01", source=a.id)])
    assert net.dropped("bye-relayed", MessageType.BYE) == 2
    assert not a.closing
    await net.send(b, message(Bye(200, "done"), ttl=1))
    assert net.router.consumed[MessageType.BYE] == 1
    assert b.closing
    unknown = Frame(random_guid(), 0x7F, 3, 0, b"", source=a.id)
    await net.router.handle([unknown])
    assert net.dropped("unknown-type", 0x7F) == 1


async def test_a_closing_links_frames_are_dropped(autojump_clock: trio.testing.MockClock) -> None:
    net = Network()
    a, b, _ = net.links
    a.closing = True
    await net.send(a, message(Query(b"too late"), ttl=3))
    assert net.dropped("connection-closing", MessageType.QUERY) == 1
    assert b.sent() == []


async def test_a_gone_links_frames_are_dropped(autojump_clock: trio.testing.MockClock) -> None:
    """Frames carry their link's id; once the link is gone the id resolves to nothing."""
    net = Network()
    _, b, _ = net.links
    ghost = FakeLink(99)
    await net.send(ghost, message(Query(b"from nowhere"), ttl=3))
    assert net.dropped("connection-closing", MessageType.QUERY) == 1
    assert b.sent() == []


async def test_a_batch_from_several_links_is_routed_per_link(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = Network()
    a, b, c = net.links
    from_a = FrameDecoder(source=a.id).receive_data(encode_message(message(Query(b"a"), ttl=3)))
    from_b = FrameDecoder(source=b.id).receive_data(encode_message(message(Query(b"b"), ttl=3)))
    await net.router.handle([*from_a, *from_b, *from_a[:0]])
    assert [f.payload for f in a.sent()] == [from_b[0].payload]
    assert [f.payload for f in b.sent()] == [from_a[0].payload]
    assert len(c.sent()) == 2
    assert [link.flushes for link in net.links] == [1, 1, 1]  # once per batch, every link


async def test_what_a_full_link_refuses_is_counted_and_the_link_closes_itself(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = Network()
    a, b, c = net.links
    c.outgoing = ThresholdQueue(max_messages=2)
    queries = [message(Query(f"q{i}".encode()), ttl=3) for i in range(5)]
    await net.send(a, *queries)
    assert len(b.sent()) == 5
    assert c.closing
    assert c.close_reason == "slow peer"
    assert net.router.forwarded[MessageType.QUERY] == 5 + 2
    assert net.dropped("outgoing-queue", MessageType.QUERY) == 3


async def test_a_pong_caching_peer_is_answered_from_the_cache_once_a_second(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = Network(pong_caching=True)
    a, b, _ = net.links
    pong = message(Pong(6346, "192.0.2.7", 1, 1), ttl=2)
    await net.send(b, pong)  # no route back, but it fills the cache
    cached_payload = FrameDecoder().receive_data(encode_message(pong))[0].payload
    own_payload = (
        FrameDecoder().receive_data(encode_message(message(Pong(6346, "192.0.2.1"))))[0].payload
    )
    await net.send(a, message(Ping(), ttl=2), message(Ping(), ttl=2))
    # our own pong for each ping, the cached one for the first only
    assert [f.payload for f in a.sent()].count(cached_payload) == 1
    await trio.sleep(1.0)
    await net.send(a, message(Ping(), ttl=2))
    assert [f.payload for f in a.sent()] == [own_payload, cached_payload]


async def test_a_caching_peers_pings_are_answered_not_recorded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A ping from a peer that caches pongs is answered and never forwarded: no reply
    can come back along its route, so none is recorded (a flood of them cannot rotate
    usable routes out), and a repeat is answered again, as gtk-gnutella does. A peer
    that does not cache pongs has its pings recorded, and its repeat is a duplicate."""
    caching = Network(pong_caching=True)
    a = caching.links[0]
    ping = message(Ping(), ttl=2)
    await caching.send(a, ping, ping)
    assert [f.payload_type for f in a.sent()] == [MessageType.PONG, MessageType.PONG]
    assert ping.guid not in caching.router.ping_routes
    assert caching.dropped("duplicate", MessageType.PING) == 0
    plain = Network()
    b = plain.links[0]
    await plain.send(b, ping, ping)
    assert [f.payload_type for f in b.sent()] == [MessageType.PONG]
    assert ping.guid in plain.router.ping_routes
    assert plain.dropped("duplicate", MessageType.PING) == 1


async def test_every_frame_is_reported_done_to_its_link(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A link whose peer hung up closes once the router has finished with all it read:
    routed and dropped frames alike are reported, each to its own link."""
    net = Network()
    a, b, c = net.links
    query = message(Query(b"once"), ttl=3)
    from_a = FrameDecoder(source=a.id).receive_data(
        encode_message(query) + encode_message(message(Ping(), ttl=0))
    )
    from_b = FrameDecoder(source=b.id).receive_data(encode_message(query))  # a duplicate
    await net.router.handle([*from_a, *from_b, *from_a[:1]])
    assert (a.done, b.done, c.done) == (3, 1, 0)


async def test_a_peers_max_ttl_is_respected_in_what_it_is_sent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A peer announcing ``X-Max-TTL: 3`` never gets a broadcast with TTL above 3; the
    others get the TTL the router's own clamp allows, and the trims are counted."""
    net = Network()
    a, b, _ = net.links
    net.links[2] = careful = FakeLink(3, max_ttl=3)
    await net.send(a, message(Query(b"far"), ttl=7), message(Ping(), ttl=2))
    assert [f.ttl for f in b.sent()] == [6, 1]
    assert [f.ttl for f in careful.sent()] == [3, 1]
    assert net.router.ttl_trimmed[MessageType.QUERY] == 1
    assert net.router.statistics().ttl_trimmed == {"query": 1}


def ancient_query(text: bytes, ttl: int = 3) -> Message:
    """A query in the pre-0.6 form: a zero "minimum speed" where the flags word now is."""
    return message(Query.legacy(text, min_speed=0), ttl=ttl)


async def test_ancient_queries_are_kept_from_peers_that_drop_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = Network()
    a, b, _ = net.links
    net.links[2] = gtk = FakeLink(3, user_agent="gtk-gnutella/1.2.3")
    modern = message(Query(b"modern"), ttl=3)
    await net.send(a, ancient_query(b"old"), modern)
    assert len(b.sent()) == 2
    assert [f.guid for f in gtk.sent()] == [modern.guid]
    assert net.dropped("peer-refuses-format", MessageType.QUERY) == 1


async def test_ancient_queries_can_be_dropped_everywhere(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = Network()
    net.router.config = msgspec.structs.replace(net.router.config, drop_ancient_queries=True)
    a, b, _ = net.links
    await net.send(a, ancient_query(b"old"))
    assert b.sent() == []
    assert net.dropped("ancient-format", MessageType.QUERY) == 1


async def test_our_pong_carries_ggep_for_peers_that_read_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from protocol.ggep import daily_uptime, vendor_code

    net = Network()
    a, _, _ = net.links
    net.links[1] = modern = FakeLink(2, ggep=True)
    await trio.sleep(30)  # the router has been up 30 s
    await net.send(modern, message(Ping(), ttl=1))
    await net.send(a, message(Ping(), ttl=1))
    (rich,) = modern.sent()
    pong = rich.message().payload
    assert isinstance(pong, Pong)
    assert pong.ggep is not None
    vendor = vendor_code(pong.ggep)
    assert vendor is not None
    assert vendor.vendor == "GRTR"
    assert daily_uptime(pong.ggep) == 30
    assert (pong.files, pong.kbytes) == (0, 0)
    (plain,) = a.sent()
    assert len(plain.payload) == 14  # no GGEP to a peer that did not announce it


async def test_neighbour_pongs_name_every_neighbour_whose_address_we_know(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = Network()
    net.links = [
        asker := FakeLink(1, pong_caching=True),
        FakeLink(2, listen_address=("192.0.2.20", 6346)),
        FakeLink(3),  # an incoming peer that announced nothing: unknown
    ]
    await net.send(asker, message(Ping(), ttl=2))
    hosts = {(p.ip, p.port) for f in asker.sent() if isinstance(p := f.message().payload, Pong)}
    assert hosts == {("192.0.2.1", 6346), ("192.0.2.20", 6346)}  # ours and the known one


async def test_a_peers_hops_flow_keeps_the_queries_it_asked_not_to_get(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """gtk-gnutella sends Hops Flow 0 when its queue towards us clogs and 255 when it
    clears: in between it gets no queries, but pings and replies still."""
    net = Network()
    a, b, c = net.links
    await net.send(c, hops_flow(0))
    assert c.hops_flow == 0
    await net.send(a, message(Query(b"stopped"), ttl=3), message(Ping(), ttl=2))
    assert types(c.sent()) == [MessageType.PING]
    assert types(b.sent()) == [MessageType.QUERY, MessageType.PING]
    assert net.dropped("peer-hops-flow", MessageType.QUERY) == 1

    await net.send(c, hops_flow(2))  # only queries that reach it with fewer than 2 hops
    near = message(Query(b"near"), ttl=3, hops=0)  # arrives at c with hops 1
    far = message(Query(b"far"), ttl=3, hops=1)  # arrives at c with hops 2
    await net.send(a, near, far)
    assert [f.guid for f in c.sent()] == [near.guid]

    await net.send(c, hops_flow(NO_HOPS_FLOW))
    await net.send(a, message(Query(b"again"), ttl=3, hops=1))
    assert types(c.sent()) == [MessageType.QUERY]
    assert net.router.statistics().dropped["peer-hops-flow"] == {"query": 2}
    assert net.router.consumed[MessageType.VENDOR] == 3


async def test_a_peers_introductions_are_kept_on_its_link(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = Network()
    a, _, _ = net.links
    gtk_list = [HOPS_FLOW, VendorMessageId(b"GTKG", 9, 1)]
    await net.send(a, messages_supported(gtk_list), features_supported([Feature("TLS!", 1)]))
    assert a.vendor_messages == (HOPS_FLOW, VendorMessageId(b"GTKG", 9, 1))
    assert a.features == (Feature("TLS!", 1),)


async def test_unknown_and_malformed_vendor_messages(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from protocol.messages import VendorMessage

    net = Network()
    a, b, _ = net.links
    unknown = Message(bytes(16), 1, 0, VendorMessage(b"LIME", 23, 2, b"whatever"))
    short = Message(bytes(16), 1, 0, VendorMessage(b"BEAR", 4, 1, b""))  # Hops Flow, no byte
    await net.send(a, unknown, short)
    assert net.router.consumed[MessageType.VENDOR] == 1
    assert net.dropped("malformed", MessageType.VENDOR) == 1
    assert a.malformed_in == 1
    assert a.hops_flow == NO_HOPS_FLOW
    assert b.sent() == []  # vendor messages travel one hop


async def test_we_introduce_ourselves_to_peers_that_announced_vendor_messages(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from protocol.messages import VendorMessage

    net = Network()
    net.links = [old := FakeLink(1), modern := FakeLink(2, vendor_messages=True)]
    for link in net.links:
        net.router.introduce(link, trio.current_time())
    assert old.sent() == []
    supported, features = (f.message().payload for f in modern.sent())
    assert isinstance(supported, VendorMessage)
    assert isinstance(features, VendorMessage)
    # Exactly what the router acts on: Hops Flow and a leaf's Query Status (the
    # introductions themselves go without saying).
    assert parse_messages_supported(supported.body) == (HOPS_FLOW, QUERY_STATUS_RESPONSE)
    assert parse_features_supported(features.body) == ()
    assert net.router.generated[MessageType.VENDOR] == 2


async def test_only_a_peers_own_repeats_are_duplicate_offences(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A query that comes back through another neighbour is the network's doing; the same
    GUID again from the same peer, with no higher TTL, is the peer's."""
    net = Network()
    a, b, _ = net.links
    query = message(Query(b"once"), ttl=3)
    await net.send(a, query)
    await net.send(b, query)  # relayed to us along another path
    assert b.offences[Offence.DUPLICATE] == 0
    await net.send(a, query, query)
    assert a.offences[Offence.DUPLICATE] == 2
    higher = Message(query.guid, 5, 0, query.payload)
    await net.send(a, higher)  # a re-query with a higher TTL is allowed (and relayed)
    assert a.offences[Offence.DUPLICATE] == 2
    assert net.dropped("duplicate", MessageType.QUERY) == 3
    assert net.router.relayed_higher_ttl == 1


async def test_ttl_malformed_unknown_and_unroutable_offences_are_reported(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from protocol.messages import OpaquePayload

    net = Network()
    a, _, _ = net.links
    await net.send(
        a,
        message(Query(b"far"), ttl=14, hops=2),
        message(Ping(), ttl=0),
        message(hit()),  # no query asked for it
        Message(random_guid(), 1, 0, OpaquePayload(0x99, b"?")),
    )
    garbled_ping = encode_header(random_guid(), MessageType.PING, 1, 0, 2) + b"xx"
    await net.router.handle(FrameDecoder(source=a.id).receive_data(garbled_ping))
    assert a.offences == {
        Offence.HIGH_TTL: 1,
        Offence.TTL_ZERO: 1,
        Offence.UNROUTABLE: 1,
        Offence.UNKNOWN_TYPE: 1,
        Offence.MALFORMED: 1,
    }


async def test_writes_wait_for_the_next_batch_only_when_one_is_due_and_fits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With more events queued, a link that takes a whole batch more is left for the
    next batch's write; one that would not is written now, and so is every link once
    the queue is empty."""
    net = Network()
    a, b, c = net.links
    c.outgoing = ThresholdQueue(max_messages=net.router.stage.batch_size)
    first = FrameDecoder(source=a.id).receive_data(encode_message(message(Query(b"1"), ttl=3)))
    queued = FrameDecoder(source=a.id).receive_data(encode_message(message(Query(b"2"), ttl=3)))
    assert net.router.stage.queue.admit(queued) == 1  # the next batch is due
    await net.router.handle(first)
    assert [link.flushes for link in net.links] == [0, 0, 1]  # c: 1 + a batch > its bound
    net.router.stage.queue.take(10)  # the queue is empty again
    await net.router.handle(queued)
    assert [link.flushes for link in net.links] == [1, 1, 2]
    assert [f.payload for f in b.sent()] == [first[0].payload, queued[0].payload]


async def test_the_next_batch_may_follow_at_once_only_while_no_writer_is_busy(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The router's stage takes its next batch before the other tasks run only while
    every link's writes went to its socket: a busy writer must run first."""
    net = Network()
    may_continue = net.router.stage.may_continue
    assert may_continue is not None
    assert may_continue()
    net.links[1].writer.busy = True
    assert not may_continue()
    net.links[1].writer.busy = False
    assert may_continue()


async def test_a_large_hit_with_no_route_is_an_offence_left_unparsed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from gnutella_router.control.abuse import LARGE_HIT, Offence

    net = Network()
    a, _, _ = net.links
    garbage = b"\x01" + bytes(LARGE_HIT + 100)  # not a hit at all, but too large to parse
    await net.router.handle([Frame(b"g" * 16, MessageType.QUERY_HIT, 3, 0, garbage, source=1)])
    assert net.dropped("no-route", MessageType.QUERY_HIT) == 1
    assert net.dropped("malformed", MessageType.QUERY_HIT) == 0
    assert a.offences[Offence.UNROUTABLE_LARGE] == 1
