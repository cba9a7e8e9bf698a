"""A peer session driven with bytes and ``now`` alone: no socket, no trio, no clock."""

from __future__ import annotations

import itertools
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gnutella_router.control.abuse import AbuseMeter, Kick, Offence
from gnutella_router.net.flow_control_queue import FlowControlQueue
from gnutella_router.net.outqueue import OutgoingQueue, Verdict
from gnutella_router.net.session import (
    MAX_LISTED_BY_PEER,
    Close,
    PeerSession,
    StreamBroken,
)
from gnutella_router.net.threshold_queue import ThresholdQueue
from protocol.capabilities import Capabilities
from protocol.codec import encode_message
from protocol.compression import DEFAULT_DEFLATE_LEVEL, RATIO_GRACE, zlib_header
from protocol.constants import ByeCode
from protocol.framing import Frame, FrameDecoder
from protocol.messages import Bye, Message, Query, random_guid
from protocol.vendor import NO_HOPS_FLOW, Feature, VendorMessageId

LINK_ID = 7


def session(
    *,
    bye_packet: bool = False,
    deflate_in: bool = False,
    deflate_out: bool = False,
    outgoing: OutgoingQueue | None = None,
    abuse: AbuseMeter | None = None,
    role: str = "incoming",
    max_payload: int = 65536,
    listen: tuple[str, int] | None = None,
    deflate_level: int = DEFAULT_DEFLATE_LEVEL,
) -> PeerSession:
    return PeerSession(
        id=LINK_ID,
        peer=("192.0.2.5", 6346),
        role=role,
        capabilities=Capabilities(bye_packet=bye_packet, listen_address=listen),
        outgoing=outgoing or ThresholdQueue(),
        compress_outgoing=deflate_out,
        decompress_incoming=deflate_in,
        max_payload=max_payload,
        now=100.0,
        abuse=None if abuse is None else (lambda: abuse),
        deflate_level=deflate_level,
    )


def queries(count: int, text: bytes = b"search") -> list[bytes]:
    return [encode_message(Message(random_guid(), 3, 0, Query(text))) for _ in range(count)]


def wire(frames: list[Frame]) -> list[bytes]:
    return [frame.to_bytes() for frame in frames]


def read_all(link: PeerSession, data: bytes, frames: list[Frame] | None = None) -> list[Frame]:
    """Everything ``data`` completes, piece after piece, as the adapter reads it (into
    ``frames``, which then holds what came out before a :class:`StreamBroken`)."""
    frames = [] if frames is None else frames
    frames += link.receive_data(data)
    while link.more_to_frame:
        frames += link.next_frames()
    return frames


def cut(data: bytes, points: list[int]) -> list[bytes]:
    bounds = sorted({0, len(data), *(p % (len(data) + 1) for p in points)})
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def decoded_bye(data: bytes) -> Bye:
    (frame,) = FrameDecoder().receive_data(data)
    payload = frame.message().payload
    assert isinstance(payload, Bye)
    return payload


# ---------------------------------------------------------------------- reading


@settings(max_examples=60)
@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=8),
    points=st.lists(st.integers(0, 10_000), max_size=12),
)
def test_frames_come_out_whole_and_in_order_however_the_bytes_are_cut(
    sizes: list[int], points: list[int]
) -> None:
    messages = [encode_message(Message(random_guid(), 3, 0, Query(b"q" * size))) for size in sizes]
    stream = b"".join(messages)
    link = session()
    frames: list[Frame] = []
    for chunk in cut(stream, points):
        frames += link.receive_data(chunk)
    assert wire(frames) == messages
    assert all(frame.source == LINK_ID for frame in frames)
    assert (link.messages_in, link.bytes_in) == (len(messages), len(stream))
    assert link.partial_bytes == 0
    assert link.frames_unfinished == len(messages)


