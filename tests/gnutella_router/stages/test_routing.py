"""Every routing rule, checked on the wire with real TCP peers against a running daemon."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from gnutella_router.daemon import Daemon
from protocol.constants import MessageType
from protocol.ggep import GGEPBlock, GGEPExtension
from protocol.header import encode_header
from protocol.messages import (
    Bye,
    OpaquePayload,
    Ping,
    Pong,
    Push,
    QrpReset,
    Query,
    QueryHit,
    QueryHitResult,
    VendorMessage,
    random_guid,
)
from tests.support.peers import Peer, message, peers, running_daemons
from tests.support.waiting import of_type, wait_until

PING, PONG, QUERY, QUERY_HIT, PUSH = (
    MessageType.PING,
    MessageType.PONG,
    MessageType.QUERY,
    MessageType.QUERY_HIT,
    MessageType.PUSH,
)


def dropped(daemon: Daemon, reason: str, message_type: int) -> int:
    return daemon.router.dropped[reason, message_type]


def hit_for(query_guid: bytes, servent: bytes) -> QueryHit:
    return QueryHit(
        port=6346,
        ip="10.0.0.9",
        speed=100,
        results=(QueryHitResult(7, 1234, b"song.mp3"),),
        servent_guid=servent,
    )


@pytest.mark.e2e
async def test_ping_is_answered_and_broadcast_but_not_echoed(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        a, b, c = await peers(daemon, 3)
        ping = message(Ping(), ttl=3)
        await a.send(ping)
        own_pong = await a.receive()
        assert own_pong.payload_type == PONG
        assert own_pong.guid == ping.guid
        assert (own_pong.ttl, own_pong.hops) == (1, 0)
        pong = own_pong.message().payload
        assert isinstance(pong, Pong)
        assert (pong.ip, pong.port) == daemon.address
        for peer in (b, c):
            forwarded = await peer.receive_matching(of_type(PING))
            assert forwarded.guid == ping.guid
            assert (forwarded.ttl, forwarded.hops) == (2, 1)
        assert not [f for f in await a.collect(0.2) if f.payload_type == PING]


@pytest.mark.e2e
async def test_duplicates_are_dropped_by_type_and_guid(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        a, b, c = await peers(daemon, 3)
        query = message(Query(b"twice"), ttl=3)
        await a.send(query)
        await b.send(query)  # the same GUID from another side: a duplicate
        ping_same_guid = message(Ping(), ttl=3, guid=query.guid)
        await a.send(ping_same_guid)  # same GUID, other type: not a duplicate
        got = await c.collect(0.5)
        assert [f.payload_type for f in got if f.guid == query.guid].count(QUERY) == 1
        assert [f.payload_type for f in got if f.guid == query.guid].count(PING) == 1
        assert dropped(daemon, "duplicate", QUERY) == 1


@pytest.mark.e2e
async def test_hits_follow_the_reverse_path_and_pushes_the_servent(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        origin, bystander, responder = await peers(daemon, 3)
        query = message(Query(b"song"), ttl=4)
        await origin.send(query)
        await responder.receive_matching(of_type(QUERY))
        await bystander.receive_matching(of_type(QUERY))

        servent = random_guid()
        await responder.send(message(hit_for(query.guid, servent), ttl=5, guid=query.guid))
        hit = await origin.receive_matching(of_type(QUERY_HIT))
        assert hit.guid == query.guid
        assert (hit.ttl, hit.hops) == (4, 1)
        hit_payload = hit.message().payload
        assert isinstance(hit_payload, QueryHit)
        assert hit_payload.servent_guid == servent

        push = message(Push(servent, 7, "10.0.0.1", 6346), ttl=5)
        await origin.send(push)
        routed = await responder.receive_matching(of_type(PUSH))
        assert routed.guid == push.guid
        assert (routed.ttl, routed.hops) == (4, 1)
        await origin.send(push)  # the same push again: a duplicate
        leftovers = await bystander.collect(0.3) + await responder.collect(0.1)
        assert not [f for f in leftovers if f.payload_type in (QUERY_HIT, PUSH)]
        assert dropped(daemon, "duplicate", PUSH) == 1


@pytest.mark.e2e
async def test_pongs_go_back_only_to_the_pinger(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        pinger, answerer, bystander = await peers(daemon, 3)
        ping = message(Ping(), ttl=2)
        await pinger.send(ping)
        await answerer.receive_matching(of_type(PING))
        await answerer.send(message(Pong(6346, "10.1.2.3", 5, 6), ttl=2, guid=ping.guid))
        pongs = [
            f.message().payload
            for f in await pinger.collect(0.4)
            if f.payload_type == PONG and f.guid == ping.guid
        ]
        assert Pong(6346, "10.1.2.3", 5, 6) in pongs
        assert not [f for f in await bystander.collect(0.2) if f.payload_type == PONG]


@pytest.mark.e2e
async def test_replies_without_a_route_are_dropped_and_counted(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        a, b = await peers(daemon, 2)
        await a.send(
            message(Pong(1, "10.0.0.1"), ttl=3),
            message(hit_for(random_guid(), random_guid()), ttl=3),
            message(Push(random_guid(), 1, "10.0.0.1", 1), ttl=3),
        )
        await wait_until(lambda: dropped(daemon, "no-route", PUSH) == 1)
        assert dropped(daemon, "no-route", PONG) == 1
        assert dropped(daemon, "no-route", QUERY_HIT) == 1
        assert not await b.collect(0.2)


@pytest.mark.e2e
async def test_ttl_rules(tmp_path: Path) -> None:
    async with running_daemons(tmp_path, overrides={"network.max_ttl": 7}) as (daemon,):
        sender, sink = await peers(daemon, 2)
        last_hop = message(Query(b"ttl one"), ttl=1)
        zero = message(Query(b"ttl zero"), ttl=0)
        too_far = message(Query(b"hops+ttl 16"), ttl=10, hops=6)
        hostile = message(Query(b"ttl 255"), ttl=255)
        clamped = message(Query(b"clamped"), ttl=7, hops=3)
        await sender.send(last_hop, zero, too_far, hostile, clamped)
        frame = await sink.receive_matching(of_type(QUERY))
        assert frame.guid == clamped.guid
        assert (frame.ttl, frame.hops) == (3, 4)  # hops + TTL clamped to 7, then one hop
        assert not [f for f in await sink.collect(0.3) if f.payload_type == QUERY]
        assert dropped(daemon, "ttl-zero", QUERY) == 1
        assert dropped(daemon, "hard-ttl-limit", QUERY) == 2
        assert daemon.router.query_routes.lookup(last_hop.guid, trio.current_time()) is not None


@pytest.mark.e2e
async def test_bye_closes_only_its_connection(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        leaver, a, b = await peers(daemon, 3)
        await leaver.send(message(Bye(201, "User manual removal"), ttl=1))
        await leaver.wait_closed()
        await wait_until(lambda: len(daemon.server.connections) == 2)
        await a.send(message(Query(b"still routing"), ttl=2))
        assert (await b.receive_matching(of_type(QUERY))).payload_type == QUERY


@pytest.mark.e2e
async def test_hop_by_hop_and_unknown_messages_go_nowhere(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        a, b = await peers(daemon, 2)
        await a.send(
            message(QrpReset(65536, 7), ttl=1),
            message(VendorMessage(b"\x00\x00\x00\x00", 0, 0, b"\x00\x00"), ttl=1),
            message(OpaquePayload(0x99, b"mystery"), ttl=3),
        )
        await wait_until(lambda: dropped(daemon, "unknown-type", 0x99) == 1)
        assert daemon.router.consumed[MessageType.QRP] == 1
        assert daemon.router.consumed[MessageType.VENDOR] == 1
        assert not await b.collect(0.2)


@pytest.mark.e2e
async def test_pong_caching_peers_get_cached_pongs_instead_of_a_broadcast(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        pinger, answerer = await peers(daemon, 2)
        caching = await Peer.connect(daemon.address, extra_headers=[("Pong-Caching", "0.1")])
        await wait_until(lambda: len(daemon.server.connections) == 3)
        # Fill the cache: a pong for 81.2.69.9 routed through the daemon.
        ping = message(Ping(), ttl=2)
        await pinger.send(ping)
        await answerer.receive_matching(of_type(PING))
        await answerer.send(message(Pong(6346, "81.2.69.9", 1, 1), ttl=2, guid=ping.guid))
        await pinger.receive_matching(lambda f: f.payload_type == PONG and f.hops == 1)

        cached_ping = message(Ping(), ttl=3)
        await caching.send(cached_ping)
        answers = [f for f in await caching.collect(0.4) if f.guid == cached_ping.guid]
        hosts = {
            (p.ip, p.port) for p in (f.message().payload for f in answers) if isinstance(p, Pong)
        }
        assert daemon.address in hosts
        assert ("81.2.69.9", 6346) in hosts
        others = await pinger.collect(0.1) + await answerer.collect(0.1)
        assert not [f for f in others if f.guid == cached_ping.guid]


@pytest.mark.e2e
async def test_malformed_messages_are_dropped_and_the_link_survives(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        a, b = await peers(daemon, 2)
        no_nul = encode_header(random_guid(), QUERY, 3, 0, 5) + b"\x80\x00abc"
        junk_ping = encode_header(random_guid(), PING, 3, 0, 3) + b"xyz"
        short_push = encode_header(random_guid(), PUSH, 3, 0, 4) + b"abcd"
        await a.send(no_nul, junk_ping, short_push, message(Query(b"fine"), ttl=2))
        good = await b.receive_matching(of_type(QUERY))
        assert good.payload.startswith(b"\x80\x00fine")
        assert dropped(daemon, "malformed", QUERY) == 1
        assert dropped(daemon, "malformed", PING) == 1
        assert dropped(daemon, "malformed", PUSH) == 1


@pytest.mark.e2e
async def test_deflated_links_route_like_plain_ones(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        a = await Peer.connect(daemon.address, deflate=True)
        b = await Peer.connect(daemon.address, deflate=True)
        await wait_until(lambda: len(daemon.server.connections) == 2)
        assert a.complete.compress_outgoing
        assert a.complete.decompress_incoming
        ggep = GGEPBlock((GGEPExtension("NP"),))
        query = message(Query(b"compressed", extensions=(ggep,)), ttl=2)
        await a.send(query)
        frame = await b.receive_matching(of_type(QUERY))
        assert frame.message().payload == query.payload


def _ipv6_loopback() -> bool:
    import socket

    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.e2e
@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
async def test_routes_over_ipv6(tmp_path: Path) -> None:
    async with running_daemons(tmp_path, overrides={"node.listen": "[::1]:0"}) as (daemon,):
        assert daemon.address[0] == "::1"
        a, b = await peers(daemon, 2)
        query = message(Query(b"over IPv6"), ttl=2)
        await a.send(query)
        assert (await b.receive_matching(of_type(QUERY))).guid == query.guid


@pytest.mark.e2e
async def test_public_networks_keep_private_pongs_out_of_the_cache(tmp_path: Path) -> None:
    overrides = {"network.allow_private_addresses": False}
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        pinger, answerer = await peers(daemon, 2)
        ping = message(Ping(), ttl=2)
        await pinger.send(ping)
        await answerer.receive_matching(of_type(PING))
        await answerer.send(
            message(Pong(6346, "192.168.1.7"), ttl=2, guid=ping.guid),
            message(Pong(6346, "81.2.69.9"), ttl=2, guid=ping.guid),
        )
        routed = {
            f.message().payload.ip  # type: ignore[union-attr]
            for f in await pinger.collect(0.4)
            if f.payload_type == PONG and f.hops == 1
        }
        assert routed == {"192.168.1.7", "81.2.69.9"}  # both still routed back
        assert len(daemon.router.pong_cache) == 1
        assert daemon.router.statistics().pongs_not_cached["private"] == 1
        assert ("192.168.1.7", 6346) not in daemon.catcher.hosts
        assert daemon.catcher.hosts.statistics().rejected["private"] == 1


@pytest.mark.e2e
async def test_a_handler_bug_costs_a_batch_not_the_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        a, b = await peers(daemon, 2)

        def broken(connection: object, frame: object, now: float) -> None:
            raise RuntimeError("a bug")

        # Every per-message handler is broken; a push always takes that path (runs route
        # only pings, queries, pongs and hits).
        monkeypatch.setattr(daemon.router.replies, "_handlers", [broken] * 256)
        await a.send(message(Push(b"S" * 16, 1, "10.0.0.1", 6346), ttl=2))
        await wait_until(lambda: daemon.router.stage.handler_errors == 1)
        monkeypatch.undo()
        query = message(Query(b"after the bug"), ttl=2)
        await a.send(query)
        assert (await b.receive_matching(of_type(QUERY))).guid == query.guid


@pytest.mark.e2e
async def test_a_peers_last_messages_are_handled_before_its_close(tmp_path: Path) -> None:
    """A servent that shuts down sends its last messages and a Bye and closes at once, in
    one write (gtk-gnutella does). Here they arrive while the router is busy (a query in
    its injected delay), so the end of the stream is read long before the router gets to
    them: the hit must still be routed back, and the Bye recorded with its code in the
    connection's closing line."""
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        async with running_daemons(tmp_path, overrides={"router.query_delay_ms": 300}) as (daemon,):
            asker, leaving = await peers(daemon, 2)
            query = message(Query(b"last words"), ttl=3)
            await asker.send(query)
            await leaving.receive_matching(of_type(QUERY))  # routed, so its route exists
            await asker.send(message(Query(b"keeps the router busy"), ttl=3))
            await wait_until(lambda: daemon.router.received[QUERY] == 2)
            last_hit = message(hit_for(query.guid, random_guid()), ttl=3, guid=query.guid)
            await leaving.send(last_hit, message(Bye(200, "shutting down"), ttl=1))
            await leaving.aclose()
            routed = await asker.receive_matching(of_type(QUERY_HIT))
            assert routed.guid == query.guid
            await wait_until(lambda: len(daemon.server.connections) == 1)
    assert daemon.router.dropped["connection-closing", QUERY_HIT] == 0
    closed = [entry for entry in logs if entry["event"] == "connection closed"]
    leaving_line = next(entry for entry in closed if entry.get("bye_received"))
    assert leaving_line["bye_received"] == 200
    assert leaving_line["reason"].startswith("peer said Bye 200")


