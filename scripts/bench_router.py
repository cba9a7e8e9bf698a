"""Benchmark the router over loopback TCP: throughput, latency, memory per connection.

Run from the repository root, in the project's virtual environment:

    python scripts/bench_router.py            # print the figures
    python scripts/bench_router.py --write    # also update docs/benchmarks.md
    python scripts/bench_router.py --target 127.0.0.1:6346   # a router already running

What is measured, and why:

1. Throughput. The router runs in its own process (started here on a free loopback
   port, with a fresh state directory). This process connects one source peer and
   three sink peers, each an ultrapeer doing the 0.6 handshake. The source writes the
   paper's load, 85 % pings and 15 % queries (TTL 2, hops 0, each GUID unique), as
   fast as the router takes them, from pre-encoded 64 KiB chunks; the router forwards
   each message once to every sink (TTL 1, hops 1) and answers each ping with a pong,
   which the source reads and throws away. Pings carry a small GGEP block so that
   pings and queries are the same size on the wire and the sinks only have to count
   bytes. The figure is the messages per second each sink receives over a steady
   window after a warm-up: the router's forwarding rate per destination.
2. Latency at a fixed offered rate (10,000 messages/s by default, sent in bursts every
   millisecond). Bytes 0-7 of each GUID hold the send time (``perf_counter_ns``,
   big-endian); one sink frames what it receives and records arrival minus send time
   in an HDR histogram, while the other two only count bytes (all three paths through
   the router are alike, and three timestamping sinks in one process would delay each
   other's wake-ups). One hop, client to router to client, including the client's own
   wake-ups (the baseline's figures bound that share). These runs follow the
   throughput runs on the same server process, so the router's route and duplicate
   tables are full, as on a busy node.
3. Memory per idle connection: the router's resident set size (``VmRSS``) before and
   after 1,000 idle connections are opened and seen to be served, divided by 1,000.
4. Side by side: the same throughput and latency runs (and the memory run) against
   ``scripts/baseline_forwarder.py``, a plain asyncio forwarder, interleaved with the
   router's runs in the same invocation, so the ratio holds on a noisy machine.

Every figure is the median of several runs. The router routes on one thread; this
client is another process, so on a two-core machine each can have a core. The client
does no per-message work on the throughput path (it counts bytes), and the CPU used in
each timed window by the server, by the client and by every other process on the
machine is reported, so a reader can see which side was the limit and whether the
machine was shared. A run that fails (a connection closed, a phase over its time limit)
is run once more; the reason is printed either way.

Flags: ``--repeats`` (runs per figure, 3), ``--duration`` (throughput window, 3 s),
``--latency-duration`` (5 s), ``--warmup`` (1 s), ``--rate`` (10,000 msgs/s),
``--connections`` (1,000), ``--skip-baseline``, ``--skip-memory``, ``--write``.

The peers announce ``User-Agent``, ``X-Ultrapeer: True``, ``Bye-Packet`` and a GUID, and
neither ``Pong-Caching`` (a caching peer's pings are answered from the cache and not
broadcast) nor ``Accept-Encoding`` (no deflate). All 1,000 memory-run connections come
from 127.0.0.1, so the router started here gets a configuration file that lifts its
per-IP limit on connection attempts (60 a minute by default); nothing else is changed
from the defaults except ``--max-connections`` (1,100 for 1,000 connections) for the
memory run.

``--router-arg ARG`` (repeatable) passes ARG to the router started here, e.g.
``--router-arg=--record=/tmp/bench.trace`` to measure the cost of recording a trace.

``--target HOST:PORT`` (loopback only) measures a router that is already running, for
throughput and latency only; the baseline still runs beside it unless
``--skip-baseline``. Exit status 1 when a floor is missed or a run failed.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import ipaddress
import itertools
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TypeVar

import trio
from hdrh.histogram import HdrHistogram

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gnutella_router.net.handshaking import next_handshake_event
from protocol.codec import encode_message
from protocol.constants import HEADER_SIZE, MessageType
from protocol.errors import RemoteProtocolError
from protocol.framing import FrameDecoder
from protocol.ggep import GGEPBlock, GGEPExtension
from protocol.handshake import (
    HandshakeComplete,
    HandshakeEvent,
    HandshakeRejected,
    HandshakeResponse,
    Initiator,
)
from protocol.header import HEADER_STRUCT
from protocol.messages import Message, Ping, Query, random_guid

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdocs import machine, replace_section

ROOT = Path(__file__).resolve().parent.parent

THROUGHPUT_FLOOR = 250_000
"""Routed messages per second in, per sink, for the router on one core."""
LATENCY_P99_FLOOR_US = 1_000
"""p99 one-hop latency at the default 10,000 messages/s."""
MEMORY_FLOOR_BYTES = 50_000
"""Per idle connection, with 1,000 open (1 KB = 1,000 bytes throughout)."""


SINKS = 3
SEND_CHUNK = 64 * 1024
RECEIVE_SIZE = 1 << 20
BLAST_MESSAGES = 65_536
"""Messages in the pre-encoded throughput buffer; GUIDs are renewed on every pass."""
SEND_TTL = 2
MAX_BURST = 1_000
PROBE_INTERVAL = 0.25
SETTLE_SECONDS = 0.5
CLIENT_BOUND_SHARE = 0.85
"""Client CPU (share of one core) above which a throughput figure may be the client's."""
OTHERS_NOTICEABLE = 0.1
"""Other processes' CPU (share of one core) worth a warning beside the figures."""
USER_AGENT = "bench-router/1.0"
LATENCY_HIGHEST_US = 60_000_000
BYE = MessageType.BYE

