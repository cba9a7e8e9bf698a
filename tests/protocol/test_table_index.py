"""The table index answers exactly what asking every table would."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.qrp import QrpTable, qrp_hashcode
from protocol.qrp_leaves import INDEXED_SLOTS_MAX, TableIndex

WORDS = [f"word{n}" for n in range(40)]


def table_of(words: list[str], slots: int) -> QrpTable:
    return QrpTable.of_words(words, slots)


def asked_one_by_one(tables: dict[int, QrpTable], index: TableIndex, codes: list[int]) -> int:
    return sum(index.bit(key) for key, table in tables.items() if table.matches_hashcodes(codes))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 9),  # the member
            st.one_of(st.none(), st.lists(st.sampled_from(WORDS), max_size=12)),  # None: gone
            st.sampled_from([64, 1024, 65536]),
        ),
        max_size=30,
    ),
    st.lists(st.lists(st.sampled_from(WORDS), max_size=4), min_size=1, max_size=10),
)
def test_the_index_matches_as_every_table_would(
    changes: list[tuple[int, list[str] | None, int]], queries: list[list[str]]
) -> None:
    index = TableIndex()
    tables: dict[int, QrpTable] = {}
    for key, words, slots in changes:
        if words is None:
            index.discard(key)
            tables.pop(key, None)
        else:
            tables[key] = table_of(words, slots)
            index.put(key, tables[key])
        for word in WORDS:  # after every change, every word alone
            codes = [qrp_hashcode(word)]
            assert index.matching(codes) == asked_one_by_one(tables, index, codes)
    assert len(index) == len(tables)
    bits = [index.bit(key) for key in tables]
    assert all(bits)
    assert len(set(bits)) == len(bits)
    for words in queries:
        codes = [qrp_hashcode(word) for word in words]
        assert index.matching(codes) == asked_one_by_one(tables, index, codes)


def test_a_table_too_full_to_index_is_asked_directly() -> None:
    index = TableIndex()
    full = QrpTable(65536, bytearray(b"\xff" * (65536 // 8)))
    assert full.filled > INDEXED_SLOTS_MAX
    index.put(1, full)
    index.put(2, table_of(["abbey"], 65536))
    codes = [qrp_hashcode("abbey")]
    assert index.matching(codes) == index.bit(1) | index.bit(2)
    assert index.matching([qrp_hashcode("road")]) == index.bit(1)
    assert index.matching([]) == 0  # no words match nothing
    index.discard(1)
    assert index.bit(1) == 0
    assert index.matching([qrp_hashcode("road")]) == 0
