"""systemd's notification protocol: the notifier, the watchdog's progress check, and a
router that says READY=1, WATCHDOG=1, RELOADING=1 and STOPPING=1 to a socket of ours."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from gnutella_router.daemon import Daemon
from gnutella_router.runtime.progress import ProgressCheck, StageSample
from gnutella_router.runtime.stage import Stage
from gnutella_router.systemd import Notifier, notify_address
from tests.support.peers import daemon_config
from tests.support.processes import free_port


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    """systemd's side: a datagram socket of ours, and its NOTIFY_SOCKET text."""
    path = tmp_path / "notify"
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(str(path))
    yield receiver, str(path)
    receiver.close()


def received(receiver: socket.socket, timeout: float = 10.0) -> dict[str, str]:
    """The next message, as its KEY=VALUE lines."""
    receiver.settimeout(timeout)
    data = receiver.recv(4096).decode()
    return dict(line.split("=", 1) for line in data.split("\n"))


async def next_with(receiver: socket.socket, key: str, timeout: float = 20.0) -> dict[str, str]:
    """The first message from now that carries ``key`` (others are skipped)."""
    with trio.fail_after(timeout):
        while True:
            message = await trio.to_thread.run_sync(received, receiver, timeout)
            if not key or key in message:
                return message


async def next_stalled(receiver: socket.socket, *, keep_alive_allowed: bool = True) -> str:
    """The next status line that says a stage stalled; with ``keep_alive_allowed``
    false, a keep-alive before it fails the test."""
    while True:
        message = await next_with(receiver, "STATUS" if keep_alive_allowed else "")
        assert keep_alive_allowed or "WATCHDOG" not in message, "a keep-alive while wedged"
        if message.get("STATUS", "").startswith("stalled"):
            return message["STATUS"]


