"""scripts/gtk-servent.sh keeps its contract: configuration written, a ``ready:`` line once
its servent listens, a clean shutdown through the servent's shell on SIGTERM and when
its parent dies, and its stats command (the servent's drop counters).

gtk-gnutella itself is not on CI machines, so a stand-in plays its part: a small program
that reads the same ``config_gnet``, listens where it says, writes the same pid file
and answers ``--shell`` over the same local socket. What is checked is the wrapper's
side of the contract, not gtk-gnutella's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gnutella_router.lab.testnet.servent_stats import drop_counters, stats_command
from tests.support.processes import free_port

WRAPPER = Path(__file__).resolve().parents[2] / "scripts" / "gtk-servent.sh"
SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "gtk-gnutella-1.2.3-stats-drop.txt"

STAND_IN = """\
import os, selectors, signal, socket, sys
home = os.environ["GTK_GNUTELLA_DIR"]
log = open(os.path.join(home, "stand-in.log"), "a", buffering=1)
path = os.path.join(home, "ipc", "socket")
if "--shell" in sys.argv:
    with socket.socket(socket.AF_UNIX) as shell:
        shell.connect(path)
        shell.sendall(sys.stdin.buffer.read())
        shell.shutdown(socket.SHUT_WR)
        sys.stdout.write(shell.makefile().read())
    sys.exit(0)
log.write("started " + " ".join(sys.argv[1:]) + "\\n")
config = dict(
    line.split(" = ", 1) for line in open(os.path.join(home, "config_gnet")).read().splitlines()
    if " = " in line
)
signal.signal(signal.SIGTERM, lambda *_: (log.write("SIGTERM\\n"), sys.exit(0)))
listener = socket.create_server((config["forced_local_ip"].strip('"'), int(config["listen_port"])))
os.makedirs(os.path.dirname(path), exist_ok=True)
local = socket.socket(socket.AF_UNIX)
local.bind(path)
local.listen()
open(os.path.join(home, "gtk-gnutella.pid"), "w").write(str(os.getpid()))
events = selectors.DefaultSelector()
events.register(listener, selectors.EVENT_READ)
events.register(local, selectors.EVENT_READ)
while True:
    for key, _ in events.select():
        connection, _ = key.fileobj.accept()
        if key.fileobj is listener:
            connection.close()
            continue
        command = connection.makefile().read().strip()
        sample = os.path.join(home, "stats-drop.sample")
        if command == "stats drop" and os.path.exists(sample):
            connection.sendall(open(sample, "rb").read())
        else:
            connection.sendall(f"100 {command}\\n".encode())
        connection.close()
        log.write(f"shell: {command}\\n")
        if command == "shutdown":
            os.unlink(os.path.join(home, "gtk-gnutella.pid"))
            sys.exit(0)
