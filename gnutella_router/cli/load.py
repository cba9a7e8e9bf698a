"""``gnutella-router load``: drive synthetic traffic through a router and measure it."""

from __future__ import annotations

import argparse
import ipaddress
import sys
from pathlib import Path

import trio

from gnutella_router.traffic.echo import EchoRouter
from gnutella_router.traffic.load import LoadError, LoadSettings, Traffic, run_load
from traffic_models.arrivals import ConstantRate, parse_arrivals
from traffic_models.generator import TrafficGenerator
from traffic_models.mix import mix_by_name_or_path
from traffic_models.trace_traffic import TraceTraffic


def add_load_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    load = commands.add_parser(
        "load",
        help="drive open-loop synthetic traffic through a router and report per-type latency",
        description=(
            "Connect PEERS peers to a router on loopback; INJECTORS of them send traffic "
            "on an open-loop schedule, the rest sink it. Reports per-type latency "
            "(p50/p90/p99/max, measured from each message's scheduled time), loss, "
            "achieved rates and late sends."
        ),
    )
    load.add_argument("--target", required=True, metavar="HOST:PORT", help="router to load")
    source = load.add_mutually_exclusive_group()
    source.add_argument(
        "--model",
        default="paper",
        help="message mix: 'paper' (15%% queries), 'trace' (pong-heavy), or a TOML/JSON file",
    )
    source.add_argument(
        "--trace", metavar="FILE", help="replay a recorded trace as the load (with --speed)"
    )
    load.add_argument("--speed", type=float, default=1.0, help="trace playback speed factor")
    rate = load.add_mutually_exclusive_group()
    rate.add_argument("--rate", type=float, help="constant offered rate, messages/s")
    rate.add_argument(
        "--arrivals",
        help="arrival process: constant:R, poisson:R, bursts:NxDms, steps:10s@100,10s@1000, "
        "ramp:30s@100-1000",
    )
    load.add_argument("--duration", type=float, default=10.0, help="seconds of traffic")
    load.add_argument(
        "--warmup",
        type=float,
        default=0.0,
        help="seconds at the start that are sent but not timed (steady-state latency)",
    )
    load.add_argument("--peers", type=int, default=4, help="peers to connect (default 4)")
    load.add_argument("--injectors", type=int, default=1, help="peers that send (default 1)")
    load.add_argument("--legacy", action="store_true", help="connect with the 0.4 handshake")
    load.add_argument(
        "--respond",
        action="store_true",
        help="sinks answer pings and queries, so replies are timed as round trips",
    )
    load.add_argument("--seed", type=int, default=1)
    load.add_argument(
        "--late-ms", type=float, default=1.0, help="a send later than this is counted late"
    )
    load.add_argument(
        "--json", metavar="FILE", help="also write the results as JSON ('-' = stdout)"
    )
    load.add_argument("--quiet", action="store_true", help="no live progress line")
    load.set_defaults(handler=cmd_load)


def add_echo_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    echo = commands.add_parser(
        "echo",
        help="a stand-in router with a known delay, to calibrate the load client",
        description=(
            "Accept peers and copy every message to every other peer after DELAY_MS, with "
            "no routing at all: a target whose latency is known by construction, so "
            "`gnutella-router load` against it shows the client's own error. Runs until "
            "Ctrl-C."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    echo.add_argument(
        "--listen", default="127.0.0.1:6346", metavar="HOST:PORT", help="loopback address"
    )
    echo.add_argument(
        "--delay-ms", type=float, default=0.0, help="milliseconds added to every message"
    )
    echo.set_defaults(handler=cmd_echo)


def cmd_echo(args: argparse.Namespace) -> int:
    host, port = _loopback_target(args.listen, command="echo")
    if not args.delay_ms >= 0:
        print("gnutella-router echo: --delay-ms must be 0 or more", file=sys.stderr)
        return 2
    echo = EchoRouter(delay=args.delay_ms / 1000, host=host, port=port)

    async def serve() -> None:
        async with trio.open_nursery() as nursery:
            address = await nursery.start(echo.serve)
            print(
                f"echo stand-in on {address[0]}:{address[1]}, delay {args.delay_ms:g} ms",
                file=sys.stderr,
                flush=True,
            )

    try:
        trio.run(serve)
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        print(f"gnutella-router echo: cannot listen on {args.listen}: {exc}", file=sys.stderr)
        return 1
    return 0


def _loopback_target(text: str, command: str = "load") -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError
    except ValueError:
        if host != "localhost":
            raise SystemExit(
                f"gnutella-router {command}: {text}: only loopback addresses are allowed"
            ) from None
    try:
        return host, int(port)
    except ValueError:
        raise SystemExit(f"gnutella-router {command}: {text}: not HOST:PORT") from None


def cmd_load(args: argparse.Namespace) -> int:
    target = _loopback_target(args.target)
    try:
        mix = mix_by_name_or_path(args.model)
        if args.arrivals:
            arrivals = parse_arrivals(args.arrivals, seed=args.seed)
        else:
            arrivals = ConstantRate(args.rate if args.rate else 1000.0)
        settings = LoadSettings(
            target=target,
            peers=args.peers,
            injectors=args.injectors,
            duration=args.duration,
            seed=args.seed,
            legacy=args.legacy,
            respond=args.respond,
            late_threshold_ms=args.late_ms,
            warmup=args.warmup,
            progress=not args.quiet and sys.stderr.isatty(),
        )
    except ValueError as exc:
        print(f"gnutella-router load: {exc}", file=sys.stderr)
        return 2
    traffic: Traffic
    if args.trace:
        try:
            traffic = TraceTraffic(Path(args.trace), speed=args.speed)
        except (OSError, ValueError) as exc:
            print(f"gnutella-router load: {exc}", file=sys.stderr)
            return 2
    else:
        traffic = TrafficGenerator(mix=mix, arrivals=arrivals, seed=args.seed)
    try:
        report = trio.run(run_load, settings, traffic)
    except LoadError as exc:
        print(f"gnutella-router load: {exc}", file=sys.stderr)
        return 1
    print(report.to_text())
    if args.json == "-":
        print(report.to_json())
    elif args.json:
        Path(args.json).write_text(report.to_json() + "\n")
    return 0
