"""The 0.6 draft's and gtk-gnutella's slow-peer policy: a byte budget with priorities,
flow control between a high- and a low-water mark, eviction of less important traffic.

See :mod:`gnutella_router.net.outqueue` for the contract and the theory of operation.
"""

from __future__ import annotations

import math
import sys
from typing import ClassVar, Final

from gnutella_router.net.outqueue import (
    _CLEARED,
    _EVICTED,
    _FLOW_CONTROL,
    _OVERFLOW,
    _QUEUE_FULL,
    _QUEUED,
    OutgoingQueue,
    Verdict,
)
from protocol.constants import ByeCode, MessageType

__all__ = ["DROPPABLE_TYPES", "FlowControlQueue", "priority_level"]

_HOPS_BUCKETS: Final = 8
_BROADCAST_CLASSES: Final = (MessageType.PING, MessageType.QUERY)
_CLASS_ORDER: Final = (
    MessageType.PING,
    MessageType.QUERY,
    MessageType.PONG,
    MessageType.QUERY_HIT,
    MessageType.PUSH,
)
DROPPABLE_TYPES: Final = frozenset({MessageType.PING, MessageType.PONG, MessageType.QUERY})
"""Types refused rather than fatal when they cannot be queued (gtk-gnutella's list).

Hits and pushes can still be evicted by more important messages; control messages never.
"""

_CONTROL_LEVEL: Final = len(_CLASS_ORDER) * _HOPS_BUCKETS
_LEVEL_COUNT: Final = _CONTROL_LEVEL + 1
# Ping, query and pong are the three lowest classes, so "droppable" is "below this level".
_FIRST_KEPT_LEVEL: Final = _CLASS_ORDER.index(MessageType.QUERY_HIT) * _HOPS_BUCKETS


def _build_level_table() -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    control = (_CONTROL_LEVEL,) * 256
    by_type: list[tuple[int, ...]] = [control] * 256
    level_type = [-1] * _LEVEL_COUNT
    last = _HOPS_BUCKETS - 1
    for rank, message_type in enumerate(_CLASS_ORDER):
        base = rank * _HOPS_BUCKETS
        if message_type in _BROADCAST_CLASSES:
            row = tuple(base + last - min(hops, last) for hops in range(256))
        else:
            row = tuple(base + min(hops, last) for hops in range(256))
        by_type[message_type] = row
        for level in range(base, base + _HOPS_BUCKETS):
            level_type[level] = int(message_type)
    return tuple(by_type), tuple(level_type)


# _LEVEL_OF[type][hops] is a message's level; _LEVEL_TYPE[level] the type a level holds.
_LEVEL_OF, _LEVEL_TYPE = _build_level_table()

assert all((_LEVEL_OF[t][0] < _FIRST_KEPT_LEVEL) == (t in DROPPABLE_TYPES) for t in range(256)), (
    "droppable classes must sit below every kept class"
)


def priority_level(message_type: int, hops: int) -> int:
    """The flow-control importance of a message: higher is sent first and evicted last."""
    return _LEVEL_OF[message_type][hops]