@settings(max_examples=40)
@given(
    flushes=st.lists(st.integers(1, 6), min_size=1, max_size=5),
    points=st.lists(st.integers(0, 10_000), max_size=12),
)
def test_a_deflating_peer_is_inflated_and_framed_however_its_bytes_are_cut(
    flushes: list[int], points: list[int]
) -> None:
    """The peer sync-flushes after groups of messages (a flush may fall inside a message
    too); every cut of its stream gives the same frames."""
    deflater = zlib.compressobj()
    messages: list[bytes] = []
    stream = b""
    for count in flushes:
        group = queries(count)
        messages += group
        joined = b"".join(group)
        half = len(joined) // 2
        stream += deflater.compress(joined[:half]) + deflater.flush(zlib.Z_SYNC_FLUSH)
        stream += deflater.compress(joined[half:]) + deflater.flush(zlib.Z_SYNC_FLUSH)
    link = session(deflate_in=True)
    frames: list[Frame] = []
    for chunk in cut(stream, points):
        frames += read_all(link, chunk)
    assert wire(frames) == messages
    assert (link.messages_in, link.bytes_in) == (len(messages), len(stream))


def test_a_large_inflated_read_is_handed_out_a_piece_at_a_time() -> None:
    """One read that inflates to more than a piece (256 KiB) gives its frames over
    several calls, so each piece can wait for the router's queue before the next is
    inflated."""
    messages = queries(4000, b"x" * 100)  # about 500 KB inflated
    deflater = zlib.compressobj()
    stream = deflater.compress(b"".join(messages)) + deflater.flush(zlib.Z_SYNC_FLUSH)
    link = session(deflate_in=True)
    first = link.receive_data(stream)
    assert link.more_to_frame
    assert 0 < len(first) < len(messages)
    pieces = [first]
    while link.more_to_frame:
        pieces.append(link.next_frames())
    assert len(pieces) >= 2
    assert wire([frame for piece in pieces for frame in piece]) == messages


def test_a_corrupt_deflate_stream_closes_the_session() -> None:
    link = session(deflate_in=True, bye_packet=True)
    with pytest.raises(StreamBroken) as broken:
        read_all(link, b"\x78\x9c" + b"\xff" * 64)
    assert broken.value.close == Close(broken.value.reason, int(ByeCode.INVALID_PAYLOAD))
    assert broken.value.frames == []
    assert link.closing
    assert link.close_reason is not None
    assert "corrupt deflate stream" in link.close_reason
    assert link.kick is None  # corrupt is not hostile
    assert decoded_bye(link.data_to_send(65536)[0]).code == ByeCode.INVALID_PAYLOAD


def bomb() -> bytes:
    """Pings of TTL 0 and hops 0 with empty payloads: nothing but zeros, ~1000:1."""
    deflater = zlib.compressobj(9)
    return deflater.compress(bytes(4 * RATIO_GRACE)) + deflater.flush(zlib.Z_SYNC_FLUSH)


def test_a_deflate_bomb_is_a_kick_when_abuse_is_judged() -> None:
    link = session(deflate_in=True, abuse=AbuseMeter({}, 10.0))
    handed: list[Frame] = []
    with pytest.raises(StreamBroken) as broken:
        read_all(link, bomb(), handed)
    assert link.closing
    assert link.kick is not None
    assert link.kick.offence is Offence.DEFLATE_RATIO
    assert broken.value.close is not None
    assert broken.value.close.reason == link.close_reason
    assert len(handed) * 23 <= 2 * RATIO_GRACE  # cut off soon after the grace
    assert link.messages_in == len(handed)


def test_a_deflate_bomb_without_abuse_judged_closes_without_a_kick() -> None:
    link = session(deflate_in=True)
    with pytest.raises(StreamBroken):
        read_all(link, bomb())
    assert link.closing
    assert link.kick is None


def test_an_oversized_header_closes_after_handing_out_the_frames_before_it() -> None:
    before = queries(2)
    bad = bytearray(queries(1)[0])
    bad[19:23] = (70_000).to_bytes(4, "little")
    link = session(bye_packet=True)
    with pytest.raises(StreamBroken) as broken:
        link.receive_data(b"".join(before) + bytes(bad))
    assert wire(broken.value.frames) == before
    assert link.messages_in == 2
    assert link.frames_unfinished == 2  # the router still owes them back
    assert broken.value.close is not None
    assert broken.value.close.bye_code == ByeCode.MESSAGE_TOO_LARGE
    assert link.bye_code_sent == ByeCode.MESSAGE_TOO_LARGE


