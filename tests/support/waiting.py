"""Waiting for a condition in a test, bounded in time."""

from __future__ import annotations

from collections.abc import Callable

import trio

from protocol.framing import Frame


async def wait_until(condition: Callable[[], bool], timeout: float = 3.0) -> None:
    with trio.fail_after(timeout):
        while not condition():
            await trio.sleep(0.01)


def of_type(message_type: int) -> Callable[[Frame], bool]:
    return lambda frame: frame.payload_type == message_type
