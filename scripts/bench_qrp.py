"""Benchmark QRP: what a query costs to check against a leaf's table, and a table's intake.

Run from the repository root, in the project's virtual environment:

    python scripts/bench_qrp.py            # print the figures
    python scripts/bench_qrp.py --write    # also update docs/benchmarks.md

The router works out a query's QRP words once per batch and then asks each leaf's table
(:meth:`protocol.qrp.QrpTable.matches`); both are timed here apart, on queries drawn
from a vocabulary like the traffic model's (two or three words each), against a
65,536-slot table holding 2,000 of those words (a leaf with a few hundred files). A
table's intake is timed too: RESET plus one compressed 4-bit PATCH, as gtk-gnutella
leaves send it. Medians of several repetitions; one core, no I/O.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchdocs import machine, replace_section

from gnutella_router.stages.query_routing import qrp_hashcodes
from protocol.codec import encode_message
from protocol.messages import Message, Query, random_guid
from protocol.qrp import QrpReceiver, QrpTable, table_messages

VOCABULARY = 20_000
SHARED_WORDS = 2_000
QUERIES = 20_000


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per figure")
    parser.add_argument("--seed", type=int, default=1, help="seed of the vocabulary")
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()

    rng = random.Random(args.seed)
    words = [f"w{rng.getrandbits(40):x}" for _ in range(VOCABULARY)]
    table = QrpTable.of_words(rng.sample(words, SHARED_WORDS))
    queries = [
        encode_message(
            Message(
                random_guid(), 3, 1, Query(" ".join(rng.sample(words, rng.randint(2, 3))).encode())
            )
        )
        for _ in range(QUERIES)
    ]
    word_lists = [qrp_hashcodes(q) for q in queries]

    words_s = median_seconds(lambda: [qrp_hashcodes(q) for q in queries], args.repeats)
    match_s = median_seconds(lambda: [table.matches_hashcodes(w) for w in word_lists], args.repeats)
    messages = table_messages(table, entry_bits=4, patch_bytes=65536)

    def intake() -> None:
        receiver = QrpReceiver()
        for message in messages:
            receiver.receive(message)

    intake_s = median_seconds(intake, args.repeats)
    per_words = words_s / QUERIES * 1e6
    per_match = match_s / QUERIES * 1e6
    lines = [
        f"Measured on {machine()}.",
        "",
        "| what | cost |",
        "|---|---|",
        f"| a query's QRP words, hashed (once per query and batch) | {per_words:.2f} µs |",
        f"| one table asked about a query | {per_match:.2f} µs |",
        f"| a 65,536-slot table received (RESET, one zlib 4-bit PATCH) | {intake_s * 1e3:.1f} ms |",
        "",
        f"A query to N leaves costs about {per_words:.1f} + N x {per_match:.1f} µs of router "
        "CPU; peers that are not leaves, and routers without leaves or last-hop tables, pay "
        "nothing. Rerun with `python scripts/bench_qrp.py --write`.",
    ]
    print("\n".join(lines))
    if args.write:
        path = replace_section("bench-qrp", ["## QRP (`scripts/bench_qrp.py`)", "", *lines])
        print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