@pytest.mark.e2e
async def test_a_vendor_message_peer_is_introduced_to_and_its_hops_flow_obeyed(
    tmp_path: Path,
) -> None:
    from gnutella_router.observe.dumps import dump_connections
    from protocol.vendor import (
        HOPS_FLOW,
        QUERY_STATUS_RESPONSE,
        hops_flow,
        messages_supported,
        parse_messages_supported,
    )
    from tests.support.peers import connection_of

    async with running_daemons(tmp_path) as (daemon,):
        sender = await Peer.connect(daemon.address)
        gtk_like = await Peer.connect(daemon.address, extra_headers=[("Vendor-Message", "0.2")])
        first = (await gtk_like.receive()).message()
        assert isinstance(first.payload, VendorMessage)
        assert (first.ttl, first.hops, first.guid) == (1, 0, bytes(16))
        assert parse_messages_supported(first.payload.body) == (HOPS_FLOW, QUERY_STATUS_RESPONSE)

        link = connection_of(daemon, gtk_like)
        await gtk_like.send(messages_supported([HOPS_FLOW]), hops_flow(0))
        await wait_until(lambda: link.hops_flow == 0)
        (entry,) = [c for c in dump_connections(daemon) if c["id"] == link.id]
        assert entry["vendor"] == {
            "messages_supported": ["BEAR/4v1"],
            "features_supported": None,
            "hops_flow": 0,
        }

        await sender.send(message(Query(b"not for you"), ttl=3))
        await wait_until(lambda: dropped(daemon, "peer-hops-flow", QUERY) == 1)
        assert [f for f in await gtk_like.collect(0.3) if f.payload_type == QUERY] == []


