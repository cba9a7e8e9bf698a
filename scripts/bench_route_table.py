"""What recording a new GUID costs in a route table, alone, as the router uses it.

Run from the repository root, in the project's virtual environment:

    .venv/bin/python scripts/bench_route_table.py

It times the table as installed: ``GNUTELLA_ROUTER_PURE=1 scripts/venv.sh dev``
reinstalls it as pure Python, ``scripts/venv.sh dev`` compiles it again.

A table with the router's capacity (50,000 entries per generation) records random
16-byte GUIDs the way the run router does (``record_many``, runs of ``--batch``) and
one call per GUID (``record``, as dumps, replies and our own messages do), and once more
with another connection's routes in the table (the spraying connection then loses its own
oldest routes instead of rotating, see ``RouteTable._make_room``), through enough GUIDs
that generations fill and rotate, so dropping old generations is in the figure. Each
figure is the best of ``--repeats`` passes, in ns per GUID; the first line says whether
the table ran compiled (``gnutella-router --version`` says the same).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence

from gnutella_router import native
from gnutella_router.routing.route_table import DEFAULT_CAPACITY, RouteTable, pack_detail


def _per_guid_batch(
    batches: list[list[bytes]], details: list[int], *, others: bool = False
) -> float:
    table: RouteTable = RouteTable("query", 300.0, DEFAULT_CAPACITY)
    if others:  # another connection's pending routes: the spray evicts its own instead
        for n in range(100):
            table.record(b"other-%010d" % n, 7, 0.0)
    now = 0.0
    started = time.perf_counter()
    for guids in batches:
        table.record_many(guids, 3, now, details)
        now += 0.0005
    return time.perf_counter() - started


def _per_guid_single(batches: list[list[bytes]]) -> float:
    table: RouteTable = RouteTable("query", 300.0, DEFAULT_CAPACITY)
    now = 0.0
    started = time.perf_counter()
    for guids in batches:
        for guid in guids:
            table.record(guid, 3, now, ttl=2)
        now += 0.0005
    return time.perf_counter() - started


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--guids", type=int, default=1_000_000, help="GUIDs per pass")
    parser.add_argument("--batch", type=int, default=200, help="GUIDs per record_many call")
    parser.add_argument("--repeats", type=int, default=5, help="passes; the best counts")
    args = parser.parse_args(argv)
    if args.guids < args.batch or args.batch < 1 or args.repeats < 1:
        parser.error("--guids must be at least --batch, and both and --repeats positive")
    batches = [[os.urandom(16) for _ in range(args.batch)] for _ in range(args.guids // args.batch)]
    count = len(batches) * args.batch
    details = [pack_detail(2, 0)] * args.batch
    print(f"route table: {native.describe()}; {count:,} GUIDs a pass")
    bulk = min(_per_guid_batch(batches, details) for _ in range(args.repeats))
    spray = min(_per_guid_batch(batches, details, others=True) for _ in range(args.repeats))
    single = min(_per_guid_single(batches) for _ in range(args.repeats))
    print(f"record_many, runs of {args.batch}: {bulk / count * 1e9:.0f} ns per GUID")
    print(
        f"record_many, a spray beside another connection's routes: "
        f"{spray / count * 1e9:.0f} ns per GUID"
    )
    print(f"record, one call per GUID:   {single / count * 1e9:.0f} ns per GUID")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
