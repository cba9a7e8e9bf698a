"""A pong's address read off its head answers exactly as a whole parse would."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.codec import build_payload, parse_payload
from protocol.constants import MessageType
from protocol.errors import MalformedPayloadError
from protocol.messages import Pong
from protocol.pong_address import PongAddresses
from tests.support.strategies import pongs

# Real pongs, and pongs whose tail is cut short, grown or replaced with junk.
payloads = st.one_of(
    pongs.map(build_payload),
    st.tuples(pongs.map(build_payload), st.integers(0, 40)).map(lambda p: p[0][: p[1]]),
    st.tuples(pongs.map(build_payload), st.binary(max_size=12)).map(lambda p: p[0] + p[1]),
    st.binary(max_size=40),
)


def whole_parse(payload: bytes) -> tuple[str, int] | None:
    try:
        pong = parse_payload(MessageType.PONG, payload)
    except MalformedPayloadError:
        return None
    assert isinstance(pong, Pong)
    return pong.ip, pong.port


@settings(max_examples=500)
@given(st.lists(payloads, min_size=1, max_size=8))
def test_reading_the_head_agrees_with_a_whole_parse(batch: list[bytes]) -> None:
    reader = PongAddresses(kept=3)  # small: the remembered answers are thrown away too
    for payload in batch * 2:  # the second time from what it remembered
        assert reader.read(payload) == whole_parse(payload)
