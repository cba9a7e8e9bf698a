"""The router stage's door: one read's frames into its bounded queue.

Every connection's reader hands the frames of each read to the :class:`Door` itself
(the server gives the door's :meth:`Door.admit` to every connection it runs), so a
message reaches the router's code first when a stage worker takes it from the queue.

Every frame handed over is either admitted, shed by the shedding policy (and counted by
it), or, when the connection closes while it waits, dropped and counted as
``connection-closing``; each is reported done to its link (the link of a peer that hung
up closes once all are). When the queue is full, :meth:`Door.admit` waits, and that
stops the connection's reader: the peer's TCP window closes, which is backpressure
instead of loss or unbounded memory (unless the policy sheds at the bound instead).
"""

from __future__ import annotations

import collections

import trio

from gnutella_router.control.shedding import Shedder
from gnutella_router.routing.link import Link
from gnutella_router.runtime.stage_queue import StageQueue
from protocol.framing import Frame


class Door:
    """What stands between the readers and the router stage's queue: the queue, the
    shedding policy (None: nothing is shed, the reader waits) and the router's drop
    counts, by reason and message type."""

    __slots__ = ("dropped", "queue", "shedder")

    def __init__(
        self,
        queue: StageQueue[Frame],
        shedder: Shedder | None,
        dropped: collections.Counter[tuple[str, int]],
    ) -> None:
        self.queue = queue
        self.shedder = shedder
        self.dropped = dropped

    async def admit(self, link: Link, frames: list[Frame]) -> None:
        """Admit ``frames`` of ``link`` into the queue, waiting while it is full."""
        queue = self.queue
        shedder = self.shedder
        if shedder is not None:
            offered = len(frames)
            frames = shedder.admit(
                link.id,
                frames,
                queue,
                trio.current_time(),
                from_leaf=link.capabilities.ultrapeer is False,
            )
            if len(frames) < offered:
                link.frames_done(offered - len(frames))
        admitted = queue.admit(frames)
        while admitted < len(frames):
            if shedder is not None and not shedder.waits_at_bound:
                shedder.shed_rest(frames[admitted:])
                link.frames_done(len(frames) - admitted)
                return
            await queue.wait_for_space()
            if link.closing:
                dropped = self.dropped
                for frame in frames[admitted:]:
                    dropped["connection-closing", frame.payload_type] += 1
                link.frames_done(len(frames) - admitted)
                return
            frames = frames[admitted:]
            admitted = queue.admit(frames)