T = TypeVar("T")


class BenchError(Exception):
    """A run could not be measured; the message says why."""


# ---------------------------------------------------------------------------------------
# Messages on the wire


@dataclass(frozen=True, slots=True)
class Wire:
    """A ping and a query of the same size, encoded with an all-zero GUID."""

    size: int
    ping: bytes
    query: bytes

    @classmethod
    def build(cls) -> Wire:
        ggep = GGEPBlock((GGEPExtension("SCP", b"\x01"),))
        ping = encode_message(Message(bytes(16), SEND_TTL, 0, Ping(ggep)))
        search_length = len(ping) - HEADER_SIZE - 3  # flags word, text, NUL
        query = encode_message(
            Message(bytes(16), SEND_TTL, 0, Query((b"jazz" * 8)[:search_length]))
        )
        if len(ping) != len(query):
            raise BenchError(f"ping is {len(ping)} bytes but query {len(query)}")
        return cls(len(ping), ping, query)

    def probe(self) -> bytes:
        """A ping with send time 0: sinks see it but never time it."""
        return bytes(8) + b"\xff" + os.urandom(6) + b"\x00" + self.ping[16:]


def message_kinds(count: int, query_share: float, seed: int) -> list[bool]:
    """True for a query, False for a ping, in a seeded order with the exact shares."""
    queries = round(count * query_share)
    kinds = [True] * queries + [False] * (count - queries)
    random.Random(seed).shuffle(kinds)
    return kinds


class Blast:
    """The throughput source's buffer: ``count`` messages, each with a unique GUID.

    GUID layout: bytes 0-3 random for this process, 4-7 the slot, 8 = 0xFF, 9-12 the
    pass number, 13-14 random, 15 = 0. A pass rewrites bytes 9-12 of every slot with
    four extended-slice assignments, so each pass is fresh to the router's duplicate
    tables at no per-message cost.
    """

    def __init__(self, wire: Wire, kinds: Sequence[bool]) -> None:
        run = os.urandom(4)
        tail = os.urandom(2)
        parts = []
        for slot, is_query in enumerate(kinds):
            template = wire.query if is_query else wire.ping
            guid = run + slot.to_bytes(4, "big") + b"\xff" + bytes(4) + tail + b"\x00"
            parts.append(guid + template[16:])
        self.buffer = bytearray(b"".join(parts))
        self.count = len(kinds)
        self.size = wire.size
        self.passes = 0

    def next_pass(self) -> memoryview:
        self.passes += 1
        for offset, value in enumerate(self.passes.to_bytes(4, "big"), start=9):
            self.buffer[offset :: self.size] = bytes((value,)) * self.count
        return memoryview(self.buffer)


class Stamper:
    """Latency messages: GUID bytes 0-7 the send time, 8 = 0xFF, 9-14 a sequence, 15 = 0."""

    def __init__(self, wire: Wire, kinds: Sequence[bool]) -> None:
        self.bodies = [(wire.query if k else wire.ping)[16:] for k in kinds]
        self.sequence = itertools.count(int.from_bytes(os.urandom(4), "big"))

    def burst(self, count: int, now_ns: int) -> bytes:
        stamp = now_ns.to_bytes(8, "big") + b"\xff"
        bodies = self.bodies
        parts = []
        for _ in range(count):
            n = next(self.sequence)
            parts.append(stamp + (n & 0xFFFF_FFFF_FFFF).to_bytes(6, "big") + b"\x00")
            parts.append(bodies[n % len(bodies)])
        return b"".join(parts)


# ---------------------------------------------------------------------------------------
# Peers


@dataclass(slots=True)
class Peer:
    """One handshaken connection and what it has received."""

    stream: trio.SocketStream
    name: str
    received: int = 0
    closed: str | None = None

    async def aclose(self) -> None:
        with (
            trio.CancelScope(shield=True),
            trio.move_on_after(1.0),
            contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError),
        ):
            await self.stream.aclose()


def peer_headers() -> list[tuple[str, str]]:
    return [
        ("User-Agent", USER_AGENT),
        ("X-Ultrapeer", "True"),
        ("Bye-Packet", "0.1"),
        ("GUID", random_guid().hex()),
    ]


async def _next_event(stream: trio.SocketStream, initiator: Initiator) -> HandshakeEvent:
    try:
        return await next_handshake_event(stream, initiator)
    except RemoteProtocolError as exc:
        raise BenchError(f"handshake failed: {exc}") from exc


async def connect(address: tuple[str, int], name: str) -> Peer:
    """TCP connect and the 0.6 handshake as an ultrapeer, without deflate."""
    stream = await trio.open_tcp_stream(*address)
    try:
        initiator = Initiator()
        await stream.send_all(initiator.start(peer_headers()))
        event = await _next_event(stream, initiator)
        if isinstance(event, HandshakeRejected):
            raise BenchError(f"handshake refused: {event.status_code} {event.reason}")
        assert isinstance(event, HandshakeResponse), event
        await stream.send_all(initiator.confirm())
        complete = await _next_event(stream, initiator)
        assert isinstance(complete, HandshakeComplete), complete
        if complete.decompress_incoming:
            raise BenchError("the router deflates although deflate was not offered")
    except BaseException:
        await Peer(stream, name).aclose()
        raise
    return Peer(stream, name, received=len(complete.trailing_data))


