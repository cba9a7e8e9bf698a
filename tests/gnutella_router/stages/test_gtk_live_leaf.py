"""A live gtk-gnutella 1.2.3 leaf session, replayed: its QRP table decides what reaches it.

``tests/fixtures/gtk-gnutella-1.2.3-leaf-live.trace`` is the router's own recording
(``[trace] record``) of a run of ``scripts/live_gtk_check.py``: everything a gtk-gnutella
leaf sharing one file and two gtk-gnutella ultrapeers sent the router over loopback,
uncut. The ultrapeers relay queries that entered at them from scripted peers: searches
for the leaf's file and queries for random words that match nothing; the leaf answers
what reaches it. Replayed in the recorded order through a router whose links stand in
for the three servents, the leaf must be sent exactly the queries its file's name
answers (the name is read from the leaf's own hits, so the check does not lean on the
router's QRP code), and each of its hits must go back to the ultrapeer its query came
from.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import trio
import trio.testing

from gnutella_router.control.abuse import Offence
from protocol.constants import MessageType
from protocol.framing import Frame
from protocol.messages import Query, QueryHit
from protocol.qrp import query_words
from tests.support.links import FakeLink, Network
from traffic_models.trace_format import TraceRecord
from traffic_models.trace_reader import read_trace

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "gtk-gnutella-1.2.3-leaf-live.trace"
QUERY = int(MessageType.QUERY)
HIT = int(MessageType.QUERY_HIT)
P = TypeVar("P", Query, QueryHit)


def _records() -> list[TraceRecord]:
    return sorted(read_trace(FIXTURE), key=lambda r: r.at)


def _leaf(records: list[TraceRecord]) -> int:
    (leaf,) = {r.connection for r in records if r.payload_type == HIT}
    return leaf


def _file_words(records: list[TraceRecord]) -> set[str]:
    names = {
        result.text
        for r in records
        if r.payload_type == HIT
        for result in _payload(r, QueryHit).results
    }
    (name,) = names
    return set(query_words(name.rsplit(".", 1)[0]))


def _payload(record: TraceRecord, kind: type[P]) -> P:
    payload = record.frame().message().payload
    assert isinstance(payload, kind)
    return payload


async def test_the_leaf_gets_exactly_the_queries_its_file_answers_and_its_hits_go_home(
    autojump_clock: trio.testing.MockClock,
) -> None:
    records = _records()
    leaf = _leaf(records)
    words = _file_words(records)
    net = Network(links=0)
    net.links = [
        FakeLink(
            connection,
            ultrapeer=connection != leaf,
            ultrapeer_query_routing=None if connection == leaf else "0.1",
            bye_packet=True,
        )
        for connection in sorted({r.connection for r in records})
    ]
    sent: dict[int, list[Frame]] = {link.id: [] for link in net.links}
    for record in records:
        frame = record.frame()
        frame.source = record.connection
        await net.router.handle([frame])
        for link in net.links:
            sent[link.id].extend(link.sent())

    queries = [r for r in records if r.payload_type == QUERY]
    answerable = {
        r.guid for r in queries if set(query_words(_payload(r, Query).search.decode())) <= words
    }
    assert answerable
    assert len(answerable) < len(queries)  # unmatched queries were relayed to us too
    to_leaf = {f.guid for f in sent[leaf] if f.payload_type == QUERY}
    assert to_leaf == answerable
    missed = len(queries) - len(answerable)
    assert net.dropped("qrp-miss", QUERY) >= missed

    came_from = {r.guid: r.connection for r in queries}
    hits = [r for r in records if r.payload_type == HIT]
    assert {h.guid for h in hits} == answerable  # the leaf answered every one
    for hit in hits:
        home = came_from[hit.guid]
        assert hit.guid in {f.guid for f in sent[home] if f.payload_type == HIT}
        for other in sent:
            if other != home:
                assert hit.guid not in {f.guid for f in sent[other] if f.payload_type == HIT}
    # The servents' pongs answer the live router's pings, which are not in the recording,
    # so they have no route here; nothing else is held against what gtk-gnutella sent.
    offences = {offence for link in net.links for offence in link.offences}
    assert offences <= {Offence.UNROUTABLE}, offences
    assert net.router.dropped["no-route", int(MessageType.PONG)] > 0
    assert not any(link.closing for link in net.links)