class FlowControlQueue(OutgoingQueue):
    """Byte-bounded priority queue with flow control, after the 0.6 draft and gtk-gnutella.

    Args:
        max_bytes: the byte budget; the draft asks for at least 150 % of the largest
            message a connection may carry.
        enter_ratio: flow control starts when queued bytes reach this share of the budget.
        leave_ratio: and stops (in ``take``, or after evictions) once they fall below this
            share.
        max_flow_control_seconds: a flow-control episode lasting longer makes ``check``
            ask for Bye 405, as gtk-gnutella does (its ``node_tx_flowc_timeout``).

    ``take`` sends the most important level first and FIFO within a level. Eviction takes
    the oldest message of the least important non-empty level, repeatedly, and only from
    levels strictly below the incoming message's level.

    A level holds a list while it has messages and ``None`` once emptied: a queue has
    41 levels, an idle one (most of them) then holds none, and a busy one only the few
    it uses (41 empty deques were about 30 KB per connection).
    """

    __slots__ = (
        "_enter_at",
        "_enter_bytes",
        "_fast_floor",
        "_fc_entries",
        "_fc_since",
        "_flow_controlled",
        "_leave_below",
        "_level_bytes",
        "_levels",
        "_limit",
        "_mask",
        "_max_bytes",
        "_max_fc_seconds",
    )

    policy: ClassVar[str] = "flow-control"

    def __init__(
        self,
        max_bytes: int = 96 * 1024,
        enter_ratio: float = 0.5,
        leave_ratio: float = 0.25,
        max_flow_control_seconds: float = 180.0,
    ) -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {max_bytes}")
        if not 0.0 < leave_ratio <= enter_ratio <= 1.0:
            raise ValueError(
                "need 0 < leave_ratio <= enter_ratio <= 1, "
                f"got leave_ratio={leave_ratio}, enter_ratio={enter_ratio}"
            )
        if not max_flow_control_seconds > 0.0:
            raise ValueError(
                f"max_flow_control_seconds must be > 0, got {max_flow_control_seconds}"
            )
        super().__init__()
        self._max_bytes = max_bytes
        # Queued byte counts are integers, so rounding the marks up keeps the
        # comparisons exact: n >= x iff n >= ceil(x), and n < x iff n < ceil(x).
        self._enter_bytes = math.ceil(enter_ratio * max_bytes)
        self._leave_below = math.ceil(leave_ratio * max_bytes)
        self._max_fc_seconds = max_flow_control_seconds
        self._levels: list[list[bytes] | None] = [None] * _LEVEL_COUNT
        self._level_bytes = [0] * _LEVEL_COUNT
        self._mask = 0  # bit i set iff level i is non-empty
        self._flow_controlled = False
        self._fc_since = 0.0
        self._fc_entries = 0
        # Hot-path gates, each folding a state test into a single comparison:
        # _limit is max_bytes while open and -1 once closed; _enter_at is the high-water
        # mark outside flow control and out of reach inside it; _fast_floor is the lowest
        # level accepted without eviction (all of them, or only the kept ones in FC).
        self._limit = max_bytes
        self._enter_at = self._enter_bytes
        self._fast_floor = 0

    def offer(self, data: bytes, message_type: int, hops: int, now: float) -> Verdict:
        level = _LEVEL_OF[message_type][hops]
        size = len(data)
        pending = self._pending_bytes + size
        if pending <= self._limit and level >= self._fast_floor:
            queue = self._levels[level]
            if queue is None:
                self._levels[level] = [data]
            else:
                queue.append(data)
            self._level_bytes[level] += size
            self._mask |= 1 << level
            self._pending_bytes = pending
            if pending >= self._enter_at:
                self._enter_flow_control(now)
            return _QUEUED
        return self._offer_slow(data, message_type, level, size, now)

    def _offer_slow(
        self, data: bytes, message_type: int, level: int, size: int, now: float
    ) -> Verdict:
        if self._closed:
            return self._offer_after_close(data, message_type, now)
        droppable = level < _FIRST_KEPT_LEVEL
        if droppable and self._flow_controlled:
            # As gtk-gnutella: in flow control a droppable message may only replace at
            # least its own size of less important traffic, so droppable traffic cannot
            # grow the queue and the room above the high-water mark stays for replies.
            if not self._make_room(level, size):
                return self._refuse(message_type, _FLOW_CONTROL)
        elif not self._make_room(level, self._pending_bytes + size - self._max_bytes):
            if droppable:
                return self._refuse(message_type, _QUEUE_FULL)
            self._mark_closed("send queue full", int(ByeCode.SEND_QUEUE_FULL))
            self._limit = -1
            self._refuse(message_type, _OVERFLOW)
            return Verdict.BYE_AND_CLOSE
        self._append(data, level, now)
        return _QUEUED

    def _append(self, data: bytes, level: int, now: float) -> None:
        size = len(data)
        queue = self._levels[level]
        if queue is None:
            self._levels[level] = [data]
        else:
            queue.append(data)
        self._level_bytes[level] += size
        self._mask |= 1 << level
        self._pending_bytes += size
        self._update_flow_control(now)

    def _make_room(self, level: int, needed: int) -> bool:
        """Evict at least ``needed`` bytes from levels below ``level``, or nothing at all."""
        if needed <= 0:
            return True
        lower = self._mask & ((1 << level) - 1)
        level_bytes = self._level_bytes
        # Decide first, from per-level byte counts, so a hopeless offer evicts nothing
        # and costs one pass over at most _LEVEL_COUNT levels, never over messages.
        available = 0
        remaining = lower
        while remaining:
            bit = remaining & -remaining
            available += level_bytes[bit.bit_length() - 1]
            if available >= needed:
                break
            remaining ^= bit
        else:
            return False
        self._note_peak()
        levels = self._levels
        dropped, dropped_by_type = self._drops()
        freed = 0
        evicted = 0
        remaining = lower
        while freed < needed:
            bit = remaining & -remaining
            remaining ^= bit
            index = bit.bit_length() - 1
            queue = levels[index]
            assert queue is not None  # its bit is set
            level_freed = 0
            count = 0
            length = len(queue)
            while count < length and freed + level_freed < needed:
                level_freed += len(queue[count])  # oldest first: it is the stalest
                count += 1
            level_bytes[index] -= level_freed
            dropped_by_type[_LEVEL_TYPE[index]] += count
            freed += level_freed
            evicted += count
            if count == length:
                levels[index] = None
                self._mask ^= bit
            else:
                del queue[:count]
        dropped[_EVICTED] += evicted
        self._pending_bytes -= freed
        return True

    def _enter_flow_control(self, now: float) -> None:
        self._flow_controlled = True
        self._fc_since = now
        self._fc_entries += 1
        self._enter_at = sys.maxsize
        self._fast_floor = _FIRST_KEPT_LEVEL

    def _leave_flow_control(self) -> None:
        self._flow_controlled = False
        self._enter_at = self._enter_bytes
        self._fast_floor = 0

    def _update_flow_control(self, now: float) -> None:
        if self._flow_controlled:
            if self._pending_bytes < self._leave_below:
                self._leave_flow_control()
        elif self._pending_bytes >= self._enter_bytes:
            self._enter_flow_control(now)

    def take(self, max_bytes: int = 65536) -> list[bytes]:
        mask = self._mask
        if not mask:
            return []
        self._note_peak()
        levels = self._levels
        level_bytes = self._level_bytes
        batch: list[bytes] = []
        total = 0
        while mask:
            level = mask.bit_length() - 1
            queue = levels[level]
            assert queue is not None  # its bit is set
            taken = 0
            count = 0
            length = len(queue)
            while count < length:
                size = len(queue[count])
                if total + taken + size > max_bytes and (batch or count):
                    break
                taken += size
                count += 1
            level_bytes[level] -= taken
            total += taken
            if count < length:
                batch.extend(queue[:count])
                del queue[:count]
                break
            batch.extend(queue)
            levels[level] = None
            mask ^= 1 << level
        self._mask = mask
        self._pending_bytes -= total
        self._sent_total += len(batch)
        if self._flow_controlled and self._pending_bytes < self._leave_below:
            self._leave_flow_control()
        return batch

    def check(self, now: float) -> Verdict:
        if (
            self._flow_controlled
            and not self._closed
            and now - self._fc_since > self._max_fc_seconds
        ):
            self._mark_closed(
                f"flow-controlled for more than {self._max_fc_seconds:g} s",
                int(ByeCode.ACTIVITY_TIMEOUT),
            )
            self._limit = -1
            return Verdict.BYE_AND_CLOSE
        return _QUEUED

    def clear(self) -> int:
        self._note_peak()
        count = 0
        for queue in self._levels:
            if queue is not None:
                count += len(queue)
        self._levels = [None] * _LEVEL_COUNT
        self._level_bytes = [0] * _LEVEL_COUNT
        self._mask = 0
        self._pending_bytes = 0
        if count:
            self._drops()[0][_CLEARED] += count
        if self._flow_controlled:
            self._leave_flow_control()
        return count

    @property
    def pending_messages(self) -> int:
        count = 0
        mask = self._mask
        levels = self._levels
        while mask:
            bit = mask & -mask
            queue = levels[bit.bit_length() - 1]
            assert queue is not None  # its bit is set
            count += len(queue)
            mask ^= bit
        return count

    @property
    def flow_controlled(self) -> bool:
        return self._flow_controlled

    def _capacity(self) -> int:
        return self._max_bytes

    def _flow_control_entries(self) -> int:
        return self._fc_entries

    def _seconds_in_flow_control(self, now: float) -> float:
        return now - self._fc_since if self._flow_controlled else 0.0

    def _admit_bye(self, data: bytes, now: float) -> None:
        self._append(data, _CONTROL_LEVEL, now)
