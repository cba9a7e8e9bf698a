"""The ``gnutella-router`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from protocol.codec import encode_message
from protocol.errors import RemoteProtocolError
from protocol.framing import FrameDecoder

from . import __version__
from .config import add_config_arguments
from .describe import describe_frame

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

    from .config import ConfigError, config_from_args
    from .daemon import Daemon
    from .logs import configure_logging

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
        # Binding the listener is what fails in practice (port taken, no permission).
        failure = group.exceptions[0]  # type: ignore[assignment]
    if failure is not None:
        print(f"gnutella-router: cannot start: {failure}", file=sys.stderr)
        return 1
    return 0


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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = args.handler
    result: int = handler(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
