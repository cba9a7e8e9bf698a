"""Routers as real processes, for tests of what a user starts from a shell."""

from __future__ import annotations

import os
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


async def wait_listening(port: int, process: subprocess.Popen[bytes] | None = None) -> None:
    """Until something accepts on ``port`` (127.0.0.1); with ``process``, until it is that
    process's own listener. Tests on parallel workers each pick free ports, and a port a
    test's router has let go of (killed between two starts) can be picked by another's:
    a connection alone would then say the router is up while it is still starting, before
    its signal handlers are in place."""
    with trio.fail_after(15):
        while True:
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
            except OSError:
                await trio.sleep(0.05)
                continue
            await stream.aclose()
            if process is None or _listens_on(process.pid, port):
                return
            await trio.sleep(0.05)


def _listens_on(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a socket listening on TCP ``port`` (Linux's /proc;
    elsewhere it says yes)."""
    if not sys.platform.startswith("linux"):
        return True
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(inode)
    try:
        held = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    except OSError:
        return False
    return any(f"socket:[{inode}]" in held for inode in inodes)