"""


@pytest.fixture
def stand_in(tmp_path: Path) -> Path:
    program = tmp_path / "gtk-gnutella"
    program.write_text(f"#!{sys.executable}\n{STAND_IN}")
    program.chmod(0o755)
    return program


def environment(binary: Path, **more: str) -> dict[str, str]:
    return {
        **os.environ,
        "GTK_GNUTELLA_BINARY": str(binary),
        "GTK_GNUTELLA_USER": "-",
        "GTK_GNUTELLA_START_TIMEOUT": "20",
        **more,
    }


@pytest.fixture
def servent(stand_in: Path, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path, int]]:
    port = free_port()
    folder = tmp_path / "node"
    process = subprocess.Popen(
        [str(WRAPPER), str(port), str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment(stand_in),
        start_new_session=True,
    )
    try:
        yield process, folder, port
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate(timeout=10)


def _ready(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    return process.stdout.readline()


def _gone(pid: int, within: float = 15.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


@pytest.mark.e2e
def test_it_configures_announces_and_stops_its_servent_cleanly(
    servent: tuple[subprocess.Popen[str], Path, int], stand_in: Path
) -> None:
    process, folder, port = servent
    line = _ready(process)
    assert line.startswith("ready: gtk-gnutella pid ")
    assert f" listening on 127.0.0.1:{port}; stats: " in line
    pid = int(line.split()[3])
    assert pid == int((folder / "gtk-gnutella.pid").read_text())
    config = (folder / "config_gnet").read_text()
    for setting in (
        f"listen_port = {port}",
        'forced_local_ip = "127.0.0.1"',
        "bind_to_forced_local_ip = TRUE",
        "configured_peermode = 2",
        "stop_host_get = TRUE",
        "enable_udp = FALSE",
        "prefer_compressed_gnet = FALSE",
        "enable_local_socket = TRUE",
        f'shared_dirs = "{folder / "share"}"',
    ):
        assert setting in config.splitlines(), setting
    assert (folder / "whitelist").read_text() == "127.0.0.1\n"
    assert "--topless" in (folder / "stand-in.log").read_text()

    shell = subprocess.run(
        [str(WRAPPER), "shell", str(folder), "stats drop"],
        capture_output=True,
        text=True,
        env=environment(stand_in),
        timeout=20,
        check=False,
    )
    assert shell.stdout == "100 stats drop\n", shell.stderr
    # The stats command the ready line offers: the servent's counters, or a clear no.
    command = stats_command(line)
    assert command is not None
    refused = subprocess.run(command, capture_output=True, text=True, timeout=20, check=False)
    assert refused.returncode == 1
    assert "no drop counters from the servent" in refused.stderr
    (folder / "stats-drop.sample").write_text(SAMPLE.read_text())
    stats = subprocess.run(command, capture_output=True, text=True, timeout=20, check=False)
    assert stats.returncode == 0, stats.stderr
    assert drop_counters(stats.stdout) == drop_counters(SAMPLE.read_text())

    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    assert _gone(pid)
    assert "shell: shutdown" in (folder / "stand-in.log").read_text()  # not a kill


@pytest.mark.e2e
def test_it_stops_its_servent_when_its_parent_dies(stand_in: Path, tmp_path: Path) -> None:
    folder = tmp_path / "orphaned"
    parent = subprocess.Popen(
        ["bash", "-c", f'"{WRAPPER}" {free_port()} "{folder}" & wait'],
        stdout=subprocess.PIPE,
        text=True,
        env=environment(stand_in),
        start_new_session=True,
    )
    try:
        line = _ready(parent)  # the wrapper's, through its parent's stdout
        assert line.startswith("ready:")
        pid = int(line.split()[3])
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        assert _gone(pid), "the servent outlived its wrapper's parent"
        assert "shell: shutdown" in (folder / "stand-in.log").read_text()
    finally:
        parent.kill()
        parent.communicate(timeout=10)
        with_pid = folder / "gtk-gnutella.pid"
        if with_pid.exists():  # a failed run must not leave the stand-in behind
            os.kill(int(with_pid.read_text()), signal.SIGKILL)


@pytest.mark.e2e
def test_a_configuration_written_first_is_kept(stand_in: Path, tmp_path: Path) -> None:
    folder = tmp_path / "leaf"
    folder.mkdir()
    port = free_port()
    mine = f'listen_port = {port}\nforced_local_ip = "127.0.0.1"\nconfigured_peermode = 0\n'
    (folder / "config_gnet").write_text(mine)
    process = subprocess.Popen(
        [str(WRAPPER), str(port), str(folder)],
        stdout=subprocess.PIPE,
        text=True,
        env=environment(stand_in),
        start_new_session=True,
    )
    try:
        assert _ready(process).startswith("ready:")
        assert (folder / "config_gnet").read_text() == mine
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    assert process.returncode == 0


@pytest.mark.e2e
def test_a_servent_that_exits_or_never_listens_is_a_clear_failure(tmp_path: Path) -> None:
    quits = subprocess.run(
        [str(WRAPPER), str(free_port()), str(tmp_path / "a")],
        capture_output=True,
        text=True,
        env=environment(Path("/bin/false")),
        timeout=30,
        check=False,
    )
    assert quits.returncode == 1
    assert "exited (status 1) before it listened" in quits.stderr
    assert "ready:" not in quits.stdout
    silent = tmp_path / "silent"
    silent.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(60)\n")
    silent.chmod(0o755)
    started = time.monotonic()
    waits = subprocess.run(
        [str(WRAPPER), str(free_port()), str(tmp_path / "b")],
        capture_output=True,
        text=True,
        env=environment(silent, GTK_GNUTELLA_START_TIMEOUT="1"),
        timeout=30,
        check=False,
    )
    assert waits.returncode == 1
    assert "did not listen on 127.0.0.1:" in waits.stderr
    assert time.monotonic() - started < 15
    # The servent that never listened is gone with the wrapper, not left running.
    left = subprocess.run(["pgrep", "-f", str(silent)], capture_output=True, check=False)
    assert left.stdout == b""


def test_bad_arguments_are_refused(stand_in: Path, tmp_path: Path) -> None:
    for argv in ([], ["notaport", str(tmp_path)], ["1", "2", "3", "4"], ["stats"]):
        done = subprocess.run(
            [str(WRAPPER), *argv],
            capture_output=True,
            text=True,
            env=environment(stand_in),
            timeout=10,
            check=False,
        )
        assert done.returncode == 2, argv
    missing = subprocess.run(
        [str(WRAPPER), "1", str(tmp_path)],
        capture_output=True,
        text=True,
        env={**environment(stand_in), "GTK_GNUTELLA_BINARY": str(tmp_path / "none")},
        timeout=10,
        check=False,
    )
    assert missing.returncode == 1
    assert "no gtk-gnutella binary" in missing.stderr
