"""Benchmark the wire format: framing throughput and full payload parses per type.

Run from the repository root, in the project's virtual environment:

    .venv/bin/python scripts/bench_protocol.py            # print the figures
    .venv/bin/python scripts/bench_protocol.py --write    # also update docs/benchmarks.md

Every figure is the median of several repetitions, and each fast path is timed side by
side with the construct declaration it replaces, in the same run, so the ratio holds
even on a noisy machine. One core, no I/O: bytes already in memory.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

from gnutella_router import native
from protocol.codec import encode_message, parse_payload, parse_payload_spec
from protocol.constants import MessageType
from protocol.framing import FrameDecoder
from protocol.header import decode_header
from protocol.spec import Header
from scripts.benchdocs import machine, provenance, replace_section
from traffic_models.samples import TRACE_LIKE_MIX, SampleFactory

FRAMING_FLOOR = 500_000
PARSE_FLOORS: dict[int, int] = {MessageType.PONG: 50_000, MessageType.QUERY: 50_000}


def median_rate(count: int, run: Callable[[], object], repeats: int) -> float:
    """Operations per second, the median over ``repeats`` timed runs of ``count`` ops."""
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        rates.append(count / (time.perf_counter() - start))
    return statistics.median(rates)


def chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def bench_framing(stream: bytes, count: int, chunk_size: int, repeats: int) -> float:
    pieces = chunks(stream, chunk_size)

    def run() -> None:
        decoder = FrameDecoder()
        decoded = 0
        for piece in pieces:
            decoded += len(decoder.receive_data(piece))
        assert decoded == count, decoded

    return median_rate(count, run, repeats)


def bench_header(headers: Sequence[bytes], repeats: int) -> tuple[float, float]:
    def fast() -> None:
        for h in headers:
            decode_header(h)

    def spec() -> None:
        for h in headers[: len(headers) // 20]:
            Header.parse(h)

    return (
        median_rate(len(headers), fast, repeats),
        median_rate(len(headers) // 20, spec, repeats),
    )


def bench_parse(message_type: int, payloads: Sequence[bytes], repeats: int) -> tuple[float, float]:
    def fast() -> None:
        for p in payloads:
            parse_payload(message_type, p)

    few = payloads[: max(1, len(payloads) // 5)]

    def spec() -> None:
        for p in few:
            parse_payload_spec(message_type, p)

    return median_rate(len(payloads), fast, repeats), median_rate(len(few), spec, repeats)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=50_000, help="messages in the corpus")
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per figure")
    parser.add_argument("--random-seed", "--seed", dest="seed", type=int, default=1)
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args(argv)

    factory = SampleFactory(args.seed)
    messages = factory.messages(args.messages, TRACE_LIKE_MIX)
    wires = [encode_message(m) for m in messages]
    stream = b"".join(wires)
    mean_size = len(stream) / len(wires)

    rows: list[tuple[str, str, str, str]] = []
    failures: list[str] = []
    print(f"corpus: {len(wires)} messages, {len(stream)} bytes, mean {mean_size:.1f} B/message")
    shares = (f"{MessageType(t).name.lower()} {w:.0%}" for t, w in TRACE_LIKE_MIX.items())
    print(f"mix: {', '.join(shares)}")

    for chunk_size in (4096, 65536):
        rate = bench_framing(stream, len(wires), chunk_size, args.repeats)
        note = f"floor {FRAMING_FLOOR:,}/s" + ("" if rate >= FRAMING_FLOOR else " MISSED")
        if rate < FRAMING_FLOOR:
            failures.append(f"framing ({chunk_size} B reads)")
        rows.append(
            (
                f"framing decoder, {chunk_size} B reads",
                f"{rate:,.0f} msgs/s",
                f"{rate * mean_size / 1e6:.0f} MB/s",
                note,
            )
        )

    fast_h, spec_h = bench_header([w[:23] for w in wires], args.repeats)
    rows.append(
        (
            "header decode: struct fast path",
            f"{fast_h:,.0f} /s",
            "",
            f"{fast_h / spec_h:.0f}x the spec",
        )
    )
    rows.append(("header decode: construct declaration", f"{spec_h:,.0f} /s", "", "oracle"))

    for message_type in TRACE_LIKE_MIX:
        payloads = [
            w[23:] for w, m in zip(wires, messages, strict=True) if m.payload_type == message_type
        ]
        fast, spec = bench_parse(message_type, payloads, args.repeats)
        name = MessageType(message_type).name.lower().replace("_", " ")
        floor = PARSE_FLOORS.get(message_type)
        note = f"{fast / spec:.1f}x the spec"
        if floor:
            note += f"; floor {floor:,}/s" + ("" if fast >= floor else " MISSED")
            if fast < floor:
                failures.append(f"{name} parse")
        rows.append((f"full parse: {name}", f"{fast:,.0f} /s", f"spec {spec:,.0f} /s", note))

    width = max(len(r[0]) for r in rows)
    for label, figure, extra, note in rows:
        print(f"{label:<{width}}  {figure:>18}  {extra:>18}  {note}")

    if args.write:
        write_section(rows, len(wires), len(stream), mean_size, args)
    if failures:
        print("below floor: " + ", ".join(failures))
        return 1
    return 0


def write_section(
    rows: list[tuple[str, str, str, str]],
    count: int,
    size: int,
    mean_size: float,
    args: argparse.Namespace,
) -> None:
    lines = [
        "## Wire format (`scripts/bench_protocol.py`)",
        "",
        f"Measured {provenance()} on {machine()}, one core, data in memory; {native.describe()} "
        "(the framing decoder is the one hot module timed here; the full parses are "
        "interpreted either way).",
        f"Corpus: {count:,} messages ({size:,} bytes, mean {mean_size:.1f} B) drawn with seed "
        f"{args.seed} from the trace-like mix (50 % pong, 25 % ping, 15 % query, 8 % query hit, "
        "2 % push). Each figure is the median of "
        f"{args.repeats} runs; fast paths and the construct declaration were timed side by side.",
        "",
        "| what | rate | also | note |",
        "|---|---:|---:|---|",
        *(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows),
        "",
        "Rerun: `.venv/bin/python scripts/bench_protocol.py --write`"
        " (exits 1 if a floor is missed).",
    ]
    print(f"wrote {replace_section('bench_protocol', lines)}")


if __name__ == "__main__":
    raise SystemExit(main())
