"""Benchmark QRP: a query checked against leaves' tables, and tables taken in, resized and
merged, this checkout against the per-slot code of commit aea9480.

Run from the repository root, in the project's virtual environment:

    .venv/bin/python scripts/bench_qrp.py            # print the figures
    .venv/bin/python scripts/bench_qrp.py --write    # also update docs/benchmarks.md

Routing: the router works out a query's QRP words once per batch and then asks each
leaf's table (:meth:`protocol.qrp.QrpTable.matches_hashcodes`); both are timed apart, on
queries drawn from a vocabulary (two or three words each) against a 65,536-slot table
holding 2,000 of those words.

Tables: the CPU time of the work a peer's tables cost the router's thread, worst cases
at gtk-gnutella's limits: a RESET and one zlib PATCH that fills every slot of a
2**21-slot table (8-bit and 4-bit entries: about 2 KB on the wire either way), that
table resized to the 65,536 slots of our last-hop table, and the union of 64 such
leaves' tables (what ``/metrics``, ``/qrp`` and the last-hop send asked for whenever a
leaf's table changed). "Before" is ``protocol/qrp.py`` as of commit aea9480, read from
git and imported beside this one, which applied patches and resized tables a slot at a
time in Python; its union of 64 tables took minutes, so it is timed for one table and
multiplied by 64 (it did the same work for each). Medians of several runs of
``time.process_time``; one core, no I/O.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import importlib.util
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from gnutella_router.routing.query_routing import LAST_HOP_TABLE_SLOTS, qrp_hashcodes
from protocol import qrp as qrp_now
from protocol.codec import encode_message
from protocol.messages import Message, QrpPatch, QrpReset, Query, random_guid
from protocol.qrp import QrpTable, table_messages
from protocol.qrp_leaves import TableUnion
from scripts import ROOT
from scripts.benchdocs import commit, machine, replace_section

BEFORE = "aea9480"
"""The last commit whose QRP code worked a slot at a time."""
VOCABULARY = 20_000
SHARED_WORDS = 2_000
QUERIES = 20_000
LARGEST = 1 << 21
LEAVES = 64


def cpu_seconds(run: Callable[[], object], repeats: int) -> float:
    """The median CPU time of ``repeats`` runs of ``run``."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        run()
        times.append(time.process_time() - start)
    return statistics.median(times)


