"""The server's traffic totals: the connections that ended, added to the live ones."""

from __future__ import annotations

from gnutella_router.net.session import PeerSession
from gnutella_router.net.threshold_queue import ThresholdQueue
from gnutella_router.stages.server_statistics import TrafficTotals
from protocol.capabilities import Capabilities
from protocol.codec import encode_message
from protocol.messages import Message, Query, random_guid


def session(link_id: int) -> PeerSession:
    return PeerSession(
        id=link_id,
        peer=("192.0.2.5", 6346),
        role="incoming",
        capabilities=Capabilities(),
        outgoing=ThresholdQueue(max_messages=1),
        compress_outgoing=False,
        decompress_incoming=False,
        max_payload=65536,
        now=0.0,
    )


def test_the_totals_keep_what_ended_connections_did() -> None:
    query = encode_message(Message(random_guid(), 3, 0, Query(b"q")))
    ended, live = session(1), session(2)
    ended.receive_data(query * 2)
    ended.outgoing.offer(query, 3, 0, 0.0)
    ended.outgoing.offer(query, 3, 0, 0.0)  # over its one message: the close verdict
    ended.sent(3, 30)
    live.receive_data(query)
    totals = TrafficTotals()
    totals.ended(ended, 1.0)
    ended.receive_data(query)  # counted when it ended, not after
    figures = totals.with_live([live], 1.0)
    assert figures["messages_in"] == 3
    assert figures["bytes_in"] == 3 * len(query)
    assert (figures["messages_out"], figures["bytes_out"]) == (3, 30)
    assert figures["outgoing_dropped"]["overflow"] == 1
    assert totals.with_live([], 1.0)["messages_in"] == 2  # the live ones are not kept
