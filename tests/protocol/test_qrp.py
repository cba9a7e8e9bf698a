"""QRP: the hash against gtk-gnutella's own known answers, tables sent and received at
every entry width, and every way a peer's table can be wrong."""

from __future__ import annotations

import itertools
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.messages import QrpPatch, QrpReset
from protocol.qrp import (
    COMPRESSOR_NONE,
    ENTRY_BITS,
    MAX_TABLE_SLOTS,
    MAX_UNION_MEMBERS,
    Intake,
    QrpError,
    QrpReceiver,
    QrpTable,
    apply_entries,
    qrp_hash,
    query_words,
    table_messages,
)
from protocol.qrp_leaves import TableUnion

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
    intakes = [receiver.receive(m) for m in messages]
    assert intakes == [Intake.TAKEN] * (len(messages) - 1) + [Intake.COMPLETED]
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
    assert receiver.receive(QrpPatch(1, 1, 0, 8, bytes(delta))) is Intake.COMPLETED
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


# --------------------------------------------------------------------------------------
# The whole-buffer code against a deliberately simple model: one Python bool per slot.


def slots_of(table: QrpTable) -> list[bool]:
    return [bool(table.data[s >> 3] & (0x80 >> (s & 7))) for s in range(table.slots)]


def table_of(slots: list[bool]) -> QrpTable:
    table = QrpTable(len(slots))
    for slot, present in enumerate(slots):
        if present:
            table.add(slot)
    return table


