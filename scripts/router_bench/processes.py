"""The processes under test: starting a router or the baseline forwarder on a free
loopback port, stopping it, reading its CPU time and resident memory from /proc, and
collecting what went wrong."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gnutella_router.lab.testnet.servents import free_router_port
from router_bench.peers import BenchError

ROOT = Path(__file__).resolve().parents[2]


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time of a process, from /proc/PID/stat."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent busy (not idle or waiting), from /proc/stat."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise BenchError(f"no VmRSS for process {pid}")


def listener_pid(port: int) -> int | None:
    """The process listening on a loopback TCP port, if it is visible to us."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                parts = line.split()
                if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(parts[9])
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return int(proc.name)
    return None


def free_port() -> int:
    """A loopback port for a server, with the next one free too (a router's default
    admin port)."""
    return free_router_port()


_LIVE: set[Server] = set()
"""Servers started and not yet closed, for :func:`kill_live_servers`."""


def kill_live_servers() -> list[int]:
    """SIGKILL every server still running and reap it; their process ids. For a signal
    handler that must end the benchmark at once, wherever it is (an exception raised in
    a handler could land inside trio's own bookkeeping rather than unwind the ``with``
    blocks that stop the servers)."""
    killed = []
    for server in list(_LIVE):
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()
            killed.append(server.pid)
        _LIVE.discard(server)
    return killed


class Server:
    """A server under test running as a child process; killed on exit whatever happens."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        port: int,
        log_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.address = ("127.0.0.1", port)
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, **env} if env else None,
        )
        self.pid = self.process.pid
        _LIVE.add(self)

    def wait_until_accepting(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BenchError(f"{self.name} exited with {self.process.returncode}{self.tail()}")
            with contextlib.suppress(OSError), socket.create_connection(self.address, timeout=1):
                return
            time.sleep(0.05)
        raise BenchError(f"{self.name} did not accept within {timeout:g} s{self.tail()}")

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM and wait; the exit status, or None if it had to be killed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                return None
        return self.process.returncode

    def tail(self, lines: int = 5) -> str:
        self._log.flush()
        with contextlib.suppress(OSError):
            text = self.log_path.read_text(errors="replace").strip().splitlines()[-lines:]
            if text:
                return ":\n    " + "\n    ".join(text)
        return ""

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._log.close()
        _LIVE.discard(self)


@contextlib.contextmanager
def started(
    name: str, argv: list[str], port: int, workdir: Path, env: Mapping[str, str] | None = None
) -> Iterator[Server]:
    """A server running for the ``with`` block; ``env`` adds to this process's environment."""
    server = Server(name, argv, port, workdir / f"{name}-{port}.log", env)
    try:
        server.wait_until_accepting()
        yield server
    finally:
        server.close()


def router_argv(
    port: int,
    state_dir: Path,
    max_connections: int | None,
    extra: Sequence[str] = (),
    network: str = "",
    tables: str = "",
) -> list[str]:
    """The router's command line; ``network`` adds lines to its ``[network]`` table,
    ``tables`` other tables after it. The benchmark's peers are on loopback, a trusted
    network by default, so neither the per-address slot limit nor the per-peer query
    rate (``router.peer_query_rate``) applies to a flood from one source."""
    config = state_dir / f"bench-{port}.toml"
    config.write_text(f"[network]\nconnects_per_ip_per_minute = 100000\n{network}{tables}")
    executable = Path(sys.executable).parent / "gnutella-router"
    command = (
        [str(executable)] if executable.exists() else [sys.executable, "-m", "gnutella_router"]
    )
    argv = [
        *command,
        "run",
        "--listen",
        f"127.0.0.1:{port}",
        "--log-level",
        "warning",
        "--state-dir",
        str(state_dir),
        "--config",
        str(config),
    ]
    if max_connections is not None:
        argv += ["--max-connections", str(max_connections)]
    return [*argv, *extra]


def baseline_argv(port: int) -> list[str]:
    script = ROOT / "scripts" / "baseline_forwarder.py"
    return [sys.executable, str(script), "--listen", f"127.0.0.1:{port}"]


def reference_argv(port: int, writes: str = "per-read") -> list[str]:
    """The naive router (``scripts/reference_router.py``), writing ``per-read`` or
    ``per-message``."""
    script = ROOT / "scripts" / "reference_router.py"
    return [sys.executable, str(script), "--listen", f"127.0.0.1:{port}", "--writes", writes]


@dataclass(frozen=True, slots=True)
class Cpu:
    """Shares of one core used over a window: the server, this client, everything else."""

    server: float | None
    client: float
    others: float | None
    """Other processes on the machine (None when the server's share is unknown)."""


class CpuMeter:
    """Snapshots at the start and end of a timed window."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.start()

    def _read(self) -> tuple[float, float | None, float, float]:
        server = cpu_seconds(self.pid) if self.pid is not None else None
        return time.perf_counter(), server, time.process_time(), machine_busy_seconds()

    def start(self) -> None:
        self._start = self._read()

    def stop(self) -> Cpu:
        (t0, server0, client0, busy0), (t1, server1, client1, busy1) = self._start, self._read()
        elapsed = t1 - t0
        client = (client1 - client0) / elapsed
        if server0 is None or server1 is None:
            return Cpu(None, client, None)
        server = (server1 - server0) / elapsed
        others = max(0.0, (busy1 - busy0) / elapsed - server - client)
        return Cpu(server, client, others)


@dataclass(slots=True)
class Problems:
    """Runs that failed or missed a floor (exit status 1), and runs that needed a retry."""

    failures: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)

    def fail(self, text: str) -> None:
        self.failures.append(text)


def stop_server(server: Server, problems: Problems) -> str:
    """SIGTERM, then the exit status as text; anything but 0 is a failure."""
    status = server.stop()
    text = "killed after 10 s" if status is None else str(status)
    if status != 0:
        problems.fail(f"{server.name} did not exit 0 on SIGTERM ({text})")
        print(f"  {server.name}: exit status {text} after SIGTERM{server.tail()}")
    else:
        print(f"  {server.name}: stopped by SIGTERM, exit status 0")
    return text


def describe_cpu(cpu: Cpu) -> str:
    server = "server CPU n/a" if cpu.server is None else f"server CPU {cpu.server:.0%}"
    others = "" if cpu.others is None else f", other processes {cpu.others:.0%}"
    return f"{server}, client {cpu.client:.0%}{others}"
