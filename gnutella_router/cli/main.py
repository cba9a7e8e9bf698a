"""The ``gnutella-router`` command line."""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from functools import partial
from pathlib import Path

import trio

from gnutella_router import __version__, native
from gnutella_router.cli.arguments import (
    DefaultsHelpFormatter,
    add_admin_arguments,
    add_random_seed,
    add_run_folder_arguments,
    admin_for_target,
    count,
    positive,
)
from gnutella_router.cli.check_config import add_check_config_parser
from gnutella_router.cli.completion import add_completion_parser
from gnutella_router.cli.config_flags import add_config_arguments
from gnutella_router.cli.console import add_console_parser
from gnutella_router.cli.ctl import add_ctl_parser
from gnutella_router.cli.dump import add_dump_parser
from gnutella_router.cli.gwebcache import add_gwebcache_parser
from gnutella_router.cli.interrupt import INTERRUPTED, run_interruptible
from gnutella_router.cli.load import add_echo_parser, add_load_parser
from gnutella_router.cli.plot import add_plot_parser
from gnutella_router.cli.runs import add_runs_parser
from gnutella_router.cli.testnet import add_testnet_parser
from gnutella_router.observe.admin_client import token_from
from gnutella_router.observe.describe import describe_frame
from gnutella_router.run_folder import SUMMARY, RunFolderError, start_run
from protocol.codec import encode_message
from protocol.errors import RemoteProtocolError
from protocol.framing import FrameDecoder
from traffic_models.trace import MAGIC

READ_SIZE = 64 * 1024


def sample_capture(count: int, seed: int) -> bytes:
    """A reproducible stream of realistic messages, as a router would read it."""
    from traffic_models.samples import SampleFactory

    return b"".join(encode_message(m) for m in SampleFactory(seed).messages(count))


def cmd_decode(args: argparse.Namespace) -> int:
    """Print one line per message of a raw capture, a router's trace, or a sample."""
    try:
        return _decode(args)
    except BrokenPipeError:
        # `decode ... | head`: the reader has all it wanted. Point stdout at /dev/null
        # so that the interpreter's final flush does not complain a second time.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _decode(args: argparse.Namespace) -> int:
    if args.capture is None:
        data = sample_capture(args.count, args.random_seed)
        print(
            f"# sample capture: {args.count} messages, {len(data)} bytes "
            f"(random seed {args.random_seed})"
        )
        chunks: Iterable[bytes] = [data]
    else:
        path = Path(args.capture)
        try:
            with path.open("rb") as stream:
                head = stream.read(len(MAGIC))
        except OSError as exc:
            print(f"gnutella-router decode: {path}: {exc.strerror or exc}", file=sys.stderr)
            return 1
        if head == MAGIC:
            return _decode_trace(path, args.limit)
        chunks = _read_chunks(path)
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


def _decode_trace(path: Path, limit: int | None) -> int:
    """A trace written by ``run --record``: each record with its time and connection."""
    from traffic_models.trace import TraceFormatError, read_trace

    shown = 0
    try:
        for record in read_trace(
            path, on_problem=lambda problem: print(f"# {problem}", file=sys.stderr)
        ):
            if limit is None or shown < limit:
                line = describe_frame(record.frame())
                print(f"{record.at:10.6f} conn={record.connection:<4} {line}")
            shown += 1
    except (TraceFormatError, OSError) as exc:
        print(f"gnutella-router decode: {exc}", file=sys.stderr)
        return 1
    print(f"# {shown} messages (trace {path})")
    return 0


def _read_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as stream:
        yield from iter(lambda: stream.read(READ_SIZE), b"")