def final_bye(data: bytes | bytearray) -> str:
    """Describe the Bye that ends ``data`` (the last bytes read before the end), if any."""
    end = len(data)
    for start in range(max(0, end - HEADER_SIZE - 512), end - HEADER_SIZE - 1):
        _, payload_type, _, _, length = HEADER_STRUCT.unpack_from(data, start)
        if payload_type == BYE and start + HEADER_SIZE + length == end and length >= 2:
            payload = bytes(data[start + HEADER_SIZE : end])
            reason = payload[2:].split(b"\x00", 1)[0].decode("utf-8", "replace")
            return f" after Bye {int.from_bytes(payload[:2], 'little')} {reason!r}"
    return ""


async def count_bytes(peer: Peer) -> None:
    """Read and count until the connection ends; one reused buffer, no parsing."""
    sock = peer.stream.socket
    buffer = bytearray(RECEIVE_SIZE)
    last = 0
    try:
        while True:
            n = await sock.recv_into(buffer)
            if not n:
                peer.closed = f"{peer.name} closed by the server{final_bye(buffer[:last])}"
                return
            peer.received += n
            last = n
    except (trio.ClosedResourceError, OSError) as exc:
        peer.closed = f"{peer.name} lost: {exc.__class__.__name__}"


async def read_until(peer: Peer, size: int, reached: Callable[[], None]) -> None:
    """Read until ``size`` bytes have arrived in all, then call ``reached`` and stop."""
    try:
        while peer.received < size:
            data = await peer.stream.receive_some(4096)
            if not data:
                peer.closed = f"{peer.name} closed by the server"
                return
            peer.received += len(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
        peer.closed = f"{peer.name} lost: {exc.__class__.__name__}"
        return
    reached()


async def probe_until_reached(sender: Peer, receivers: Sequence[Peer], wire: Wire) -> None:
    """Broadcast probe pings from ``sender`` until every receiver has received one.

    This is how the client knows that the server has registered every connection (its
    own handshake finishes before the server has read the last step), for the router
    and the baseline alike; the probes' send time is 0, so no latency run times them.
    """
    targets = [(peer, peer.received + wire.size) for peer in receivers]
    next_probe = trio.current_time()
    while True:
        missing = [p for p, size in targets if p.received < size]
        closed = [p.closed for p in missing if p.closed]
        if closed:
            raise BenchError(f"a connection ended before the probe arrived: {closed[0]}")
        if not missing:
            return
        if trio.current_time() >= next_probe:
            await sender.stream.send_all(wire.probe())
            next_probe = trio.current_time() + PROBE_INTERVAL
        await trio.sleep(0.01)


# ---------------------------------------------------------------------------------------
# Processes


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
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    """A server under test running as a child process; killed on exit whatever happens."""

    def __init__(self, name: str, argv: list[str], port: int, log_path: Path) -> None:
        self.name = name
        self.address = ("127.0.0.1", port)
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT
        )
        self.pid = self.process.pid

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


@contextlib.contextmanager
def started(name: str, argv: list[str], port: int, workdir: Path) -> Iterator[Server]:
    server = Server(name, argv, port, workdir / f"{name}-{port}.log")
    try:
        server.wait_until_accepting()
        yield server
    finally:
        server.close()


def router_argv(
    port: int, state_dir: Path, max_connections: int | None, extra: Sequence[str] = ()
) -> list[str]:
    config = state_dir / "bench.toml"
    config.write_text("[network]\nconnects_per_ip_per_minute = 100000\n")
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


# ---------------------------------------------------------------------------------------
# Runs


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


@dataclass(frozen=True, slots=True)
class ThroughputRun:
    per_sink: float
    """Messages per second each sink received (mean over the sinks)."""
    slowest_sink: float
    accepted: float
    """Messages per second the server took from the source."""
    cpu: Cpu


@dataclass(frozen=True, slots=True)
class LatencyRun:
    p50: int
    p90: int
    p99: int
    max: int
    samples: int
    offered: float
    """Messages per second the source actually sent in the window."""
    delivered: float
    """Samples over (messages sent in the window x sinks)."""
    cpu: Cpu


@dataclass(frozen=True, slots=True)
class MemoryRun:
    before: int
    after: int
    connections: int

    @property
    def per_connection(self) -> float:
        return (self.after - self.before) / self.connections


