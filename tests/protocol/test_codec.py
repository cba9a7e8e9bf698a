"""Payload codecs: round trips for every type, and the fast path held to the spec."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.codec import (
    build_payload,
    build_payload_spec,
    decode_message,
    encode_message,
    parse_payload,
    parse_payload_spec,
)
from protocol.constants import HEADER_SIZE, MessageType
from protocol.errors import LocalProtocolError, MalformedPayloadError
from protocol.ggep import GGEPBlock, GGEPExtension
from protocol.header import decode_header
from protocol.messages import (
    Bye,
    HugeExtension,
    Message,
    Payload,
    Pong,
    Push,
    Query,
    QueryHit,
    QueryHitResult,
    UnknownExtension,
    XmlExtension,
    payload_type_of,
)
from tests.support import strategies as s

Outcome = tuple[str, object]


def outcome(parse: object, message_type: int, data: bytes) -> Outcome:
    assert callable(parse)
    try:
        return ("ok", parse(message_type, data))
    except MalformedPayloadError as exc:
        return ("malformed", exc.message_type)


@given(s.payloads)
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_build_parse_build_is_identity(payload: Payload) -> None:
    message_type = payload_type_of(payload)
    wire = build_payload(payload)
    assert build_payload_spec(payload) == wire
    parsed = parse_payload(message_type, wire)
    assert parsed == payload
    assert parse_payload_spec(message_type, wire) == payload
    assert build_payload(parsed) == wire


@given(s.messages)
@settings(max_examples=200)
def test_whole_message_round_trip(message: Message) -> None:
    wire = encode_message(message)
    guid, payload_type, ttl, hops, length = decode_header(wire)
    assert length == len(wire) - HEADER_SIZE
    assert decode_message(guid, payload_type, ttl, hops, wire[HEADER_SIZE:]) == message


@given(s.message_types, st.binary(max_size=80))
@settings(max_examples=600)
def test_fast_path_agrees_with_spec_on_arbitrary_bytes(message_type: int, data: bytes) -> None:
    assert outcome(parse_payload, message_type, data) == outcome(
        parse_payload_spec, message_type, data
    )
    result = outcome(parse_payload, message_type, data)
    assert result[0] == "ok" or result[1] == message_type


@st.composite
def mutated_payloads(draw: st.DrawFn) -> tuple[int, bytes]:
    """Valid payloads, then truncated, extended or with bytes overwritten."""
    payload = draw(s.payloads)
    data = bytearray(build_payload(payload))
    kind = draw(st.sampled_from(["truncate", "append", "overwrite"]))
    if kind == "truncate" and data:
        del data[draw(st.integers(0, len(data) - 1)) :]
    elif kind == "append":
        data += draw(st.binary(min_size=1, max_size=8))
    elif data:
        index = draw(st.integers(0, len(data) - 1))
        data[index] = draw(s.u8)
    return payload_type_of(payload), bytes(data)


@given(mutated_payloads())
@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
def test_fast_path_agrees_with_spec_on_damaged_payloads(case: tuple[int, bytes]) -> None:
    message_type, data = case
    assert outcome(parse_payload, message_type, data) == outcome(
        parse_payload_spec, message_type, data
    )


def test_query_flags_word_is_big_endian_and_legacy_speed_little_endian() -> None:
    modern = parse_payload(MessageType.QUERY, b"\x80\x00abc\x00")
    assert isinstance(modern, Query)
    assert modern.is_modern
    assert modern.min_speed is None
    legacy = parse_payload(MessageType.QUERY, b"\x10\x00abc\x00")
    assert isinstance(legacy, Query)
    assert not legacy.is_modern
    assert legacy.min_speed == 0x0010
    assert build_payload(Query.legacy(b"abc", 0x0010)) == b"\x10\x00abc\x00"
    with pytest.raises(ValueError, match="legacy"):
        Query.legacy(b"abc", 0x80)


def test_ggep_with_separator_and_nul_bytes_stays_whole_in_a_result() -> None:
    raw_block = bytes.fromhex("c3 82 5454 44 001c001c")  # TT, 4 bytes, not COBS-encoded
    lenient = parse_payload(
        MessageType.QUERY_HIT,
        bytes.fromhex("01 ba18 7f000001 10000000")
        + bytes.fromhex("01000000 0a000000")
        + b"a.txt\x00"
        + b"urn:sha1:AAAA\x1c"
        + raw_block
        + b"\x00"
        + bytes(range(16)),
    )
    assert isinstance(lenient, QueryHit)
    (result,) = lenient.results
    assert result.extensions[1] == GGEPBlock((GGEPExtension("TT", b"\x00\x1c\x00\x1c"),))
    with pytest.raises(LocalProtocolError, match="COBS"):
        build_payload(lenient)

    block = GGEPBlock((GGEPExtension("TT", b"\x00\x1c\x00\x1c", cobs=True),))
    hit = QueryHit(
        port=6346,
        ip="127.0.0.1",
        speed=16,
        results=(
            QueryHitResult(1, 10, b"a.txt", (HugeExtension(b"urn:sha1:AAAA"), block)),
            QueryHitResult(2, 20, b"b.txt", ()),
        ),
        servent_guid=bytes(range(16)),
    )
    wire = build_payload(hit)
    assert parse_payload(MessageType.QUERY_HIT, wire) == hit


def test_query_tolerates_trailing_nul_padding_but_not_embedded_nul() -> None:
    padded = parse_payload(MessageType.QUERY, b"\x80\x00abc\x00urn:sha1:X\x00\x00")
    assert isinstance(padded, Query)
    assert padded.extensions == (HugeExtension(b"urn:sha1:X"),)
    with pytest.raises(MalformedPayloadError):
        parse_payload(MessageType.QUERY, b"\x80\x00abc\x00urn:sha1:X\x00<xml")


def test_extension_kinds_are_classified() -> None:
    query = parse_payload(MessageType.QUERY, b"\x80\x00q\x00urn:sha1:A\x1c<x/>\x1cplain\x1c\x1c")
    assert isinstance(query, Query)
    assert query.extensions == (
        HugeExtension(b"urn:sha1:A"),
        XmlExtension(b"<x/>"),
        UnknownExtension(b"plain"),
    )


def test_bye_parsing_is_lenient() -> None:
    without_nul = parse_payload(MessageType.BYE, b"\xc8\x00Servent shutdown")
    assert without_nul == Bye(200, "Servent shutdown")
    bare_lf = parse_payload(MessageType.BYE, b"\xc9\x00Removed\nServer: x\nbogus line\n\n\x00")
    assert bare_lf == Bye(201, "Removed", (("Server", "x"),))


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(Pong(70000, "1.2.3.4"), id="port-too-big"),
        pytest.param(Pong(1, "1.2.3"), id="bad-ip"),
        pytest.param(Pong(1, "1.2.3.4", files=-1), id="negative-files"),
        pytest.param(Push(b"short", 1, "1.2.3.4", 1), id="short-guid"),
        pytest.param(Query(b"a\x00b"), id="nul-in-search"),
        pytest.param(Query(b"a", 0x10000), id="flags-too-big"),
        pytest.param(Query(b"a", extensions=(UnknownExtension(b"a\x1cb"),)), id="separator"),
        pytest.param(Query(b"a", extensions=(UnknownExtension(b""),)), id="empty-ext"),
        pytest.param(Query(b"a", extensions=(HugeExtension(b"sha1:x"),)), id="not-urn"),
        pytest.param(Query(b"a", extensions=(UnknownExtension(b"urn:x"),)), id="unknown-urn"),
        pytest.param(Bye(200, "two\r\nlines"), id="bye-crlf"),
        pytest.param(Bye(200, "ok", (("Na:me", "v"),)), id="bye-header-colon"),
        pytest.param(Bye(70000, "ok"), id="bye-code"),
        pytest.param(
            QueryHit(1, "1.2.3.4", 1, (QueryHitResult(1, 1, b"x"),) * 256, bytes(16)),
            id="too-many-results",
        ),
        pytest.param(QueryHit(1, "1.2.3.4", 1, (), bytes(15)), id="short-servent-guid"),
        pytest.param(Pong(1, "127.000.000.001"), id="zero-padded-ip"),
        pytest.param(
            Query(b"a", extensions=(GGEPBlock((GGEPExtension("NP"),)), HugeExtension(b"urn:x"))),
            id="ggep-before-huge",
        ),
    ],
)
def test_unrepresentable_records_raise_local_protocol_error(payload: Payload) -> None:
    with pytest.raises(LocalProtocolError):
        build_payload(payload)
    with pytest.raises(LocalProtocolError):
        build_payload_spec(payload)


def test_encode_message_rejects_bad_header_fields() -> None:
    with pytest.raises(LocalProtocolError):
        encode_message(Message(bytes(16), 256, 0, Pong(1, "1.2.3.4")))
    with pytest.raises(LocalProtocolError):
        encode_message(Message(bytes(15), 1, 0, Pong(1, "1.2.3.4")))