def cmd_sample(args: argparse.Namespace) -> int:
    data = sample_capture(args.count, args.random_seed)
    try:
        Path(args.output).write_bytes(data)
    except OSError as exc:
        print(f"gnutella-router sample: {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"wrote {args.count} messages ({len(data)} bytes) to {args.output}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from gnutella_router.cli.config_flags import config_from_args
    from gnutella_router.config import ConfigError
    from gnutella_router.daemon import Daemon
    from gnutella_router.logs import configure_logging, get_logger
    from gnutella_router.systemd import Notifier

    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"gnutella-router: configuration error: {exc}", file=sys.stderr)
        return 2
    configure_logging(config.log.format, config.log.level)
    # A reload (SIGHUP, POST /reload) reads the file again under the same flags.
    daemon = Daemon(
        config,
        config_source=partial(config_from_args, args),
        notifier=Notifier.from_environment(),
    )

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(daemon.run, handle_signals=True))

    failure: OSError | None = None
    try:
        trio.run(main)
    except* OSError as group:
        # Binding a listener (port taken, no permission) and locking the state directory
        # are what fail in practice; the error may sit several nurseries deep.
        failure = _first_leaf(group)
    finally:
        if daemon.notifier is not None:
            daemon.notifier.close()
    if failure is not None:
        # Through the configured logger, so that in JSON mode this line is JSON too. A
        # failure after the start is not a start-up problem, and says where it came from.
        log = get_logger("gnutella-router")
        if daemon.admin_address is None:  # not everything was up yet
            log.error("cannot start", error=str(failure))
        else:
            log.error("stopped by an error", error=repr(failure), exc_info=failure)
        return 1
    return 0


# --- trace recording, replay and summary ---------------------------------------------


def _absolute_path(text: str) -> str:
    """A path given on the command line is relative to where the command runs."""
    return os.path.abspath(text)


