"""The responder: pongs for pings, hits for some queries, nothing for the rest."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.codec import encode_message, parse_payload
from protocol.constants import MessageType
from protocol.framing import Frame, FrameDecoder
from protocol.messages import (
    HugeExtension,
    Message,
    Ping,
    Pong,
    Push,
    Query,
    QueryHit,
    QueryHitFlag,
    make_guid,
)
from traffic_models.responder import RESPONDER_VENDOR, Responder, keep_alive_pong

ADDRESS = ("10.1.2.3", 6347)


def guid(number: int) -> bytes:
    return make_guid(struct.pack(">QQ", number, ~number & 0xFFFF_FFFF_FFFF_FFFF))


def frame_of(message: Message) -> Frame:
    """The frame a router would deliver for ``message``."""
    frames = FrameDecoder().receive_data(encode_message(message))
    assert len(frames) == 1
    return frames[0]


def query_frame(number: int, *, hops: int = 1, text: bytes = b"jazz piano") -> Frame:
    return frame_of(Message(guid(number), 6, hops, Query(text, 0x8800)))


def test_a_ping_gets_one_pong_back_along_its_path() -> None:
    responder = Responder(address=ADDRESS)
    ping = frame_of(Message(guid(1), 5, 2, Ping()))
    (reply,) = responder.respond(ping)
    assert reply.guid == ping.guid
    assert (reply.ttl, reply.hops) == (3, 0)
    assert isinstance(reply.payload, Pong)
    assert (reply.payload.ip, reply.payload.port) == ADDRESS
    assert reply.payload.files > 0
    assert reply.payload.kbytes > 0
    parsed = parse_payload(MessageType.PONG, encode_message(reply)[23:])
    assert parsed == reply.payload
    assert responder.pings_answered == 1


def test_pong_ttl_is_capped_at_the_hard_limit() -> None:
    (reply,) = Responder(address=ADDRESS).respond(frame_of(Message(guid(2), 1, 15, Ping())))
    assert reply.ttl == 15


@pytest.mark.parametrize("p_hit", [0.1, 0.5])
def test_hit_probability_is_p_hit(p_hit: float) -> None:
    responder = Responder(address=ADDRESS, p_hit=p_hit, seed=3)
    queries = 4000
    hits = sum(bool(responder.respond(query_frame(n))) for n in range(queries))
    # Standard deviation at most 0.008 of a share over 4000 queries.
    assert hits / queries == pytest.approx(p_hit, abs=0.035)
    assert responder.queries_seen == queries
    assert responder.hits_sent == hits


def test_p_hit_zero_and_one() -> None:
    never = Responder(address=ADDRESS, p_hit=0.0)
    always = Responder(address=ADDRESS, p_hit=1.0)
    for n in range(200):
        assert never.respond(query_frame(n)) == []
        assert len(always.respond(query_frame(n))) == 1


def test_a_hit_parses_back_with_the_servent_guid() -> None:
    servent = make_guid(bytes(range(16)))
    responder = Responder(address=ADDRESS, p_hit=1.0, servent_guid=servent, max_results=4)
    query = query_frame(7, hops=3, text=b"live concert")
    (reply,) = responder.respond(query)
    assert reply.guid == query.guid
    assert (reply.ttl, reply.hops) == (5, 0)
    data = encode_message(reply)
    (frame,) = FrameDecoder().receive_data(data)
    hit = parse_payload(frame.payload_type, frame.payload)
    assert isinstance(hit, QueryHit)
    assert hit == reply.payload
    assert hit.servent_guid == servent == responder.servent_guid
    assert (hit.ip, hit.port) == ADDRESS
    assert 1 <= len(hit.results) <= 4
    for result in hit.results:
        assert result.name.startswith(b"live_concert")
        (urn,) = result.extensions
        assert isinstance(urn, HugeExtension)
        assert urn.urn.startswith(b"urn:sha1:")
        assert len(urn.urn) == len(b"urn:sha1:") + 32
    assert hit.descriptor is not None
    assert hit.descriptor.vendor == RESPONDER_VENDOR
    assert hit.descriptor.flag(QueryHitFlag.PUSH) is False
    assert hit.descriptor.flag(QueryHitFlag.BUSY) is False


def test_hit_ttl_is_hops_plus_two_capped() -> None:
    responder = Responder(address=ADDRESS, p_hit=1.0)
    (near,) = responder.respond(query_frame(1, hops=0))
    (far,) = responder.respond(query_frame(2, hops=14))
    assert near.ttl == 2
    assert far.ttl == 15


def test_answers_depend_on_the_guid_not_on_arrival_order() -> None:
    frames = [query_frame(n) for n in range(300)]
    first = Responder(address=ADDRESS, p_hit=0.3, seed=8)
    second = Responder(address=ADDRESS, p_hit=0.3, seed=8)
    forward = {f.guid: first.respond(f) for f in frames}
    backward = {f.guid: second.respond(f) for f in reversed(frames)}
    assert forward == backward
    assert all(bool(forward[f.guid]) == first.would_hit(f.guid) for f in frames)
    other = Responder(address=ADDRESS, p_hit=0.3, seed=9)
    assert [other.would_hit(f.guid) for f in frames] != [first.would_hit(f.guid) for f in frames]


def test_the_servent_guid_is_seeded_and_modern() -> None:
    one = Responder(address=ADDRESS, seed=1)
    assert one.servent_guid == Responder(address=ADDRESS, seed=1).servent_guid
    assert one.servent_guid != Responder(address=ADDRESS, seed=2).servent_guid
    assert len(one.servent_guid) == 16
    assert (one.servent_guid[8], one.servent_guid[15]) == (0xFF, 0)


def test_replies_and_other_types_get_nothing() -> None:
    responder = Responder(address=ADDRESS, p_hit=1.0)
    others = [
        Message(guid(1), 3, 1, Pong(6346, "1.2.3.4")),
        Message(guid(2), 3, 1, Push(guid(3), 1, "1.2.3.4", 6346)),
    ]
    for message in others:
        assert responder.respond(frame_of(message)) == []
    bye = Frame(guid(4), MessageType.BYE, 1, 0, b"\xc8\x00bye\x00")
    assert responder.respond(bye) == []


def test_a_malformed_query_is_ignored() -> None:
    responder = Responder(address=ADDRESS, p_hit=1.0)
    garbage = Frame(guid(5), MessageType.QUERY, 3, 1, b"\x80")
    assert responder.respond(garbage) == []


@given(st.binary(max_size=80).filter(lambda b: b"\x00" not in b))
def test_any_search_text_gives_a_hit_that_parses(text: bytes) -> None:
    responder = Responder(address=ADDRESS, p_hit=1.0)
    (reply,) = responder.respond(query_frame(9, text=text))
    hit = parse_payload(MessageType.QUERY_HIT, encode_message(reply)[23:])
    assert hit == reply.payload


@pytest.mark.parametrize(
    "kwargs",
    [
        {"address": ("localhost", 6346)},
        {"address": ADDRESS, "p_hit": 1.5},
        {"address": ADDRESS, "max_results": 0},
        {"address": ADDRESS, "servent_guid": b"short"},
        {"address": ("1.2.3.4", 70000)},
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"address|range|p_hit|max_results|GUID"):
        Responder(**kwargs)  # type: ignore[arg-type]


def test_a_neighbours_own_ping_gets_a_pong_with_no_address() -> None:
    """Any peer answers a router's keep-alive or discovery ping (hops 0), so that the
    router does not close it as idle; a pong with port 0 is never cached or handed on."""
    for ttl in (1, 2):
        ping = frame_of(Message(guid(ttl), ttl, 0, Ping()))
        pong = keep_alive_pong(ping)
        assert pong is not None
        (reply,) = FrameDecoder().receive_data(pong)
        assert (reply.guid, reply.payload_type, reply.ttl, reply.hops) == (ping.guid, 1, 1, 0)
        assert reply.payload_record() == Pong(port=0, ip="0.0.0.0")
    # A ping relayed from further away, or anything else, is not the neighbour's own.
    assert keep_alive_pong(frame_of(Message(guid(3), 5, 1, Ping()))) is None
    assert keep_alive_pong(query_frame(4, hops=0)) is None
