"""Query Routing Protocol tables: the keyword hash, the table, receiving one, and the
union of many.

Theory of operation
-------------------
A leaf tells its ultrapeer which keywords it could answer, so the ultrapeer sends it
only the queries that might match. It does so with a table of ``2**bits`` slots: every
keyword it shares (lowercased; words of three characters or more) is hashed to a slot,
and the slot is marked present. The ultrapeer hashes each word of a query the same way
and forwards the query only if every word's slot is present (a false positive costs one
useless query; a false negative would lose a hit, so the rule is conservative).

The hash (:func:`qrp_hash`) is LimeWire's and gtk-gnutella's: the low byte of each
UTF-16 code unit of the word is XORed into a 32-bit number, one byte position after the
other (little-endian, wrapping every four), the number is multiplied by 0x4F1BBCDC
modulo 2**32 and the top ``bits`` bits of the product are the slot.

**Receiving.** A table travels as a RESET (slot count, "infinity") followed by a
sequence of PATCH messages whose concatenated data, zlib-compressed or raw, holds one
signed entry per slot, 1, 2, 4 or 8 bits wide, the highest bits of a byte for the lowest
slot. The specification makes each entry a delta added to the slot's hop distance, a
slot counting as present while its value is below the infinity. Between a leaf and its
ultrapeer only presence matters, and like gtk-gnutella (``qrt_patch_slot`` in
``src/core/qrp.c``) the receiver keeps one bit per slot and reads only each delta's
sign: a negative entry (sign bit set) marks the slot present, a positive one clears it,
zero leaves it; a 1-bit entry of 1 flips the slot (XOR). A 65,536-slot table therefore
costs 8 KiB whatever the entry width, and a 2**21-slot one 256 KiB.

**Whole buffers, never a slot at a time.** A patch for a 2**21-slot table carries up to
2 MiB of entries; a Python loop per slot cost the router's thread half a second to a
second and a half for it.
Every operation here works on whole byte strings instead, in C: ``bytes.translate``
(one lookup per byte through a 256-byte table), strided slices (``data[k::w]``), and
big-integer bit operations on ``int.from_bytes`` of a whole buffer. The tricks:

* *Patches.* Eight slots, one byte of the table's bitset, take exactly ``w`` bytes of
  ``w``-bit entries. So the ``k``-th byte of every such ``w``-byte group,
  ``entries[k::w]``, always holds the same eight-or-fewer slots of its bitset byte, and
  one 256-entry table per ``k`` turns each entry byte into the bits of those slots:
  "negative" lanes give the slots to set, "non-zero" lanes the slots the patch touches.
  ORing the ``w`` translated strings as integers gives two bitsets ``negative`` and
  ``touched`` of the patched stretch, and the new stretch is
  ``(old & ~touched) | negative`` (for 1-bit entries, ``old ^ entries``; onto an empty
  stretch, as after a RESET, just ``negative``). Entries that do not fill a group yet
  (a patch message may end anywhere) wait for the next message.
* *Resizing.* Halving a table ORs each pair of neighbouring slots: the even bytes of the
  bitset, translated, give the high nibbles of the result and the odd bytes the low
  ones. Doubling copies each slot twice: one table spreads a byte's high nibble over a
  whole byte, another its low nibble, written to the even and odd bytes of the result.
  A resize by ``2**n`` is ``n`` such steps, so shrinking never loses a keyword (a slot
  of the smaller table is present if any slot it stands for was) and growing marks
  every slot a present one could stand for (more false positives, no false negatives).
* *Sending.* The patch that sends a table from scratch is a patch read backwards: the
  ``k``-th byte of every ``w``-byte group is the bitset translated by a table that turns
  a byte's bits into the "present" entries of its ``k``-th group of slots.

:class:`QrpReceiver` applies a peer's messages to a working copy and installs it only
when the sequence is complete, so a table is never half-applied: until then the last
complete table stays in force. Anything wrong — a PATCH before any RESET, a slot count
that is not a power of two or is over :data:`MAX_TABLE_SLOTS`, a sequence number out of
order, an entry width or compressor that changes mid-sequence, more entries than slots
(the decompressed size is capped, so a zlib bomb costs nothing), too few at the end, a
corrupt zlib stream — raises :class:`QrpError` (Bye 413), after which the receiver holds
no table at all.

**Rate.** Given ``min_interval``, a receiver takes at most one table per that many
seconds: a table *begins* with a RESET, or with a PATCH #1 that patches the table in
force (the PATCH #1 right after a RESET belongs to the RESET's table). A table begun
sooner is refused undecoded (:attr:`Intake.TOO_SOON`, for the caller to count as an
offence). Its patches are deltas against what the peer believes we hold, so once one
is refused the receiver no longer knows the peer's table: it keeps the last complete
one in force and skips every PATCH (:attr:`Intake.SKIPPED`) until a RESET arrives in
time and starts afresh. Honest servents send tables far more rarely than the router's
default limit of 10 s (LimeWire at most once a minute, gtk-gnutella on library changes
and every five minutes between ultrapeers).

:class:`~protocol.qrp_leaves.TableUnion` and :class:`~protocol.qrp_leaves.TableIndex`
hold many tables at once (an ultrapeer's leaves'): :mod:`protocol.qrp_leaves`.

Nothing here does I/O or reads a clock: times are passed in.
"""