async def throughput_run(
    address: tuple[str, int], pid: int | None, wire: Wire, blast: Blast, args: argparse.Namespace
) -> ThroughputRun:
    with trio.fail_after(args.warmup + args.duration + 30):
        sinks = [await connect(address, f"sink {i}") for i in range(1, SINKS + 1)]
        source = await connect(address, "source")
        peers = [*sinks, source]
        sent = [0]

        async def send() -> None:
            stream = source.stream
            while True:
                view = blast.next_pass()
                for offset in range(0, len(view), SEND_CHUNK):
                    chunk = view[offset : offset + SEND_CHUNK]
                    await stream.send_all(chunk)
                    sent[0] += len(chunk)

        def snapshot() -> tuple[float, list[int], int]:
            return time.perf_counter(), [s.received for s in sinks], sent[0]

        meter = CpuMeter(pid)

        try:
            async with trio.open_nursery() as nursery:
                for peer in peers:
                    nursery.start_soon(count_bytes, peer)
                with trio.fail_after(10):
                    await probe_until_reached(source, sinks, wire)
                nursery.start_soon(send)
                await trio.sleep(args.warmup)
                meter.start()
                t0, got0, sent0 = snapshot()
                await trio.sleep(args.duration)
                t1, got1, sent1 = snapshot()
                cpu = meter.stop()
                nursery.cancel_scope.cancel()
        finally:
            for peer in peers:
                await peer.aclose()
    ended = [p.closed for p in peers if p.closed]
    if ended:
        raise BenchError(f"a connection ended during the run: {ended[0]}")
    elapsed = t1 - t0
    rates = [(b - a) / wire.size / elapsed for a, b in zip(got0, got1, strict=True)]
    return ThroughputRun(
        per_sink=statistics.fmean(rates),
        slowest_sink=min(rates),
        accepted=(sent1 - sent0) / wire.size / elapsed,
        cpu=cpu,
    )


