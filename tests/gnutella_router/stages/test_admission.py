"""The router stage's door: what a reader's frames become when the queue is full."""

from __future__ import annotations

import collections

import trio
import trio.testing

from gnutella_router.config.sections import SheddingConfig
from gnutella_router.control.shedding import Shedder
from gnutella_router.runtime.stage_queue import StageQueue
from gnutella_router.stages.admission import Door
from protocol.codec import encode_message
from protocol.constants import MessageType
from protocol.framing import Frame, FrameDecoder
from protocol.messages import Query
from tests.support.links import FakeLink, message


def queries(count: int) -> list[Frame]:
    data = b"".join(encode_message(message(Query(b"q"), ttl=3)) for _ in range(count))
    return FrameDecoder(source=1).receive_data(data)


def door(threshold: int, shedder: Shedder | None = None) -> Door:
    return Door(StageQueue("router", threshold), shedder, collections.Counter())


async def test_frames_that_fit_are_admitted_at_once() -> None:
    entrance = door(10)
    link = FakeLink(1)
    with trio.fail_after(1):
        await entrance.admit(link, queries(4))
    assert len(entrance.queue) == 4
    assert link.done == 0  # owed back by the router, once it has routed them


async def test_a_full_queue_holds_the_reader_until_a_worker_makes_room() -> None:
    entrance = door(3)
    link = FakeLink(1)
    frames = queries(5)
    admitted = trio.Event()

    async def read() -> None:
        await entrance.admit(link, frames)
        admitted.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        await trio.testing.wait_all_tasks_blocked()
        assert not admitted.is_set()  # backpressure: the reader waits
        assert entrance.queue.take(3) == frames[:3]
        await admitted.wait()
    assert entrance.queue.take(3) == frames[3:]
    assert not entrance.dropped


async def test_what_waits_when_the_link_closes_is_dropped_and_done() -> None:
    entrance = door(3)
    link = FakeLink(1)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(entrance.admit, link, queries(5))
        await trio.testing.wait_all_tasks_blocked()
        link.close("gone")
        entrance.queue.take(1)
    assert entrance.dropped == {("connection-closing", MessageType.QUERY): 2}
    assert link.done == 2
    assert len(entrance.queue) == 2


async def test_a_policy_that_sheds_at_the_bound_never_waits() -> None:
    shed: collections.Counter[str] = collections.Counter()
    shedder = Shedder(
        SheddingConfig(policy="drop-tail"), count=lambda reason, frame: shed.update([reason])
    )
    entrance = door(3, shedder)
    link = FakeLink(1)
    with trio.fail_after(1):
        await entrance.admit(link, queries(5))
    assert len(entrance.queue) == 3
    assert shed == {"shed-drop-tail": 2}
    assert link.done == 2