from __future__ import annotations

import enum
import functools
import re
import zlib
from collections.abc import Callable, Iterable, Iterator

from .constants import ByeCode
from .errors import RemoteProtocolError
from .messages import QrpPatch, QrpReset

MAX_TABLE_SLOTS = 1 << 21
"""The largest table a peer may send: 2**21 slots (256 KiB as a bitset), gtk-gnutella's
largest; its ultrapeers send each other at most 128 Ki slots."""
MIN_TABLE_SLOTS = 8
ENTRY_BITS = (1, 2, 4, 8)
COMPRESSOR_NONE = 0
COMPRESSOR_ZLIB = 1
MIN_WORD_LENGTH = 3
"""Shorter words are neither put in tables nor looked up (gtk-gnutella, LimeWire)."""
MAX_UNION_MEMBERS = 0xFFFF
"""Most tables a :class:`TableUnion` holds: its per-slot counts are 16 bits wide."""
_MULTIPLIER = 0x4F1BBCDC


def qrp_hashcode(word: str) -> int:
    """The 32-bit QRP hash of ``word`` (already lowercased), before truncation."""
    if word.isascii():
        units = word.encode("ascii")
    else:  # each UTF-16 code unit's low byte
        units = word.encode("utf-16-le", "surrogatepass")[0::2]
    rest = int.from_bytes(units, "little")
    folded = 0
    while rest:  # 4-byte little-endian chunks, XORed together
        folded ^= rest & 0xFFFFFFFF
        rest >>= 32
    return (folded * _MULTIPLIER) & 0xFFFFFFFF


def qrp_hash(word: str, bits: int) -> int:
    """The slot of ``word`` in a table of ``2**bits`` slots."""
    return qrp_hashcode(word) >> (32 - bits)


_WORD = re.compile(rf"[^\W_]{{{MIN_WORD_LENGTH},}}")
"""A run of letters and digits (any script), long enough to count."""


def query_words(text: str) -> list[str]:
    """The words of a query or a file name as QRP sees them: lowercased runs of letters
    and digits, three characters or longer, each once."""
    return list(dict.fromkeys(_WORD.findall(text.lower())))


class QrpError(RemoteProtocolError):
    """A peer's QRP messages cannot be applied; its table is dropped."""

    bye_code = ByeCode.INVALID_QRP_SEQUENCE


# ---------------------------------------------------------------------- translate tables
# Each is 256 bytes: what one byte becomes (see "Whole buffers" in the module notes).


def _translation(byte_to: Callable[[int], int]) -> bytes:
    return bytes(byte_to(byte) for byte in range(256))


def _slot_bits(per_byte: int, width: int, lane: int, flag: Callable[[int], bool]) -> bytes:
    """Lane ``lane`` of an 8-slot group of ``width``-bit entries: an entry byte -> the
    bitset bits (MSB first) of its slots whose entry passes ``flag``."""
    mask = (1 << width) - 1

    def bits(byte: int) -> int:
        out = 0
        for j in range(per_byte):
            if flag((byte >> ((per_byte - 1 - j) * width)) & mask):
                out |= 0x80 >> (lane * per_byte + j)
        return out

    return _translation(bits)


