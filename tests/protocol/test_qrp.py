"""QRP: the hash against gtk-gnutella's own known answers, tables sent and received at
every entry width, and every way a peer's table can be wrong."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.messages import QrpPatch, QrpReset
from protocol.qrp import (
    MAX_TABLE_SLOTS,
    QrpError,
    QrpReceiver,
    QrpTable,
    qrp_hash,
    query_words,
    table_messages,
)

GTK_KNOWN_ANSWERS = [
    ("", 13, 0),
    ("eb", 13, 6791),
    ("ebc", 13, 7082),
    ("ebck", 13, 6698),
    ("ebckl", 13, 3179),
    ("ebcklm", 13, 3235),
    ("ebcklme", 13, 6438),
    ("ebcklmen", 13, 1062),
    ("ebcklmenq", 13, 3527),
    ("n", 16, 65003),
    ("nd", 16, 54193),
    ("ndf", 16, 4953),
    ("ndfl", 16, 58201),
    ("ndfla", 16, 34830),
    ("ndflal", 16, 36910),
    ("ndflale", 16, 34586),
    ("ndflalem", 16, 37658),
    ("ndflaleme", 16, 45559),
    ("ol2j34lj", 10, 318),
    ("asdfas23", 10, 503),
    ("9um3o34fd", 10, 758),
    ("a234d", 10, 281),
    ("a3f", 10, 767),
    ("3nja9", 10, 581),
    ("2459345938032343", 10, 146),
    ("7777a88a8a8a8", 10, 342),
    ("asdfjklkj3k", 10, 861),
    ("adfk32l", 10, 1011),
    ("zzzzzzzzzzz", 10, 944),
    ("\u30a2\u30cb\u30e1", 10, 46),  # a-ni-me
    ("\u30e9", 10, 0),  # ra
    ("\u58f0\u512a", 10, 731),  # voice actor
    ("\U00010400", 10, 316),  # outside the BMP: two UTF-16 code units
    ("\U00010428", 10, 658),
    ("\x01\x28", 10, 658),  # the same low bytes as the line above
    ("\uff01\u9428", 10, 658),
    ("\u1001\u2000", 10, 316),
]
"""From gtk-gnutella's test_hash() (src/core/qrp.c)."""


@pytest.mark.parametrize(("word", "bits", "slot"), GTK_KNOWN_ANSWERS)
def test_the_hash_gives_gtk_gnutellas_known_answers(word: str, bits: int, slot: int) -> None:
    assert qrp_hash(word, bits) == slot


def test_query_words_are_lowercased_alphanumeric_runs_of_three_or_more() -> None:
    assert query_words("The Beatles - Let_It_Be (1970).mp3") == [
        "the",
        "beatles",
        "let",
        "1970",
        "mp3",
    ]
    assert query_words("a bb") == []


def test_a_65536_slot_table_costs_8_kib() -> None:
    assert len(QrpTable(65536).data) == 8192


def received(messages: list[QrpReset | QrpPatch]) -> QrpReceiver:
    receiver = QrpReceiver()
    completed = [receiver.receive(m) for m in messages]
    assert completed[-1]
    assert not any(completed[:-1])
    return receiver


def test_a_table_of_words_matches_those_words_only() -> None:
    table = QrpTable.of_words(["beatles", "abbey", "road"])
    got = received(table_messages(table)).table
    assert got == table
    assert got is not None
    assert got.matches(["abbey", "road"])
    assert not got.matches(["abbey", "road", "nowhere"])
    assert not got.matches([])