def popen(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A router process of ours, with its output on pipes."""
    return subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


# ---------------------------------------------------------------------- the notifier


def test_addresses_are_paths_or_abstract_names() -> None:
    assert notify_address("/run/systemd/notify") == "/run/systemd/notify"
    assert notify_address("@gnutella/notify") == b"\0gnutella/notify"
    for unusable in ("", "@", "relative/path", "vsock:2:1234"):
        assert notify_address(unusable) is None


def test_the_environment_is_read_once_and_cleared() -> None:
    environ = {"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "42"}
    notifier = Notifier.from_environment(environ, pid=42)
    assert notifier is not None
    assert notifier.watchdog_interval == 15.0  # half of WatchdogSec
    assert environ == {}  # no process this one starts speaks for it
    notifier.close()
    other = Notifier.from_environment(
        {"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "1", "WATCHDOG_PID": "7"}, pid=8
    )
    assert other is not None
    assert other.watchdog_interval is None  # the watchdog is meant for another process
    other.close()
    assert Notifier.from_environment({}) is None
    assert Notifier.from_environment({"WATCHDOG_USEC": "1000000"}) is None


def test_messages_reach_a_socket_by_path(listener: tuple[socket.socket, str]) -> None:
    receiver, path = listener
    notifier = Notifier(path)
    assert notifier.ready("up\nand running")
    assert received(receiver) == {"READY": "1", "STATUS": "up and running"}
    assert notifier.reloading()
    reloading = received(receiver)
    assert reloading["RELOADING"] == "1"
    assert int(reloading["MONOTONIC_USEC"]) > 0
    assert notifier.watchdog()
    assert received(receiver) == {"WATCHDOG": "1"}
    assert notifier.stopping("bye")
    assert received(receiver) == {"STOPPING": "1", "STATUS": "bye"}
    assert notifier.sent == 4
    notifier.close()


def test_messages_reach_an_abstract_socket() -> None:
    name = f"gnutella-router-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(b"\0" + name.encode())
        notifier = Notifier.from_environment({"NOTIFY_SOCKET": f"@{name}"})
        assert notifier is not None
        assert notifier.ready()
        assert received(receiver) == {"READY": "1"}
        notifier.close()


def test_a_socket_nobody_reads_is_counted_not_raised(tmp_path: Path) -> None:
    notifier = Notifier(str(tmp_path / "nobody"))
    assert not notifier.watchdog()
    assert notifier.failed == 1
    assert notifier.last_error
    notifier.close()


# ---------------------------------------------------------------------- progress


def test_a_stage_that_holds_events_and_takes_none_is_stalled() -> None:
    check = ProgressCheck()
    assert check.stalled([StageSample("router", 5, 100, 10)]) == []  # a first look judges nothing
    assert check.stalled([StageSample("router", 5, 120, 11)]) == []  # took some: behind, not stuck
    assert check.stalled([StageSample("router", 0, 120, 11)]) == []  # idle
    assert check.stalled([StageSample("router", 3, 120, 11)]) == []  # new work, just arrived
    stuck = StageSample("router", 3, 120, 11)
    assert check.stalled([stuck]) == [stuck]
    assert check.stalled([StageSample("router", 3, 120, 12)]) == []  # a batch finished


# ---------------------------------------------------------------------- the daemon


async def test_a_router_says_ready_keeps_the_watchdog_fed_and_withholds_it_when_wedged(
    tmp_path: Path, listener: tuple[socket.socket, str]
) -> None:
    receiver, path = listener
    notifier = Notifier(path, watchdog_usec=100_000)
    daemon = Daemon(daemon_config(tmp_path / "node"), notifier=notifier)
    release = trio.Event()

    async def stuck(batch: list[int]) -> None:
        await release.wait()  # a handler that never returns, until released

    wedged: Stage[int] = Stage("wedged", stuck, threshold=10, batch_size=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        ready = await next_with(receiver, "READY")
        assert "peers" in ready["STATUS"]
        assert daemon.admin_address is not None  # READY=1 came with the admin port up
        await next_with(receiver, "WATCHDOG")
        # A stage whose handler never returns, with work waiting behind it.
        daemon.registry.register("wedged", wedged)
        await nursery.start(wedged.serve)
        assert wedged.queue.admit([1, 2, 3]) == 3
        stalled = await next_stalled(receiver)
        assert "stage wedged" in stalled
        # The tick after is withheld too: no keep-alive comes between the two.
        await next_stalled(receiver, keep_alive_allowed=False)
        # Once the stage moves again, so do the keep-alives.
        release.set()
        await next_with(receiver, "WATCHDOG")
        daemon.request_stop()
        stopping = await next_with(receiver, "STOPPING")
        assert stopping["STATUS"].startswith("stopping")
        nursery.cancel_scope.cancel()
    notifier.close()


@pytest.mark.e2e
async def test_a_router_process_notifies_systemd_through_its_life(
    tmp_path: Path, listener: tuple[socket.socket, str]
) -> None:
    receiver, path = listener
    port = free_port()
    config = tmp_path / "router.toml"
    config.write_text(f'[node]\nlisten = "127.0.0.1:{port}"\n[network]\nmax_connections = 32\n')
    env = {
        **os.environ,
        "NOTIFY_SOCKET": path,
        "WATCHDOG_USEC": "200000",
        "PYTHONUNBUFFERED": "1",
    }
    argv = [sys.executable, "-m", "gnutella_router", "run", "--config", str(config)]
    argv += ["--state-dir", str(tmp_path / "state"), "--log-format", "json"]
    process = popen(argv, env)
    try:
        await next_with(receiver, "READY")
        await next_with(receiver, "WATCHDOG")
        # A reload: RELOADING=1, then READY=1 again; the router runs on.
        config.write_text(
            f'[node]\nlisten = "127.0.0.1:{port}"\n[network]\nmax_connections = 8\nmax_ttl = 5\n'
        )
        process.send_signal(signal.SIGHUP)
        await next_with(receiver, "RELOADING")
        await next_with(receiver, "READY")
        await next_with(receiver, "WATCHDOG")
        process.send_signal(signal.SIGTERM)
        await next_with(receiver, "STOPPING")
        assert await trio.to_thread.run_sync(process.wait, 10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    log = process.communicate()[1].decode()
    assert '"event": "configuration reloaded"' in log or '"event":"configuration reloaded"' in log
    assert "network.max_connections" in log
    assert "needs a restart" in log or "need a restart" in log
    assert "network.max_ttl" in log
    assert "router stopped" in log
