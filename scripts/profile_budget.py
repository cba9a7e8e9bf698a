"""Where a routed message's microseconds go: a py-spy profile of the router, by part.

Profile a router under ``scripts/bench_router.py``'s flood (py-spy is not a
dependency: ``.venv/bin/pip install py-spy``), then read the profile with this script:

    .venv/bin/gnutella-router run --listen 127.0.0.1:7354 --state-dir /tmp/r &
    .venv/bin/py-spy record --nonblocking -p $! -d 7 -r 400 -f raw -o /tmp/router.txt &
    .venv/bin/python scripts/bench_router.py --target 127.0.0.1:7354 --skip-baseline \\
        --repeats 1 --duration 6
    .venv/bin/python scripts/profile_budget.py /tmp/router.txt --rate 725819

``--rate`` is the messages per second the router took from the source in that run and
``--cpu`` the share of a core it used (a message costs cpu / rate seconds of CPU). A
router whose hot path is compiled (``gnutella-router --version``) runs it as C, which
py-spy sees only with ``--native`` (it then pauses the router for each sample, so give
``--cpu``); the parts below know mypyc's names for the compiled functions too. Each
sample is charged to the part of the path its innermost recognised frame belongs to;
the table gives each part's share of the samples and its microseconds per message.
"""

from __future__ import annotations

import argparse
import collections
import re
from collections.abc import Sequence
from pathlib import Path

PARTS: tuple[tuple[str, str], ...] = (
    ("writes (one os.write per destination per batch)", r"SocketWriter\.|_write_loop"),
    (
        "framing (the decoder, a Frame per message)",
        r"receive_data|Frame\.__init__|framing___Frame\b",
    ),
    ("duplicates and reverse routes (route tables)", r"RouteTable\.|RouteTable___|SeenTable"),
    (
        "checks, our pongs, copies with TTL - 1 and hops + 1",
        r"RunRouter|rules___|OwnPong|Connection\.send\b|_ttl_ok|route_single|"
        r"ThresholdQueue\.offer \(",
    ),
    (
        "fan-out (each destination's list, its queue)",
        r"_flush_broadcasts|_fan_out|Broadcasts\.|offer_bulk|offer_many|offer_whole|Outbox\.|"
        r"DestinationFilter|_count_fanned",
    ),
    (
        "reads, admission, the stage queue, wake-ups",
        r"_read_loop|_received|_frame \(|admit|StageQueue|Stage\._work|handle \(|trio|deliver",
    ),
)


def budget(lines: Sequence[str]) -> tuple[collections.Counter[str], int]:
    """Samples per part (``other`` for the rest) and the total, from py-spy's raw format
    (one ``frame;frame;...;leaf COUNT`` line per distinct stack)."""
    parts = [(name, re.compile(pattern)) for name, pattern in PARTS]
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for line in lines:
        stack, _, number = line.rstrip().rpartition(" ")
        if not stack or not number.isdigit():
            continue
        samples = int(number)
        total += samples
        for frame in reversed(stack.split(";")):
            part = next((name for name, pattern in parts if pattern.search(frame)), None)
            if part is not None:
                counts[part] += samples
                break
        else:
            counts["other"] += samples
    return counts, total


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("profile", type=Path, help="py-spy record -f raw output")
    parser.add_argument(
        "--rate", type=float, required=True, help="messages/s the router took in that run"
    )
    parser.add_argument(
        "--cpu",
        type=float,
        default=1.0,
        help="share of one core the router used in that run (1.0; less when py-spy paused it)",
    )
    args = parser.parse_args(argv)
    if not 0 < args.cpu <= 1:
        parser.error("--cpu must be above 0 and at most 1")
    counts, total = budget(args.profile.read_text().splitlines())
    if not total:
        parser.error(f"{args.profile}: no samples")
    per_message = 1e6 * args.cpu / args.rate
    print(f"{total:,} samples; {per_message:.2f} µs of CPU per message at {args.rate:,.0f}/s")
    print("| part | share | µs per message |")
    print("|---|---:|---:|")
    for name in [*(name for name, _ in PARTS), "other"]:
        share = counts[name] / total
        print(f"| {name} | {share:.0%} | {share * per_message:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
