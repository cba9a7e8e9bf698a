"""Many QRP tables at once: an ultrapeer's leaves' tables, as one union and as one index.

**The union.** An ultrapeer sends its neighbours the union of its leaves' tables.
:class:`TableUnion` keeps it incrementally, as a count per slot of the members whose
(resized) table has the slot: the counts are one big integer of 16-bit lanes, a
member's table is spread to one lane per slot by eight translates, and adding or
removing a member is one big-integer addition or subtraction (no carry crosses a lane,
since no count exceeds :data:`MAX_UNION_MEMBERS`). The union's bitset is computed from
the counts only when asked after a change, and kept.

**The index.** The router asks every leaf's table about every query; :class:`TableIndex`
answers for all of them in one pass over the query's words (see the class).

Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

import re

from .qrp import MAX_UNION_MEMBERS, ONE_LANE, TOUCHED_LANES, QrpTable, gather_lanes

__all__ = ["INDEXED_SLOTS_MAX", "TableIndex", "TableUnion"]


def _counted(bitset: bytes) -> int:
    """A bitset as per-slot counts: one 16-bit lane per slot (first slot highest),
    holding 1 where the slot is present."""
    lanes = bytearray(16 * len(bitset))
    for j, translation in enumerate(ONE_LANE):
        lanes[2 * j + 1 :: 16] = bitset.translate(translation)
    return int.from_bytes(lanes, "big")


class TableUnion:
    """The union of many tables at one size, kept incrementally (see the module notes).

    Members are tables of any size under a key (a link id), resized to :attr:`slots`.
    The union (:attr:`table`) is worked out only when asked after a change and kept; its
    :attr:`generation` rises only when its slots really changed, so whoever sends it
    can tell whether a peer already has it.
    """

    __slots__ = ("_counts", "_generation", "_members", "_stale", "_table", "slots")

    def __init__(self, slots: int) -> None:
        self._table = QrpTable(slots)
        self.slots = slots
        self._members: dict[int, bytes] = {}
        """Each member's table at :attr:`slots`, as it was counted."""
        self._counts = 0
        self._stale = False
        self._generation = 0

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, key: object) -> bool:
        return key in self._members

    def put(self, key: int, table: QrpTable) -> None:
        """Make ``table`` the member ``key``'s (replacing any table it had)."""
        bitset = bytes(table.data if table.slots == self.slots else table.resized(self.slots).data)
        old = self._members.get(key)
        if old == bitset:
            return
        if old is None and len(self._members) >= MAX_UNION_MEMBERS:
            raise ValueError(f"a table union holds at most {MAX_UNION_MEMBERS} tables")
        counts = self._counts + _counted(bitset)
        self._counts = counts - _counted(old) if old is not None else counts
        self._members[key] = bitset
        self._stale = True

    def discard(self, key: int) -> None:
        """Forget the member ``key``'s table, if it has one."""
        old = self._members.pop(key, None)
        if old is not None:
            self._counts -= _counted(old)
            self._stale = True

    @property
    def table(self) -> QrpTable:
        """The union of every member's table (shared: do not change it)."""
        if self._stale:
            self._refresh()
        return self._table

    @property
    def generation(self) -> int:
        """Rises whenever :attr:`table` changes."""
        if self._stale:
            self._refresh()
        return self._generation

    def _refresh(self) -> None:
        slots = self.slots
        lanes = self._counts.to_bytes(2 * slots, "big")
        # One byte per slot, non-zero where the slot's count is: its lane's bytes ORed.
        per_slot = int.from_bytes(lanes[0::2], "big") | int.from_bytes(lanes[1::2], "big")
        present = gather_lanes(per_slot.to_bytes(slots, "big"), TOUCHED_LANES[8])
        bitset = bytearray(present.to_bytes(slots // 8, "big"))
        if bitset != self._table.data:
            self._table = QrpTable(slots, bitset)
            self._generation += 1
        self._stale = False


INDEXED_SLOTS_MAX = 1 << 14
"""Most present slots of a table kept in a :class:`TableIndex`'s maps (a leaf sharing a
thousand files has a few thousand); a fuller table is asked directly: indexing it would
cost the maps, and the router's time when it comes, more than it saves."""

_NONZERO_BYTE = re.compile(rb"[^\x00]")
_SLOTS_IN_BYTE = tuple(
    tuple(offset for offset in range(8) if byte & (0x80 >> offset)) for byte in range(256)
)
"""For each byte of a bitset, the offsets of its present slots (the first the high bit)."""


class TableIndex:
    """Which of many tables hold every word of a query, in one pass over its words.

    A router with many leaves asks every leaf's table about every query. Asking them one
    by one costs a pass over the query's words per table; this index turns the question
    round. Each member (a table under a key, a link id) gets a bit. For each table size
    among the members (tables need not share one), a map from every slot present in some
    member to the bits of the members that have it; a query's members are then the AND,
    over its words, of its words' slots' bits, per size: the work is the query's words,
    whatever the number of tables. A table with more than :data:`INDEXED_SLOTS_MAX`
    slots present is asked directly instead.

    Putting a table costs a pass over its bytes (at C speed where they are empty) and one
    map update per present slot; tables change seldom (a peer may begin one at most
    every ``router.qrp_table_interval`` seconds), queries all the time.
    """

    __slots__ = ("_bit_of", "_direct", "_everyone", "_free", "_members", "_present")

    def __init__(self) -> None:
        self._bit_of: dict[int, int] = {}
        """Each member's bit (a power of two), by key."""
        self._free: list[int] = []
        """Bit positions of members that left, to be given again (masks stay short)."""
        self._present: dict[int, dict[int, int]] = {}
        """Per table size (its bits), per present slot, the members that have it."""
        self._everyone: dict[int, int] = {}
        """Per table size, the bits of every indexed member of that size."""
        self._members: dict[int, tuple[int, list[int]]] = {}
        """Each indexed member's table size and present slots, to take it out again."""
        self._direct: dict[int, QrpTable] = {}
        """Members whose tables are too full to index, asked one by one."""

    def __len__(self) -> int:
        return len(self._bit_of)

    def bit(self, key: int) -> int:
        """The member's bit in :meth:`matching`'s answers; 0 if it has no table."""
        return self._bit_of.get(key, 0)

    def put(self, key: int, table: QrpTable) -> None:
        """Make ``table`` the member ``key``'s (replacing any table it had)."""
        self.discard(key)
        position = self._free.pop() if self._free else len(self._bit_of)
        bit = self._bit_of[key] = 1 << position
        if table.filled > INDEXED_SLOTS_MAX:
            self._direct[key] = table
            return
        data = bytes(table.data)
        slots = [
            index << 3 | offset
            for index in (match.start() for match in _NONZERO_BYTE.finditer(data))
            for offset in _SLOTS_IN_BYTE[data[index]]
        ]
        present = self._present.setdefault(table.bits, {})
        for slot in slots:
            present[slot] = present.get(slot, 0) | bit
        self._everyone[table.bits] = self._everyone.get(table.bits, 0) | bit
        self._members[key] = (table.bits, slots)

    def discard(self, key: int) -> None:
        """Forget the member ``key``'s table, if it has one."""
        bit = self._bit_of.pop(key, None)
        if bit is None:
            return
        self._free.append(bit.bit_length() - 1)
        if self._direct.pop(key, None) is not None:
            return
        bits, slots = self._members.pop(key)
        present = self._present[bits]
        for slot in slots:
            left = present[slot] & ~bit
            if left:
                present[slot] = left
            else:
                del present[slot]
        everyone = self._everyone[bits] & ~bit
        if everyone:
            self._everyone[bits] = everyone
        else:
            del self._everyone[bits], self._present[bits]

    def matching(self, hashcodes: list[int]) -> int:
        """The bits of the members whose tables hold every one of ``hashcodes`` (words
        hashed by :func:`qrp_hashcode`); no words match nothing, as
        :meth:`QrpTable.matches_hashcodes` says."""
        if not hashcodes:
            return 0
        found = 0
        everyone = self._everyone
        for bits, present in self._present.items():
            shift = 32 - bits
            members = everyone[bits]
            for code in hashcodes:
                members &= present.get(code >> shift, 0)
                if not members:
                    break
            found |= members
        if self._direct:
            bit_of = self._bit_of
            for key, table in self._direct.items():
                if table.matches_hashcodes(hashcodes):
                    found |= bit_of[key]
        return found