async def latency_run(
    address: tuple[str, int],
    pid: int | None,
    wire: Wire,
    stamper: Stamper,
    args: argparse.Namespace,
) -> LatencyRun:
    histogram = HdrHistogram(1, LATENCY_HIGHEST_US, 3)
    record = histogram.record_value
    window_ns = int(args.latency_duration * 1e9)
    with trio.fail_after(args.warmup + args.latency_duration + 30):
        sinks = [await connect(address, f"sink {i}") for i in range(1, SINKS + 1)]
        source = await connect(address, "source")
        peers = [*sinks, source]
        window = [0, 0]  # send times of the timed window, in perf_counter_ns
        sent_in_window = [0]
        meter = CpuMeter(pid)
        cpu: list[Cpu] = []

        async def time_arrivals(peer: Peer) -> None:
            decoder = FrameDecoder()
            stream = peer.stream
            last = b""
            try:
                while True:
                    data = await stream.receive_some(RECEIVE_SIZE)
                    arrived = time.perf_counter_ns()
                    if not data:
                        peer.closed = f"{peer.name} closed by the server{final_bye(last)}"
                        return
                    peer.received += len(data)
                    last = data
                    start, end = window
                    for frame in decoder.receive_data(data):
                        sent = int.from_bytes(frame.guid[:8], "big")
                        if start <= sent < end and frame.hops == 1:
                            record(max(1, (arrived - sent) // 1000))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                peer.closed = f"{peer.name} lost: {exc.__class__.__name__}"

        async def paced_send() -> None:
            stream = source.stream
            rate = args.rate
            began = time.perf_counter_ns()
            window[0] = began + int(args.warmup * 1e9)
            window[1] = window[0] + window_ns
            tick = trio.current_time()
            sent = 0
            timing = False
            while True:
                now = time.perf_counter_ns()
                if now >= window[1]:
                    cpu.append(meter.stop())
                    return
                if not timing and now >= window[0]:
                    timing = True
                    meter.start()
                count = min(int((now - began) * rate / 1e9) - sent, MAX_BURST)
                if count > 0:
                    await stream.send_all(stamper.burst(count, now))
                    sent += count
                    if timing:
                        sent_in_window[0] += count
                tick += 0.001
                if tick < trio.current_time():  # fell behind: catch up, do not spin
                    tick = trio.current_time() + 0.001
                await trio.sleep_until(tick)

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(count_bytes, source)
                # One sink is timed; the others only count bytes. The router's path to
                # each sink is the same, and three sinks decoding and timestamping in
                # this one process delay each other's wake-ups, which would be measured
                # as the router's latency.
                nursery.start_soon(time_arrivals, sinks[0])
                for sink in sinks[1:]:
                    nursery.start_soon(count_bytes, sink)
                with trio.fail_after(10):
                    await probe_until_reached(source, sinks, wire)
                await paced_send()
                await trio.sleep(0.25)  # the last messages' flight
                nursery.cancel_scope.cancel()
        finally:
            for peer in peers:
                await peer.aclose()
    ended = [p.closed for p in peers if p.closed]
    if ended:
        raise BenchError(f"a connection ended during the run: {ended[0]}")
    samples = int(histogram.get_total_count())
    if not samples:
        raise BenchError("no message arrived in the timed window")
    return LatencyRun(
        p50=int(histogram.get_value_at_percentile(50.0)),
        p90=int(histogram.get_value_at_percentile(90.0)),
        p99=int(histogram.get_value_at_percentile(99.0)),
        max=int(histogram.get_max_value()),
        samples=samples,
        offered=sent_in_window[0] / args.latency_duration,
        delivered=samples / max(1, sent_in_window[0]),
        cpu=cpu[0],
    )


async def memory_run(
    address: tuple[str, int], pid: int, wire: Wire, count: int, batch: int
) -> MemoryRun:
    with trio.fail_after(180):
        sender = await connect(address, "probe sender")
        idle: list[Peer] = []
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(count_bytes, sender)
                # One connection opened, served and closed first, so that costs paid
                # once (lazily imported code, first-use caches) are not counted.
                warm = await connect(address, "warm-up connection")
                await _reach(sender, [warm], wire)
                await warm.aclose()
                await trio.sleep(SETTLE_SECONDS)
                before = rss_bytes(pid)

                async def open_one() -> None:
                    idle.append(await connect(address, f"idle connection {len(idle) + 1}"))

                for first in range(0, count, batch):
                    async with trio.open_nursery() as openers:
                        for _ in range(min(batch, count - first)):
                            openers.start_soon(open_one)
                await _reach(sender, idle, wire)
                await trio.sleep(SETTLE_SECONDS)
                after = rss_bytes(pid)
                nursery.cancel_scope.cancel()
        finally:
            for peer in [sender, *idle]:
                await peer.aclose()
    return MemoryRun(before, after, count)


async def _reach(sender: Peer, receivers: Sequence[Peer], wire: Wire) -> None:
    """Probe until every receiver has read one message, then stop reading on them."""
    remaining = [len(receivers)]
    done = trio.Event()

    def reached() -> None:
        remaining[0] -= 1
        if not remaining[0]:
            done.set()

    async with trio.open_nursery() as nursery:
        for peer in receivers:
            nursery.start_soon(read_until, peer, peer.received + wire.size, reached)
        with trio.fail_after(60):
            await probe_until_reached(sender, receivers, wire)
        await done.wait()


# ---------------------------------------------------------------------------------------
# Orchestration


@dataclass(slots=True)
class Figures:
    """Everything measured for one server."""

    name: str
    throughput: list[ThroughputRun] = field(default_factory=list)
    latency: list[LatencyRun] = field(default_factory=list)
    memory: MemoryRun | None = None


def median_of(runs: Sequence[T], value: Callable[[T], float | None]) -> float | None:
    values = [v for v in map(value, runs) if v is not None]
    return statistics.median(values) if values else None


@dataclass(slots=True)
class Problems:
    """Runs that failed or missed a floor (exit status 1), and runs that needed a retry."""

    failures: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)

    def fail(self, text: str) -> None:
        self.failures.append(text)


def attempt(problems: Problems, what: str, run: Callable[[], T], retries: int = 1) -> T | None:
    """Run one measurement, once more if it fails; a failure is reported and recorded."""
    for tries_left in range(retries, -1, -1):
        try:
            return run()
        except (BenchError, trio.TooSlowError, OSError) as exc:
            reason = str(exc) or exc.__class__.__name__
            if tries_left:
                problems.retried.append(f"{what}: {reason}")
                print(f"  {what}: failed ({reason}); running it again")
            else:
                problems.fail(f"{what}: {reason}")
                print(f"  {what}: FAILED: {reason}")
    return None


def loopback_target(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    try:
        if not ipaddress.ip_address(host).is_loopback or not 0 < int(port) < 65536:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a loopback IP address and port, e.g. 127.0.0.1:6346"
        ) from None
    return host, int(port)


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


Target = tuple[Figures, tuple[str, int], int | None]


def describe_cpu(cpu: Cpu) -> str:
    server = "server CPU n/a" if cpu.server is None else f"server CPU {cpu.server:.0%}"
    others = "" if cpu.others is None else f", other processes {cpu.others:.0%}"
    return f"{server}, client {cpu.client:.0%}{others}"


def run_speed(
    targets: Sequence[Target],
    wire: Wire,
    kinds: Sequence[bool],
    args: argparse.Namespace,
    problems: Problems,
) -> None:
    """Throughput, then latency, the servers' runs interleaved repetition by repetition."""
    blast = Blast(wire, kinds)
    stamper = Stamper(wire, kinds)
    for rep in range(1, args.repeats + 1):
        for figures, address, pid in targets:
            what = f"{figures.name} throughput run {rep}"
            run = attempt(
                problems, what, partial(trio.run, throughput_run, address, pid, wire, blast, args)
            )
            if run is not None:
                figures.throughput.append(run)
                print(
                    f"  {what}: {run.per_sink:,.0f} msgs/s in per sink (slowest "
                    f"{run.slowest_sink:,.0f}), source {run.accepted:,.0f} msgs/s; "
                    f"{describe_cpu(run.cpu)}"
                )
    for rep in range(1, args.repeats + 1):
        for figures, address, pid in targets:
            what = f"{figures.name} latency run {rep}"
            lat = attempt(
                problems, what, partial(trio.run, latency_run, address, pid, wire, stamper, args)
            )
            if lat is not None:
                figures.latency.append(lat)
                print(
                    f"  {what}: p50 {lat.p50} µs, p90 {lat.p90} µs, p99 {lat.p99} µs, "
                    f"max {lat.max:,} µs; {lat.samples:,} samples, offered "
                    f"{lat.offered:,.0f} msgs/s, delivered {lat.delivered:.1%}; "
                    f"{describe_cpu(lat.cpu)}"
                )


def run_memory(
    figures: Figures,
    argv: list[str],
    port: int,
    workdir: Path,
    wire: Wire,
    args: argparse.Namespace,
    problems: Problems,
) -> None:
    """One server started for the memory run alone, then stopped."""
    name = figures.name
    with started(name, argv, port, workdir) as server:
        run = attempt(
            problems,
            f"{name} memory run",
            partial(trio.run, memory_run, server.address, server.pid, wire, args.connections, 100),
        )
        if run is not None:
            figures.memory = run
            print(
                f"  {name} memory: RSS {run.before / 1e6:.1f} MB -> {run.after / 1e6:.1f} MB "
                f"with {run.connections:,} idle connections open: "
                f"{run.per_connection / 1000:.1f} KB per connection"
            )
        stop_server(server, problems)


# ---------------------------------------------------------------------------------------
# Report

Row = tuple[str, str, str, str, str]


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f} /s"


