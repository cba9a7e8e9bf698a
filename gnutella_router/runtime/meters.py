"""What a controller reads of a stage: running totals at one instant.

A controller samples a stage (the thread governor, :mod:`gnutella_router.control.governor`;
the batching controller, :mod:`gnutella_router.control.batching`) by taking one of these
now and then and comparing it with the one before: totals rather than rates, so that
each reader chooses its own interval. :class:`~.stage.Stage` makes them; they are here,
apart, because the controllers need their shape and nothing else of the stage.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class StageMeter:
    """A stage's running totals at one instant, for a controller that samples them.

    Totals rather than rates, so the reader chooses its own interval: the difference
    between two meters is what happened in between.
    """

    at: float
    pool_size: int
    queue_length: int
    queue_threshold: int
    admitted: int
    """Events ever admitted to the queue (a requeued event is not admitted again)."""
    first_admitted_at: float | None
    """When the first of them was (None before), the start of the arrivals."""
    events: int
    """Events ever handled."""
    busy_seconds: float
    """Worker-seconds spent handling the batches finished so far. Only finished ones, so
    that divided by ``events`` it is the time an event holds a worker, whatever batches
    were in hand when it was read."""
    closed_seconds: float
    """Seconds the queue has been closed to arrivals (see :meth:`StageQueue.closed_seconds`)."""
    peak_busy: int
    """Most workers busy at once since the previous meter (see :meth:`Stage.take_peak_busy`)."""
    blocking_calls: int = 0
    """Blocking calls finished (:meth:`Stage.run_blocking`): where the time of the slow
    events goes, for the governor's samples."""
    thread_seconds: float = 0.0
    """Seconds those calls waited on their threads: the work itself plus the hand-off to
    the thread and back (and a wait for a free thread, if any)."""
    turn_wait_seconds: float = 0.0
    """Seconds they then waited to get the stage's turn back, while another worker routed."""


@dataclasses.dataclass(frozen=True, slots=True)
class BatchMeter:
    """A stage's batch totals at one instant, for the batching controller.

    Separate from :class:`StageMeter`: reading it has no side effect (that one takes the
    busy peak), so both controllers can sample the same stage.
    """

    at: float
    batch_size: int
    queue_length: int
    queue_threshold: int
    events: int
    """Events ever handled."""
    batches: int
    """Batches ever handled."""
    busy_seconds: float
    """Worker-seconds spent in finished batches."""