def test_a_session_already_closing_records_no_second_close_for_a_broken_stream() -> None:
    link = session(bye_packet=True)
    link.close("shutting down", bye_code=200)
    bad = bytearray(queries(1)[0])
    bad[19:23] = (70_000).to_bytes(4, "little")
    with pytest.raises(StreamBroken) as broken:
        link.receive_data(bytes(bad))
    assert broken.value.close is None
    assert link.close_reason == "shutting down"
    assert link.bye_code_sent == 200


# ---------------------------------------------------------------------- drain accounting


def test_the_session_is_drained_once_the_router_has_finished_every_frame() -> None:
    link = session()
    assert link.drained
    link.receive_data(b"".join(queries(3)))
    assert not link.drained
    assert link.frames_unfinished == 3
    link.frames_done(2)
    assert not link.drained
    assert link.frames_unfinished == 1
    link.frames_done(1)
    assert link.drained
    assert link.frames_unfinished == 0


# ---------------------------------------------------------------------- Bye


def test_a_bye_received_ends_the_session_with_no_bye_back() -> None:
    link = session(bye_packet=True)
    close = link.received_bye(200, "Servent shutdown")
    assert close == Close("peer said Bye 200: Servent shutdown", None)
    assert link.bye_code_received == 200
    assert link.bye_code_sent is None
    assert link.data_to_send(65536) == (b"", 0)
    assert link.close("later", bye_code=200) is None  # the first reason stands
    assert link.close_reason == "peer said Bye 200: Servent shutdown"


def test_a_bye_is_sent_once_to_a_peer_that_announced_bye_packet() -> None:
    link = session(bye_packet=True)
    queued = queries(3)
    assert link.outgoing.offer_bulk(queued, sum(map(len, queued)))
    close = link.close("shutting\x00 down\n now", bye_code=200)
    assert close == Close("shutting\x00 down\n now", 200)
    assert link.pending_messages == 0  # the queue is dropped: the Bye comes next
    assert link.outgoing_statistics(0.0).dropped["cleared"] == 3
    data, count = link.data_to_send(65536)
    bye = decoded_bye(data)
    assert (bye.code, bye.reason, count) == (200, "shutting down now", 1)
    assert link.bye_code_sent == 200
    assert link.data_to_send(65536) == (b"", 0)


def test_no_bye_is_sent_to_a_peer_that_did_not_announce_bye_packet() -> None:
    link = session(bye_packet=False)
    assert link.close("shutting down", bye_code=200) == Close("shutting down", None)
    assert link.bye_code_sent is None
    assert link.data_to_send(65536) == (b"", 0)


def test_nothing_offered_after_the_close_is_sent() -> None:
    link = session(bye_packet=True)
    link.close("bye", bye_code=200)
    assert link.outgoing.offer_bulk(queries(2), 2 * len(queries(1)[0]))
    data, _ = link.data_to_send(65536)
    decoded_bye(data)  # the Bye alone
    assert link.data_to_send(65536) == (b"", 0)
    link.ended("cancelled")
    assert link.pending_messages == 0
    assert link.close_reason == "bye"


def test_an_ended_session_records_why_if_nobody_said() -> None:
    link = session()
    link.ended("cancelled")
    assert link.closing
    assert link.close_reason == "cancelled"


# ---------------------------------------------------------------------- what the peer said


def test_hops_flow_is_what_the_peer_said_last() -> None:
    link = session()
    assert link.hops_flow == NO_HOPS_FLOW
    link.received_hops_flow(2)
    assert link.hops_flow == 2
    link.received_hops_flow(NO_HOPS_FLOW)
    assert link.statistics(101.0).hops_flow == NO_HOPS_FLOW


def test_the_first_messages_and_features_supported_count_and_are_bounded() -> None:
    link = session()
    hops_flow = VendorMessageId(b"BEAR", 4, 1)
    assert not link.understands(hops_flow)
    many = tuple(VendorMessageId(b"TEST", n, 1) for n in range(100))
    link.received_messages_supported((hops_flow, *many))
    link.received_messages_supported(())
    assert link.peer_vendor_messages is not None
    assert len(link.peer_vendor_messages) == MAX_LISTED_BY_PEER
    assert link.understands(hops_flow)
    link.received_features_supported((Feature("HSEP", 1),))
    link.received_features_supported((Feature("TLS!", 1),))
    assert link.peer_features == (Feature("HSEP", 1),)
    stats = link.statistics(101.0)
    assert stats.vendor_messages is not None
    assert stats.vendor_messages[0] == str(hops_flow)
    assert stats.features == ("HSEP/1",)