def _us(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f} µs"


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _ratio(ours: float | None, base: float | None) -> str:
    if ours is None or base is None or not base:
        return ""
    return f"{ours / base:.2f}x"


def cpu_cell(runs: Sequence[ThroughputRun] | Sequence[LatencyRun]) -> str:
    cpus = [r.cpu for r in runs]
    server = median_of(cpus, lambda c: c.server)
    client = median_of(cpus, lambda c: c.client)
    others = median_of(cpus, lambda c: c.others)
    return f"{_share(server)} / {_share(client)} / {_share(others)}"


def _floor(ok: bool, text: str, problems: Problems, what: str) -> str:
    if not ok:
        problems.fail(f"{what} below floor")
    return f"floor {text}" + ("" if ok else " MISSED")


def build_rows(
    ours: Figures, base: Figures | None, args: argparse.Namespace, problems: Problems
) -> list[Row]:
    rows: list[Row] = []
    base_tp: list[ThroughputRun] = base.throughput if base else []
    base_lat: list[LatencyRun] = base.latency if base else []

    tp = median_of(ours.throughput, lambda r: r.per_sink)
    btp = median_of(base_tp, lambda r: r.per_sink)
    note = ""
    if tp is not None:
        note = _floor(tp >= THROUGHPUT_FLOOR, f"{THROUGHPUT_FLOOR:,}/s", problems, "throughput")
    elif ours.name:
        problems.fail("no throughput figure")
    rows.append(
        ("throughput: routed msgs/s in, per sink", _rate(tp), _rate(btp), _ratio(tp, btp), note)
    )
    src = median_of(ours.throughput, lambda r: r.accepted)
    bsrc = median_of(base_tp, lambda r: r.accepted)
    rows.append(
        ("throughput: msgs/s taken from the source", _rate(src), _rate(bsrc), _ratio(src, bsrc), "")
    )
    rows.append(
        (
            "CPU in the throughput window: server / client / others",
            cpu_cell(ours.throughput),
            cpu_cell(base_tp) if base else "n/a",
            "",
            "share of one core",
        )
    )

    offered = args.rate
    for label, pick in (
        ("p50", lambda r: r.p50),
        ("p90", lambda r: r.p90),
        ("p99", lambda r: r.p99),
        ("max", lambda r: r.max),
    ):
        value = median_of(ours.latency, pick)
        bvalue = median_of(base_lat, pick)
        note = ""
        if label == "p99":
            if value is not None:
                note = _floor(
                    value <= LATENCY_P99_FLOOR_US, f"{LATENCY_P99_FLOOR_US:,} µs", problems, "p99"
                )
            else:
                problems.fail("no latency figure")
        rows.append(
            (
                f"latency {label} at {offered:,.0f} msgs/s",
                _us(value),
                _us(bvalue),
                _ratio(value, bvalue),
                note,
            )
        )
    delivered = median_of(ours.latency, lambda r: r.delivered)
    bdelivered = median_of(base_lat, lambda r: r.delivered)
    rows.append(
        (
            "latency runs: messages delivered to the timed sink",
            _share(delivered),
            _share(bdelivered),
            "",
            f"{SINKS} sinks, one timed",
        )
    )
    rows.append(
        (
            "CPU in the latency window: server / client / others",
            cpu_cell(ours.latency),
            cpu_cell(base_lat) if base else "n/a",
            "",
            "share of one core",
        )
    )

    if not args.skip_memory and not args.target:
        mem = ours.memory.per_connection if ours.memory else None
        bmem = base.memory.per_connection if base and base.memory else None
        note = ""
        if mem is not None:
            note = _floor(mem <= MEMORY_FLOOR_BYTES, "50 KB", problems, "memory")
        else:
            problems.fail("no memory figure")

        def kb(value: float | None) -> str:
            return "n/a" if value is None else f"{value / 1000:,.1f} KB"

        def rss(run: MemoryRun | None) -> str:
            if run is None:
                return "n/a"
            return f"{run.before / 1e6:.1f} -> {run.after / 1e6:.1f} MB"

        rows.append(
            (
                f"memory per idle connection, {args.connections:,} open",
                kb(mem),
                kb(bmem),
                _ratio(mem, bmem),
                note,
            )
        )
        rows.append(
            ("RSS before -> after", rss(ours.memory), rss(base.memory if base else None), "", "")
        )
    return rows


