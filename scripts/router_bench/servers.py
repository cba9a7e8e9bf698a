"""The servers under test as the benchmarks see them: the CPU each used in a timed
window beside the client's and the rest of the machine's, the runs that failed, and
stopping a server with its exit status judged."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from scripts.runner import Server, cpu_seconds, machine_busy_seconds


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
    status = server.stop(10.0)
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