def _lanes(width: int, flag: Callable[[int], bool]) -> tuple[bytes, ...]:
    return tuple(_slot_bits(8 // width, width, lane, flag) for lane in range(width))


def _sign_set(width: int) -> Callable[[int], bool]:
    return lambda entry: bool(entry >> (width - 1))


_NEGATIVE = {w: _lanes(w, _sign_set(w)) for w in (2, 4, 8)}
"""Per entry width, per lane: the slots an entry byte marks present (sign bit set)."""
TOUCHED_LANES = {w: _lanes(w, lambda entry: entry != 0) for w in (2, 4, 8)}
"""Per entry width, per lane: the slots an entry byte changes (non-zero entries)."""

_HALVE = (
    _translation(lambda b: sum(0x80 >> i for i in range(4) if b & (0xC0 >> 2 * i))),
    _translation(lambda b: sum(0x08 >> i for i in range(4) if b & (0xC0 >> 2 * i))),
)
"""A bitset byte's four slot pairs ORed, as the high nibble and as the low nibble."""
_DOUBLE = (
    _translation(lambda b: sum(0xC0 >> 2 * i for i in range(4) if b & (0x80 >> i))),
    _translation(lambda b: sum(0xC0 >> 2 * i for i in range(4) if b & (0x08 >> i))),
)
"""A bitset byte's high nibble, and its low nibble, with every slot twice."""


def _slot(j: int) -> Callable[[int], int]:
    return lambda byte: (byte >> (7 - j)) & 1


ONE_LANE = tuple(_translation(_slot(j)) for j in range(8))
"""Slot ``j`` of a bitset byte as 0 or 1 (a count of one in a union's lane)."""


def gather_lanes(entries: bytes, lanes: tuple[bytes, ...]) -> int:
    """The bitset (as an integer, first slot highest) that ``lanes`` make of whole
    8-slot groups of entries."""
    width = len(lanes)
    if width == 1:
        return int.from_bytes(entries.translate(lanes[0]), "big")
    out = 0
    for lane, table in enumerate(lanes):
        out |= int.from_bytes(entries[lane::width].translate(table), "big")
    return out


def apply_entries(bitset: bytearray, offset: int, entries: bytes, entry_bits: int) -> None:
    """Apply patch entries to ``bitset`` from byte ``offset`` on (slot ``8 * offset``):
    whole 8-slot groups only, so ``len(entries)`` is a multiple of ``entry_bits``.

    Negative entries set their slot, positive ones clear it, zeros leave it; 1-bit
    entries flip it. The bitset must hold every slot the entries cover.
    """
    if entry_bits not in ENTRY_BITS or len(entries) % entry_bits:
        raise ValueError(f"whole groups of {entry_bits}-bit entries only")
    count = len(entries) // entry_bits
    end = offset + count
    if offset < 0 or end > len(bitset):
        raise ValueError("the entries run past the table")
    if not count:
        return
    old = int.from_bytes(bitset[offset:end], "big")
    if entry_bits == 1:
        new = old ^ int.from_bytes(entries, "big")
    elif not old:  # nothing to clear (a table after its RESET): the negatives are it
        new = gather_lanes(entries, _NEGATIVE[entry_bits])
    else:
        touched = gather_lanes(entries, TOUCHED_LANES[entry_bits])
        new = (old & ~touched) | gather_lanes(entries, _NEGATIVE[entry_bits])
    bitset[offset:end] = new.to_bytes(count, "big")


def _halved(bitset: bytes) -> bytes:
    high = int.from_bytes(bitset[0::2].translate(_HALVE[0]), "big")
    low = int.from_bytes(bitset[1::2].translate(_HALVE[1]), "big")
    return (high | low).to_bytes(len(bitset) // 2, "big")


def _doubled(bitset: bytes) -> bytes:
    out = bytearray(2 * len(bitset))
    out[0::2] = bitset.translate(_DOUBLE[0])
    out[1::2] = bitset.translate(_DOUBLE[1])
    return bytes(out)


@functools.lru_cache(maxsize=16)
def _entry_lanes(entry_bits: int, present: int) -> tuple[bytes, ...]:
    """Per lane: a bitset byte -> the entry byte of its ``lane``-th group of slots, with
    ``present`` for each present slot and 0 for the others."""
    per_byte = 8 // entry_bits

    def lane_table(lane: int) -> bytes:
        def entry_byte(byte: int) -> int:
            out = 0
            for j in range(per_byte):
                if byte & (0x80 >> (lane * per_byte + j)):
                    out |= present << ((per_byte - 1 - j) * entry_bits)
            return out

        return _translation(entry_byte)

    return tuple(lane_table(lane) for lane in range(entry_bits))


# ---------------------------------------------------------------------- tables


class QrpTable:
    """A routing table as a bitset: ``2**bits`` slots, one bit each, the first slot in
    the highest bit of the first byte."""

    __slots__ = ("bits", "data", "slots")

    def __init__(self, slots: int, data: bytearray | None = None) -> None:
        if slots < MIN_TABLE_SLOTS or slots & (slots - 1):
            raise ValueError(f"a table has a power of two of slots (8 or more), not {slots}")
        if data is not None and len(data) != slots // 8:
            raise ValueError(f"a table of {slots} slots takes {slots // 8} bytes")
        self.slots = slots
        self.bits = slots.bit_length() - 1
        self.data = data if data is not None else bytearray(slots // 8)

    @classmethod
    def of_words(cls, words: Iterable[str], slots: int = 65536) -> QrpTable:
        """The table of a servent sharing ``words`` (hashed as given: lowercase first)."""
        table = cls(slots)
        for word in words:
            table.add(qrp_hash(word, table.bits))
        return table

    def add(self, slot: int) -> None:
        self.data[slot >> 3] |= 0x80 >> (slot & 7)

    def __contains__(self, slot: object) -> bool:
        if not isinstance(slot, int):
            return False
        return bool(self.data[slot >> 3] & (0x80 >> (slot & 7)))

    def present_slots(self) -> Iterator[int]:
        """Every present slot, in order (a loop in Python: for inspection, not routing)."""
        for index, byte in enumerate(self.data):
            if byte:
                for bit in range(8):
                    if byte & (0x80 >> bit):
                        yield index * 8 + bit

    def matches(self, words: Iterable[str]) -> bool:
        """Whether every word may be shared here (no words: nothing to match, False)."""
        return self.matches_hashcodes([qrp_hashcode(word) for word in words])

    def matches_hashcodes(self, hashcodes: Iterable[int]) -> bool:
        """:meth:`matches` for words already hashed (:func:`qrp_hashcode`): a router
        hashes a query's words once, whatever the number of tables it asks."""
        seen = False
        shift = 32 - self.bits
        data = self.data
        for code in hashcodes:
            slot = code >> shift
            if not data[slot >> 3] & (0x80 >> (slot & 7)):
                return False
            seen = True
        return seen

    def resized(self, slots: int) -> QrpTable:
        """This table at another size, never losing a keyword: shrinking ORs neighbouring
        slots together (a slot's hash prefix is shorter), growing marks every slot a
        present one could stand for (more false positives, no false negatives). Halved
        or doubled step by step, a whole buffer at a time (see the module notes)."""
        QrpTable(slots)  # the same checks on the new size
        bitset = bytes(self.data)
        size = self.slots
        while size > slots:
            bitset = _halved(bitset)
            size //= 2
        while size < slots:
            bitset = _doubled(bitset)
            size *= 2
        return QrpTable(slots, bytearray(bitset))

    def merge(self, other: QrpTable) -> None:
        """Add every keyword of ``other`` (which has the same size) to this table."""
        if other.slots != self.slots:
            raise ValueError("only tables of one size merge; resize first")
        merged = int.from_bytes(self.data, "big") | int.from_bytes(other.data, "big")
        self.data[:] = merged.to_bytes(len(self.data), "big")

    @property
    def filled(self) -> int:
        """Slots marked present."""
        return int.from_bytes(self.data, "big").bit_count()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, QrpTable) and (self.slots, self.data) == (other.slots, other.data)

    def __repr__(self) -> str:
        return f"<QrpTable {self.slots} slots, {self.filled} present>"


def table_messages(
    table: QrpTable,
    *,
    entry_bits: int = 4,
    infinity: int = 7,
    compressed: bool = True,
    patch_bytes: int = 4096,
) -> list[QrpReset | QrpPatch]:
    """The RESET and PATCH messages that send ``table`` to a peer from scratch."""
    if entry_bits not in ENTRY_BITS:
        raise ValueError(f"entry_bits must be one of {ENTRY_BITS}")
    entries = _entries(table, entry_bits, infinity)
    data = zlib.compress(entries, 9) if compressed else entries
    pieces = [data[i : i + patch_bytes] for i in range(0, len(data), patch_bytes)] or [b""]
    if len(pieces) > 255:
        raise ValueError("the table needs more than 255 patch messages; raise patch_bytes")
    compressor = COMPRESSOR_ZLIB if compressed else COMPRESSOR_NONE
    messages: list[QrpReset | QrpPatch] = [QrpReset(table.slots, infinity)]
    messages.extend(
        QrpPatch(n + 1, len(pieces), compressor, entry_bits, piece)
        for n, piece in enumerate(pieces)
    )
    return messages


def _entries(table: QrpTable, entry_bits: int, infinity: int) -> bytes:
    """The patch from an empty table: "present" entries, everything else zero."""
    bitset = bytes(table.data)
    if entry_bits == 1:
        return bitset  # a 1 flips an empty slot to present
    present = (-(infinity - 1) if infinity > 1 else -1) & ((1 << entry_bits) - 1)
    out = bytearray(len(bitset) * entry_bits)
    for lane, translation in enumerate(_entry_lanes(entry_bits, present)):
        out[lane::entry_bits] = bitset.translate(translation)
    return bytes(out)


# ---------------------------------------------------------------------- receiving


class Intake(enum.Enum):
    """What :meth:`QrpReceiver.receive` made of a message."""

    TAKEN = "taken"
    """Applied; the table it belongs to is not complete yet."""
    COMPLETED = "completed"
    """It completed a table, now in force (:attr:`QrpReceiver.table`)."""
    TOO_SOON = "too-soon"
    """It began a table sooner than ``min_interval`` after the last one: refused."""
    SKIPPED = "skipped"
    """A PATCH after a refused table, ignored until a RESET arrives in time."""


class QrpReceiver:
    """A peer's QRP messages in, its last complete table out (see the module's notes)."""

    def __init__(self, max_slots: int = MAX_TABLE_SLOTS, min_interval: float = 0.0) -> None:
        self.max_slots = max_slots
        self.min_interval = min_interval
        """Seconds between the beginnings of two tables this receiver takes; 0: any."""
        self.table: QrpTable | None = None
        """The last complete table, or None (none yet, or dropped after an error)."""
        self.tables_received = 0
        self.tables_refused = 0
        """Tables begun too soon after the one before (:attr:`Intake.TOO_SOON`)."""
        self._began = float("-inf")
        """When the last table taken began."""
        self._refused = False
        """A table was refused and no RESET has come in time since: PATCHes are skipped."""
        self._working: QrpTable | None = None
        self._expected_seq = 1
        self._seq_size = 0
        self._entry_bits = 0
        self._compressor = -1
        self._position = 0
        """Entry bytes received in this sequence (after inflating)."""
        self._applied = 0
        """Entry bytes applied: whole 8-slot groups; the rest waits in ``_pending``."""
        self._pending = b""
        self._inflater: zlib._Decompress | None = None

    def receive(self, message: QrpReset | QrpPatch, now: float = 0.0) -> Intake:
        """Apply one message received at ``now`` (see :class:`Intake`).

        Raises:
            QrpError: the message cannot be applied; the receiver now holds no table.
        """
        try:
            if isinstance(message, QrpReset):
                if not self._may_begin(now):
                    return self._refuse()
                self._on_reset(message)
                self._began = now
                self._refused = False
                return Intake.TAKEN
            if self._refused:
                return Intake.SKIPPED
            if self._begins_table(message):
                if not self._may_begin(now):
                    return self._refuse()
                self._began = now
            return Intake.COMPLETED if self._on_patch(message) else Intake.TAKEN
        except QrpError:
            self.table = None
            self._working = None
            raise

    def _may_begin(self, now: float) -> bool:
        return self.min_interval <= 0 or now - self._began >= self.min_interval

    def _begins_table(self, patch: QrpPatch) -> bool:
        """Whether ``patch`` starts a sequence on the table in force (not on a RESET's)."""
        return (
            patch.seq_no == 1
            and self._expected_seq == 1
            and self._working is None
            and self.table is not None
        )

    def _refuse(self) -> Intake:
        self._working = None  # a sequence under way is abandoned; the table in force stays
        self._start_sequence()
        self._refused = True
        self.tables_refused += 1
        return Intake.TOO_SOON

    def _on_reset(self, reset: QrpReset) -> None:
        slots = reset.table_length
        if slots < MIN_TABLE_SLOTS or slots & (slots - 1):
            raise _error(f"QRP table length {slots} is not a power of two (8 or more)")
        if slots > self.max_slots:
            raise _error(f"QRP table of {slots} slots is over the limit of {self.max_slots}")
        if reset.infinity < 1:
            raise _error(f"QRP infinity {reset.infinity} is below 1")
        self._working = QrpTable(slots)
        self._start_sequence()

    def _start_sequence(self) -> None:
        self._expected_seq = 1
        self._seq_size = 0
        self._entry_bits = 0
        self._compressor = -1
        self._position = 0
        self._applied = 0
        self._pending = b""
        self._inflater = None

    def _on_patch(self, patch: QrpPatch) -> bool:
        if patch.seq_no == 1 and self._expected_seq == 1:
            if self._working is None:
                if self.table is None:
                    raise _error("QRP PATCH without a RESET first")
                # A new sequence patches the table in force, on a copy.
                self._working = QrpTable(self.table.slots, bytearray(self.table.data))
            self._begin(patch)
        elif self._working is None or patch.seq_no != self._expected_seq:
            raise _error(f"QRP PATCH #{patch.seq_no} out of sequence")
        elif (patch.seq_size, patch.entry_bits, patch.compressor) != (
            self._seq_size,
            self._entry_bits,
            self._compressor,
        ):
            raise _error("QRP PATCH changed its size, entry width or compressor mid-sequence")
        data = self._inflate(patch.data) if self._inflater is not None else patch.data
        self._apply(data)
        if patch.seq_no < self._seq_size:
            self._expected_seq += 1
            return False
        return self._finish()

    def _begin(self, patch: QrpPatch) -> None:
        if patch.seq_size < 1:
            raise _error("QRP PATCH sequence of size 0")
        if patch.entry_bits not in ENTRY_BITS:
            raise _error(f"QRP entry width of {patch.entry_bits} bits is not 1, 2, 4 or 8")
        if patch.compressor not in (COMPRESSOR_NONE, COMPRESSOR_ZLIB):
            raise _error(f"QRP compressor {patch.compressor} is unknown")
        self._start_sequence()
        self._seq_size = patch.seq_size
        self._entry_bits = patch.entry_bits
        self._compressor = patch.compressor
        self._inflater = zlib.decompressobj() if patch.compressor == COMPRESSOR_ZLIB else None

    def _expected_bytes(self) -> int:
        assert self._working is not None
        return self._working.slots * self._entry_bits // 8

    def _inflate(self, data: bytes) -> bytes:
        assert self._inflater is not None
        room = self._expected_bytes() - self._position
        try:
            out = self._inflater.decompress(data, room + 1)  # never more than one too many
        except zlib.error as exc:
            raise _error(f"QRP PATCH data is not a valid zlib stream: {exc}") from exc
        if len(out) > room or self._inflater.unconsumed_tail:
            raise _error("QRP PATCH overflows its table")
        return out

    def _apply(self, data: bytes) -> None:
        working = self._working
        assert working is not None
        if self._position + len(data) > self._expected_bytes():
            raise _error("QRP PATCH overflows its table")
        self._position += len(data)
        width = self._entry_bits
        if self._pending:
            data = self._pending + data
        whole = len(data) - len(data) % width
        apply_entries(working.data, self._applied // width, data[:whole], width)
        self._applied += whole
        self._pending = data[whole:]

    def _finish(self) -> bool:
        if self._inflater is not None and not self._inflater.eof:
            raise _error("QRP PATCH sequence ended inside its zlib stream")
        if self._position != self._expected_bytes():
            raise _error(
                f"QRP PATCH sequence ended after {self._position} of "
                f"{self._expected_bytes()} bytes of entries"
            )
        assert not self._pending  # the table's size is a whole number of 8-slot groups
        self.table = self._working
        self._working = None
        self._start_sequence()
        self.tables_received += 1
        return True


def _error(text: str) -> QrpError:
    return QrpError(text, bye_code=ByeCode.INVALID_QRP_SEQUENCE)


__all__ = [
    "MAX_TABLE_SLOTS",
    "MAX_UNION_MEMBERS",
    "MIN_WORD_LENGTH",
    "Intake",
    "QrpError",
    "QrpReceiver",
    "QrpTable",
    "apply_entries",
    "qrp_hash",
    "qrp_hashcode",
    "query_words",
    "table_messages",
]
