"""The figures as a table: printed, checked against the floors, written to docs/benchmarks.md."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from protocol.constants import HEADER_SIZE
from scripts.benchdocs import machine, provenance, replace_section
from scripts.router_bench.peers import SEND_TTL, SINKS, Wire, peer_kind, pings_answered
from scripts.router_bench.runs import Figures, LatencyRun, MemoryRun, ThroughputRun, median_of
from scripts.router_bench.servers import Problems

THROUGHPUT_FLOOR = 250_000
"""Routed messages per second, for the router on one core: with peers that cache pongs,
messages taken from the source (each ping answered, each query forwarded to every
sink); with peers that do not, messages forwarded to each sink (every message is)."""
LATENCY_P99_FLOOR_US = 1_000
"""p99 one-hop latency, at any offered rate up to :data:`LATENCY_FLOOR_RATE`."""
LATENCY_FLOOR_RATE = 50_000
"""The highest offered rate the p99 floor is set for (the paper's mix from peers that
announce what gtk-gnutella does); above it the p99 is shown, not judged."""
MEMORY_FLOOR_BYTES = 50_000
"""Per idle connection, with 1,000 open (1 KB = 1,000 bytes throughout)."""
CLIENT_BOUND_SHARE = 0.85
"""Client CPU (share of one core) above which a throughput figure may be the client's."""
OTHERS_NOTICEABLE = 0.1
"""Other processes' CPU (share of one core) worth a warning beside the figures."""

CLOSED_BY_THE_SERVER = (
    "In a separate flood of the same build, with its log at info level, gnutella-router "
    'closed sinks as in the runs "closed by the server" here, with the reason "outgoing '
    'queue passed N messages", a fraction of a second into their connections: its '
    'slow-peer policy at its default (`slow_peer.policy = "threshold"`), which the '
    "benchmark leaves as it is. The naive router and the forwarder have no such policy."
)
"""Why a flood's peer may be "closed by the server", for the written sections."""

Row = tuple[str, str, str, str, str]


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f} /s"


def _us(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f} µs"


def _us_fine(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} µs"


