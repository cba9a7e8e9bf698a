"""The three router processes of a soak: their constants, starting each on free
loopback ports with a configuration of its own (as children of :mod:`scripts.runner`
that do not outlive the soak), stopping them, and the tail of a log for an error
message.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from pathlib import Path

from gnutella_router.observe.admin_client import FetchError, fetch
from scripts.runner import RunError, Server, router_command, stop_all

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
    process: Server | None = None
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

    @property
    def exit_status(self) -> int | None:
        """Once stopped: its exit status (None if it had to be killed)."""
        return None if self.process is None else self.process.exit_status

    @property
    def killed(self) -> bool:
        """Whether it was killed after the grace period rather than exiting."""
        return self.process is not None and self.process.killed

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()


def start_router(router: Router, peers: Sequence[Router], workdir: Path) -> None:
    """Start ``router`` (dialling ``peers``) and return once its admin interface answers.

    It runs in a session of its own (a Ctrl-C in the terminal reaches the soak, which
    stops the routers in order) and hears SIGHUP if the soak dies without stopping it,
    so none outlives it."""
    config = workdir / f"{router.name}.toml"
    config.write_text(
        "# Written by scripts/soak.py: the admin interface on a port of its own, and\n"
        "# no dialling beyond the seeds given on the command line.\n"
        f'[admin]\nlisten = "{LOOPBACK}:{router.admin_port}"\n\n'
        f"[catcher]\nmin_connections = {len(router.seeds)}\n"
    )
    router.state_dir.mkdir(parents=True)
    arguments = ["--config", str(config), "--listen", f"{LOOPBACK}:{router.port}"]
    arguments += ["--log-format", "json"]
    for peer in peers:
        arguments += ["--seed", f"{LOOPBACK}:{peer.port}"]
    router.process = Server(
        router.name,
        router_command(router.state_dir, *arguments),
        router.port,
        router.log_path,
        env={"PYTHONUNBUFFERED": "1"},
        own_session=True,
        die_with_parent=True,
    )
    # Ready once the admin interface answers: the router starts it after its listener,
    # and asking it costs no peer slot (a bare connect to the peer port would be
    # counted, and logged, as a broken handshake).
    try:
        router.process.wait_until(lambda: _answers(router.admin), START_TIMEOUT, "answer")
    except RunError as exc:
        raise SoakError(str(exc)) from None


def _answers(admin: tuple[str, int]) -> bool:
    try:
        fetch(admin, "/healthz", timeout=1.0)
    except FetchError:
        return False
    return True


def stop_routers(routers: Sequence[Router], grace: float = STOP_GRACE) -> None:
    """SIGTERM to every router still running, wait up to ``grace`` s, then SIGKILL.

    Safe to call twice and on routers never started; an interruption while waiting
    kills the rest at once before it goes on, so nothing is left running.
    """
    stop_all([r.process for r in routers if r.process is not None], grace)


def log_tail(path: Path, lines: int = 5) -> str:
    with contextlib.suppress(OSError):
        text = path.read_text(errors="replace").strip().splitlines()[-lines:]
        if text:
            return ":\n    " + "\n    ".join(text)
    return ""
