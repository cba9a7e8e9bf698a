"""Benchmark the router over loopback TCP: throughput, latency, memory per connection.

Run from the repository root, in the project's virtual environment:

    .venv/bin/python scripts/bench_router.py            # print the figures
    .venv/bin/python scripts/bench_router.py --write    # also update docs/benchmarks.md
    .venv/bin/python scripts/bench_router.py --target 127.0.0.1:6346   # a router already running

What is measured, and why:

1. Throughput. The router runs in its own process (started here on a free loopback
   port, with a fresh state directory). This process connects one source peer and
   three sink peers, each an ultrapeer doing the 0.6 handshake. The source writes the
   paper's load, 85 % pings and 15 % queries (TTL 2, hops 0, each GUID unique), as
   fast as the router takes them, from pre-encoded 64 KiB chunks; the router answers
   each ping with a pong, which the source reads and throws away, and forwards each
   query (and, to peers that do not cache pongs, each ping) once to every sink (TTL 1,
   hops 1). Pings carry a small GGEP block so that pings and queries are the same size
   on the wire and the sinks only have to count bytes. The figure is the messages per
   second the router routes from the source over a steady window after a warm-up
   (with ``--peers minimal``: the messages each sink receives, every one forwarded).
2. Latency at a fixed offered rate (10,000 messages/s by default, sent in bursts every
   millisecond). Bytes 0-7 of each GUID hold the send time (``perf_counter_ns``,
   big-endian); one sink frames what it receives and records arrival minus send time
   in an HDR histogram (of the queries alone when the router answers the pings), while
   the other two only count bytes (all three paths through
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
``--latency-duration`` (5 s), ``--warmup`` (1 s), ``--rate`` (10,000 msgs/s; the p99 at
50,000 msgs/s is ``--rate 50000``), ``--connections`` (1,000), ``--peers``
(gtk-like), ``--skip-baseline``, ``--skip-memory``, ``--write``.

The peers announce gtk-gnutella 1.2.3's handshake by default (``--peers gtk-like``:
``Pong-Caching``, GGEP, vendor messages, QRP, ``X-Max-TTL``), as every real servent
announces ``Pong-Caching``: the router then answers their pings (with its pong, and
cached ones at most once a second) and does not broadcast them, so only the queries
reach the sinks. The throughput figure is then the messages the router routes from the
source (pings answered, queries forwarded), beside the messages forwarded per sink, and
the latency runs time the queries alone (for the baseline too, which forwards both).
``--peers minimal`` (a bare ultrapeer: no ``Pong-Caching``) gives the old shape: every
message forwarded to every sink, the figure per sink, every message timed. No peer asks
for deflate. All 1,000 memory-run connections come
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
import ipaddress
import tempfile
from collections.abc import Sequence
from pathlib import Path

from scripts.router_bench.peers import (
    BLAST_MESSAGES,
    PEER_KINDS,
    BenchError,
    Wire,
    message_kinds,
    pings_answered,
    use_peers,
)
from scripts.router_bench.report import build_rows, limits, print_rows, write_section
from scripts.router_bench.runs import Figures, Target, run_memory, run_speed
from scripts.router_bench.servers import Problems, stop_server
from scripts.runner import (
    Server,
    baseline_argv,
    free_port,
    leaf_exceptions,
    listener_pid,
    router_argv,
    started,
)


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
    parser.add_argument(
        "--random-seed",
        "--seed",
        dest="seed",
        type=int,
        default=1,
        help="seed of the ping/query order",
    )
    parser.add_argument(
        "--peers",
        choices=sorted(PEER_KINDS),
        default="gtk-like",
        help="the handshake the peers send: gtk-gnutella 1.2.3's (Pong-Caching: the router "
        "answers their pings and forwards only queries) or a bare ultrapeer's (default "
        "gtk-like)",
    )
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
    use_peers(args.peers)
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
        f"query; {args.peers} peers"
        + (" (pings answered by the router, queries forwarded)" if pings_answered() else "")
        + f"; {args.repeats} runs per figure"
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
        except* BenchError as failed:  # raised alone, or from a nursery in a group
            for exc in leaf_exceptions(failed):
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