LEAF_HEADERS = (
    ("User-Agent", "test-leaf/1.0"),
    ("X-Ultrapeer", "False"),
    ("X-Query-Routing", "0.1"),
    ("Bye-Packet", "0.1"),
)


@pytest.mark.e2e
async def test_a_leaf_with_a_qrp_table_gets_the_queries_it_matches_and_no_others(
    tmp_path: Path,
) -> None:
    from protocol.messages import Message
    from protocol.qrp import QrpTable, table_messages

    async with running_daemons(tmp_path) as (daemon,):
        sender = await Peer.connect(daemon.address)
        leaf = await Peer.connect(daemon.address, headers=LEAF_HEADERS)
        table = QrpTable.of_words(["abbey", "road"])
        await leaf.send(*(Message(random_guid(), 1, 0, m) for m in table_messages(table)))
        await wait_until(lambda: daemon.router.consumed[MessageType.QRP] == 2)
        wanted = message(Query(b"abbey road"), ttl=3)
        await sender.send(message(Query(b"yellow submarine"), ttl=3), wanted)
        got = await leaf.receive_matching(of_type(QUERY))
        assert got.guid == wanted.guid
        assert dropped(daemon, "qrp-miss", QUERY) == 1
        from gnutella_router.observe.dumps import dump_connections

        (shown,) = [c for c in dump_connections(daemon) if c["leaf"]]
        assert shown["qrp"] == {
            "tables_received": 1,
            "slots": 65536,
            "filled": table.filled,
            "fill_ratio": round(table.filled / 65536, 4),
        }