def cmd_replay(args: argparse.Namespace) -> int:
    """Replay a trace; Ctrl-C stops it with a partial summary (exit 130)."""
    from gnutella_router.lab.traffic.replay import ReplayControl, ReplayError, parse_target, replay

    control = ReplayControl()
    try:
        target = parse_target(args.target)
        try:
            admin = admin_for_target(args.admin, target)
        except argparse.ArgumentTypeError as exc:
            raise ReplayError(f"--admin: {exc}") from None
        work = functools.partial(
            replay,
            Path(args.trace),
            target,
            speed=args.speed,
            loops=args.loop,
            peers=args.peers,
            on_problem=lambda problem: print(f"warning: {problem}", file=sys.stderr),
            control=control,
            admin=admin,
            token=token_from(args.token),
        )
        configuration = {
            "trace": os.path.abspath(args.trace),
            "target": args.target,
            "speed": args.speed,
            "loop": args.loop,
            "peers": args.peers,
            "admin": None if admin is None else f"{admin[0]}:{admin[1]}",
        }
        kept = start_run(
            "replay",
            configuration,
            command=args.command_line,
            out=args.out,
            overwrite=args.overwrite,
            notice=lambda text: print(f"gnutella-router replay: {text}", file=sys.stderr),
        )
    except (ReplayError, RunFolderError) as exc:
        print(f"gnutella-router replay: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, RunFolderError) else 1
    try:
        summary = trio.run(
            functools.partial(run_interruptible, work, control.request_stop, command="replay")
        )
    except ReplayError as exc:
        kept.finish("failed")
        print(f"gnutella-router replay: {exc}", file=sys.stderr)
        return 1
    text = summary.format()
    print(text)
    try:
        kept.keep(SUMMARY, json.dumps(summary.as_json(), indent=2, sort_keys=True))
        kept.keep("report.txt", text)
    except OSError as exc:
        print(f"gnutella-router replay: results not kept: {exc}", file=sys.stderr)
    kept.finish("interrupted" if summary.interrupted else "ok")
    print(f"gnutella-router replay: results in {kept.folder}", file=sys.stderr)
    return INTERRUPTED if summary.interrupted else 0


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
        "replay",
        help="replay a recorded trace into a router on this machine",
        description="Play a trace recorded with `run --record` into a router on loopback, "
        "at its recorded pace (or --speed X), and report what came back: copies of the "
        "trace's pings and queries at the replay's other peers (latency and duplicates), "
        "replies, and the router's own counters (what it read, forwarded and dropped, and "
        "why) when its admin interface answers. Ctrl-C stops early with a partial summary "
        "(exit 130); a second Ctrl-C quits at once.",
        formatter_class=DefaultsHelpFormatter,
    )
    replay.add_argument("trace", help="trace file (a rotated set is read from its base name)")
    replay.add_argument(
        "--target", required=True, metavar="HOST:PORT", help="the router (loopback only)"
    )
    replay.add_argument(
        "--speed",
        type=positive,
        default=1.0,
        metavar="X",
        help="play X times as fast as recorded (default 1)",
    )
    replay.add_argument(
        "--loop",
        type=count(1, 1_000_000),
        default=1,
        metavar="N",
        help="play the trace N times, with fresh GUIDs each pass (default 1)",
    )
    replay.add_argument(
        "--peers",
        type=count(1, 256),
        default=None,
        metavar="K",
        help="connections to open (default: one per connection in the trace, at most 16)",
    )
    add_admin_arguments(replay)
    add_run_folder_arguments(replay)
    replay.set_defaults(handler=cmd_replay)
    summary = commands.add_parser(
        "trace-summary", help="counts, rates and TTL/hops histograms of a trace"
    )
    summary.add_argument("trace", help="trace file (a rotated set is read from its base name)")
    summary.add_argument("--png", metavar="FILE", help="also draw the figures into a PNG file")
    summary.add_argument(
        "--bucket",
        type=positive,
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


class _VersionAction(argparse.Action):
    """``--version``: the version, and whether the hot path runs compiled (found only
    when asked, so that other commands do not import the hot modules to build help)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(f"{parser.prog} {__version__}; {native.describe()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gnutella-router", description="A Gnutella 0.6 packet router and its tools."
    )
    parser.add_argument(
        "--version",
        action=_VersionAction,
        help="show the version and whether the hot path runs compiled, and exit",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser(
        "run", help="run the router daemon (defaults work with no configuration file)"
    )
    add_config_arguments(run)
    run.set_defaults(handler=cmd_run)

    decode = commands.add_parser(
        "decode",
        help="decode a raw Gnutella message stream or a trace, one line per message",
        description="Print one line per message of a raw capture (back-to-back messages), "
        "of a trace written by `run --record` (recognised by its header), or of a "
        "built-in sample.",
        formatter_class=DefaultsHelpFormatter,
    )
    decode.add_argument(
        "capture", nargs="?", help="capture or trace file (default: a built-in sample)"
    )
    decode.add_argument(
        "--count", type=count(1, 10_000_000), default=20, help="sample size without a file"
    )
    add_random_seed(decode, "the built-in sample (without a file)", old="--seed")
    decode.add_argument(
        "--limit", type=count(0, 2**62), default=None, help="print at most this many"
    )
    decode.add_argument(
        "--max-payload", type=count(0, 2**31), default=64 * 1024, help="longest payload, bytes"
    )
    decode.set_defaults(handler=cmd_decode)

    sample = commands.add_parser(
        "sample",
        help="write a sample capture file",
        formatter_class=DefaultsHelpFormatter,
    )
    sample.add_argument("output", help="file to write")
    sample.add_argument(
        "--count", type=count(1, 10_000_000), default=1000, help="messages to write"
    )
    add_random_seed(sample, "the sample", old="--seed")
    sample.set_defaults(handler=cmd_sample)
    _add_trace_commands(commands, run)
    add_load_parser(commands)
    add_echo_parser(commands)
    add_dump_parser(commands)
    add_testnet_parser(commands)
    add_console_parser(commands)
    add_gwebcache_parser(commands)
    add_plot_parser(commands)
    add_ctl_parser(commands)
    add_check_config_parser(commands)
    add_runs_parser(commands)
    add_completion_parser(commands, build_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # What a kept run's manifest records as its command line.
    args.command_line = ["gnutella-router", *(sys.argv[1:] if argv is None else argv)]
    handler = args.handler
    result: int = handler(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