def test_a_dialled_peer_listens_where_it_was_dialled() -> None:
    assert session(role="outgoing").listen_address == ("192.0.2.5", 6346)
    assert session(role="incoming").listen_address is None
    announced = session(listen=("198.51.100.1", 6348))
    assert announced.listen_address == ("198.51.100.1", 6348)


# ---------------------------------------------------------------------- abuse


def test_offences_pile_up_to_a_kick_with_its_bye() -> None:
    link = session(bye_packet=True, abuse=AbuseMeter({Offence.DUPLICATE: 3}, 60.0))
    assert link.offended(Offence.DUPLICATE, 1.0) is None
    assert link.offended(Offence.DUPLICATE, 1.0) is None
    close = link.offended(Offence.DUPLICATE, 1.0)
    assert link.kick is not None
    assert link.kick.offence is Offence.DUPLICATE
    assert close == Close(link.kick.reason, link.kick.bye_code)
    assert link.close_reason == link.kick.reason
    assert decoded_bye(link.data_to_send(65536)[0]).code == ByeCode.TOO_MANY_DUPLICATES
    assert link.offended(Offence.DUPLICATE, 1.0) is None  # closing: nothing more


def test_without_an_abuse_meter_offences_are_counted_but_never_kick() -> None:
    link = session()
    for _ in range(1000):
        assert link.offended(Offence.MALFORMED, 1.0) is None
    assert link.malformed_in == 1000
    assert not link.closing


def test_the_abuse_meter_is_made_at_the_first_offence() -> None:
    made: list[AbuseMeter] = []

    def meter() -> AbuseMeter:
        made.append(AbuseMeter({}, 60.0))
        return made[-1]

    link = PeerSession(
        id=1,
        peer=("192.0.2.5", 6346),
        role="incoming",
        capabilities=Capabilities(),
        outgoing=ThresholdQueue(),
        compress_outgoing=False,
        decompress_incoming=False,
        max_payload=65536,
        now=0.0,
        abuse=meter,
    )
    link.receive_data(b"".join(queries(5)))
    assert made == []
    link.offended(Offence.TTL_ZERO, 1.0)
    link.offended(Offence.TTL_ZERO, 2.0)
    assert len(made) == 1


def test_a_kick_judged_outside_ends_the_session_and_is_recorded() -> None:
    link = session(bye_packet=True)
    kick = Kick(Offence.PARTIAL_MESSAGE, 1.0, "part of a message held for 30 s")
    assert link.kicked(kick) == Close(kick.reason, ByeCode.ACTIVITY_TIMEOUT)
    assert link.kick is kick
    assert link.kicked(Kick(Offence.DUPLICATE, 9.0)) is None
    assert link.kick is kick


# ---------------------------------------------------------------------- the outgoing queue


def test_a_threshold_overflow_closes_the_peer_without_a_bye() -> None:
    link = session(bye_packet=True, outgoing=ThresholdQueue(max_messages=2))
    verdicts = [link.outgoing.offer(data, 3, 0, 0.0) for data in queries(3)]
    assert verdicts[-1] is Verdict.CLOSE
    assert link.act_on(Verdict.QUEUED) is None
    assert link.act_on(Verdict.DROPPED) is None
    assert not link.closing
    close = link.act_on(verdicts[-1])
    assert close is not None
    assert close.bye_code is None
    assert close.reason == link.outgoing.close_reason
    assert link.data_to_send(65536) == (b"", 0)


def test_flow_control_that_cannot_fit_a_reply_closes_the_peer_with_a_bye() -> None:
    queue = FlowControlQueue(max_bytes=1000)
    link = session(bye_packet=True, outgoing=queue)
    hit = encode_message(Message(random_guid(), 3, 0, Query(b"h" * 2000)))
    verdict = queue.offer(hit, 0x81, 0, 0.0)  # a query hit larger than the whole budget
    assert verdict is Verdict.BYE_AND_CLOSE
    close = link.act_on(verdict)
    assert close == Close(str(queue.close_reason), queue.close_code)
    assert decoded_bye(link.data_to_send(65536)[0]).code == queue.close_code