@pytest.mark.e2e
async def test_leaves_have_slots_of_their_own(tmp_path: Path) -> None:
    from tests.support.peers import PeerRefused

    overrides = {"network.max_connections": 1, "network.max_leaves": 1}
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        await Peer.connect(daemon.address)  # the one ultrapeer slot
        await Peer.connect(daemon.address, headers=LEAF_HEADERS)  # the one leaf slot
        await wait_until(lambda: len(daemon.server.connections) == 2)
        with pytest.raises(PeerRefused) as refused:
            await Peer.connect(daemon.address, headers=LEAF_HEADERS)
        assert refused.value.rejection.status_code == 503
        assert daemon.server.refused["too-many-leaves"] == 1


@pytest.mark.e2e
async def test_a_leafs_query_reaches_ultrapeers_and_its_hits_come_back(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        ultrapeers = [await Peer.connect(daemon.address) for _ in range(2)]
        leaf = await Peer.connect(daemon.address, headers=LEAF_HEADERS)
        await wait_until(lambda: len(daemon.server.connections) == 3)
        query = message(Query(b"leaf looking"), ttl=4)
        await leaf.send(query)
        for ultrapeer in ultrapeers:
            probe = await ultrapeer.receive_matching(of_type(QUERY))
            assert (probe.guid, probe.ttl, probe.hops) == (query.guid, 1, 1)
        hit = QueryHit(6346, "192.0.2.9", 100, (QueryHitResult(1, 10, b"leaf looking"),), b"S" * 16)
        await ultrapeers[0].send(message(hit, guid=query.guid, ttl=3, hops=1))
        back = await leaf.receive_matching(of_type(QUERY_HIT))
        assert back.guid == query.guid
        assert daemon.router.statistics().dynamic_queries["copies"] == 2


@pytest.mark.e2e
async def test_an_ultrapeer_that_takes_last_hop_tables_gets_our_leaves_keywords(
    tmp_path: Path,
) -> None:
    from protocol.messages import Message, QrpPatch, QrpReset
    from protocol.qrp import QrpReceiver, QrpTable, table_messages

    async with running_daemons(tmp_path) as (daemon,):
        leaf = await Peer.connect(daemon.address, headers=LEAF_HEADERS)
        table = QrpTable.of_words(["abbey", "road"])
        await leaf.send(*(Message(random_guid(), 1, 0, m) for m in table_messages(table)))
        await wait_until(lambda: daemon.router.consumed[MessageType.QRP] == 2)
        ultrapeer = await Peer.connect(
            daemon.address, extra_headers=[("X-Ultrapeer-Query-Routing", "0.1")]
        )
        receiver = QrpReceiver()
        while receiver.table is None:
            frame = await ultrapeer.receive_matching(of_type(MessageType.QRP), timeout=5)
            payload = frame.message().payload
            assert isinstance(payload, QrpReset | QrpPatch)
            receiver.receive(payload)
        assert receiver.table.matches(["abbey", "road"])
        from gnutella_router.observe.dumps import dump_qrp

        peers = dump_qrp(daemon)["peers"]
        assert isinstance(peers, list)
        sent = {p["leaf"]: p.get("last_hop_table_sent") for p in peers}
        assert set(sent) == {True, False}
        assert sent[True] is None
        taken = sent[False]
        assert isinstance(taken, dict)
        assert taken["current"] is True
        assert 0 <= taken["seconds_ago"] < 5


@pytest.mark.e2e
async def test_dump_qrp_says_which_peers_a_keyword_would_reach(tmp_path: Path) -> None:
    from gnutella_router.observe.admin_text import format_qrp
    from gnutella_router.observe.dumps import dump_qrp
    from protocol.messages import Message
    from protocol.qrp import QrpTable, table_messages

    async with running_daemons(tmp_path) as (daemon,):
        ultrapeer = await Peer.connect(daemon.address)
        leaf = await Peer.connect(daemon.address, headers=LEAF_HEADERS)
        table = QrpTable.of_words(["abbey", "road"])
        await leaf.send(*(Message(random_guid(), 1, 0, m) for m in table_messages(table)))
        await wait_until(lambda: daemon.router.consumed[MessageType.QRP] == 2)
        del ultrapeer
        found = dump_qrp(daemon, keyword="Abbey")
        assert found["words"] == ["abbey"]
        peers = found["peers"]
        assert isinstance(peers, list)
        assert [(p["leaf"], p["would_receive"]) for p in peers] == [(False, True), (True, True)]
        assert peers[0]["last_hop_table_sent"] is None  # it never asked for one
        missing = dump_qrp(daemon, keyword="submarine")["peers"]
        assert isinstance(missing, list)
        assert [p["would_receive"] for p in missing] == [True, False]
        from gnutella_router.observe.metrics import metrics_registry, render_metrics

        metrics = render_metrics(metrics_registry(daemon)).decode()
        assert 'gnutella_qrp_tables{kind="leaf"} 1.0' in metrics
        assert f"gnutella_qrp_leaves_table_filled {float(table.filled)}" in metrics
        text = format_qrp(found)
        assert "keyword 'Abbey' hashes as the words: abbey" in text
        assert "leaf" in text
        assert "yes" in text
