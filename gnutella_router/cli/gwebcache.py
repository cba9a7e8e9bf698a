"""``gnutella-router gwebcache``: a GWebCache service routers on many machines bootstrap from."""

from __future__ import annotations

import argparse
import signal
import sys
from functools import partial

import trio

from gnutella_router.cli.arguments import count, non_negative, positive
from gnutella_router.cli.interrupt import INTERRUPTED
from gnutella_router.config import ConfigError, parse_host_port


def listen_address(text: str) -> tuple[str, int]:
    try:
        return parse_host_port(text, key="--listen")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def literal_host(text: str) -> tuple[str, int]:
    from gnutella_router.discovery.gwebcache import parse_literal_host_port

    host = parse_literal_host_port(text)
    if host is None:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a literal IP:PORT")
    return host


def add_gwebcache_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "gwebcache",
        help="run a GWebCache (v1 and v2) that routers bootstrap from and report to",
        description=(
            "Serve a GWebCache: servents ask it for hosts (get=1, hostfile=1) and caches "
            "(urlfile=1) and register themselves (update=1&ip=IP:PORT); an update may only "
            "name the requester's own address unless --trust-updates. Point routers at it "
            'with catcher.gwebcache = "http://HOST:PORT/". Runs until Ctrl-C (exit 130) '
            "or SIGTERM (exit 0)."
        ),
    )
    parser.add_argument(
        "--listen",
        type=listen_address,
        default="127.0.0.1:8080",
        metavar="HOST:PORT",
        help="where to serve (default 127.0.0.1:8080; 0.0.0.0:8080 for other machines)",
    )
    parser.add_argument(
        "--max-hosts", type=count(1, 100_000), default=200, metavar="N",
        help="hosts kept, the stalest dropped first (default 200)",
    )  # fmt: skip
    parser.add_argument(
        "--host-max-age", type=positive, default=3600.0, metavar="S",
        help="seconds a host is kept without a new update (default 3600)",
    )  # fmt: skip
    parser.add_argument(
        "--answer-hosts", type=count(1, 1000), default=20, metavar="N",
        help="hosts in one answer, the freshest first (default 20)",
    )  # fmt: skip
    parser.add_argument(
        "--client-interval", type=non_negative, default=0.0, metavar="S",
        help="least seconds between two host requests from one address; sooner gets "
        "'You came back too early' (default 0: no limit)",
    )  # fmt: skip
    parser.add_argument(
        "--trust-updates", action="store_true",
        help="accept updates naming any address, not only the requester's own",
    )  # fmt: skip
    parser.add_argument(
        "--seed-host", type=literal_host, action="append", default=[], metavar="IP:PORT",
        help="a host to list from the start, never expired; it fills answers that have "
        "too few reported hosts; repeatable (at most 100)",
    )  # fmt: skip
    parser.add_argument(
        "--log-format", choices=("auto", "console", "json"), default="auto",
        help="log output (default auto)",
    )  # fmt: skip
    parser.set_defaults(handler=cmd_gwebcache)


def cmd_gwebcache(args: argparse.Namespace) -> int:
    from gnutella_router.discovery.gwebcache_server import GWebCacheServer
    from gnutella_router.discovery.gwebcache_service import (
        MAX_SEEDS,
        GWebCacheService,
        ServiceSettings,
    )
    from gnutella_router.logs import configure_logging

    if len(set(args.seed_host)) > MAX_SEEDS:
        print(f"gnutella-router gwebcache: at most {MAX_SEEDS} --seed-host", file=sys.stderr)
        return 2

    configure_logging(args.log_format, "info")
    settings = ServiceSettings(
        max_hosts=args.max_hosts,
        host_max_age=args.host_max_age,
        answer_hosts=args.answer_hosts,
        client_interval=args.client_interval,
        trust_updates=args.trust_updates,
    )
    host, port = args.listen

    async def serve() -> None:
        service = GWebCacheService(settings, clock=trio.current_time)
        for seed in args.seed_host:
            service.add_seed(seed)
        server = GWebCacheServer(service)
        async with trio.open_nursery() as nursery:
            where = await nursery.start(partial(server.serve, host, port))
            shown = ", ".join(
                f"http://{h}:{p}/" if ":" not in h else f"http://[{h}]:{p}/" for h, p in where
            )
            print(f"gwebcache serving on {shown}", file=sys.stderr, flush=True)
            with trio.open_signal_receiver(signal.SIGTERM) as signals:
                async for _ in signals:
                    break
            print(
                f"gwebcache stopped: {service.statistics.requests} requests, "
                f"{len(service.hosts)} hosts known",
                file=sys.stderr,
                flush=True,
            )
            nursery.cancel_scope.cancel()

    try:
        trio.run(serve)
    except KeyboardInterrupt:
        return INTERRUPTED
    except OSError as exc:
        print(f"gnutella-router gwebcache: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 1
    return 0
