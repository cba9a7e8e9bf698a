"""Ctrl-C for the traffic commands: the first asks for a partial report, the second quits.

A load run or a replay that is interrupted should still say what it measured: the first
SIGINT calls the command's ``stop`` (which ends the sending and lets the report be
made), the second ends the process at once with status 130, the shell's code for an
interrupt. Commands return :data:`INTERRUPTED` when they stopped early.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

INTERRUPTED = 130
"""Exit status of a command stopped by Ctrl-C (128 + SIGINT)."""

T = TypeVar("T")


async def run_interruptible(
    work: Callable[[], Awaitable[T]], stop: Callable[[], None], *, command: str
) -> T:
    """Run ``work``; on the first SIGINT call ``stop``, on the second exit at once.

    Signals reach only the main thread: elsewhere (a command run from a worker thread,
    as tests do) ``work`` simply runs.
    """
    if threading.current_thread() is not threading.main_thread():
        return await work()
    failure: Exception | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch, stop, command)
        try:
            result = await work()
        except Exception as exc:
            # Raised as itself, not inside the nursery's exception group, so that the
            # command's own error handling sees the error it knows.
            failure = exc
        nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return result


async def _watch(stop: Callable[[], None], command: str) -> None:
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        seen = 0
        async for _ in signals:
            seen += 1
            if seen == 1:
                print(
                    f"\n{command}: stopping; a partial report follows (Ctrl-C again to quit)",
                    file=sys.stderr,
                    flush=True,
                )
                stop()
            else:
                print(f"{command}: quit", file=sys.stderr, flush=True)
                os._exit(INTERRUPTED)
