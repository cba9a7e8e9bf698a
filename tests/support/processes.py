"""Routers as real processes, for tests of what a user starts from a shell."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import trio

from gnutella_router.lab.testnet.process import start_router_process
from gnutella_router.lab.testnet.servents import free_router_port

COMMAND = [sys.executable, "-m", "gnutella_router"]


def free_port() -> int:
    """A loopback port for a router, with its default admin port (the next) free too."""
    return free_router_port()


def start(args: list[str], state: Path) -> subprocess.Popen[bytes]:
    """A router process with output on pipes; the caller waits for it as it needs."""
    return start_router_process(state, args).process


async def wait_listening(port: int) -> None:
    with trio.fail_after(15):
        while True:
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
            except OSError:
                await trio.sleep(0.05)
                continue
            await stream.aclose()
            return
