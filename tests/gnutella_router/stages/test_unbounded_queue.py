"""The router queue's bound comes from the configuration; 0 is memory's bound alone."""

from __future__ import annotations

import trio

from gnutella_router.config import load_config
from gnutella_router.config.sections import UNBOUNDED_QUEUE
from gnutella_router.stages.router import GnutellaRouter
from protocol.codec import encode_message
from protocol.framing import Frame, FrameDecoder
from protocol.messages import Ping
from tests.support.links import outbox_over
from tests.support.peers import message

OWN_GUID = bytes(range(16))


def frames(count: int) -> list[Frame]:
    """``count`` copies of one ping frame, as a reader would admit them."""
    (frame,) = FrameDecoder(source=1).receive_data(encode_message(message(Ping(), ttl=2)))
    return [frame] * count


def router(overrides: dict[str, object]) -> GnutellaRouter:
    config = load_config(overrides=overrides)
    return GnutellaRouter(
        config.router,
        outbox=outbox_over(list),
        own_address=lambda: ("192.0.2.1", 6346),
        own_guid=OWN_GUID,
        max_ttl=config.network.max_ttl,
        hard_ttl_limit=config.network.hard_ttl_limit,
        now=trio.current_time(),
    )


async def test_the_default_queue_refuses_past_its_threshold() -> None:
    queue = router({}).stage.queue
    assert queue.admit(frames(5000)) == 1000
    assert queue.refused == 4000


async def test_an_unbounded_experiment_admits_everything() -> None:
    unbounded = router({"router.queue_threshold": 0, "router.unbounded_experiment": True})
    queue = unbounded.stage.queue
    assert queue.threshold == UNBOUNDED_QUEUE
    for _ in range(20):
        assert queue.admit(frames(5000)) == 5000
    assert len(queue) == 100_000
    assert queue.refused == 0
