"""The scripts' one runner: every child it starts is stopped or killed on every way out
of its block, with its group when it has a session of its own; an interrupt that comes
while a child is being started is delivered once it is registered; a load that fails
says so."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from scripts import runner
from scripts.runner import Child, RunError, Server, started, stop_all

SLEEPER = "import time; time.sleep(60)"
DEAF = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('deaf', flush=True); time.sleep(60)"
)
"""A child that ignores SIGTERM (it says so once it does)."""


def listener(port: int) -> list[str]:
    return [
        sys.executable,
        "-c",
        "import socket, time; s = socket.socket(); "
        f"s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(60)",
    ]


def gone(pid: int, within: float = 10.0) -> bool:
    """Whether process ``pid`` no longer exists (a grandchild is reaped by init, so
    this waits for that, up to ``within`` seconds)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


def wait_for_line(child: Child, text: str) -> None:
    child.wait_until(lambda: text in child.log_path.read_text(), 10, f"say {text!r}")


def test_a_server_is_killed_when_its_block_ends_by_an_exception(tmp_path: Path) -> None:
    port = runner.free_port()
    servers: list[Server] = []

    def failing_run() -> None:
        with started("listener", listener(port), port, tmp_path) as server:
            servers.append(server)
            raise ValueError("a failed run")

    with pytest.raises(ValueError, match="a failed run"):
        failing_run()
    assert servers[0].killed
    assert not servers[0].alive()
    assert runner.kill_live() == []  # nothing left registered


def test_a_server_that_exits_at_start_is_reported_with_its_log(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "print('cannot listen'); raise SystemExit(3)"]
    port = runner.free_port()
    with (
        pytest.raises(RunError, match=r"exited with 3:\n    cannot listen"),
        started("broken", argv, port, tmp_path),
    ):
        pass


def test_stop_kills_a_child_that_ignores_sigterm_after_its_grace(tmp_path: Path) -> None:
    child = Child("deaf", [sys.executable, "-c", DEAF], tmp_path / "deaf.log")
    try:
        wait_for_line(child, "deaf")
        assert child.stop(grace=0.2) is None
        assert child.killed
        assert child.exit_status is None
    finally:
        child.close()


def test_stop_all_stops_the_willing_and_kills_the_rest(tmp_path: Path) -> None:
    willing = Child("willing", [sys.executable, "-c", SLEEPER], tmp_path / "willing.log")
    deaf = Child("deaf", [sys.executable, "-c", DEAF], tmp_path / "deaf.log")
    wait_for_line(deaf, "deaf")
    stop_all([willing, deaf], grace=0.5)
    assert (willing.killed, willing.exit_status) == (False, -signal.SIGTERM)
    assert (deaf.killed, deaf.exit_status) == (True, None)
    assert runner.kill_live() == []


def test_a_child_with_a_session_of_its_own_takes_what_it_started_with_it(
    tmp_path: Path,
) -> None:
    spawner = (
        "import subprocess, sys, time; "
        f"p = subprocess.Popen([sys.executable, '-c', {SLEEPER!r}]); "
        "print('grandchild', p.pid, flush=True); time.sleep(60)"
    )
    child = Child("spawner", [sys.executable, "-c", spawner], tmp_path / "s.log", own_session=True)
    try:
        wait_for_line(child, "grandchild")
        grandchild = int(child.log_path.read_text().split()[1])
    finally:
        child.close()
    assert gone(grandchild)


def test_kill_live_kills_every_child_still_running(tmp_path: Path) -> None:
    children = [
        Child(f"c{n}", [sys.executable, "-c", SLEEPER], tmp_path / f"c{n}.log") for n in range(2)
    ]
    assert sorted(runner.kill_live()) == sorted(c.pid for c in children)
    assert not any(c.alive() for c in children)


def test_an_interrupt_while_a_child_starts_comes_once_it_is_registered() -> None:
    reached: list[str] = []

    def starting() -> None:
        with runner.interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)  # delivered at once, it would have raised here
            reached.append("the end of the block")

    with pytest.raises(KeyboardInterrupt):
        starting()
    assert reached == ["the end of the block"]


def test_the_servers_address_is_its_loopback_port(tmp_path: Path) -> None:
    port = runner.free_port()
    server = Server("listener", listener(port), port, tmp_path / "l.log")
    try:
        server.wait_until_accepting()
        assert server.address == ("127.0.0.1", port)
        assert runner.listener_pid(port) == server.pid
    finally:
        server.close()


def test_a_load_process_that_fails_raises_and_one_that_ends_gives_its_output() -> None:
    ok = [sys.executable, "-c", "print('done')"]
    assert trio.run(runner.run_to_end, ok, "a load") == "done\n"
    failing = [sys.executable, "-c", "raise SystemExit(3)"]
    with pytest.raises(RunError, match=r"a load failed \(exit status 3\)"):
        trio.run(runner.run_to_end, failing, "a load")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_script_killed_outright_leaves_no_child_running(tmp_path: Path) -> None:
    """A script that dies without stopping its children (SIGKILL here, or a SIGTERM it
    does not catch) takes them with it: each hears SIGHUP when its parent dies."""
    pid_file = tmp_path / "child.pid"
    script = (
        "from pathlib import Path; import sys, time; from scripts.runner import Child; "
        f"child = Child('sleeper', [sys.executable, '-c', {SLEEPER!r}], "
        f"Path({str(tmp_path / 'c.log')!r})); "
        f"Path({str(pid_file)!r}).write_text(str(child.pid)); time.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 20
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline, "the script never started its child"
            time.sleep(0.05)
        child_pid = int(pid_file.read_text())
        assert not gone(child_pid, within=0.2)
    finally:
        parent.kill()
        parent.wait()
    try:
        assert gone(child_pid)
    finally:
        if not gone(child_pid, within=0.05):  # when it failed: no sleeper left behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(child_pid, signal.SIGKILL)
