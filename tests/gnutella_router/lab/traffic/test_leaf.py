"""The synthetic leaf servent: library, QRP table, answers and the accounting of hits."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from gnutella_router.lab.traffic.leaf import (
    LEAF_VENDOR,
    MAX_OUTSTANDING,
    LeafServent,
    SharedFile,
    draw_library,
    query_matches,
)
from protocol.codec import encode_message
from protocol.constants import MessageType
from protocol.framing import Frame, FrameDecoder
from protocol.messages import (
    Message,
    Ping,
    Pong,
    QrpPatch,
    QrpReset,
    Query,
    QueryHit,
    random_guid,
)
from protocol.qrp import Intake, QrpReceiver, qrp_hash, query_words
from traffic_models.content import Vocabulary

VOCABULARY = Vocabulary(size=300, seed=3)


def frame(message: Message) -> Frame:
    (decoded,) = FrameDecoder().receive_data(encode_message(message))
    return decoded


def shared(index: int, name: str) -> SharedFile:
    return SharedFile(index, name.encode(), frozenset(query_words(name)), 1000)


LIBRARY = (shared(1, "abbey_road_remastered.mp3"), shared(2, "yellow_submarine.ogg"))


def test_a_query_matches_a_file_only_if_it_names_every_keyword() -> None:
    assert query_matches(["abbey", "road"], LIBRARY) == [LIBRARY[0]]
    assert query_matches(["road", "submarine"], LIBRARY) == []
    assert query_matches([], LIBRARY) == []  # no keywords: nothing to find


def test_the_library_is_seeded_and_its_keywords_are_what_a_router_hashes() -> None:
    one = draw_library(VOCABULARY, random.Random(5), 12)
    assert one == draw_library(VOCABULARY, random.Random(5), 12)
    assert len(one) == 12
    for item in one:
        assert item.keywords == frozenset(query_words(item.name.decode()))
        assert all(len(word) >= 3 for word in item.keywords)


def test_its_published_table_decodes_to_the_table_of_its_keywords() -> None:
    leaf = LeafServent("leaf", LIBRARY, seed=1)
    receiver = QrpReceiver()
    done = False
    for data in leaf.table_messages():
        (message_frame,) = FrameDecoder().receive_data(data)
        assert message_frame.ttl == 1
        payload = message_frame.payload_record()
        assert isinstance(payload, QrpReset | QrpPatch)
        done = receiver.receive(payload) is Intake.COMPLETED
    assert done
    assert receiver.table == leaf.table
    for word in ("abbey", "road", "remastered", "yellow", "submarine"):
        assert qrp_hash(word, leaf.table.bits) in leaf.table


def test_it_answers_a_matching_query_with_the_matching_files_and_counts_the_rest() -> None:
    leaf = LeafServent("leaf", LIBRARY, seed=1)
    guid = random_guid()
    (reply,) = leaf.receive(frame(Message(guid, 2, 3, Query(b"ABBEY road"))), frozenset(), 0.0)
    hit_frame = FrameDecoder().receive_data(reply)[0]
    assert (hit_frame.guid, hit_frame.ttl, hit_frame.hops) == (guid, 5, 0)
    hit = hit_frame.payload_record()
    assert isinstance(hit, QueryHit)
    assert [r.name for r in hit.results] == [b"abbey_road_remastered.mp3"]
    assert hit.servent_guid == leaf.servent_guid
    assert hit.descriptor is not None
    assert hit.descriptor.vendor == LEAF_VENDOR

    assert (
        leaf.receive(
            frame(Message(random_guid(), 2, 1, Query(b"abbey submarine"))), frozenset(), 0.0
        )
        == []
    )
    assert (leaf.queries_received, leaf.queries_unmatched, leaf.hits_sent) == (2, 1, 1)


def test_hits_for_its_own_queries_are_counted_and_only_leaves_hits_are_files_found() -> None:
    seeker = LeafServent("seeker", (), seed=1)
    sharer = LeafServent("sharer", LIBRARY, seed=1)
    encoded = seeker.query(VOCABULARY, now=10.0)
    sent = frame(FrameDecoder().receive_data(encoded)[0].message())
    query = seeker.queries[sent.guid]
    assert query.words == tuple(query_words(query.text.decode()))

    leaves = frozenset({seeker.servent_guid, sharer.servent_guid})
    answer = sharer.receive(
        frame(Message(sent.guid, 3, 1, Query(b"yellow submarine"))), leaves, 10.1
    )
    seeker.receive(FrameDecoder().receive_data(answer[0])[0], leaves, 10.25)
    not_a_leaf = QueryHit(6346, "10.0.0.1", 1, (), random_guid())
    seeker.receive(frame(Message(sent.guid, 3, 1, not_a_leaf)), leaves, 10.3)
    seeker.receive(frame(Message(random_guid(), 3, 1, not_a_leaf)), leaves, 10.3)

    assert (query.hits, query.results, query.leaf_hits) == (2, 1, 1)
    assert query.first_leaf_hit_at == 10.25
    assert seeker.hits_for_others == 1


def test_its_memory_of_own_queries_is_bounded() -> None:
    leaf = LeafServent("leaf", (), seed=1)
    first = None
    for _ in range(MAX_OUTSTANDING + 5):
        data = leaf.query(VOCABULARY, 0.0)
        first = first or FrameDecoder().receive_data(data)[0].guid
    assert len(leaf.queries) == MAX_OUTSTANDING
    assert first not in leaf.queries  # the oldest went first
    assert leaf.queries_sent == MAX_OUTSTANDING + 5


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 30))
def test_a_library_always_answers_queries_made_of_one_of_its_names(seed: int, files: int) -> None:
    library = draw_library(VOCABULARY, random.Random(seed), files)
    leaf = LeafServent("leaf", library, seed=seed)
    for item in library:
        if not item.keywords:
            continue
        text = " ".join(sorted(item.keywords)).encode()
        replies = leaf.receive(frame(Message(random_guid(), 1, 1, Query(text))), frozenset(), 0.0)
        assert len(replies) == 1
        assert int(MessageType.QUERY_HIT) == FrameDecoder().receive_data(replies[0])[0].payload_type


def test_its_ultrapeers_own_pings_get_a_pong() -> None:
    leaf = LeafServent("leaf", LIBRARY, seed=1)
    ping = frame(Message(random_guid(), 1, 0, Ping()))
    (reply,) = leaf.receive(ping, frozenset(), 0.0)
    (pong,) = FrameDecoder().receive_data(reply)
    assert (pong.guid, pong.payload_type) == (ping.guid, MessageType.PONG)
    assert isinstance(pong.payload_record(), Pong)
