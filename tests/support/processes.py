"""Routers as real processes, for tests of what a user starts from a shell."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import trio

COMMAND = [sys.executable, "-m", "gnutella_router"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start(args: list[str], state: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [*COMMAND, "run", "--state-dir", str(state), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


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
