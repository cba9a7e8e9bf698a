"""A stage's bounded event queue: admission is the producer's decision, never a wait inside.

:meth:`StageQueue.admit` takes what fits under the threshold and says how much that was;
the caller sheds the rest (counting why) or applies backpressure, waiting in
:meth:`StageQueue.wait_for_space` without reading its socket. Workers take batches with
:meth:`StageQueue.take` (and hand back what they cannot serve with
:meth:`StageQueue.requeue`). Each admitted run keeps its admission time, so the oldest
event's wait is known (:meth:`StageQueue.head_admitted_at`) without a timestamp per
event, and so is how long the queue was closed to arrivals
(:meth:`StageQueue.closed_seconds`, which the thread governor reads). See :mod:`.stage`
for the stage around it.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from typing import Generic, TypeVar

import trio

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True)
class QueueStatistics:
    """A stage queue at one instant."""

    name: str
    length: int
    """Events waiting now."""
    threshold: int
    """Admission bound: the queue never holds more."""
    peak: int
    """Largest length seen since start."""
    admitted: int
    """Events ever admitted."""
    refused: int
    """Events the queue refused at admission (the caller then shed or waited)."""
    taken: int
    """Events handed to workers."""
    requeued: int
    """Events a worker about to block handed back for another worker."""


class StageQueue(Generic[T]):
    """A bounded FIFO of events whose producers must decide what to do when it is full."""

    __slots__ = (
        "_closed_seconds",
        "_closed_since",
        "_consumers",
        "_events",
        "_head",
        "_marks",
        "_producers",
        "_tail",
        "_taken_marks",
        "_waiting",
        "admitted",
        "first_admitted_at",
        "name",
        "peak",
        "refused",
        "requeued",
        "taken",
        "threshold",
    )

    def __init__(self, name: str, threshold: int) -> None:
        if threshold < 1:
            raise ValueError(f"queue {name!r}: threshold must be at least 1")
        self.name = name
        self.threshold = threshold
        # A list, not a deque: a worker takes a batch as one slice and one deletion at C
        # speed, where a deque gives up its events one popleft() call at a time. The
        # deletion moves the rest of the queue along, at most ``threshold`` pointers.
        self._events: list[T] = []
        self._consumers = trio.lowlevel.ParkingLot()
        self._producers = trio.lowlevel.ParkingLot()
        self.admitted = 0
        self.refused = 0
        self.taken = 0
        self.requeued = 0
        self.peak = 0
        self.first_admitted_at: float | None = None
        """When the first event was admitted: the arrivals began then, not at start."""
        self._marks: collections.deque[tuple[int, float]] = collections.deque()
        """(sequence number just past an admitted run, when it was admitted): one per
        admission that queued something, so at most ``threshold`` of them."""
        self._head = 0
        """Sequence number of the event at the front of the queue."""
        self._tail = 0
        """Sequence number the next admitted event gets."""
        self._taken_marks: list[tuple[int, float]] = []
        """The marks the last :meth:`take` passed, so :meth:`requeue` can put back the
        admission times of what it hands back."""
        self._closed_seconds = 0.0
        self._closed_since: float | None = None
        """When the queue last closed to arrivals (see :meth:`closed_seconds`), while closed."""
        self._waiting = 0
        """Producers waiting for room (:meth:`wait_for_space`)."""

    def __len__(self) -> int:
        return len(self._events)

    @property
    def space(self) -> int:
        return self.threshold - len(self._events)

    def admit(self, events: Sequence[T]) -> int:
        """Queue as many of ``events`` as fit, in order; return how many that was.

        The events not admitted are ``events[returned:]``; they are counted as refused.
        """
        space = self.threshold - len(self._events)
        count = len(events)
        if space < count:
            if space <= 0:
                self.refused += count
                return 0
            self.refused += count - space
            count = space
            self._events.extend(events[:count])
        else:
            self._events.extend(events)
        self._admitted(count)
        return count

    def admit_one(self, event: T) -> bool:
        """Queue one event if there is room."""
        if len(self._events) >= self.threshold:
            self.refused += 1
            return False
        self._events.append(event)
        self._admitted(1)
        return True

    def _admitted(self, count: int) -> None:
        """``count`` events were just queued: note when, the peak, a queue now full, and
        wake a worker."""
        self._mark(count)
        self.admitted += count
        length = len(self._events)
        if length > self.peak:
            self.peak = length
        if length >= self.threshold:
            self._closing()
        if self._consumers:
            self._consumers.unpark()

    def _mark(self, count: int) -> None:
        if count:
            self._tail += count
            now = _clock()
            if now is not None:
                self._marks.append((self._tail, now))
                if self.first_admitted_at is None:
                    self.first_admitted_at = now

    def _closing(self) -> None:
        """The queue is full, or a producer waits: closed to arrivals from now on."""
        if self._closed_since is None:
            self._closed_since = _clock()

    def _opening(self) -> None:
        """Room again and nobody waiting for it: add the time the queue was closed."""
        since, self._closed_since = self._closed_since, None
        if since is not None:
            now = _clock()
            if now is not None:
                self._closed_seconds += now - since

    def closed_seconds(self, now: float) -> float:
        """Seconds the queue has been closed to arrivals since start, up to ``now``.

        Closed: at its threshold, or with a producer waiting for room (one whose frames
        did not all fit; a worker's take opens room, but until the waiting producers have
        run, the arrivals still wait behind them). Meanwhile the queue admits only what
        its workers make room for, so over such a time the admission rate says how fast
        the stage works, not how fast events arrive; under backpressure the rest wait in
        the peers' sockets, uncounted. The thread governor reads this to know which of
        its samples measured the arrivals.
        """
        since = self._closed_since
        return self._closed_seconds + (max(0.0, now - since) if since is not None else 0.0)

    def head_admitted_at(self) -> float | None:
        """When the event at the front of the queue was admitted (None: queue empty).

        Events handed back by :meth:`requeue` keep their admission time.
        """
        # take() drops every mark the head has passed, so the first one left is the
        # head's own run.
        if not self._events or not self._marks:
            return None
        return self._marks[0][1]

    def take(self, limit: int) -> list[T]:
        """Remove and return up to ``limit`` events, oldest first (never waits)."""
        events = self._events
        if not events:
            return []
        if len(events) <= limit:
            batch = events
            self._events = events = []
        else:
            batch = events[:limit]
            del events[:limit]
        self._head += len(batch)
        marks = self._marks
        passed = self._taken_marks = []
        while marks and marks[0][0] <= self._head:
            passed.append(marks.popleft())
        self.taken += len(batch)
        if self._closed_since is not None and not self._waiting and len(events) < self.threshold:
            self._opening()
        if self._producers:
            self._producers.unpark_all()
        if events and self._consumers:
            self._consumers.unpark()
        return batch

    def requeue(self, events: Sequence[T]) -> None:
        """Put taken events back at the front, in order, for another worker.

        A worker about to block hands back the rest of its batch this way, so only the
        event that needs the blocking work waits for it. The queue may briefly hold up
        to one batch more than its threshold: these events were admitted already.
        """
        if not events:
            return
        self._events[:0] = events
        self._head -= len(events)
        marks = self._marks
        for mark in reversed(self._taken_marks):  # the runs the handed-back events are of
            if mark[0] > self._head:
                marks.appendleft(mark)
        self._taken_marks = []
        self.taken -= len(events)
        self.requeued += len(events)
        if len(self._events) >= self.threshold:
            self._closing()
        if self._consumers:
            self._consumers.unpark()

    async def wait_for_events(self) -> None:
        """Return once the queue holds at least one event."""
        while not self._events:
            await self._consumers.park()

    async def wait_for_space(self) -> None:
        """Return once the queue can admit at least one event (backpressure)."""
        if len(self._events) < self.threshold:
            return
        self._waiting += 1
        self._closing()
        try:
            while len(self._events) >= self.threshold:
                await self._producers.park()
        finally:
            self._waiting -= 1
            if not self._waiting and len(self._events) < self.threshold:
                self._opening()

    def clear(self) -> int:
        """Drop every queued event (at shutdown); return how many."""
        dropped = len(self._events)
        self._events.clear()
        self._marks.clear()
        self._head = self._tail
        self._opening()
        if self._producers:
            self._producers.unpark_all()
        return dropped

    def statistics(self) -> QueueStatistics:
        return QueueStatistics(
            name=self.name,
            length=len(self._events),
            threshold=self.threshold,
            peak=self.peak,
            admitted=self.admitted,
            refused=self.refused,
            taken=self.taken,
            requeued=self.requeued,
        )


def _clock() -> float | None:
    """trio's clock, or None outside a trio run (the controllers' unit tests)."""
    try:
        return trio.current_time()
    except RuntimeError:
        return None
