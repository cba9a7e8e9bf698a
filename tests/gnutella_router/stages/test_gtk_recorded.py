"""What real gtk-gnutella 1.2.3 nodes sent the router, replayed against its rules.

``tests/fixtures/gtk-gnutella-1.2.3.trace`` was recorded with ``gnutella-router run
--record`` while two gtk-gnutella 1.2.3 ultrapeers and one gtk-gnutella leaf were
connected to it on loopback (the recipe is in the interop notes), for nine minutes of
queries from a scripted peer; it keeps everything the three nodes sent except all but
four query hits each: their introductory vendor messages, the leaf's QRP table, their
pings and pongs, hits, and the Byes of their shutdown. Unlike hand-made vectors, these
bytes are what gtk-gnutella really puts on the wire.
"""

from __future__ import annotations

import collections
from pathlib import Path

import trio
import trio.testing

from gnutella_router.control.abuse import Offence
from protocol.constants import MessageType
from protocol.framing import Frame, FrameDecoder
from protocol.messages import Bye, QrpPatch, QrpReset, QueryHit, VendorMessage
from protocol.qrp import Intake, QrpReceiver, query_words
from protocol.vendor import (
    FEATURES_SUPPORTED,
    HOPS_FLOW,
    MESSAGES_SUPPORTED,
    Feature,
    VendorMessageId,
    parse_features_supported,
    parse_messages_supported,
)
from tests.support.links import FakeLink, Network
from traffic_models.trace_reader import read_trace

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "gtk-gnutella-1.2.3.trace"


def recorded() -> dict[int, list[Frame]]:
    """The recorded frames, by the connection they came on."""
    by_connection: dict[int, list[Frame]] = collections.defaultdict(list)
    for record in read_trace(FIXTURE):
        by_connection[record.connection].extend(
            FrameDecoder(source=record.connection).receive_data(record.wire())
        )
    return dict(by_connection)


def leaf_of(sessions: dict[int, list[Frame]]) -> int:
    (leaf,) = [c for c, frames in sessions.items() if any(f.payload_type == 0x30 for f in frames)]
    return leaf


def test_gtk_gnutella_introduces_itself_with_vendor_messages_we_read() -> None:
    for frames in recorded().values():
        vendor = [f.message().payload for f in frames if f.payload_type == MessageType.VENDOR]
        assert all(isinstance(v, VendorMessage) for v in vendor)
        ids = [VendorMessageId.of(v) for v in vendor if isinstance(v, VendorMessage)]
        assert ids == [MESSAGES_SUPPORTED, FEATURES_SUPPORTED]
        supported, features = (v.body for v in vendor if isinstance(v, VendorMessage))
        understood = parse_messages_supported(supported)
        assert HOPS_FLOW in understood
        assert len(understood) > 10
        assert Feature("HSEP", 1) in parse_features_supported(features)


def test_the_gtk_leafs_qrp_table_is_received_whole_and_matches_its_files() -> None:
    sessions = recorded()
    leaf = leaf_of(sessions)
    receiver = QrpReceiver()
    completed = []
    for frame in sessions[leaf]:
        if frame.payload_type == MessageType.QRP:
            payload = frame.message().payload
            assert isinstance(payload, QrpReset | QrpPatch)
            completed.append(receiver.receive(payload) is Intake.COMPLETED)
    assert completed == [False, True]
    table = receiver.table
    assert table is not None
    hits = [f.message().payload for f in sessions[leaf] if f.payload_type == MessageType.QUERY_HIT]
    names = [r.name.decode() for h in hits if isinstance(h, QueryHit) for r in h.results]
    assert names
    for name in names:  # every file the leaf answered with is in its table
        assert table.matches(query_words(name.rsplit(".", 1)[0])), name


async def test_the_whole_session_replays_through_the_router_without_a_fault(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sessions = recorded()
    leaf = leaf_of(sessions)
    net = Network(links=0)
    net.links = [
        FakeLink(connection, ultrapeer=connection != leaf, bye_packet=True)
        for connection in sessions
    ]
    for frames in sessions.values():
        await net.router.handle(frames)
    offences: collections.Counter[Offence] = collections.Counter()
    for link in net.links:
        offences.update(link.offences)
    # The hits answer queries that are not in the recording, so they have no route; that
    # is the only thing held against gtk-gnutella's messages.
    assert set(offences) <= {Offence.UNROUTABLE}, offences
    assert net.router.consumed[MessageType.VENDOR] == 2 * len(sessions)
    assert net.router.qrp_receiver(leaf) is not None
    byes = [
        f.message().payload for frames in sessions.values() for f in frames if f.payload_type == 2
    ]
    assert [b.code for b in byes if isinstance(b, Bye)] == [200] * len(sessions)
    assert [link.bye_code_received for link in net.links] == [200] * len(sessions)
