"""The daemon as a user starts it: a real process, real signals, real exit codes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from protocol.constants import MessageType
from protocol.messages import Bye
from tests.support.peers import Peer
from tests.support.processes import free_port, start, wait_listening

COMMAND = [sys.executable, "-m", "gnutella_router"]


@pytest.mark.e2e
async def test_sigterm_says_bye_and_exits_zero(tmp_path: Path) -> None:
    port = free_port()
    process = start(["--listen", f"127.0.0.1:{port}", "--log-format", "json"], tmp_path)
    try:
        await wait_listening(port, process)
        peer = await Peer.connect(("127.0.0.1", port))
        await trio.sleep(0.2)
        sent_at = time.monotonic()
        process.send_signal(signal.SIGTERM)
        frames = await peer.wait_closed(timeout=5)
        byes = [f.message().payload for f in frames if f.payload_type == MessageType.BYE]
        assert [b.code for b in byes if isinstance(b, Bye)] == [200]
        assert await trio.to_thread.run_sync(process.wait, 5) == 0
        assert time.monotonic() - sent_at < 5
        await peer.aclose()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    _, stderr = process.communicate()
    events = [json.loads(line)["event"] for line in stderr.decode().splitlines() if line]
    assert "router started" in events
    assert "connection closed" in events
    assert events[-1] == "router stopped"
    assert (tmp_path / "hosts.txt").exists()


@pytest.mark.e2e
def test_a_bad_setting_is_named_and_refused(tmp_path: Path) -> None:
    config = tmp_path / "router.toml"
    config.write_text("[network]\nmax_ttl = 99\n")
    result = subprocess.run(
        [*COMMAND, "run", "--config", str(config), "--state-dir", str(tmp_path)],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert b"network.max_ttl" in result.stderr


@pytest.mark.e2e
def test_a_busy_port_is_a_clear_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [*COMMAND, "run", "--listen", f"127.0.0.1:{port}", "--state-dir", str(tmp_path)],
            capture_output=True,
            timeout=30,
            check=False,
        )
    assert result.returncode == 1
    assert b"cannot start" in result.stderr
    assert b"Address already in use" in result.stderr
    assert f"cannot listen on 127.0.0.1:{port} (the node's listener".encode() in result.stderr


@pytest.mark.e2e
def test_a_busy_admin_port_is_named_as_the_admin_interfaces(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "router.toml"
        config.write_text(f'[admin]\nlisten = "127.0.0.1:{port}"\n')
        arguments = ["--state-dir", str(tmp_path), "--log-format", "json", "--config", str(config)]
        result = subprocess.run(
            [*COMMAND, "run", "--listen", "127.0.0.1:0", *arguments],
            capture_output=True,
            timeout=30,
            check=False,
        )
    assert result.returncode == 1
    # In JSON mode even the fatal line is JSON.
    record = json.loads(result.stderr.decode().strip().splitlines()[-1])
    assert record["event"] == "cannot start"
    assert f"cannot listen on 127.0.0.1:{port} (the admin interface" in record["error"]


@pytest.mark.e2e
def test_a_second_router_on_one_state_directory_is_refused(tmp_path: Path) -> None:
    import time

    config = tmp_path / "router.toml"
    config.write_text('[admin]\nlisten = "127.0.0.1:0"\n')
    arguments = ["--listen", "127.0.0.1:0", "--config", str(config)]
    first = start(arguments, tmp_path)
    lock = tmp_path / "router.lock"
    try:
        deadline = time.monotonic() + 15
        while not (lock.exists() and lock.read_text().strip()):
            assert time.monotonic() < deadline, "the first router never locked its directory"
            time.sleep(0.05)
        second = subprocess.run(
            [*COMMAND, "run", *arguments, "--state-dir", str(tmp_path)],
            capture_output=True,
            timeout=30,
            check=False,
        )
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=15)
    assert second.returncode == 1
    assert b"is in use by another router (pid " in second.stderr
    assert str(first.pid).encode() in second.stderr
