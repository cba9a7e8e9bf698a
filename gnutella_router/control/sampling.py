"""What the thread governor and the batching controller share: :class:`SampledController`.

Both steer one knob of a stage (its pool size, its batch size) from readings of its
meter taken every ``interval`` seconds, each turned into a sample that says what was
measured and what was done. How a controller is made (its stage, its configuration
section, its logger), the loop that takes the readings on trio's clock, the bounded
history of samples kept for dumps, /metrics and the profiler, and what a statistics
snapshot shows of that history are the same for both; each controller says only what
its logger is called, what state it keeps (:meth:`_set_up`), how it takes its first
reading and what one sample decides (:meth:`step`, sans-IO, so that tests drive it
with any clock).
"""

from __future__ import annotations

import abc
import collections
from typing import ClassVar, Generic, Protocol, TypeVar

import structlog
import trio

__all__ = ["HISTORY", "RECENT", "SampledController"]

HISTORY = 600
"""Samples a controller keeps for statistics and plots (10 minutes at the batching
controller's default interval, 20 at the governor's)."""
RECENT = 60
"""The last samples a statistics snapshot carries."""


class Sampling(Protocol):
    """What the controller reads of its configuration section."""

    @property
    def interval(self) -> float: ...


StageT = TypeVar("StageT")
ConfigT = TypeVar("ConfigT", bound=Sampling)
SampleT = TypeVar("SampleT")


class SampledController(abc.ABC, Generic[StageT, ConfigT, SampleT]):
    """A controller of ``stage`` that takes a sample every ``config.interval`` seconds
    and keeps the last :data:`HISTORY` of them, oldest first, in :attr:`samples`."""

    logger_name: ClassVar[str]
    """The logger the controller logs to when it is not given one."""

    def __init__(
        self,
        stage: StageT,
        config: ConfigT,
        *,
        log: structlog.typing.FilteringBoundLogger | None = None,
    ) -> None:
        self.stage = stage
        self.config = config
        self.log = log or structlog.get_logger(self.logger_name)
        self.samples: collections.deque[SampleT] = collections.deque(maxlen=HISTORY)
        self._set_up()

    @abc.abstractmethod
    def _set_up(self) -> None:
        """The controller's own state, from :attr:`stage` and :attr:`config` (called
        once, at construction)."""

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Sample and act every ``interval`` seconds, until cancelled."""
        self._start(trio.current_time())
        task_status.started()
        while True:
            await trio.sleep(self.config.interval)
            self.step(trio.current_time())

    @abc.abstractmethod
    def _start(self, now: float) -> None:
        """Take the reading the first sample is measured from, at ``now``: the one taken
        at construction may be long stale by the time the loop starts."""

    @abc.abstractmethod
    def step(self, now: float) -> SampleT:
        """One sample and at most one change of the knob, kept in :attr:`samples`."""

    def recent(self) -> tuple[SampleT, ...]:
        """The last :data:`RECENT` samples, oldest first, for a statistics snapshot."""
        return tuple(self.samples)[-RECENT:]
