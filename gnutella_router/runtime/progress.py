"""Whether the stages are getting on with their work: what the watchdog keep-alive asks.

Theory of operation
-------------------
Under systemd's watchdog (:mod:`gnutella_router.systemd`) the daemon sends a keep-alive
every half ``WatchdogSec``, and systemd restarts it when none comes. A keep-alive sent
by a timer alone proves only that the event loop runs. A router can be wedged with its
loop running: a stage's worker stuck in its handler (a blocking call that never
returns, a lock never released), or a pool with no worker left; events then wait in the
stage's queue and none is ever taken. So the keep-alive is sent only when every stage
made progress since the last look, where a stage made progress if its queue was empty
at either look (nothing waited the whole time), or it took events from its queue, or it
finished a batch in between. A stage fed nothing is idle, not wedged; a stage behind
under overload still takes events, and is not wedged either. A loop that does not run
at all sends nothing, and is restarted for that.

A batch the handler holds for longer than one interval with more events waiting
counts as a stall (the experiment hook ``router.query_delay_ms`` can make one, at its
largest, with one thread): choose ``WatchdogSec`` well above the longest batch the
configuration allows.

:class:`ProgressCheck` holds the counters of the last look and judges the next; it
reads nothing itself (:func:`sample` reads a stage), so tests give it numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from gnutella_router.runtime.stage import Stage, StageRegistry

__all__ = ["ProgressCheck", "StageSample", "sample", "samples"]


@dataclasses.dataclass(frozen=True, slots=True)
class StageSample:
    """A stage's counters at one look."""

    name: str
    waiting: int
    """Events in its queue."""
    taken: int
    """Events its workers have taken from the queue, ever."""
    batches: int
    """Batches its handler has finished, ever."""


def sample(name: str, stage: Stage[Any]) -> StageSample:
    """``stage``'s counters now."""
    return StageSample(name, len(stage.queue), stage.queue.taken, stage.batches)


def samples(registry: StageRegistry) -> list[StageSample]:
    """Every stage of ``registry`` (the registered parts that are no stage are skipped)."""
    found = []
    for name in registry.names():
        source = registry[name]
        if isinstance(source, Stage):
            found.append(sample(name, source))
    return found


class ProgressCheck:
    """Judges each look against the one before (see the module)."""

    def __init__(self) -> None:
        self._last: dict[str, StageSample] = {}

    def stalled(self, looked: Iterable[StageSample]) -> list[StageSample]:
        """The stages that held events at the last look and at this one and neither
        took an event nor finished a batch in between; remembers this look."""
        stuck = []
        current = {}
        for now in looked:
            current[now.name] = now
            before = self._last.get(now.name)
            if (
                before is not None
                and before.waiting
                and now.waiting
                and now.taken == before.taken
                and now.batches == before.batches
            ):
                stuck.append(now)
        self._last = current
        return stuck