@settings(max_examples=60, deadline=None)
@given(
    bits=st.integers(3, 14),
    density=st.floats(0, 1),
    entry_bits=st.sampled_from([1, 2, 4, 8]),
    compressed=st.booleans(),
    patch_bytes=st.integers(1, 5000),
    seed=st.integers(0, 2**32 - 1),
)
def test_any_table_round_trips_at_every_entry_width(
    bits: int, density: float, entry_bits: int, compressed: bool, patch_bytes: int, seed: int
) -> None:
    import random

    rng = random.Random(seed)
    table = QrpTable(1 << bits)
    for slot in range(table.slots):
        if rng.random() < density:
            table.add(slot)
    messages = table_messages(
        table,
        entry_bits=entry_bits,
        compressed=compressed,
        patch_bytes=max(patch_bytes, (table.slots * entry_bits // 8) // 200 + 1),
    )
    assert received(messages).table == table


def test_a_second_sequence_patches_the_table_in_force() -> None:
    first = QrpTable.of_words(["abbey"], slots=1024)
    receiver = received(table_messages(first, entry_bits=8))
    # A patch (no RESET) that adds "road" and removes "abbey": +1 clears, -6 sets.
    delta = bytearray(1024)
    delta[qrp_hash("abbey", 10)] = 1
    delta[qrp_hash("road", 10)] = 0xFA
    assert receiver.receive(QrpPatch(1, 1, 0, 8, bytes(delta)))
    assert receiver.table is not None
    assert receiver.table.matches(["road"])
    assert not receiver.table.matches(["abbey"])


def test_the_old_table_stays_in_force_until_the_new_one_is_complete() -> None:
    old = QrpTable.of_words(["abbey"], slots=1024)
    receiver = received(table_messages(old, compressed=False))
    new = QrpTable.of_words(["road"], slots=1024)
    reset, first, *rest = table_messages(new, compressed=False, patch_bytes=100)
    receiver.receive(reset)
    receiver.receive(first)
    assert receiver.table == old  # never half-applied
    for patch in rest:
        receiver.receive(patch)
    assert receiver.table == new


def patch(
    seq: int = 1, size: int = 1, compressor: int = 0, bits: int = 8, data: bytes = b""
) -> QrpPatch:
    return QrpPatch(seq, size, compressor, bits, data)


BAD_SEQUENCES: dict[str, tuple[list[QrpReset | QrpPatch], str]] = {
    "not-power-of-two": ([QrpReset(1000, 7)], "not a power of two"),
    "too-large": ([QrpReset(MAX_TABLE_SLOTS * 2, 7)], "over the limit"),
    "infinity-0": ([QrpReset(64, 0)], "infinity"),
    "out-of-sequence": ([QrpReset(64, 7), patch(1, 2, data=bytes(32)), patch(3, 2)], "out of"),
    "starts-at-2": ([QrpReset(64, 7), patch(2, 2, data=bytes(32))], "out of sequence"),
    "width-3": ([QrpReset(64, 7), patch(bits=3, data=bytes(24))], "entry width"),
    "compressor-9": ([QrpReset(64, 7), patch(compressor=9)], "compressor"),
    "changes-width": (
        [QrpReset(64, 7), patch(1, 2, data=bytes(32)), patch(2, 2, bits=4, data=bytes(16))],
        "mid-sequence",
    ),
    "overflow": ([QrpReset(64, 7), patch(data=bytes(65))], "overflows"),
    "too-short": ([QrpReset(64, 7), patch(data=bytes(63))], "ended after 63 of 64"),
    "corrupt-zlib": ([QrpReset(64, 7), patch(compressor=1, data=b"not zlib at all")], "zlib"),
    "zlib-cut-short": (
        [QrpReset(64, 7), patch(compressor=1, data=zlib.compress(bytes(64))[:-6])],
        "inside its zlib stream",
    ),
    "zlib-bomb": (
        [QrpReset(64, 7), patch(compressor=1, data=zlib.compress(bytes(10_000_000), 9))],
        "overflows",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SEQUENCES))
def test_a_bad_sequence_is_refused_with_bye_413_and_drops_the_table(case: str) -> None:
    *fine, bad = BAD_SEQUENCES[case][0]
    receiver = received(table_messages(QrpTable.of_words(["kept"], slots=64)))
    for message in fine:
        receiver.receive(message)
    with pytest.raises(QrpError, match=BAD_SEQUENCES[case][1]) as caught:
        receiver.receive(bad)
    assert caught.value.bye_code == 413
    assert receiver.table is None


def test_a_patch_before_any_reset_is_refused() -> None:
    with pytest.raises(QrpError, match="without a RESET"):
        QrpReceiver().receive(patch(data=bytes(64)))


@pytest.mark.parametrize("slots", [1024, 65536, 1 << 18])
def test_a_resized_table_keeps_every_keyword(slots: int) -> None:
    words = [f"word{n}" for n in range(200)]
    table = QrpTable.of_words(words, slots=65536)
    resized = table.resized(slots)
    assert resized.slots == slots
    assert all(resized.matches([word]) for word in words)
    assert resized.resized(65536).filled >= table.filled


def test_merged_tables_hold_both_keyword_sets() -> None:
    one = QrpTable.of_words(["abbey"], slots=1024)
    one.merge(QrpTable.of_words(["road"], slots=1024))
    assert one.matches(["abbey", "road"])
    with pytest.raises(ValueError, match="one size"):
        one.merge(QrpTable(2048))
