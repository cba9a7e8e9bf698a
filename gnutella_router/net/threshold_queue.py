"""The paper's slow-peer policy: a FIFO with a ceiling, past which the peer is closed.

See :mod:`gnutella_router.net.outqueue` for the contract and for how this policy compares
with flow control.
"""

from __future__ import annotations

import sys
from typing import ClassVar

from gnutella_router.config.sections import SlowPeerConfig
from gnutella_router.net.outqueue import (
    _CLEARED,
    _OVERFLOW,
    _QUEUE_FULL,
    _QUEUED,
    OutgoingQueue,
    Verdict,
)


class ThresholdQueue(OutgoingQueue):
    """The SEDA router's policy: a FIFO, and a close as soon as it passes its threshold.

    With a ``grace`` (seconds), a peer is closed only when its queue has stayed at the
    threshold that long: meanwhile what does not fit is dropped (``queue_full``), and
    the grace starts again whenever the peer's writes bring the queue back under the
    threshold. A peer that reads at its own pace, slower than a flood through the router,
    therefore loses the flood's excess and stays connected; one that stops reading is
    closed once the grace runs out. Without a grace (0, the paper's policy) the first
    message that does not fit closes the peer.

    Args:
        max_messages: the threshold; the message that would make the queue hold more is
            refused (dropped within the grace, else with CLOSE). 0 means no limit at
            all (neither messages nor bytes), which is only for the overload experiment
            that must show memory growing.
        max_bytes: a safety net on queued bytes, so memory stays bounded even when the
            messages are large.
        unbounded_experiment: must be true for ``max_messages=0`` to be accepted, so an
            unbounded queue cannot be configured by accident.
        grace: how long the queue may stay full before the peer is closed (0: at once).
    """

    __slots__ = (
        "_full_since",
        "_grace",
        "_limit_bytes",
        "_limit_messages",
        "_max_bytes",
        "_max_messages",
        "_queue",
    )

    policy: ClassVar[str] = "threshold"

    def __init__(
        self,
        max_messages: int = SlowPeerConfig().threshold_messages,
        max_bytes: int = 4 * 1024 * 1024,
        *,
        unbounded_experiment: bool = False,
        grace: float = 0.0,
    ) -> None:
        if grace < 0:
            raise ValueError(f"grace must be >= 0, got {grace}")
        if max_messages < 0:
            raise ValueError(f"max_messages must be >= 0, got {max_messages}")
        if max_messages == 0 and not unbounded_experiment:
            raise ValueError(
                "max_messages=0 (an unbounded queue) is only allowed with unbounded_experiment=True"
            )
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be > 0, got {max_bytes}")
        super().__init__()
        self._queue: list[bytes] = []
        # A list, not a deque: an empty deque keeps a 512-byte block, and most queues are
        # empty most of the time. take() hands the whole list out and starts a new one;
        # only a write larger than max_bytes leaves a remainder to shift forward, and a
        # queue under the threshold holds a few hundred messages at most.
        self._max_messages = max_messages
        self._max_bytes = max_bytes
        # The limits the hot path compares against: sys.maxsize when unbounded, and 0
        # once closed so every offer falls through to the slow path.
        self._limit_messages = max_messages if max_messages else sys.maxsize
        self._limit_bytes = max_bytes if max_messages else sys.maxsize
        self._grace = grace
        self._full_since: float | None = None
        """Since when the queue has been at its threshold, while within its grace."""

    def offer(self, data: bytes, message_type: int, hops: int, now: float) -> Verdict:
        pending = self._pending_bytes + len(data)
        queue = self._queue
        if len(queue) < self._limit_messages and pending <= self._limit_bytes:
            queue.append(data)
            self._pending_bytes = pending
            return _QUEUED
        if self._closed:
            return self._offer_after_close(data, message_type, now)
        if self._grace:
            since = self._full_since
            if since is None:
                self._full_since = since = now
            if now - since < self._grace:
                return self._refuse(message_type, _QUEUE_FULL)
        if len(queue) >= self._max_messages:
            reason = f"outgoing queue passed {self._max_messages} messages"
        else:
            reason = f"outgoing queue passed {self._max_bytes} bytes"
        self._mark_closed(reason, None)
        self._limit_messages = 0
        self._refuse(message_type, _OVERFLOW)
        return Verdict.CLOSE

    def offer_bulk(self, datas: list[bytes], total_bytes: int) -> bool:
        queue = self._queue
        pending = self._pending_bytes + total_bytes
        if (
            len(queue) + len(datas) <= self._limit_messages
            and pending <= self._limit_bytes
            and not self._closed
        ):
            queue.extend(datas)
            self._pending_bytes = pending
            return True
        return False

    def has_room_for(self, count: int) -> bool:
        # Messages only: a batch's bytes are not known ahead, and the byte limit is the
        # safety net for large messages, not the slow-peer threshold.
        return not self._closed and len(self._queue) + count <= self._limit_messages

    def take(self, max_bytes: int = 65536) -> list[bytes]:
        queue = self._queue
        if not queue:
            return []
        self._note_peak()
        if self._pending_bytes <= max_bytes:
            # The common case: everything fits in one write; hand the list out whole.
            self._queue = []
            self._pending_bytes = 0
            self._sent_total += len(queue)
            self._full_since = None
            return queue
        total = len(queue[0])
        count = 1
        for count in range(1, len(queue)):
            size = len(queue[count])
            if total + size > max_bytes:
                break
            total += size
        else:
            count = len(queue)
        batch = queue[:count]
        del queue[:count]
        self._pending_bytes -= total
        self._sent_total += count
        if len(queue) < self._limit_messages and self._pending_bytes < self._limit_bytes:
            self._full_since = None
        return batch

    def check(self, now: float) -> Verdict:
        # A queue full for its whole grace closes even when nothing more is offered.
        since = self._full_since
        if since is None or self._closed or now - since < self._grace:
            return _QUEUED
        self._mark_closed(
            f"outgoing queue at its threshold ({self._max_messages} messages) for "
            f"{self._grace:g} s",
            None,
        )
        self._limit_messages = 0
        return Verdict.CLOSE

    def clear(self) -> int:
        self._note_peak()
        count = len(self._queue)
        self._queue.clear()
        self._pending_bytes = 0
        if count:
            self._drops()[0][_CLEARED] += count
        return count

    @property
    def pending_messages(self) -> int:
        return len(self._queue)

    def _capacity(self) -> int:
        return self._max_messages

    def _admit_bye(self, data: bytes, now: float) -> None:
        self._queue.append(data)
        self._pending_bytes += len(data)


# -- flow-control priority levels ------------------------------------------------------
#
# Each message class is split into _HOPS_BUCKETS levels by hop count, so "less important"
# is a property of a level and eviction never has to look at individual messages. Levels
# are numbered from least to most important; within a broadcast class (ping, query) more
# hops sits lower (it has already covered most of its horizon), within a reply class
# (pong, hit, push) fewer hops sits lower (a reply that has travelled far is closer to
# the searcher that is waiting for it). Hop counts of 7 and above share the last
# bucket: with the usual TTL caps of 4 to 7 such messages are rare, and that is the only
# place where the hops ordering is approximated. Control messages (everything that is
# not one of the five routed types) share a single top level, so they stay in FIFO
# order among themselves, which QRP patch sequences need.
