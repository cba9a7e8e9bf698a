"""One timed run each of throughput, latency and memory, and the medians of several."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import trio
from hdrh.histogram import HdrHistogram

from protocol.constants import MessageType
from protocol.framing import FrameDecoder
from scripts.router_bench.peers import (
    LATENCY_HIGHEST_US,
    MAX_BURST,
    PROBE_MARK,
    RECEIVE_SIZE,
    SEND_CHUNK,
    SINKS,
    BenchError,
    Blast,
    Peer,
    Stamper,
    Wire,
    connect,
    count_bytes,
    final_bye,
    pings_answered,
    probe_until_reached,
    reach,
)
from scripts.router_bench.replies import (
    Answers,
    LeafPlan,
    ReplyCounts,
    answer_and_count,
    count_returned,
)
from scripts.router_bench.servers import Cpu, CpuMeter, Problems, describe_cpu, stop_server
from scripts.runner import cpu_seconds, rss_bytes, started

SETTLE_SECONDS = 0.5
PING = int(MessageType.PING)
QUERY = int(MessageType.QUERY)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ThroughputRun:
    per_sink: float
    """Messages per second each sink received (mean over the sinks)."""
    slowest_sink: float
    accepted: float
    """Messages per second the server took from the source."""
    cpu: Cpu
    replies_sent: float = 0.0
    """Replies per second the sinks sent (runs with answering sinks)."""
    replies_unsent: float = 0.0
    """Replies per second the sinks had to leave unsent (their sender was behind)."""
    replies_back: float = 0.0
    """Replies per second routed back to the source."""
    per_matching_leaf: float | None = None
    """Messages per second each leaf whose table matches the queries received (mean)."""
    per_other_leaf: float | None = None
    """Messages per second each of the other leaves received (mean)."""


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
    """Samples over the timed messages sent in the window (the timed sink's share)."""
    cpu: Cpu
    queries_only: bool = False
    """Only queries were timed: the peers announce Pong-Caching, so a router answers
    their pings instead of broadcasting them."""


@dataclass(frozen=True, slots=True)
class MemoryRun:
    before: int
    after: int
    connections: int

    @property
    def per_connection(self) -> float:
        return (self.after - self.before) / self.connections


async def server_quiet(pid: int | None, share: float = 0.25, longest: float = 5.0) -> None:
    """Wait until the server uses less than ``share`` of a core over a tenth of a second
    (at most ``longest`` seconds): a flood that just ended leaves megabytes in the
    server's socket buffers, which it goes on routing, and a run that connects new sinks
    meanwhile hands them that backlog before they read (a router may then close one as
    slow, a failure of the benchmark and not of the run measured)."""
    if pid is None:
        return
    deadline = trio.current_time() + longest
    before = cpu_seconds(pid)
    while before is not None and trio.current_time() < deadline:
        await trio.sleep(0.1)
        after = cpu_seconds(pid)
        if after is None or after - before < share * 0.1:
            return
        before = after


async def throughput_run(
    address: tuple[str, int],
    pid: int | None,
    wire: Wire,
    blast: Blast,
    args: argparse.Namespace,
    sink_count: int = SINKS,
    *,
    deflate_sinks: bool = False,
    answers: Answers | None = None,
    leaves: LeafPlan | None = None,
    leaves_served: bool = True,
) -> ThroughputRun:
    """One flood: the source writes ``blast`` as fast as the server reads it; the sinks
    count bytes, and with ``answers`` answer the marked copies (the source then counts
    the replies routed back). With ``leaves``, leaves connect first and send their QRP
    tables; when ``leaves_served`` (a server that passes queries to leaves by their
    tables), the probe must reach the matching ones too, so their tables are in before
    the clock starts."""
    await server_quiet(pid)
    with trio.fail_after(args.warmup + args.duration + 30):
        peers: list[Peer] = []  # every connection opened, to close whatever happens

        async def opened(name: str, **options: Any) -> Peer:
            peer = await connect(address, name, **options)
            peers.append(peer)
            return peer

        try:
            leaf_peers = []
            for index, table in enumerate(leaves.tables if leaves else ()):
                assert leaves is not None
                leaf = await opened(f"leaf {index}", headers=leaves.headers())
                leaf_peers.append(leaf)
                await leaf.stream.send_all(table)
            sinks = [
                await opened(f"sink {i}", deflate=deflate_sinks) for i in range(1, sink_count + 1)
            ]
            source = await opened("source")
        except BaseException:
            for peer in peers:
                await peer.aclose()
            raise
        matching = [leaf_peers[i] for i in leaves.matching] if leaves else []
        others = [p for i, p in enumerate(leaf_peers) if leaves and i not in leaves.matching]
        probed = [*sinks, *(matching if leaves_served else [])]
        replied = ReplyCounts()
        sent = [0]

        async def send() -> None:
            """Write the blast until cancelled; a connection the server ended is left
            to the source's reader to describe (with the server's Bye, if it sent one)."""
            stream = source.stream
            try:
                while True:
                    view = blast.next_pass()
                    for offset in range(0, len(view), SEND_CHUNK):
                        chunk = view[offset : offset + SEND_CHUNK]
                        await stream.send_all(chunk)
                        sent[0] += len(chunk)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                source.closed = source.closed or "source: the server stopped reading it"

        def snapshot() -> tuple[float, list[int], int, tuple[int, int, int]]:
            return (
                time.perf_counter(),
                [p.received for p in [*sinks, *matching, *others]],
                sent[0],
                (replied.sent, replied.unsent, replied.returned),
            )

        meter = CpuMeter(pid)

        try:
            async with trio.open_nursery() as nursery:
                for peer in leaf_peers:
                    nursery.start_soon(count_bytes, peer)
                for peer in sinks:
                    if answers is not None:
                        nursery.start_soon(answer_and_count, peer, answers, replied)
                    else:
                        nursery.start_soon(count_bytes, peer)
                if answers is not None:
                    nursery.start_soon(count_returned, source, answers, replied)
                else:
                    nursery.start_soon(count_bytes, source)
                with trio.fail_after(10):
                    await probe_until_reached(source, probed, wire)
                nursery.start_soon(send)
                await trio.sleep(args.warmup)
                meter.start()
                t0, got0, sent0, replies0 = snapshot()
                await trio.sleep(args.duration)
                t1, got1, sent1, replies1 = snapshot()
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
    sink_rates = rates[: len(sinks)]
    matching_rates = rates[len(sinks) : len(sinks) + len(matching)]
    other_rates = rates[len(sinks) + len(matching) :]
    sent_r, unsent_r, back_r = ((b - a) / elapsed for a, b in zip(replies0, replies1, strict=True))
    return ThroughputRun(
        per_sink=statistics.fmean(sink_rates),
        slowest_sink=min(sink_rates),
        accepted=(sent1 - sent0) / wire.size / elapsed,
        cpu=cpu,
        replies_sent=sent_r,
        replies_unsent=unsent_r,
        replies_back=back_r,
        per_matching_leaf=statistics.fmean(matching_rates) if matching_rates else None,
        per_other_leaf=statistics.fmean(other_rates) if other_rates else None,
    )


async def latency_run(
    address: tuple[str, int],
    pid: int | None,
    wire: Wire,
    stamper: Stamper,
    args: argparse.Namespace,
) -> LatencyRun:
    """Messages stamped with their send time at ``args.rate``; one sink times the
    copies that arrive (the queries alone with peers whose pings a router answers: the
    same messages for every server, so the figures compare)."""
    histogram = HdrHistogram(1, LATENCY_HIGHEST_US, 3)
    record = histogram.record_value
    window_ns = int(args.latency_duration * 1e9)
    queries_only = pings_answered()
    timed_types = (QUERY,) if queries_only else (QUERY, PING)
    with trio.fail_after(args.warmup + args.latency_duration + 30):
        sinks = [await connect(address, f"sink {i}") for i in range(1, SINKS + 1)]
        source = await connect(address, "source")
        peers = [*sinks, source]
        window = [0, 0]  # send times of the timed window, in perf_counter_ns
        sent_in_window = [0, 0]  # messages, queries
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
                        if frame.guid[9:15] == PROBE_MARK:
                            peer.probed = True
                            continue
                        sent = int.from_bytes(frame.guid[:8], "big")
                        if (
                            start <= sent < end
                            and frame.hops == 1
                            and frame.payload_type in timed_types
                        ):
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
                    queries = stamper.queries
                    await stream.send_all(stamper.burst(count, now))
                    sent += count
                    if timing:
                        sent_in_window[0] += count
                        sent_in_window[1] += stamper.queries - queries
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
        delivered=samples / max(1, sent_in_window[1 if queries_only else 0]),
        cpu=cpu[0],
        queries_only=queries_only,
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
                await reach(sender, [warm], wire)
                await warm.aclose()
                await trio.sleep(SETTLE_SECONDS)
                before = rss_bytes(pid)

                async def open_one() -> None:
                    idle.append(await connect(address, f"idle connection {len(idle) + 1}"))

                for first in range(0, count, batch):
                    async with trio.open_nursery() as openers:
                        for _ in range(min(batch, count - first)):
                            openers.start_soon(open_one)
                await reach(sender, idle, wire)
                await trio.sleep(SETTLE_SECONDS)
                after = rss_bytes(pid)
                nursery.cancel_scope.cancel()
        finally:
            for peer in [sender, *idle]:
                await peer.aclose()
    return MemoryRun(before, after, count)


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


FAILURES = (BenchError, trio.TooSlowError, OSError)
"""What ends one measurement, not the benchmark."""


def _failure(exc: BaseException) -> BaseException | None:
    """The measurement failure ``exc`` is or holds (a nursery raises its tasks'
    exceptions in a group), or None when it holds anything else."""
    if isinstance(exc, FAILURES):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        matched, rest = exc.split(FAILURES)
        if rest is None and matched is not None:
            first: BaseException = matched
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            return first
    return None


def attempt(problems: Problems, what: str, run: Callable[[], T], retries: int = 1) -> T | None:
    """Run one measurement, once more if it fails; a failure is reported and recorded."""
    for tries_left in range(retries, -1, -1):
        try:
            return run()
        except BaseException as caught:
            exc = _failure(caught)
            if exc is None:
                raise
            reason = str(exc) or exc.__class__.__name__
            if tries_left:
                problems.retried.append(f"{what}: {reason}")
                print(f"  {what}: failed ({reason}); running it again")
            else:
                problems.fail(f"{what}: {reason}")
                print(f"  {what}: FAILED: {reason}")
    return None


Target = tuple[Figures, tuple[str, int], int | None]


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
                    f"  {what}: source {run.accepted:,.0f} msgs/s taken, "
                    f"{run.per_sink:,.0f} msgs/s forwarded per sink (slowest "
                    f"{run.slowest_sink:,.0f}); {describe_cpu(run.cpu)}"
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
                    f"{lat.offered:,.0f} msgs/s, delivered {lat.delivered:.1%} of the "
                    f"{'queries' if lat.queries_only else 'messages'}; "
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
