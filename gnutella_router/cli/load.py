"""``gnutella-router load``: drive synthetic traffic through a router and measure it."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
from pathlib import Path

import trio

from gnutella_router.cli.arguments import (
    DefaultsHelpFormatter,
    add_admin_arguments,
    add_random_seed,
    add_run_folder_arguments,
    admin_for_target,
    count,
    loopback_address,
    non_negative,
    positive,
)
from gnutella_router.cli.interrupt import INTERRUPTED, run_interruptible
from gnutella_router.lab.traffic.echo import EchoRouter
from gnutella_router.lab.traffic.load import LoadError, LoadRun, LoadSettings, Traffic
from gnutella_router.observe.admin_client import token_from
from gnutella_router.run_folder import SUMMARY, RunFolderError, start_run
from traffic_models.arrival_text import parse_arrivals
from traffic_models.arrivals import ConstantRate, Schedule
from traffic_models.generator import TrafficGenerator
from traffic_models.mix import mix_by_name_or_path
from traffic_models.trace_traffic import TraceTraffic

DEFAULT_DURATION = 10.0
"""Seconds of traffic when neither ``--duration`` nor the schedule says how long."""


def add_load_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    load = commands.add_parser(
        "load",
        help="drive open-loop synthetic traffic through a router and report per-type latency",
        description=(
            "Connect PEERS peers to a router on loopback; INJECTORS of them send traffic "
            "on an open-loop schedule, the rest sink it. Reports per-type latency "
            "(p50/p90/p99/max, measured from each message's scheduled time), copies that "
            "did not arrive, achieved rates and late sends, beside the router's own "
            "counters when its admin interface answers. Ctrl-C stops early with a partial "
            "report (exit 130); a second Ctrl-C quits at once."
        ),
        formatter_class=DefaultsHelpFormatter,
    )
    load.add_argument(
        "--target", required=True, type=loopback_address, metavar="HOST:PORT", help="router"
    )
    source = load.add_mutually_exclusive_group()
    source.add_argument(
        "--model",
        default="paper",
        help="message mix: 'paper' (15%% queries), 'trace' (pong-heavy), or a TOML/JSON file",
    )
    source.add_argument(
        "--trace", metavar="FILE", help="replay a recorded trace as the load (see --speed, --loop)"
    )
    load.add_argument("--speed", type=positive, default=1.0, help="trace playback speed factor")
    load.add_argument(
        "--loop", type=count(1, 1_000_000), default=1, metavar="N", help="play the trace N times"
    )
    rate = load.add_mutually_exclusive_group()
    rate.add_argument(
        "--rate", type=positive, default=1000.0, help="constant offered rate, messages/s"
    )
    rate.add_argument(
        "--arrivals",
        help="arrival process: constant:R, poisson:R, bursts:NxDms, steps:10s@100,10s@1000, "
        "ramp:30s@100-1000 (steps and ramps run their own length unless --duration is given)",
    )
    load.add_argument(
        "--duration",
        type=positive,
        default=None,
        help="seconds of traffic (default: the schedule's or the trace's own length, "
        f"else {DEFAULT_DURATION:g})",
    )
    load.add_argument(
        "--warmup",
        type=non_negative,
        default=0.0,
        help="seconds at the start that are sent but not timed (steady-state latency)",
    )
    load.add_argument(
        "--drain",
        type=non_negative,
        default=5.0,
        help="longest wait after the last message for copies still in flight (it ends "
        "sooner once all arrived or none came for 1 s)",
    )
    load.add_argument("--peers", type=count(2, 1024), default=4, help="peers to connect")
    load.add_argument(
        "--injectors", type=count(1, 1023), default=1, help="peers that send (fewer than --peers)"
    )
    load.add_argument("--legacy", action="store_true", help="connect with the 0.4 handshake")
    load.add_argument(
        "--respond",
        action="store_true",
        help="sinks answer pings and queries, so replies are timed as round trips",
    )
    add_random_seed(load, "the traffic model (mix, arrivals, query words)", old="--seed")
    load.add_argument(
        "--late-ms", type=positive, default=1.0, help="a send later than this is counted late"
    )
    add_admin_arguments(load)
    add_run_folder_arguments(load)
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
        formatter_class=DefaultsHelpFormatter,
    )
    echo.add_argument(
        "--listen",
        type=loopback_address,
        default="127.0.0.1:6346",
        metavar="HOST:PORT",
        help="loopback address",
    )
    echo.add_argument(
        "--delay-ms", type=non_negative, default=0.0, help="milliseconds added to every message"
    )
    echo.set_defaults(handler=cmd_echo)


def cmd_echo(args: argparse.Namespace) -> int:
    host, port = args.listen
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
        print(f"gnutella-router echo: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 1
    return 0


def _fail(text: str, status: int = 2) -> int:
    print(f"gnutella-router load: {text}", file=sys.stderr)
    return status


def cmd_load(args: argparse.Namespace) -> int:
    target: tuple[str, int] = args.target
    if args.json not in (None, "-") and not Path(args.json).parent.is_dir():
        return _fail(f"--json {args.json}: the folder {Path(args.json).parent} does not exist")
    try:
        admin = admin_for_target(args.admin, target)
    except argparse.ArgumentTypeError as exc:
        return _fail(f"--admin: {exc}")
    traffic: Traffic
    notes: list[str] = []
    try:
        if args.trace:
            trace = TraceTraffic(Path(args.trace), speed=args.speed, loops=args.loop)
            natural: float | None = trace.length
            traffic = trace
        else:
            mix = mix_by_name_or_path(args.model)
            arrivals = (
                parse_arrivals(args.arrivals, seed=args.random_seed)
                if args.arrivals
                else ConstantRate(args.rate)
            )
            natural = arrivals.total_duration if isinstance(arrivals, Schedule) else None
            traffic = TrafficGenerator(mix=mix, arrivals=arrivals, seed=args.random_seed)
        duration = args.duration or natural or DEFAULT_DURATION
        if args.duration is not None and natural is not None and args.duration != natural:
            what = "trace" if args.trace else "schedule"
            if args.duration < natural:
                notes.append(f"--duration {args.duration:g} s cuts the {natural:g} s {what} short")
            elif args.trace:
                notes.append(f"the trace ends after {natural:g} s, before --duration")
                duration = natural
            else:
                notes.append(
                    f"the schedule lasts {natural:g} s; its last rate is held for the "
                    f"remaining {args.duration - natural:g} s"
                )
        settings = LoadSettings(
            target=target,
            peers=args.peers,
            injectors=args.injectors,
            duration=duration,
            seed=args.random_seed,
            legacy=args.legacy,
            respond=args.respond,
            late_threshold_ms=args.late_ms,
            warmup=args.warmup,
            drain=args.drain,
            admin=admin,
            token=token_from(args.token),
            progress=not args.quiet and sys.stderr.isatty(),
        )
    except (OSError, ValueError) as exc:
        return _fail(str(exc))
    configuration = {
        **dataclasses.asdict(settings),
        "token": "(set)" if settings.token else "",
        "model": None if args.trace else args.model,
        "trace": args.trace,
        "arrivals": args.arrivals or f"constant:{args.rate:g}",
        "speed": args.speed if args.trace else None,
        "loop": args.loop if args.trace else None,
    }
    try:
        kept = start_run(
            "load",
            configuration,
            command=args.command_line,
            out=args.out,
            overwrite=args.overwrite,
            seed=settings.seed,
            notice=lambda text: print(f"gnutella-router load: {text}", file=sys.stderr),
        )
    except RunFolderError as exc:
        return _fail(str(exc))
    for note in notes:
        print(f"gnutella-router load: note: {note}", file=sys.stderr)
    run = LoadRun(settings, traffic)
    try:
        report = trio.run(
            functools.partial(run_interruptible, run.run, run.request_stop, command="load")
        )
    except LoadError as exc:
        kept.finish("failed")
        return _fail(str(exc), 1)
    text = report.to_text()
    print(text)
    try:
        kept.keep(SUMMARY, report.to_json())
        kept.keep("report.txt", text)
    except OSError as exc:
        print(f"gnutella-router load: results not kept: {exc}", file=sys.stderr)
    kept.finish("interrupted" if report.interrupted else "ok")
    print(f"gnutella-router load: results in {kept.folder}", file=sys.stderr)
    if args.json == "-":
        print(report.to_json())
    elif args.json:
        try:
            Path(args.json).write_text(report.to_json() + "\n")
        except OSError as exc:
            return _fail(f"--json {args.json}: {exc.strerror or exc}", 1)
    return INTERRUPTED if report.interrupted else 0