def cpu_per_message(run: ThroughputRun) -> float | None:
    """Microseconds of the server's CPU per message it took from the source (each one
    routed to every sink): what routing one message costs, whatever the window."""
    if run.cpu.server is None or not run.accepted:
        return None
    return run.cpu.server / run.accepted * 1e6


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

    answered = pings_answered()
    if answered:
        # A router answers these peers' pings and forwards only the queries: what it
        # routes is what it takes from the source; the baseline broadcasts everything.
        tp = median_of(ours.throughput, lambda r: r.accepted)
        btp = median_of(base_tp, lambda r: r.accepted)
        label = "throughput: msgs/s routed from the source (pings answered, queries forwarded)"
    else:
        tp = median_of(ours.throughput, lambda r: r.per_sink)
        btp = median_of(base_tp, lambda r: r.per_sink)
        label = "throughput: routed msgs/s in, per sink"
    note = ""
    if tp is not None:
        note = _floor(tp >= THROUGHPUT_FLOOR, f"{THROUGHPUT_FLOOR:,}/s", problems, "throughput")
    elif ours.name:
        problems.fail("no throughput figure")
    rows.append((label, _rate(tp), _rate(btp), _ratio(tp, btp), note))
    if answered:
        sink = median_of(ours.throughput, lambda r: r.per_sink)
        bsink = median_of(base_tp, lambda r: r.per_sink)
        rows.append(
            (
                "throughput: msgs/s forwarded per sink",
                _rate(sink),
                _rate(bsink),
                "",
                "the router: the queries alone; the baseline: pings and queries",
            )
        )
    else:
        src = median_of(ours.throughput, lambda r: r.accepted)
        bsrc = median_of(base_tp, lambda r: r.accepted)
        rows.append(
            (
                "throughput: msgs/s taken from the source",
                _rate(src),
                _rate(bsrc),
                _ratio(src, bsrc),
                "",
            )
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
    cost = median_of(ours.throughput, cpu_per_message)
    bcost = median_of(base_tp, cpu_per_message)
    rows.append(
        (
            "server CPU per routed message",
            _us_fine(cost),
            _us_fine(bcost),
            _ratio(cost, bcost),
            "server CPU time / messages taken from the source",
        )
    )

    offered = args.rate
    timed = " (queries timed)" if answered else ""
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
            if value is None:
                problems.fail("no latency figure")
            elif offered <= LATENCY_FLOOR_RATE:
                note = _floor(
                    value <= LATENCY_P99_FLOOR_US, f"{LATENCY_P99_FLOOR_US:,} µs", problems, "p99"
                )
            else:
                note = (
                    f"no floor at this rate (floor {LATENCY_P99_FLOOR_US:,} µs up to "
                    f"{LATENCY_FLOOR_RATE:,} msgs/s)"
                )
        rows.append(
            (
                f"latency {label} at {offered:,.0f} msgs/s{timed}",
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
            f"latency runs: {'queries' if answered else 'messages'} delivered to the timed sink",
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

    def rate(run: ThroughputRun) -> float:
        return run.accepted if pings_answered() else run.per_sink

    what = "taken from the source" if pings_answered() else "per sink"
    ours_tp = median_of(ours.throughput, rate)
    base_tp = median_of(base.throughput, rate) if base else None
    if ours_tp and base_tp and base_tp > ours_tp:
        notes.append(
            f"The same client reached {base_tp:,.0f} msgs/s ({what}) with the baseline, "
            f"{base_tp / ours_tp:.1f}x what it reached with {ours.name}, so it was not the "
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
    ping = 100 - round(args.query_share * 100)
    answered = pings_answered()
    if answered:
        peers = (
            "gtk-gnutella 1.2.3's handshake (`--peers gtk-like`: Pong-Caching, GGEP, "
            "Vendor-Message, X-Query-Routing, X-Max-TTL 4, as real servents announce)"
        )
        routing = (
            "The peers cache pongs, so a router answers each ping with a pong (its own, "
            "and cached ones at most once a second), which the source reads and discards, "
            "and does not broadcast it; it forwards each query once to every sink (TTL 1, "
            "hops 1). The baseline knows nothing of pong caching and forwards both."
        )
        throughput = (
            "the figure is the messages per second the server took from the source (for "
            "the router: pings answered and queries forwarded), beside the messages each "
            "sink received (the queries alone from the router)"
        )
        timed = "every query (the pings are not forwarded by the router)"
    else:
        peers = "a bare ultrapeer's handshake (`--peers minimal`: no Pong-Caching)"
        routing = (
            "The server forwards each message once to every sink (TTL 1, hops 1); the "
            "router also answers each ping with a pong, which the source reads and discards."
        )
        throughput = "the figure is the messages per second each sink receives"
        timed = "every message"
    lines = [
        "## Router (`scripts/bench_router.py`)",
        "",
        f"Measured {provenance()} on {machine()}. Two processes over loopback TCP: the server "
        "under test (one process, routing on one thread, so at most one core) and the "
        "benchmark client (trio); on two cores each can have one.",
        "",
        f"- Load: one source and {SINKS} sink peers, each an ultrapeer after a 0.6 "
        f"handshake, {peers}; {ping} % pings and {100 - ping} % queries, TTL {SEND_TTL} "
        f"hops 0, every GUID unique, {wire.size} bytes each (the pings carry a "
        f"{wire.size - HEADER_SIZE}-byte GGEP block so that both types are the same size "
        f"and the sinks only count bytes). {routing}",
        "- Throughput: the source writes pre-encoded 64 KiB chunks as fast as the server "
        f"reads them; {throughput}, over a "
        f"{args.duration:g} s window after {args.warmup:g} s of warm-up. CPU is the share of "
        'one core each process used in that window, and "others" what the rest of the '
        "machine used (from /proc).",
        f"- Latency: {args.rate:,.0f} msgs/s offered in 1 ms bursts; the send time is in the "
        f"GUID, and one sink records arrival minus send time for {timed} in an HDR "
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
        f"Rerun: `.venv/bin/python scripts/bench_router.py --peers {peer_kind()} "
        f"--rate {args.rate:g} --write` (a few minutes; exits 1 "
        "if a floor is missed). `--target HOST:PORT` measures another router already "
        "listening on loopback, beside the same baseline; `--help` lists the other knobs.",
    ]
    print(f"wrote {replace_section('bench_router', lines)}")