def reference_patch(slots: list[bool], entries: bytes, entry_bits: int) -> list[bool]:
    """What a patch does, slot by slot, as the module's notes and gtk-gnutella's
    qrt_patch_slot() say: the highest bits of a byte are the lowest slot; a negative
    entry sets its slot, a positive one clears it, 0 keeps it; 1-bit entries flip."""
    out = list(slots)
    per_byte = 8 // entry_bits
    mask = (1 << entry_bits) - 1
    for slot in range(len(entries) * per_byte):
        byte = entries[slot // per_byte]
        entry = (byte >> ((per_byte - 1 - slot % per_byte) * entry_bits)) & mask
        signed = entry - (1 << entry_bits) if entry >> (entry_bits - 1) else entry
        if entry_bits == 1:
            out[slot] ^= bool(entry)
        elif signed < 0:
            out[slot] = True
        elif signed > 0:
            out[slot] = False
    return out


def reference_resized(slots: list[bool], size: int) -> list[bool]:
    if size <= len(slots):
        factor = len(slots) // size
        return [any(slots[i * factor : (i + 1) * factor]) for i in range(size)]
    factor = size // len(slots)
    return [slots[i // factor] for i in range(size)]


def reference_entries(slots: list[bool], entry_bits: int, infinity: int) -> bytes:
    """The patch from an empty table, slot by slot: 1 - infinity (-1 at least) where
    present, 0 elsewhere; a 1-bit patch is the bitset itself."""
    present = (1 - infinity if infinity > 1 else -1) & ((1 << entry_bits) - 1)
    if entry_bits == 1:
        present = 1
    per_byte = 8 // entry_bits
    out = bytearray(len(slots) // per_byte)
    for slot, here in enumerate(slots):
        if here:
            out[slot // per_byte] |= present << ((per_byte - 1 - slot % per_byte) * entry_bits)
    return bytes(out)


@st.composite
def bitsets(draw: st.DrawFn, min_bits: int = 3, max_bits: int = 11) -> list[bool]:
    bits = draw(st.integers(min_bits, max_bits))
    data = draw(st.binary(min_size=(1 << bits) // 8, max_size=(1 << bits) // 8))
    return slots_of(QrpTable(1 << bits, bytearray(data)))


@st.composite
def patch_entries(draw: st.DrawFn, slots: int, entry_bits: int) -> bytes:
    """A patch's entries: mostly zeros, as real ones are, or anything at all."""
    size = slots * entry_bits // 8
    if not size:
        return b""
    if draw(st.booleans()):
        return draw(st.binary(min_size=size, max_size=size))
    sparse = bytearray(size)
    for at, value in draw(st.lists(st.tuples(st.integers(0, size - 1), st.integers(0, 255)))):
        sparse[at] = value
    return bytes(sparse)


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    base=bitsets(),
    entry_bits=st.sampled_from(ENTRY_BITS),
    compressed=st.booleans(),
)
def test_a_patch_received_in_any_pieces_agrees_with_the_per_slot_model(
    data: st.DataObject, base: list[bool], entry_bits: int, compressed: bool
) -> None:
    entries = data.draw(patch_entries(len(base), entry_bits), label="entries")
    stream = zlib.compress(entries) if compressed else entries
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6), label="cuts"))
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    receiver = received(table_messages(table_of(base)))  # the table in force
    intakes = [
        receiver.receive(QrpPatch(n + 1, len(pieces), int(compressed), entry_bits, piece))
        for n, piece in enumerate(pieces)
    ]
    assert intakes[-1] is Intake.COMPLETED
    assert receiver.table is not None
    assert slots_of(receiver.table) == reference_patch(base, entries, entry_bits)


@settings(max_examples=200, deadline=None)
@given(
    data=st.data(),
    base=bitsets(),
    entry_bits=st.sampled_from(ENTRY_BITS),
)
def test_apply_entries_patches_exactly_the_groups_it_is_given(
    data: st.DataObject, base: list[bool], entry_bits: int
) -> None:
    groups = len(base) // 8
    offset = data.draw(st.integers(0, groups), label="offset")
    count = data.draw(st.integers(0, groups - offset), label="groups")
    entries = data.draw(patch_entries(8 * count, entry_bits), label="entries")
    bitset = bytearray(table_of(base).data)
    apply_entries(bitset, offset, entries, entry_bits)
    expected = list(base)
    stretch = slice(8 * offset, 8 * (offset + count))
    expected[stretch] = reference_patch(base[stretch], entries, entry_bits)
    assert slots_of(QrpTable(len(base), bitset)) == expected


def test_apply_entries_refuses_part_groups_and_stretches_past_the_table() -> None:
    with pytest.raises(ValueError, match="whole groups"):
        apply_entries(bytearray(8), 0, bytes(3), 4)
    with pytest.raises(ValueError, match="past the table"):
        apply_entries(bytearray(8), 7, bytes(16), 8)
    with pytest.raises(ValueError, match="whole groups"):
        apply_entries(bytearray(8), 0, bytes(3), 3)


@settings(max_examples=200, deadline=None)
@given(base=bitsets(max_bits=12), size_bits=st.integers(3, 14))
def test_resizing_agrees_with_the_per_slot_model(base: list[bool], size_bits: int) -> None:
    resized = table_of(base).resized(1 << size_bits)
    assert slots_of(resized) == reference_resized(base, 1 << size_bits)


@settings(max_examples=200, deadline=None)
@given(base=bitsets(), entry_bits=st.sampled_from(ENTRY_BITS), infinity=st.integers(1, 255))
def test_a_tables_patch_from_scratch_agrees_with_the_per_slot_model(
    base: list[bool], entry_bits: int, infinity: int
) -> None:
    (reset, *patches) = table_messages(
        table_of(base), entry_bits=entry_bits, infinity=infinity, compressed=False
    )
    assert reset == QrpReset(len(base), infinity)
    entries = b"".join(p.data for p in patches if isinstance(p, QrpPatch))
    assert entries == reference_entries(base, entry_bits, infinity)


def test_filled_counts_present_slots() -> None:
    table = QrpTable(64, bytearray(b"\xff\x01\x00\x00\x80\x00\x00\x03"))
    assert table.filled == 8 + 1 + 1 + 2 == len(list(table.present_slots()))


@pytest.mark.parametrize(
    ("slots", "entry_bits"), [(MAX_TABLE_SLOTS, 8), (MAX_TABLE_SLOTS, 4), (131072, 4)]
)
def test_gtk_gnutellas_largest_tables_are_taken(slots: int, entry_bits: int) -> None:
    """2**21 slots from a leaf, 128 Ki between ultrapeers, every slot present."""
    full = QrpTable(slots, bytearray(b"\xff" * (slots // 8)))
    receiver = received(table_messages(full, entry_bits=entry_bits, patch_bytes=65536))
    assert receiver.table == full


# --------------------------------------------------------------------------------------
# The rate limit


def full_table(slots: int = 64, infinity: int = 7) -> list[QrpReset | QrpPatch]:
    return table_messages(QrpTable(slots, bytearray(b"\xff" * (slots // 8))), infinity=infinity)


def test_a_table_begun_too_soon_is_refused_and_the_one_in_force_kept() -> None:
    first = QrpTable.of_words(["first"], slots=1024)
    receiver = QrpReceiver(min_interval=10.0)
    assert [receiver.receive(m, 0.0) for m in table_messages(first)][-1] is Intake.COMPLETED
    second = table_messages(
        QrpTable.of_words(["second"], slots=1024), compressed=False, patch_bytes=100
    )
    assert len(second) > 2
    reset, *patches = second
    assert receiver.receive(reset, 9.9) is Intake.TOO_SOON
    assert [receiver.receive(p, 9.9) for p in patches] == [Intake.SKIPPED] * len(patches)
    assert receiver.table == first
    assert receiver.tables_refused == 1
    # Patches of the table in force are skipped too: we no longer know what they patch.
    delta = QrpPatch(1, 1, COMPRESSOR_NONE, 8, bytes(1024))
    assert receiver.receive(delta, 30.0) is Intake.SKIPPED
    # A RESET in time starts afresh.
    intakes = [receiver.receive(m, 30.0) for m in second]
    assert intakes == [Intake.TAKEN] * (len(second) - 1) + [Intake.COMPLETED]
    assert receiver.table == QrpTable.of_words(["second"], slots=1024)
    assert receiver.tables_received == 2


def test_a_patch_of_the_table_in_force_begins_a_table_and_is_rate_limited_too() -> None:
    receiver = QrpReceiver(min_interval=10.0)
    for message in table_messages(QrpTable.of_words(["kept"], slots=64)):
        receiver.receive(message, 0.0)
    nothing = QrpPatch(1, 1, COMPRESSOR_NONE, 8, bytes(64))
    assert receiver.receive(nothing, 5.0) is Intake.TOO_SOON
    assert receiver.receive(full_table()[0], 10.0) is Intake.TAKEN  # in time again
    later = QrpReceiver(min_interval=10.0)
    for message in table_messages(QrpTable.of_words(["kept"], slots=64)):
        later.receive(message, 0.0)
    assert later.receive(nothing, 10.0) is Intake.COMPLETED


def test_a_reset_mid_sequence_too_soon_abandons_the_sequence() -> None:
    receiver = QrpReceiver(min_interval=10.0)
    reset, first, *rest = table_messages(
        QrpTable.of_words(["slow"], slots=1024), compressed=False, patch_bytes=100
    )
    receiver.receive(reset, 0.0)
    receiver.receive(first, 0.0)
    assert receiver.receive(reset, 1.0) is Intake.TOO_SOON
    assert receiver.receive(rest[0], 1.0) is Intake.SKIPPED
    assert receiver.table is None


def test_without_an_interval_any_rate_is_taken() -> None:
    receiver = QrpReceiver()
    for _ in range(3):
        assert [receiver.receive(m, 0.0) for m in full_table()][-1] is Intake.COMPLETED
    assert receiver.tables_refused == 0


# --------------------------------------------------------------------------------------
# The union


union_steps = st.lists(
    st.tuples(
        st.sampled_from(["put", "discard"]),
        st.integers(0, 5),  # the member
        st.integers(3, 12),  # its table's size, as bits
        st.integers(0, 2**32 - 1),  # its slots' seed
        st.floats(0, 1),  # its density
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(steps=union_steps, size_bits=st.sampled_from([3, 8, 10]))
def test_the_union_kept_incrementally_is_the_union_from_scratch(
    steps: list[tuple[str, int, int, int, float]], size_bits: int
) -> None:
    import random

    union = TableUnion(1 << size_bits)
    members: dict[int, QrpTable] = {}
    seen = []
    for action, key, bits, seed, density in steps:
        if action == "discard":
            union.discard(key)
            members.pop(key, None)
        else:
            rng = random.Random(seed)
            table = table_of([rng.random() < density for _ in range(1 << bits)])
            union.put(key, table)
            members[key] = table
        scratch = QrpTable(1 << size_bits)
        for table in members.values():
            scratch.merge(table.resized(1 << size_bits))
        assert union.table == scratch
        assert len(union) == len(members)
        seen.append((union.generation, bytes(union.table.data)))
    # The generation rises exactly when the union's slots change.
    for (gen_a, data_a), (gen_b, data_b) in itertools.pairwise(seen):
        assert (gen_b == gen_a) == (data_b == data_a)
        assert gen_b in (gen_a, gen_a + 1)


def test_the_union_is_worked_out_once_per_change(monkeypatch: pytest.MonkeyPatch) -> None:
    refreshes = []
    refresh = TableUnion._refresh

    def counted(self: TableUnion) -> None:
        refreshes.append(1)
        refresh(self)

    monkeypatch.setattr(TableUnion, "_refresh", counted)
    union = TableUnion(1024)
    union.put(1, QrpTable.of_words(["abbey"], slots=4096))
    first = union.table
    assert (union.table, union.generation, len(refreshes)) == (first, 1, 1)
    union.put(1, QrpTable.of_words(["abbey"], slots=4096))  # the same table again
    union.discard(99)  # never a member
    assert (union.table, len(refreshes)) == (first, 1)
    union.put(2, QrpTable.of_words(["road"], slots=256))
    union.put(3, QrpTable.of_words(["nowhere"], slots=1 << 21))
    assert union.table is not first
    assert (union.generation, len(refreshes)) == (2, 2)
    assert union.table.matches(["abbey", "road", "nowhere"])


def test_the_union_holds_at_most_its_counters_worth_of_members() -> None:
    union = TableUnion(8)
    union._members = dict.fromkeys(range(MAX_UNION_MEMBERS), bytes(1))
    union.put(0, QrpTable(8))  # a member already: replaced
    with pytest.raises(ValueError, match="at most"):
        union.put(MAX_UNION_MEMBERS, QrpTable(8))