def limits(ours: Figures, base: Figures | None) -> list[str]:
    """Which side was the limit in the throughput runs, from the CPU each one used."""
    notes: list[str] = []
    for figures in (ours, base):
        if figures is None or not figures.throughput:
            continue
        cpus = [r.cpu for r in figures.throughput]
        server = median_of(cpus, lambda c: c.server)
        client = median_of(cpus, lambda c: c.client)
        others = median_of(cpus, lambda c: c.others)
        assert client is not None
        if client >= CLIENT_BOUND_SHARE:
            notes.append(
                f"{figures.name}: the client used {client:.0%} of a core in the throughput "
                "window, so it may have been the limit: read the figure as a lower bound."
            )
        elif server is None:
            notes.append(
                f"{figures.name}: its CPU could not be read; the client used {client:.0%} of "
                "a core, so the client was not the limit."
            )
        elif server >= 0.9:
            notes.append(
                f"{figures.name}: the server was the limit in the throughput window "
                f"({server:.0%} of a core, the client {client:.0%})."
            )
        elif others is not None and server + client + others >= 0.9 * (os.cpu_count() or 1):
            notes.append(
                f"{figures.name}: the machine was saturated in the throughput window (server "
                f"{server:.0%} of a core, client {client:.0%}, other processes {others:.0%}), "
                "so the server was held back by the other processes: its figure is below "
                "what it does with a core of its own."
            )
        else:
            notes.append(
                f"{figures.name}: neither process used a whole core in the throughput window "
                f"(server {server:.0%}, client {client:.0%}) and cores were free: the server "
                "was waiting on loopback TCP or on the client."
            )
    ours_tp = median_of(ours.throughput, lambda r: r.per_sink)
    base_tp = median_of(base.throughput, lambda r: r.per_sink) if base else None
    if ours_tp and base_tp and base_tp > ours_tp:
        notes.append(
            f"The same client took {base_tp:,.0f} msgs/s per sink from the baseline, "
            f"{base_tp / ours_tp:.1f}x what it took from {ours.name}, so it was not the "
            f"limit for {ours.name}'s figure."
        )
    runs = [*ours.throughput, *ours.latency, *(base.throughput + base.latency if base else [])]
    others = median_of([r.cpu for r in runs], lambda c: c.others)
    if others is not None and others >= OTHERS_NOTICEABLE:
        notes.append(
            f"The machine was shared: other processes used {others:.0%} of a core (median "
            "over the timed windows), so these figures are below what a quiet machine gives."
        )
    return notes


def print_rows(rows: Sequence[Row], ours: Figures, base: Figures | None) -> None:
    header: Row = ("what", ours.name, base.name if base else "", "ratio" if base else "", "note")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for row in [header, *rows]:
        cells = [row[0].ljust(widths[0]), *(row[i].rjust(widths[i]) for i in (1, 2, 3)), row[4]]
        print("  ".join(cells).rstrip())


def write_section(
    rows: Sequence[Row], notes: Sequence[str], wire: Wire, args: argparse.Namespace
) -> None:
    today = datetime.date.today().isoformat()
    ping = 100 - round(args.query_share * 100)
    lines = [
        "## Router (`scripts/bench_router.py`)",
        "",
        f"Measured {today} on {machine()}. Two processes over loopback TCP: the server "
        "under test (one process, routing on one thread, so at most one core) and the "
        "benchmark client (trio); on two cores each can have one.",
        "",
        f"- Load: one source and {SINKS} sink peers, each an ultrapeer after a 0.6 "
        f"handshake; {ping} % pings and {100 - ping} % queries, TTL {SEND_TTL} hops 0, every "
        f"GUID unique, {wire.size} bytes each (the pings carry a {wire.size - HEADER_SIZE}-byte "
        "GGEP block so that both types are the same size and the sinks only count bytes). "
        "The server forwards each message once to every sink (TTL 1, hops 1); the router "
        "also answers each ping with a pong, which the source reads and discards.",
        "- Throughput: the source writes pre-encoded 64 KiB chunks as fast as the server "
        "reads them; the figure is the messages per second each sink receives over a "
        f"{args.duration:g} s window after {args.warmup:g} s of warm-up. CPU is the share of "
        'one core each process used in that window, and "others" what the rest of the '
        "machine used (from /proc).",
        f"- Latency: {args.rate:,.0f} msgs/s offered in 1 ms bursts; the send time is in the "
        "GUID, and one sink records arrival minus send time for every message in an HDR "
        "histogram (the other two only count bytes: their paths through the server are "
        "alike, and timestamping in three sinks of one process delays their wake-ups) "
        f"over a {args.latency_duration:g} s window after {args.warmup:g} s of "
        "warm-up (one hop: client, server, client, with the client's own wake-ups "
        "included; the baseline's figures bound that share). The latency runs follow the "
        "throughput runs on the same server process, so the router's route and duplicate "
        "tables are full, as on a busy node.",
        f"- Memory: the server's VmRSS before and after {args.connections:,} idle connections "
        "(opened 100 at a time, each seen to be served by a probe ping that reaches it), "
        "divided by their number; 1 KB = 1,000 bytes. RSS is the process's own memory, not "
        "the kernel's socket buffers. A connection opened and closed before the first "
        "reading keeps one-time costs out. All connections come from 127.0.0.1, so the "
        "router gets a configuration file lifting its per-IP limit on connection attempts, "
        f"and `--max-connections {args.connections + 100}`; otherwise it runs with its "
        "defaults.",
        f"- Each figure is the median of {args.repeats} runs. The baseline is "
        "`scripts/baseline_forwarder.py`, a plain asyncio forwarder (per-read `struct` "
        "framing, a duplicate dict, one write per destination per read, no replies); its "
        "runs alternate with the router's in the same invocation. Ratio = "
        "gnutella-router / baseline.",
        "",
        "| what | gnutella-router | baseline forwarder | ratio | note |",
        "|---|---:|---:|---:|---|",
        *(f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in rows),
        "",
        *(f"- {note}" for note in notes),
        "",
        "Rerun: `.venv/bin/python scripts/bench_router.py --write` (a few minutes; exits 1 "
        "if a floor is missed). `--target HOST:PORT` measures another router already "
        "listening on loopback, beside the same baseline; `--help` lists the other knobs.",
    ]
    print(f"wrote {replace_section('bench_router', lines)}")


