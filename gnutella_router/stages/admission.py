"""The router stage's door: one read's frames into its bounded queue.

Every frame a reader hands over is either admitted, shed by the shedding policy (and
counted by it), or, when the connection closes while it waits, dropped and counted as
``connection-closing``; each is reported done to its link (the link of a peer that hung
up closes once all are). When the queue is full, ``admit`` waits, and that stops the
connection's reader: the peer's TCP window closes, which is backpressure instead of loss
or unbounded memory (unless the policy sheds at the bound instead).
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from gnutella_router.control.shedding import Shedder
from gnutella_router.routing.link import Link
from gnutella_router.runtime.stage_queue import StageQueue
from protocol.framing import Frame


async def admit(
    queue: StageQueue[Frame],
    shedder: Shedder | None,
    link: Link,
    frames: list[Frame],
    drop: Callable[[str, list[Frame]], None],
) -> None:
    """Admit ``frames`` of ``link`` into ``queue``, waiting while it is full."""
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
            drop("connection-closing", frames[admitted:])
            link.frames_done(len(frames) - admitted)
            return
        frames = frames[admitted:]
        admitted = queue.admit(frames)
