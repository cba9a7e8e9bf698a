"""Load shedding at the router's queue: what to refuse when demand exceeds capacity.

The SEDA paper lists the choices a stage has when its queue fills (section 5.2.3), and
each is a policy here, chosen in configuration:

* ``backpressure`` (the default): admit nothing that does not fit and stop reading the
  connection until there is room; nothing is lost, the peer's TCP window closes.
* ``drop-tail``: admit what fits under the threshold, drop the rest of the read.
* ``red``: Random Early Detection's idea applied to a stage queue: between
  ``red_min`` and ``red_max`` (fractions of the threshold) each arriving message is
  dropped with a probability rising linearly to ``red_max_p``; above ``red_max``
  everything is; drop-tail at the bound.
* ``queries-first``: once the queue passes ``queries_first_at`` of its threshold,
  queries (the source of the paper's overload) are dropped and everything else is
  admitted, with backpressure at the bound.
* ``response-time``: SEDA's response-time controller
  (:mod:`gnutella_router.control.response_time`): queries are admitted through a token
  bucket whose rate follows the 90th percentile of the stage's response times (AIMD
  towards ``response_time_target_ms``); refused ones are dropped at the door as
  ``shed-admission``; everything else is admitted, with backpressure at the bound.
  With ``response_time_classes``, every message goes through the bucket of its class
  (everything else, leaf queries, queries from ultrapeers; weighted), and with
  ``degrade_ttl_by`` queries are forwarded with less TTL before any is refused.

Independently, ``rate_limit`` (messages/s, with ``rate_burst``) is a token bucket per
connection, the paper's input rate controller: what a connection sends beyond it is
dropped. Every message shed is counted by policy and type in the router's drop counters,
and no policy ever lets the queue pass its bound.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Callable
from typing import get_args

from gnutella_router.config.sections import SheddingConfig, SheddingPolicy
from gnutella_router.control.response_time import (
    LEAF_QUERIES,
    OTHERS,
    QUERIES,
    QualityLevel,
    ResponseTimeController,
    admission_class,
)
from gnutella_router.control.token_bucket import TokenBucket
from gnutella_router.runtime.stage_queue import StageQueue
from protocol.constants import MessageType
from protocol.framing import Frame

POLICIES: tuple[str, ...] = get_args(SheddingPolicy)

Count = Callable[[str, Frame], None]


class Shedder:
    """Decides, per read, which frames enter the router's queue."""

    def __init__(
        self, config: SheddingConfig, *, count: Count, seed: int = 0, now: float = 0.0
    ) -> None:
        if config.policy not in POLICIES:
            raise ValueError(f"unknown shedding policy {config.policy!r}: one of {POLICIES}")
        self.config = config
        self.policy = config.policy
        self.count = count
        self.random = random.Random(seed)
        self.buckets: dict[int, TokenBucket] = {}
        self.controller = (
            ResponseTimeController(
                config.response_time_target_ms / 1000.0,
                initial_rate=config.response_time_initial_rate,
                min_rate=config.response_time_min_rate,
                max_rate=config.response_time_max_rate,
                additive_increase=config.response_time_additive_increase,
                decrease_factor=config.response_time_decrease_factor,
                samples_per_update=config.response_time_samples,
                interval=config.response_time_interval,
                now=now,
                weights=(
                    (OTHERS, config.weight_others),
                    (LEAF_QUERIES, config.weight_leaf_queries),
                    (QUERIES, config.weight_queries),
                )
                if config.response_time_classes
                else ((QUERIES, 1.0),),
                quality=QualityLevel(
                    config.degrade_ttl_by,
                    recovery=config.degrade_recovery,
                    decrease_factor=config.response_time_decrease_factor,
                )
                if config.degrade_ttl_by
                else None,
            )
            if self.policy == "response-time"
            else None
        )
        """The response-time controller, under that policy; None otherwise."""

    @property
    def waits_at_bound(self) -> bool:
        """Whether a full queue means "stop reading" (else the rest of the read is shed)."""
        return self.policy in ("backpressure", "queries-first", "response-time")

    def forget(self, connection_id: int) -> None:
        self.buckets.pop(connection_id, None)

    def admit(
        self,
        connection_id: int,
        frames: list[Frame],
        queue: StageQueue[Frame],
        now: float,
        *,
        from_leaf: bool = False,
    ) -> list[Frame]:
        """The frames that may be offered to the queue; the others are counted as shed."""
        config = self.config
        if config.rate_limit > 0:
            bucket = self.buckets.get(connection_id)
            if bucket is None:
                bucket = self.buckets[connection_id] = TokenBucket(
                    config.rate_limit, config.rate_burst, now
                )
            granted = bucket.take(len(frames), now)
            if granted < len(frames):
                for frame in frames[granted:]:
                    self.count("shed-rate-limit", frame)
                frames = frames[:granted]
        if self.controller is not None:
            if len(self.controller.classes) > 1:
                return self._class_admission(frames, now, from_leaf)
            return self._admission(frames, now)
        if self.policy == "red":
            return self._red(frames, queue)
        if self.policy == "queries-first":
            return self._queries_first(frames, queue)
        return frames

    def _admission(self, frames: list[Frame], now: float) -> list[Frame]:
        """Queries as far as the response-time controller's bucket lets them in."""
        assert self.controller is not None
        queries = sum(1 for frame in frames if frame.payload_type == MessageType.QUERY)
        if not queries:
            return frames
        refused = queries - self.controller.admit(queries, now)
        if not refused:
            return frames
        kept: list[Frame] = []
        for frame in reversed(frames):  # the latest queries go: the earliest waited longest
            if refused and frame.payload_type == MessageType.QUERY:
                refused -= 1
                self.count("shed-admission", frame)
            else:
                kept.append(frame)
        kept.reverse()
        return kept

    def _class_admission(self, frames: list[Frame], now: float, from_leaf: bool) -> list[Frame]:
        """Every frame through its class's bucket (one read comes from one link, so
        queries are of one class); the latest of a class go first, as above."""
        assert self.controller is not None
        names = [admission_class(frame.payload_type, from_leaf) for frame in frames]
        wanted = collections.Counter(names)
        refused = {
            name: count - self.controller.admit(count, now, name) for name, count in wanted.items()
        }
        if not any(refused.values()):
            return frames
        kept: list[Frame] = []
        for frame, name in zip(reversed(frames), reversed(names), strict=True):
            if refused[name]:
                refused[name] -= 1
                self.count("shed-admission", frame)
            else:
                kept.append(frame)
        kept.reverse()
        return kept

    def shed_rest(self, frames: list[Frame]) -> None:
        """Frames that did not fit under the bound, for the policies that drop them."""
        name = f"shed-{self.policy}"
        for frame in frames:
            self.count(name, frame)

    def _red(self, frames: list[Frame], queue: StageQueue[Frame]) -> list[Frame]:
        config = self.config
        low = config.red_min * queue.threshold
        high = config.red_max * queue.threshold
        length = len(queue)
        if length + len(frames) <= low:
            return frames
        kept: list[Frame] = []
        draw = self.random.random
        for frame in frames:
            position = length + len(kept)
            if position < low:
                kept.append(frame)
                continue
            if position >= high:
                probability = 1.0
            else:
                probability = config.red_max_p * (position - low) / max(1e-9, high - low)
            if draw() < probability:
                self.count("shed-red", frame)
            else:
                kept.append(frame)
        return kept

    def _queries_first(self, frames: list[Frame], queue: StageQueue[Frame]) -> list[Frame]:
        if len(queue) < self.config.queries_first_at * queue.threshold:
            return frames
        kept: list[Frame] = []
        for frame in frames:
            if frame.payload_type == MessageType.QUERY:
                self.count("shed-queries-first", frame)
            else:
                kept.append(frame)
        return kept
