"""Messages Supported, Features Supported and Hops Flow: bytes typed from gtk-gnutella's
layout (vmsg.c: vendor code big-endian as four letters, selector and version
little-endian, a little-endian count before the entries), round trips, hostile bodies."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.codec import encode_message, parse_payload
from protocol.constants import MessageType
from protocol.errors import LocalProtocolError, MalformedPayloadError
from protocol.framing import FrameDecoder
from protocol.messages import VendorMessage
from protocol.vendor import (
    FEATURES_SUPPORTED,
    HOPS_FLOW,
    MESSAGES_SUPPORTED,
    Feature,
    VendorMessageId,
    features_supported,
    hops_flow,
    messages_supported,
    parse_features_supported,
    parse_hops_flow,
    parse_messages_supported,
)


def test_messages_supported_has_gtk_gnutellas_layout() -> None:
    message = messages_supported([HOPS_FLOW, MESSAGES_SUPPORTED])
    assert message.guid == bytes(16)
    assert (message.ttl, message.hops) == (1, 0)
    assert encode_message(message)[16:] == (
        b"\x31\x01\x00"  # vendor message, TTL 1, hops 0
        + (8 + 2 + 8).to_bytes(4, "little")  # payload length
        + b"\0\0\0\0" + b"\x00\x00" + b"\x00\x00"  # Messages Supported 0v0
        + b"\x01\x00"  # one entry (the introduction itself is not listed)
        + b"BEAR" + b"\x04\x00" + b"\x01\x00"  # Hops Flow 4v1
    )  # fmt: skip


def test_features_supported_has_gtk_gnutellas_layout() -> None:
    message = features_supported([Feature("TLS!", 1), Feature("F2FT", 0xFFFF)])
    assert isinstance(message.payload, VendorMessage)
    assert VendorMessageId.of(message.payload) == FEATURES_SUPPORTED
    assert message.payload.body == b"\x02\x00F2FT\xff\xffTLS!\x01\x00"


def test_an_empty_feature_list_is_a_count_of_zero() -> None:
    message = features_supported([])
    assert isinstance(message.payload, VendorMessage)
    assert message.payload.body == b"\x00\x00"
    assert parse_features_supported(b"\x00\x00") == ()


def test_hops_flow_is_one_byte() -> None:
    message = hops_flow(0)
    assert isinstance(message.payload, VendorMessage)
    assert (message.payload.vendor, message.payload.selector) == (b"BEAR", 4)
    assert message.payload.body == b"\x00"
    assert parse_hops_flow(b"\x03") == 3


def test_a_gtk_gnutella_messages_supported_parses() -> None:
    body = b"\x03\x00" + b"BEAR\x04\x00\x01\x00" + b"GTKG\x09\x00\x01\x00" + b"LIME\x17\x00\x02\x00"
    assert [str(m) for m in parse_messages_supported(body)] == [
        "BEAR/4v1",
        "GTKG/9v1",
        "LIME/23v2",
    ]
    assert str(MESSAGES_SUPPORTED) == "0000/0v0"


def test_the_whole_message_round_trips_through_the_codec() -> None:
    data = encode_message(messages_supported([HOPS_FLOW]))
    (frame,) = FrameDecoder().receive_data(data)
    decoded = parse_payload(frame.payload_type, frame.payload)
    assert decoded == VendorMessage(b"\0\0\0\0", 0, 0, b"\x01\x00BEAR\x04\x00\x01\x00")
    assert decoded.message_type == MessageType.VENDOR


@pytest.mark.parametrize(
    ("parse", "body"),
    [
        (parse_messages_supported, b""),
        (parse_messages_supported, b"\x01"),
        (parse_messages_supported, b"\x02\x00BEAR\x04\x00\x01\x00"),  # one entry of two
        (parse_features_supported, b"\x01\x00TLS"),
        (parse_hops_flow, b""),
    ],
)
def test_a_body_shorter_than_it_declares_is_malformed(parse: object, body: bytes) -> None:
    assert callable(parse)
    with pytest.raises(MalformedPayloadError, match="malformed") as caught:
        parse(body)
    assert caught.value.message_type == MessageType.VENDOR


def test_bytes_after_the_declared_entries_are_ignored_as_gtk_gnutella_does() -> None:
    assert parse_messages_supported(b"\x01\x00BEAR\x04\x00\x01\x00junk") == (HOPS_FLOW,)
    assert parse_hops_flow(b"\x05\x00") == 5


def test_a_feature_name_must_be_four_letters() -> None:
    with pytest.raises(LocalProtocolError, match="4 letters"):
        features_supported([Feature("TLS", 1)])


ids = st.builds(
    VendorMessageId,
    st.binary(min_size=4, max_size=4),
    st.integers(0, 0xFFFF),
    st.integers(0, 0xFFFF),
)


@given(st.lists(ids, max_size=40))
def test_messages_supported_round_trips(understood: list[VendorMessageId]) -> None:
    message = messages_supported(understood)
    assert isinstance(message.payload, VendorMessage)
    expected = sorted(set(understood) - {MESSAGES_SUPPORTED, FEATURES_SUPPORTED})
    assert list(parse_messages_supported(message.payload.body)) == expected


@given(st.binary(max_size=64))
def test_any_body_parses_or_is_refused_as_malformed(body: bytes) -> None:
    for parse in (parse_messages_supported, parse_features_supported, parse_hops_flow):
        with contextlib.suppress(MalformedPayloadError):
            parse(body)


def test_query_status_has_gtk_gnutellas_layout() -> None:
    from protocol.vendor import (
        QUERY_STATUS_REQUEST,
        STOP_QUERY,
        parse_query_status,
        query_status_request,
        query_status_response,
    )

    guid = bytes(range(16))
    request = query_status_request(guid)
    assert request.guid == guid  # the query it asks about
    assert isinstance(request.payload, VendorMessage)
    assert VendorMessageId.of(request.payload) == QUERY_STATUS_REQUEST
    assert request.payload.body == b""
    response = query_status_response(guid, 300)
    assert isinstance(response.payload, VendorMessage)
    assert response.payload.body == b"\x2c\x01"  # 300, little-endian
    assert parse_query_status(b"\xff\xff") == STOP_QUERY
    with pytest.raises(MalformedPayloadError):
        parse_query_status(b"\x01")
