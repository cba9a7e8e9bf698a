"""The three router processes of a soak: their constants, starting each on free
loopback ports with a configuration of its own (and with the soak as its parent, so that
none outlives it), stopping them, and the tail of a log for an error message.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from gnutella_router.observe.admin_client import FetchError, fetch

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = "127.0.0.1"
ROUTERS = 3
TOPOLOGIES: dict[str, tuple[tuple[int, ...], ...]] = {
    # Seeds of each router (indices of the routers it dials).
    "line": ((), (0,), (1,)),
    "triangle": ((), (0,), (0, 1)),
}
INJECTOR_ROUTERS = (0, 2)
SINK_ROUTERS = (0, 1, 2)
"""One sink on every router, so each injector has exactly one sink beside it: every
ping is then owed to exactly one sink whichever injector sent it."""
START_TIMEOUT = 30.0
FORM_TIMEOUT = 30.0
SETTLE_TIMEOUT = 10.0
STOP_GRACE = 15.0
ADMIN_TIMEOUT = 5.0
WINDOW_SECONDS = 60.0
"""The minute whose samples' median stands for "at minute 5" and "at the end"."""
PR_SET_PDEATHSIG = 1


class SoakError(Exception):
    """The network could not be started or formed, or the load client could not connect."""


# --------------------------------------------------------------------------- processes


@dataclasses.dataclass(slots=True)
class Router:
    """One ``gnutella-router run`` child and where to reach it."""

    name: str
    port: int
    admin_port: int
    seeds: tuple[int, ...]
    state_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    exit_status: int | None = None
    killed: bool = False
    died_at: float | None = None
    """perf_counter() when a sample first found it gone before we stopped it."""

    @property
    def address(self) -> tuple[str, int]:
        return (LOOPBACK, self.port)

    @property
    def admin(self) -> tuple[str, int]:
        return (LOOPBACK, self.admin_port)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


def free_ports(count: int) -> list[int]:
    """Ports the system hands out as free, all bound at once so they differ."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((LOOPBACK, 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _die_with_parent(parent: int) -> Callable[[], None]:
    """Runs in the child before exec: the kernel sends it SIGTERM when this script's
    main thread ends, however it ends (even SIGKILL), so no router is left behind."""

    def prepare() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return prepare


def start_router(router: Router, peers: Sequence[Router], workdir: Path) -> None:
    """Start ``router`` (dialling ``peers``) and return once its admin interface answers."""
    config = workdir / f"{router.name}.toml"
    config.write_text(
        "# Written by scripts/soak.py: the admin interface on a port of its own, and\n"
        "# no dialling beyond the seeds given on the command line.\n"
        f'[admin]\nlisten = "{LOOPBACK}:{router.admin_port}"\n\n'
        f"[catcher]\nmin_connections = {len(router.seeds)}\n"
    )
    router.state_dir.mkdir(parents=True)
    argv = [sys.executable, "-m", "gnutella_router", "run", "--config", str(config)]
    argv += ["--listen", f"{LOOPBACK}:{router.port}", "--state-dir", str(router.state_dir)]
    argv += ["--log-format", "json"]
    for peer in peers:
        argv += ["--seed", f"{LOOPBACK}:{peer.port}"]
    with router.log_path.open("wb") as log:
        router.process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
            preexec_fn=_die_with_parent(os.getpid()),
        )
    # Ready once the admin interface answers: the router starts it after its listener,
    # and asking it costs no peer slot (a bare connect to the peer port would be
    # counted, and logged, as a broken handshake).
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if not router.alive():
            raise SoakError(f"{router.name} exited at start{log_tail(router.log_path)}")
        try:
            fetch(router.admin, "/healthz", timeout=1.0)
            return
        except FetchError:
            if time.monotonic() > deadline:
                raise SoakError(
                    f"{router.name} did not answer within {START_TIMEOUT:g} s"
                    f"{log_tail(router.log_path)}"
                ) from None
            time.sleep(0.05)


def stop_routers(routers: Sequence[Router], grace: float = STOP_GRACE) -> None:
    """SIGTERM to every router still running, wait up to ``grace`` s, then SIGKILL.

    Safe to call twice and on routers never started; an interruption while waiting
    kills the rest at once before it goes on, so nothing is left running.
    """
    running = [r for r in routers if r.process is not None and r.process.returncode is None]
    try:
        for router in running:
            assert router.process is not None
            if router.process.poll() is None:
                router.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for router in running:
            assert router.process is not None
            try:
                router.exit_status = router.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                router.process.kill()
                router.process.wait()
                router.killed = True
    finally:
        for router in running:
            assert router.process is not None
            if router.process.poll() is None:
                router.process.kill()
                router.process.wait()
                router.killed = True


def log_tail(path: Path, lines: int = 5) -> str:
    with contextlib.suppress(OSError):
        text = path.read_text(errors="replace").strip().splitlines()[-lines:]
        if text:
            return ":\n    " + "\n    ".join(text)
    return ""
