"""The framer: any chunking, bounded memory, typed errors, nothing lost."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.codec import encode_message
from protocol.constants import DEFAULT_MAX_PAYLOAD, HEADER_SIZE, MessageType
from protocol.errors import (
    MalformedPayloadError,
    StreamBrokenError,
    TruncatedStreamError,
)
from protocol.framing import Frame, FrameDecoder, FrameTooLargeError
from protocol.header import encode_header
from protocol.messages import Message, Ping, Pong, Query
from tests.support import strategies as s


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for point in points:
        pieces.append(data[last:point])
        last = point
    pieces.append(data[last:])
    return [p for p in pieces if p]


def reference_frames(data: bytes, max_payload: int) -> tuple[list[Frame], bool]:
    """The obvious whole-buffer framer: frames, and whether a bad length was met."""
    frames: list[Frame] = []
    position = 0
    while len(data) - position >= HEADER_SIZE:
        guid = data[position : position + 16]
        payload_type, ttl, hops = data[position + 16], data[position + 17], data[position + 18]
        length = int.from_bytes(data[position + 19 : position + 23], "little")
        if length > max_payload:
            return frames, True
        if position + HEADER_SIZE + length > len(data):
            break
        payload = data[position + HEADER_SIZE : position + HEADER_SIZE + length]
        frames.append(Frame(guid, payload_type, ttl, hops, payload))
        position += HEADER_SIZE + length
    return frames, False


def feed(decoder: FrameDecoder, pieces: list[bytes]) -> tuple[list[Frame], bool]:
    frames: list[Frame] = []
    for piece in pieces:
        try:
            frames.extend(decoder.receive_data(piece))
        except FrameTooLargeError as exc:
            frames.extend(exc.frames)
            with pytest.raises(StreamBrokenError):
                decoder.receive_data(b"more")
            return frames, True
    return frames, False


@given(st.lists(s.messages, max_size=12), st.lists(st.integers(0, 10_000), max_size=30))
@settings(max_examples=300)
def test_any_chunking_yields_every_message_once(messages: list[Message], cuts: list[int]) -> None:
    stream = b"".join(encode_message(m) for m in messages)
    decoder = FrameDecoder()
    frames, failed = feed(decoder, split(stream, cuts))
    assert not failed
    assert [f.message() for f in frames] == messages
    assert decoder.buffered == 0
    assert decoder.receive_data(b"") == []


@given(st.binary(max_size=300), st.lists(st.integers(0, 400), max_size=20), st.integers(0, 64))
@settings(max_examples=500)
def test_arbitrary_bytes_match_the_reference_framer(
    data: bytes, cuts: list[int], max_payload: int
) -> None:
    decoder = FrameDecoder(max_payload=max_payload)
    frames, failed = feed(decoder, split(data, cuts))
    assert (frames, failed) == reference_frames(data, max_payload)
    if not failed:
        assert decoder.buffered <= HEADER_SIZE + max_payload


def test_oversized_length_keeps_earlier_frames_and_breaks_the_stream() -> None:
    good = encode_message(Message(bytes(16), 7, 0, Ping()))
    bad_header = encode_header(bytes(16), MessageType.QUERY, 7, 0, DEFAULT_MAX_PAYLOAD + 1)
    decoder = FrameDecoder()
    with pytest.raises(FrameTooLargeError) as info:
        decoder.receive_data(good + good + bad_header + b"junk")
    assert len(info.value.frames) == 2
    assert not info.value.resynchronisable
    assert info.value.bye_code == 400
    with pytest.raises(StreamBrokenError):
        decoder.receive_data(good)


def test_length_is_checked_before_the_payload_is_buffered() -> None:
    decoder = FrameDecoder(max_payload=1000)
    with pytest.raises(FrameTooLargeError):
        decoder.receive_data(encode_header(bytes(16), 0x80, 7, 0, 1001))


def test_malformed_payload_leaves_the_stream_in_sync() -> None:
    before = Message(b"a" * 16, 5, 1, Query(b"first"))
    broken_pong = encode_header(b"b" * 16, MessageType.PONG, 5, 1, 3) + b"xyz"
    after = Message(b"c" * 16, 5, 1, Pong(6346, "127.0.0.1", 1, 2))
    stream = encode_message(before) + broken_pong + encode_message(after)
    frames = FrameDecoder().receive_data(stream)
    assert len(frames) == 3
    assert frames[0].message() == before
    with pytest.raises(MalformedPayloadError) as info:
        frames[1].message()
    assert info.value.resynchronisable
    assert info.value.message_type == MessageType.PONG
    assert frames[2].message() == after


def test_end_of_stream_inside_a_message_is_reported() -> None:
    wire = encode_message(Message(bytes(16), 7, 0, Query(b"cut short")))
    decoder = FrameDecoder()
    assert decoder.receive_data(wire[:-3]) == []
    with pytest.raises(TruncatedStreamError) as info:
        decoder.receive_data(b"")
    assert info.value.leftover == len(wire) - 3
    with pytest.raises(StreamBrokenError):
        decoder.receive_data(b"")


def test_dripped_large_message_is_buffered_without_rescanning() -> None:
    payload = b"q" * 60_000
    wire = encode_header(bytes(16), 0x99, 1, 0, len(payload)) + payload
    decoder = FrameDecoder()
    for i in range(len(wire) - 1):
        assert decoder.receive_data(wire[i : i + 1]) == []
    assert decoder.buffered == len(wire) - 1
    (frame,) = decoder.receive_data(wire[-1:])
    assert frame.payload == payload
    assert frame.to_bytes() == wire
    assert decoder.buffered == 0


def test_frame_from_message_round_trips() -> None:
    message = Message(bytes(range(16)), 3, 4, Pong(1, "10.0.0.1", 5, 6))
    frame = Frame.from_message(message)
    assert frame.message() == message
    assert frame.to_bytes() == encode_message(message)
    assert "type=0x01" in repr(frame)