def shown(seconds: float) -> str:
    """A CPU time as a table shows it: µs below a millisecond, else ms."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:,.0f} µs"
    return f"{seconds * 1e3:,.1f} ms" if seconds < 0.1 else f"{seconds * 1e3:,.0f} ms"


def module_before() -> ModuleType:
    """``protocol/qrp.py`` as of :data:`BEFORE`, imported as ``protocol._qrp_before``
    (its relative imports resolve to this checkout's protocol package, unchanged since)."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{BEFORE}:protocol/qrp.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp(prefix="bench_qrp_")) / "qrp_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("protocol._qrp_before", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def intake(qrp: Any, messages: list[QrpReset | QrpPatch]) -> Any:
    """The table ``messages`` make, received by ``qrp``'s receiver."""
    receiver = qrp.QrpReceiver()
    for message in messages:
        receiver.receive(message)
    assert receiver.table is not None
    return receiver.table


def routing_figures(args: argparse.Namespace) -> list[str]:
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
    words_s = cpu_seconds(lambda: [qrp_hashcodes(q) for q in queries], args.repeats)
    match_s = cpu_seconds(lambda: [table.matches_hashcodes(w) for w in word_lists], args.repeats)
    per_words = words_s / QUERIES * 1e6
    per_match = match_s / QUERIES * 1e6
    messages = table_messages(table, entry_bits=4, patch_bytes=65536)
    intake_s = cpu_seconds(lambda: intake(qrp_now, messages), args.repeats)
    return [
        "| routing | cost |",
        "|---|---:|",
        f"| a query's QRP words, hashed (once per query and batch) | {per_words:.2f} µs |",
        f"| one table asked about a query | {per_match:.2f} µs |",
        f"| a 65,536-slot table of 2,000 words received (RESET, one zlib 4-bit PATCH) "
        f"| {intake_s * 1e3:.2f} ms |",
        "",
        f"A query to N leaves costs about {per_words:.1f} + N x {per_match:.1f} µs of router "
        "CPU; peers that are not leaves, and routers without leaves or last-hop tables, pay "
        "nothing.",
    ]


def table_figures(args: argparse.Namespace, before: ModuleType) -> list[str]:
    rows = []
    full_now = QrpTable(LARGEST, bytearray(b"\xff" * (LARGEST // 8)))
    full_before = before.QrpTable(LARGEST, bytearray(full_now.data))
    repeats_before = max(1, min(args.repeats, args.repeats_before))

    def row(what: str, now: Callable[[], object], then: Callable[[], object], n: int = 1) -> None:
        after_s = cpu_seconds(now, args.repeats)
        before_s = cpu_seconds(then, repeats_before) * n
        rows.append(
            f"| {what} | {shown(before_s)} | {shown(after_s)} | {before_s / after_s:,.0f}x |"
        )
        print(rows[-1], flush=True)

    for entry_bits in (8, 4):
        messages = table_messages(full_now, entry_bits=entry_bits, patch_bytes=65536)
        wire = sum(len(m.data) for m in messages if isinstance(m, QrpPatch))
        row(
            f"a 2^21-slot table, every slot present, {entry_bits}-bit entries "
            f"({wire:,} bytes of zlib): RESET and PATCH applied",
            functools.partial(intake, qrp_now, messages),
            functools.partial(intake, before, messages),
        )
    row(
        "that table resized to 65,536 slots",
        lambda: full_now.resized(LAST_HOP_TABLE_SLOTS),
        lambda: full_before.resized(LAST_HOP_TABLE_SLOTS),
    )
    small_now = QrpTable.of_words([f"w{n}" for n in range(2_000)], slots=1 << 14)
    small_before = before.QrpTable(small_now.slots, bytearray(small_now.data))
    row(
        "a 16,384-slot table of 2,000 words resized to 65,536 slots",
        lambda: small_now.resized(LAST_HOP_TABLE_SLOTS),
        lambda: small_before.resized(LAST_HOP_TABLE_SLOTS),
    )

    def union_now() -> None:
        union = TableUnion(LAST_HOP_TABLE_SLOTS)
        for leaf in range(LEAVES):
            union.put(leaf, full_now)
        assert union.table.filled == LAST_HOP_TABLE_SLOTS

    def union_before_one() -> None:
        merged = before.QrpTable(LAST_HOP_TABLE_SLOTS)
        merged.merge(full_before.resized(LAST_HOP_TABLE_SLOTS))

    row(
        f"the union of {LEAVES} such leaves' tables (before: one table's share, x {LEAVES})",
        union_now,
        union_before_one,
        LEAVES,
    )
    kept = TableUnion(LAST_HOP_TABLE_SLOTS)
    for leaf in range(LEAVES):
        kept.put(leaf, full_now)
    sparse = QrpTable.of_words([f"w{n}" for n in range(2_000)], slots=LARGEST)

    def one_changes() -> None:
        kept.put(0, sparse)
        assert kept.table.filled == LAST_HOP_TABLE_SLOTS
        kept.put(0, full_now)
        assert kept.table.filled == LAST_HOP_TABLE_SLOTS

    row(
        f"one of {LEAVES} leaves sends a new 2^21-slot table, and back: the union kept "
        "up to date twice (before: rebuilt twice)",
        one_changes,
        union_before_one,
        2 * LEAVES,
    )
    return [
        "| tables (router CPU) | before (aea9480) | after | speed-up |",
        "|---|---:|---:|---:|",
        *rows,
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per figure")
    parser.add_argument(
        "--repeats-before", type=int, default=3, help="timed runs of the slow, old code"
    )
    parser.add_argument(
        "--random-seed", "--seed", dest="seed", type=int, default=1, help="seed of the vocabulary"
    )
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()

    load = os.getloadavg()[0]
    before = module_before()
    tables = table_figures(args, before)
    routing = routing_figures(args)
    lines = [
        f"Measured {datetime.date.today().isoformat()} on {machine()}, commit {commit()}; "
        f"load average before the runs {load:.2f}; "
        f"CPU time (`time.process_time`), medians of {args.repeats} runs "
        f"({min(args.repeats, args.repeats_before)} of the code before). Before: "
        f"`protocol/qrp.py` of commit {BEFORE}, which applied patches and resized tables a "
        "slot at a time in Python; after: whole buffers (`bytes.translate` per lane, "
        "big-integer bit operations, see the module's notes), and the leaves' union kept as "
        "per-slot counts. The tables are gtk-gnutella's largest (2^21 slots) with every "
        "slot present: a patch of such a table is about 2 KB of zlib either way.",
        "",
        *tables,
        "",
        *routing,
        "",
        "Rerun: `.venv/bin/python scripts/bench_qrp.py --write` (about ten seconds, "
        "most of it the code before).",
    ]
    print("\n".join(lines))
    if args.write:
        path = replace_section("bench-qrp", ["## QRP (`scripts/bench_qrp.py`)", "", *lines])
        print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
