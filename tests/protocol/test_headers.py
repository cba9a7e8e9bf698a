"""Header blocks: RFC 822 folding and repetition, limits checked as bytes arrive."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import HandshakeError, LocalProtocolError
from protocol.headers import HandshakeLimits, HeadBuffer, HeaderBlock, format_headers

TOKEN_CHARS = "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
names = st.text(alphabet=TOKEN_CHARS, min_size=1, max_size=20)
# Printable latin-1 with inner spaces; no surrounding whitespace, which parsing trims.
values = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"),
    max_size=40,
).map(lambda v: v.strip(" \t"))
pairs = st.lists(st.tuples(names, values), max_size=20)


def test_lookup_is_case_insensitive_and_keeps_order() -> None:
    block = HeaderBlock([("X-Try", "1.2.3.4:1"), ("User-Agent", "x"), ("x-try", "5.6.7.8:2")])
    assert block.get("x-TRY") == "1.2.3.4:1, 5.6.7.8:2"
    assert block.get_all("X-Try") == ("1.2.3.4:1", "5.6.7.8:2")
    assert block.get("Missing") is None
    assert block.get_all("Missing") == ()
    assert "USER-AGENT" in block
    assert "Missing" not in block
    assert 42 not in block
    assert len(block) == 3
    assert block.items()[2] == ("x-try", "5.6.7.8:2")


def test_continuation_lines_fold_into_one_space() -> None:
    data = (
        b"First-Field: this is the value of the first field\r\n"
        b"Second-Field: this is the value\r\n"
        b"    of the\r\n"
        b"\tsecond field\r\n"
        b"\r\n"
    )
    block = HeaderBlock.parse(data)
    assert block.get("First-Field") == "this is the value of the first field"
    assert block.get("Second-Field") == "this is the value of the second field"


def test_continuation_of_an_empty_value() -> None:
    block = HeaderBlock.parse(b"X-Try:\r\n 1.2.3.4:5\r\n")
    assert block.get("X-Try") == "1.2.3.4:5"


def test_whitespace_is_trimmed_and_bare_lf_accepted() -> None:
    block = HeaderBlock.parse(b"Name \t:   spaced value \t\nOther:v\n\n")
    assert block.items() == (("Name", "spaced value"), ("Other", "v"))


def test_latin1_values_round_trip() -> None:
    raw = b"User-Agent: caf\xe9 \xff\r\n"
    block = HeaderBlock.parse(raw)
    assert block.get("User-Agent") == "café ÿ"
    assert block.to_bytes() == raw


@pytest.mark.parametrize(
    "data",
    [
        b"no colon here\r\n",
        b": no name\r\n",
        b"Bad Name: space in the name\r\n",
        b" continuation first\r\n",
        b"Name: nul\x00byte\r\n",
        b"Name: bare\rcarriage return\r\n",
        b"A: 1\r\n\r\nB: after the end\r\n",
    ],
)
def test_malformed_blocks_are_refused_with_400(data: bytes) -> None:
    with pytest.raises(HandshakeError) as info:
        HeaderBlock.parse(data)
    assert info.value.status_code == 400


def test_parse_enforces_limits() -> None:
    limits = HandshakeLimits(max_line_length=10, max_headers=2, max_block_size=100)
    with pytest.raises(HandshakeError, match="longer") as info:
        HeaderBlock.parse(b"A: 0123456789\r\n", limits)
    assert info.value.status_code == 413
    with pytest.raises(HandshakeError, match="more than 2") as info:
        HeaderBlock.parse(b"A: 1\r\nB: 2\r\nC: 3\r\n", limits)
    assert info.value.status_code == 413
    with pytest.raises(HandshakeError, match="exceeds") as info:
        HeaderBlock.parse(b"A: 1\r\n" * 20, HandshakeLimits(max_headers=50, max_block_size=100))
    assert info.value.status_code == 413


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("", "v"),
        ("Has:Colon", "v"),
        ("Has Space", "v"),
        ("Name", "line\r\nInjected: yes"),
        ("Name", "nul\x00"),
        ("Name", "not latin-1 \u20ac"),
        ("Nam\u00e9\u20ac", "v"),
    ],
)
def test_unsendable_headers_are_local_errors(name: str, value: str) -> None:
    with pytest.raises(LocalProtocolError):
        format_headers([(name, value)])


def test_limits_must_be_positive() -> None:
    with pytest.raises(LocalProtocolError):
        HandshakeLimits(max_headers=0)


def test_merged_with_prefers_the_later_block() -> None:
    first = HeaderBlock([("X-Ultrapeer", "True"), ("User-Agent", "a"), ("X-Degree", "32")])
    later = HeaderBlock([("x-ultrapeer", "False"), ("Private", "1")])
    merged = first.merged_with(later)
    assert merged.get("X-Ultrapeer") == "False"
    assert merged.get_all("X-Ultrapeer") == ("False",)
    assert merged.get("User-Agent") == "a"
    assert merged.get("Private") == "1"


def test_equality_and_hash() -> None:
    a = HeaderBlock([("A", "1")])
    assert a == HeaderBlock([("A", "1")])
    assert hash(a) == hash(HeaderBlock([("A", "1")]))
    assert a != HeaderBlock([("a", "1")])
    assert a != "A: 1"
    assert "A" in repr(a)


@settings(max_examples=150, deadline=None)
@given(pairs)
def test_format_then_parse_round_trips(items: list[tuple[str, str]]) -> None:
    block = HeaderBlock(items)
    assert HeaderBlock.parse(block.to_bytes() + b"\r\n") == block


words = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0xFF, exclude_characters="\x7f"),
    min_size=1,
    max_size=8,
)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(names, st.lists(words, min_size=1, max_size=6)), max_size=10), st.data())
def test_folded_values_equal_their_unfolded_form(
    items: list[tuple[str, list[str]]], data: st.DataObject
) -> None:
    """Folding a value at any space is invisible after parsing."""
    lines: list[bytes] = []
    for name, value_words in items:
        cut = data.draw(st.integers(1, len(value_words)))
        indent = data.draw(st.sampled_from([" ", "\t", " \t  "]))
        lines.append(f"{name}: {' '.join(value_words[:cut])}".encode("latin-1"))
        if cut < len(value_words):
            lines.append(f"{indent}{' '.join(value_words[cut:])}".encode("latin-1"))
    expected = tuple((name, " ".join(value_words)) for name, value_words in items)
    assert HeaderBlock.parse_lines(lines).items() == expected


# -- HeadBuffer -----------------------------------------------------------------------


def test_head_buffer_finds_the_head_and_keeps_the_rest() -> None:
    buffer = HeadBuffer(HandshakeLimits())
    buffer.arm()
    buffer.feed(b"GNUTELLA CONNECT/0.6\r\nA: 1\r\n")
    assert not buffer.complete
    buffer.feed(b"\r\nrest")
    assert buffer.complete
    assert buffer.excess == 4
    line, headers = buffer.take_head()
    assert line == "GNUTELLA CONNECT/0.6"
    assert headers.items() == (("A", "1"),)
    assert not buffer.complete
    assert buffer.excess == 4
    assert buffer.take_rest() == b"rest"
    assert len(buffer) == 0


def test_head_buffer_refuses_a_wrong_start_at_the_first_byte() -> None:
    buffer = HeadBuffer(HandshakeLimits())
    buffer.arm()
    with pytest.raises(HandshakeError) as info:
        buffer.feed(b"\x16")
    assert info.value.status_code == 400


def test_take_head_without_a_head_is_a_local_error() -> None:
    buffer = HeadBuffer(HandshakeLimits())
    with pytest.raises(LocalProtocolError):
        buffer.take_head()


def test_disarmed_buffer_only_stores() -> None:
    buffer = HeadBuffer(HandshakeLimits(max_line_length=4, max_block_size=8))
    buffer.feed(b"x" * 100)
    assert buffer.excess == 100
    assert not buffer.complete


def test_parse_without_a_final_newline_and_blank_continuations() -> None:
    assert HeaderBlock.parse(b"A: 1").items() == (("A", "1"),)
    assert HeaderBlock.parse(b"A: 1\r\n \t \r\nB: 2").items() == (("A", "1"), ("B", "2"))


def test_a_head_without_a_first_line_is_refused() -> None:
    buffer = HeadBuffer(HandshakeLimits(), prefix=b"")
    buffer.arm()
    buffer.feed(b"\r\n")
    assert buffer.complete
    with pytest.raises(HandshakeError) as info:
        buffer.take_head()
    assert info.value.status_code == 400