def test_a_peer_flow_controlled_for_too_long_is_closed_by_the_check() -> None:
    queue = FlowControlQueue(max_bytes=1000, max_flow_control_seconds=10.0)
    link = session(bye_packet=True, outgoing=queue)
    for data in queries(20):
        queue.offer(data, 3, 0, 0.0)
    assert link.flow_controlled
    assert link.check(5.0) is None
    close = link.check(11.0)
    assert close is not None
    assert close.bye_code == ByeCode.ACTIVITY_TIMEOUT
    assert link.closing


# ---------------------------------------------------------------------- writing


def test_data_to_send_joins_a_write_and_counts_what_was_sent() -> None:
    link = session()
    assert link.data_to_send(65536) == (b"", 0)
    queued = queries(5)
    assert link.outgoing.offer_bulk(queued, sum(map(len, queued)))
    data, count = link.data_to_send(2 * len(queued[0]))
    assert (data, count) == (b"".join(queued[:2]), 2)
    assert link.pending_messages == 3
    assert link.pending_bytes == 3 * len(queued[0])
    link.sent(count, 10)  # the socket took part of it
    link.sent(0, len(data) - 10)  # and the rest later
    assert (link.messages_out, link.bytes_out) == (2, len(data))
    stats = link.statistics(103.5)
    assert (stats.messages_out, stats.bytes_out, stats.age_seconds) == (2, len(data), 3.5)


def test_deflated_writes_and_the_bye_inflate_back_in_order() -> None:
    """Small writes (sent stored) and a large one (deflated) through one stream, a write
    deflated by the caller (as a deflate pool does), then the final Bye: the peer's one
    inflater reads all of it, in order."""
    link = session(bye_packet=True, deflate_out=True)
    inflate = zlib.decompressobj()
    expected = b""
    written = b""
    for batch in (queries(2, b"small"), queries(200, b"a larger write"), queries(1)):
        assert link.outgoing.offer_bulk(batch, sum(map(len, batch)))
        data, count = link.data_to_send(1 << 20)
        assert count == len(batch)
        expected += b"".join(batch)
        written += data
    pooled = queries(3, b"by the pool")
    assert link.outgoing.offer_bulk(pooled, sum(map(len, pooled)))
    plain, _ = link.data_to_send(1 << 20, deflate=False)
    assert plain == b"".join(pooled)
    written += link.deflate(plain)
    expected += plain
    link.close("done", bye_code=200)
    bye, _ = link.data_to_send(1 << 20)
    inflated = inflate.decompress(written + bye)
    assert inflated[: len(expected)] == expected
    assert decoded_bye(inflated[len(expected) :]).code == 200
    assert len(written) < len(expected)


def test_an_idle_deflater_is_dropped_by_the_check_unless_a_write_is_under_way() -> None:
    link = session(deflate_out=True)
    assert link.compressor is not None
    batch = queries(100, b"large enough to deflate")
    assert link.outgoing.offer_bulk(batch, sum(map(len, batch)))
    link.data_to_send(1 << 20)
    assert link.compressor.holds_state
    for now in (1.0, 2.0, 3.0):
        link.check(now, writing=True)
    assert link.compressor.holds_state
    link.check(4.0)
    link.check(5.0)
    assert not link.compressor.holds_state


@pytest.mark.parametrize("level", [1, 6, 9])
def test_what_we_send_is_deflated_at_the_level_configured(level: int) -> None:
    link = session(deflate_out=True, deflate_level=level)
    batch = queries(100, b"large enough to deflate")
    assert link.outgoing.offer_bulk(batch, sum(map(len, batch)))
    data, _ = link.data_to_send(1 << 20)
    assert data[:2] == zlib_header(level)  # the stream's header names its level
    reference = zlib.compressobj(level)
    joined = b"".join(batch)
    assert data == reference.compress(joined) + reference.flush(zlib.Z_SYNC_FLUSH)


def test_the_summary_leaves_out_what_stayed_zero() -> None:
    link = session()
    link.receive_data(b"".join(queries(2)))
    link.received_bye(200, "bye")
    summary = link.summary(102.0)
    assert summary["reason"] == "peer said Bye 200: bye"
    assert summary["duration"] == 2.0
    assert summary["messages_in"] == 2
    assert summary["bye_received"] == 200
    assert "messages_out" not in summary
    assert "bye_sent" not in summary
