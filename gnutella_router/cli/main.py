"""The ``gnutella-router`` command line."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from gnutella_router import __version__
from gnutella_router.cli.dump import add_dump_parser
from gnutella_router.cli.load import add_echo_parser, add_load_parser
from gnutella_router.cli.testnet import add_testnet_parser
from gnutella_router.config import add_config_arguments
from gnutella_router.observe.describe import describe_frame
from protocol.codec import encode_message
from protocol.errors import RemoteProtocolError
from protocol.framing import FrameDecoder

READ_SIZE = 64 * 1024


def sample_capture(count: int, seed: int) -> bytes:
    """A reproducible stream of realistic messages, as a router would read it."""
    from traffic_models.samples import SampleFactory

    return b"".join(encode_message(m) for m in SampleFactory(seed).messages(count))


def cmd_decode(args: argparse.Namespace) -> int:
    if args.capture is None:
        data = sample_capture(args.count, args.seed)
        print(f"# sample capture: {args.count} messages, {len(data)} bytes (seed {args.seed})")
        chunks = [data]
    else:
        chunks = _read_chunks(Path(args.capture))
    decoder = FrameDecoder(max_payload=args.max_payload)
    shown = 0
    try:
        for chunk in chunks:
            for frame in decoder.receive_data(chunk):
                if args.limit is None or shown < args.limit:
                    print(describe_frame(frame))
                shown += 1
        decoder.receive_data(b"")
    except RemoteProtocolError as exc:
        for frame in getattr(exc, "frames", ()):
            print(describe_frame(frame))
            shown += 1
        print(f"# stream error after {shown} messages: {exc.reason}", file=sys.stderr)
        return 1
    print(f"# {shown} messages")
    return 0


def _read_chunks(path: Path) -> list[bytes]:
    with path.open("rb") as stream:
        return list(iter(lambda: stream.read(READ_SIZE), b""))


def cmd_sample(args: argparse.Namespace) -> int:
    data = sample_capture(args.count, args.seed)
    Path(args.output).write_bytes(data)
    print(f"wrote {args.count} messages ({len(data)} bytes) to {args.output}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    import trio

    from gnutella_router.config import ConfigError, config_from_args
    from gnutella_router.daemon import Daemon
    from gnutella_router.logs import configure_logging

    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"gnutella-router: configuration error: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.log.format, config.log.level)
    daemon = Daemon(config)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(daemon.run, handle_signals=True))

    failure: OSError | None = None
    try:
        trio.run(main)
    except* OSError as group:
        # Binding a listener is what fails in practice (port taken, no permission); the
        # error may sit several nurseries deep.
        failure = _first_leaf(group)
    if failure is not None:
        print(f"gnutella-router: cannot start: {failure}", file=sys.stderr)
        return 1
    return 0


# --- trace recording, replay and summary ---------------------------------------------


def _absolute_path(text: str) -> str:
    """A path given on the command line is relative to where the command runs."""
    return os.path.abspath(text)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive number")
    return value


def _count(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not text.isdigit() or not low <= int(text) <= high:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number {low} to {high}")
        return int(text)

    return parse


def cmd_replay(args: argparse.Namespace) -> int:
    from gnutella_router.traffic.replay import run_replay

    return run_replay(
        Path(args.trace),
        args.target,
        speed=args.speed,
        loops=args.loop,
        peers=args.peers,
        warn=lambda text: print(text, file=sys.stderr),
    )


def cmd_trace_summary(args: argparse.Namespace) -> int:
    from traffic_models.trace import TraceFormatError
    from traffic_models.trace_summary import (
        PlotUnavailableError,
        format_summary,
        plot_summary,
        summarize_trace,
    )

    try:
        summary = summarize_trace(Path(args.trace), bucket=args.bucket)
    except (TraceFormatError, OSError) as exc:
        print(f"gnutella-router trace-summary: {exc}", file=sys.stderr)
        return 1
    print(format_summary(summary))
    if args.png is not None:
        try:
            plot_summary(summary, Path(args.png), title=Path(args.trace).name)
        except (PlotUnavailableError, OSError) as exc:
            print(f"gnutella-router trace-summary: {exc}", file=sys.stderr)
            return 1
        print(f"wrote {args.png}")
    return 0


def _add_trace_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], run: argparse.ArgumentParser
) -> None:
    run.add_argument(
        "--record",
        metavar="FILE",
        type=_absolute_path,
        help="record every message peers send into this trace file (relative to the "
        "current directory; overrides trace.record)",
    )
    replay = commands.add_parser(
        "replay", help="replay a recorded trace into a router on this machine"
    )
    replay.add_argument("trace", help="trace file (a rotated set is read from its base name)")
    replay.add_argument(
        "--target", required=True, metavar="HOST:PORT", help="the router (loopback only)"
    )
    replay.add_argument(
        "--speed",
        type=_positive,
        default=1.0,
        metavar="X",
        help="play X times as fast as recorded (default 1)",
    )
    replay.add_argument(
        "--loop",
        type=_count(1, 1_000_000),
        default=1,
        metavar="N",
        help="play the trace N times, with fresh GUIDs each pass (default 1)",
    )
    replay.add_argument(
        "--peers",
        type=_count(1, 256),
        default=None,
        metavar="K",
        help="connections to open (default: one per connection in the trace, at most 16)",
    )
    replay.set_defaults(handler=cmd_replay)
    summary = commands.add_parser(
        "trace-summary", help="counts, rates and TTL/hops histograms of a trace"
    )
    summary.add_argument("trace", help="trace file (a rotated set is read from its base name)")
    summary.add_argument("--png", metavar="FILE", help="also draw the figures into a PNG file")
    summary.add_argument(
        "--bucket",
        type=_positive,
        default=1.0,
        metavar="SECONDS",
        help="time bucket for rates (default 1)",
    )
    summary.set_defaults(handler=cmd_trace_summary)


# --- end of trace commands -----------------------------------------------------------


def _first_leaf(error: BaseException) -> OSError | None:
    """The first OSError inside (possibly nested) exception groups."""
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _first_leaf(inner)
            if found is not None:
                return found
        return None
    return error if isinstance(error, OSError) else None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gnutella-router", description="A Gnutella 0.6 packet router and its tools."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser(
        "run", help="run the router daemon (defaults work with no configuration file)"
    )
    add_config_arguments(run)
    run.set_defaults(handler=cmd_run)

    decode = commands.add_parser(
        "decode", help="decode a raw Gnutella message stream and print one line per message"
    )
    decode.add_argument(
        "capture", nargs="?", help="file of back-to-back messages (default: a built-in sample)"
    )
    decode.add_argument("--count", type=int, default=20, help="sample size when no file is given")
    decode.add_argument("--seed", type=int, default=1, help="sample seed when no file is given")
    decode.add_argument("--limit", type=int, default=None, help="print at most this many")
    decode.add_argument("--max-payload", type=int, default=64 * 1024)
    decode.set_defaults(handler=cmd_decode)

    sample = commands.add_parser("sample", help="write a sample capture file")
    sample.add_argument("output")
    sample.add_argument("--count", type=int, default=1000)
    sample.add_argument("--seed", type=int, default=1)
    sample.set_defaults(handler=cmd_sample)
    _add_trace_commands(commands, run)
    add_load_parser(commands)
    add_echo_parser(commands)
    add_dump_parser(commands)
    add_testnet_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = args.handler
    result: int = handler(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