# ---------------------------------------------------------------------------------------
# Main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--target",
        type=loopback_target,
        metavar="HOST:PORT",
        help="measure a router already listening there (loopback only): throughput and "
        "latency, no memory",
    )
    parser.add_argument("--skip-baseline", action="store_true", help="do not run the baseline")
    parser.add_argument("--skip-memory", action="store_true", help="do not run the memory part")
    parser.add_argument(
        "--duration",
        type=float,
        default=3.0,
        metavar="SECONDS",
        help="throughput window, seconds (default 3)",
    )
    parser.add_argument(
        "--latency-duration",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="latency window, seconds (default 5)",
    )
    parser.add_argument(
        "--warmup",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="seconds before each window (default 1)",
    )
    parser.add_argument(
        "--repeats", type=int, default=3, metavar="N", help="runs per figure (default 3)"
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=10_000,
        metavar="MSGS",
        help="offered msgs/s in the latency runs (default 10,000)",
    )
    parser.add_argument(
        "--connections",
        type=int,
        default=1_000,
        metavar="N",
        help="idle connections in the memory run (default 1,000)",
    )
    parser.add_argument(
        "--query-share",
        type=float,
        default=0.15,
        metavar="SHARE",
        help="share of queries in the load (default 0.15)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the ping/query order")
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument(
        "--router-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for the router started here, repeatable "
        "(e.g. --router-arg=--record=/tmp/bench.trace)",
    )
    args = parser.parse_args(argv)
    if args.write and args.target:
        parser.error("--write records gnutella-router's own figures; it cannot go with --target")
    if args.router_arg and (args.write or args.target):
        parser.error("--router-arg changes the router measured; not with --write or --target")
    if args.repeats < 1 or args.duration <= 0 or args.latency_duration <= 0 or args.warmup < 0:
        parser.error("--repeats, --duration and --latency-duration must be positive")
    if not 0 < args.rate <= 1_000_000:
        parser.error("--rate must be within 1..1,000,000")
    if not 0 <= args.query_share <= 1:
        parser.error("--query-share must be within 0..1")
    if not 1 <= args.connections <= 5_000:
        parser.error("--connections must be within 1..5,000")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    wire = Wire.build()
    kinds = message_kinds(BLAST_MESSAGES, args.query_share, args.seed)
    problems = Problems()
    if args.target:
        host, port = args.target
        ours = Figures(f"router at {host}:{port}")
    else:
        ours = Figures("gnutella-router")
    base = None if args.skip_baseline else Figures("baseline")
    print(
        f"{wire.size}-byte messages, {1 - args.query_share:.0%} ping / {args.query_share:.0%} "
        f"query; {args.repeats} runs per figure"
    )

    with tempfile.TemporaryDirectory(prefix="bench-router-") as tmp:
        workdir = Path(tmp)
        try:
            with contextlib.ExitStack() as stack:
                targets: list[Target] = []
                router: Server | None = None
                baseline: Server | None = None
                if args.target:
                    targets.append((ours, args.target, listener_pid(args.target[1])))
                else:
                    port = free_port()
                    state = workdir / "state"
                    state.mkdir()
                    router = stack.enter_context(
                        started(
                            ours.name,
                            router_argv(port, state, None, args.router_arg),
                            port,
                            workdir,
                        )
                    )
                    targets.append((ours, router.address, router.pid))
                if base is not None:
                    port = free_port()
                    baseline = stack.enter_context(
                        started(base.name, baseline_argv(port), port, workdir)
                    )
                    targets.append((base, baseline.address, baseline.pid))
                run_speed(targets, wire, kinds, args, problems)
                for server in (router, baseline):
                    if server is not None:
                        stop_server(server, problems)

            if not args.skip_memory and not args.target:
                port = free_port()
                state = workdir / "state-memory"
                state.mkdir()
                run_memory(
                    ours,
                    router_argv(port, state, args.connections + 100, args.router_arg),
                    port,
                    workdir,
                    wire,
                    args,
                    problems,
                )
                if base is not None:
                    port = free_port()
                    run_memory(base, baseline_argv(port), port, workdir, wire, args, problems)
        except BenchError as exc:
            problems.fail(str(exc))
            print(f"FAILED: {exc}")

    rows = build_rows(ours, base, args, problems)
    notes = limits(ours, base)
    notes += [f"Repeated after a failure: {text}." for text in problems.retried]
    notes += [f"Failed: {text}." for text in problems.failures if not text.endswith("floor")]
    print()
    print_rows(rows, ours, base)
    for note in notes:
        print(note)
    if args.write:
        write_section(rows, notes, wire, args)
    if problems.failures:
        print("below floor or failed: " + "; ".join(dict.fromkeys(problems.failures)))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
