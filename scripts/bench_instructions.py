"""The router's own work per routed message, counted in instructions: no noise.

Run from the repository root, in the project's virtual environment, with valgrind
installed (``apt install valgrind``):

    .venv/bin/python scripts/bench_instructions.py                 # the working tree, as installed
    .venv/bin/python scripts/bench_instructions.py --load mixed    # 85 % pings, 15 % queries
    .venv/bin/python scripts/bench_instructions.py --write  # both loads, into docs/benchmarks.md

Loopback benchmarks (``bench_router.py``, ``bench_query_flood.py``, ``bench_commits.py``)
measure what users get, but on a shared machine two runs of the same code differ by 10 %
and more, so a change worth a few percent cannot be seen in them. This counts instead:
the router's code runs under valgrind's cachegrind, which counts every instruction it
executes and simulates the caches, so two runs of the same code give the same figures
to a fraction of a percent, and a change's effect on the router's own work is read
directly.

What runs, in one process with no sockets: a ``GnutellaRouter`` on its defaults with
three ultrapeer links (one source, two sinks) that announced what gtk-gnutella 1.2.3
announces (``router_bench.peers.GTK_LIKE_HEADERS``: the source's pings are answered, not
broadcast), whose outgoing queues are the real threshold queues; 64 KiB reads of the
loopback benchmarks' 30-byte messages (TTL 2, every GUID unique) cut by the real
``FrameDecoder``; the frames handed to the router 250 at a time, as its stage takes
them; after each batch every sink's queue taken and joined into one buffer, as a
connection's socket writer does before its write. The kernel's part (the reads and
writes, the wake-ups) is not here: it is the same for any version of the router, and the
loopback benchmarks carry it.

The figure is the difference between two counted runs, one routing ``--messages`` and
one twice as many (both make twice as many, since making them is Python work per
message), divided by the difference in messages routed, so that starting Python,
importing the router and making the load cancel out: instructions per routed message,
and the last-level cache misses per message the simulation counts (reads and writes,
in a simulated 8 MiB cache). Compare two versions with ``--tree DIR``, a checkout of the
other version with its hot path compiled in place (``git archive REV | tar -x -C DIR``,
then ``python -c "import hatch_build; from pathlib import Path;
hatch_build.compile_hot_path(Path.cwd())"`` in it); ``scripts/bench_commits.py`` runs
the loopback floods the same way.

Each counted run is this script again in a child process under valgrind, with ``--run
N`` (route N messages and exit) and ``PYTHONHASHSEED=0``, so that dicts are laid out
alike in every run; with ``--tree``, the child has a folder of links to that tree's
packages first on its ``PYTHONPATH`` (``scripts/router_bench/trees.py``), so it routes
with that tree's router and makes the load with this checkout's code.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from gnutella_router.config.sections import RouterConfig

LOADS = ("query", "mixed")
READ_SIZE = 64 * 1024
BATCH = RouterConfig().batch_size
"""Frames per router batch: the router stage's default ``batch_size``."""
MIXED_QUERY_SHARE = 0.15
"""The mixed load's queries, as in ``scripts/bench_router.py``."""


def _load(kind: str, count: int, seed: int) -> list[bytes]:
    """``count`` messages in reads of at most :data:`READ_SIZE` bytes: the loopback
    benchmarks' ping and query (:class:`router_bench.peers.Wire`) in their order and
    shares (``message_kinds``), each with a GUID of its own."""
    from scripts.router_bench.peers import Wire, message_kinds

    wire = Wire.build()
    rng = random.Random(seed)
    kinds = message_kinds(count, 1.0 if kind == "query" else MIXED_QUERY_SHARE, seed)
    messages = [rng.randbytes(16) + (wire.query if q else wire.ping)[16:] for q in kinds]
    reads: list[bytes] = []
    chunk: list[bytes] = []
    size = 0
    for data in messages:
        if size + len(data) > READ_SIZE:
            reads.append(b"".join(chunk))
            chunk, size = [], 0
        chunk.append(data)
        size += len(data)
    if chunk:
        reads.append(b"".join(chunk))
    return reads


def _route(kind: str, count: int, made: int, seed: int) -> int:
    """Route ``count`` of ``made`` messages through a socketless router; the bytes the
    sinks got. (Making the messages is Python work per message, so the runs compared
    make as many and route different numbers.)"""
    import trio

    from gnutella_router.config import Config
    from gnutella_router.net.outbox import Outbox
    from gnutella_router.net.threshold_queue import ThresholdQueue
    from gnutella_router.stages.router import GnutellaRouter
    from protocol.capabilities import Capabilities
    from protocol.framing import FrameDecoder
    from protocol.headers import HeaderBlock
    from protocol.vendor import NO_HOPS_FLOW
    from scripts.router_bench.peers import GTK_LIKE_HEADERS

    class Link:
        """The parts of a connection the router uses, around a real threshold queue."""

        def __init__(self, link_id: int) -> None:
            self.id = link_id
            # What gtk-gnutella 1.2.3 announces (Pong-Caching, GGEP, X-Max-TTL 4 ...):
            # the source's pings are answered with our pong, not broadcast.
            self.capabilities = Capabilities.from_headers(HeaderBlock(GTK_LIKE_HEADERS))
            self.outgoing = ThresholdQueue()
            self.closing = False
            self.flow_controlled = False
            self.hops_flow = NO_HOPS_FLOW
            self.written = 0
            self.writer = self  # the outbox's writer: the link is its own
            self.busy = False  # its writes are made in flush, none left over
            self.deflates = False  # the loads' links are plain
            self.writer_busy = False  # the same, as a --tree router before writers reads it

        def act_on(self, verdict: object) -> None:
            pass  # the sinks' queues never refuse this load

        def flush(self) -> None:
            self.written += len(b"".join(self.outgoing.take(READ_SIZE)))

        def frames_done(self, count: int) -> None:
            pass

        # The rest of a link: nothing in this load calls them.
        listen_address = None

        def offended(self, offence: object, now: float) -> None:
            pass

        def received_bye(self, code: int, reason: str) -> None:
            pass

        def received_messages_supported(self, understood: tuple[object, ...]) -> None:
            pass

        def received_features_supported(self, features: tuple[object, ...]) -> None:
            pass

        def understands(self, message: object) -> bool:
            return False

        def received_hops_flow(self, hops: int) -> None:
            pass

        def close(self, reason: str, *, bye_code: int | None = None) -> None:
            self.closing = True

    class Links:
        """The outbox's registry of the three links."""

        def snapshot(self) -> tuple[Link, ...]:
            return tuple(links)

        def get(self, link_id: int) -> Link | None:
            return links[link_id - 1]

    links = [Link(1), Link(2), Link(3)]
    reads = _load(kind, made, seed)
    routed = 0

    async def main() -> None:
        import gc

        from gnutella_router.daemon import YOUNG_COLLECTION_THRESHOLD

        config = Config()
        router = GnutellaRouter(
            config.router,
            # The source is a trusted neighbour, as on loopback: no per-peer query rate.
            trusted=lambda link_id: True,
            outbox=Outbox(Links()),
            own_address=lambda: ("192.0.2.1", 6346),
            own_guid=b"R" * 16,
            max_ttl=config.network.max_ttl,
            hard_ttl_limit=config.network.hard_ttl_limit,
            now=trio.current_time(),
        )
        nonlocal routed
        # The collector as the daemon sets it once it runs.
        gc.freeze()
        gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *gc.get_threshold()[1:])
        decoder = FrameDecoder(source=1)
        for data in reads:
            if routed >= count:
                break
            frames = decoder.receive_data(data)
            for start in range(0, len(frames), BATCH):
                await router.handle(frames[start : start + BATCH])
            routed += len(frames)

    trio.run(main)
    print(
        f"{links[1].written + links[2].written} bytes written to the sinks, "
        f"{links[0].written} to the source"
    )
    return routed


_SUMMARY = re.compile(r"==\d+== (I\s+refs|LL misses):\s+([\d,]+)")


def _counted(
    kind: str, count: int, made: int, seed: int, env: Mapping[str, str]
) -> tuple[int, int, int]:
    """Messages routed, instructions and last-level cache misses of routing ``count`` of
    ``made`` messages in a child process under cachegrind (``env`` added to its
    environment: the router's tree first on its path, with ``--tree``)."""
    with tempfile.TemporaryDirectory() as scratch:
        result = subprocess.run(
            [
                "valgrind",
                "--tool=cachegrind",
                "--cache-sim=yes",
                "--LL=8388608,16,64",
                f"--cachegrind-out-file={os.path.join(scratch, 'out')}",
                sys.executable,
                __file__,
                "--run",
                str(count),
                "--made",
                str(made),
                "--load",
                kind,
                "--random-seed",
                str(seed),
            ],
            # The same dict layouts in every run, so the same cache misses.
            env={**os.environ, **env, "PYTHONHASHSEED": "0"},
            capture_output=True,
            text=True,
            check=False,
        )
    if result.returncode != 0:
        raise SystemExit(f"the counted run failed:\n{result.stderr[-2000:]}")
    found = {
        name.split()[0]: int(value.replace(",", ""))
        for name, value in _SUMMARY.findall(result.stderr)
    }
    routed = re.search(r"^routed (\d+)$", result.stdout, re.MULTILINE)
    if routed is None:
        raise SystemExit(f"the counted run said nothing of its messages:\n{result.stdout}")
    return int(routed.group(1)), found["I"], found["LL"]


def _describe(env: Mapping[str, str]) -> str:
    """What ``native.describe()`` says of the router the counted runs import."""
    if not env:
        from gnutella_router import native

        return native.describe()
    said = subprocess.run(
        [sys.executable, "-c", "from gnutella_router import native; print(native.describe())"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return (said.stdout or said.stderr).strip()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--load", choices=LOADS, default="query")
    parser.add_argument(
        "--messages",
        type=int,
        default=100_000,
        metavar="N",
        help="count the messages routed past the first N (100,000: with the router's "
        "50,000 per route-table generation, two full generations are dropped in the "
        "window, as in a long flood)",
    )
    parser.add_argument("--random-seed", "--seed", dest="seed", type=int, default=1)
    parser.add_argument(
        "--tree",
        type=Path,
        metavar="DIR",
        help="count the router in this checkout (its hot path compiled in place, as "
        "scripts/venv.sh or hatch_build.py leave it) instead of this one",
    )
    parser.add_argument(
        "--write", action="store_true", help="count both loads, update docs/benchmarks.md"
    )
    parser.add_argument("--run", type=int, metavar="N", help=argparse.SUPPRESS)
    parser.add_argument("--made", type=int, metavar="N", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run is not None:
        routed = _route(args.load, args.run, args.made or args.run, args.seed)
        print(f"routed {routed}")
        return 0
    if shutil.which("valgrind") is None:
        print("bench_instructions: valgrind is not installed", file=sys.stderr)
        return 1
    from scripts.router_bench.trees import packages_of, tree_first

    with contextlib.ExitStack() as stack:
        env: dict[str, str] = {}
        if args.tree is not None:  # its packages first on the children's path
            env = tree_first(stack.enter_context(packages_of(args.tree.resolve())))
        described = _describe(env)
        print(f"router: {described}")
        made = 2 * args.messages
        rows = []
        for load in LOADS if args.write else (args.load,):
            once = _counted(load, args.messages, made, args.seed, env)
            twice = _counted(load, made, made, args.seed, env)
            more = twice[0] - once[0]
            instructions = (twice[1] - once[1]) / more
            misses = (twice[2] - once[2]) / more
            print(
                f"{load} load, {more:,} more messages routed: {instructions:,.0f} "
                f"instructions and {misses:.3f} last-level cache misses per routed message"
            )
            rows.append(f"| {load} | {instructions:,.0f} | {misses:.2f} |")
    if args.write:
        from scripts.benchdocs import machine, provenance, replace_section

        lines = [
            "## Instructions per routed message (`scripts/bench_instructions.py`)",
            "",
            f"Counted {provenance()} on {machine()}, under valgrind's cachegrind (its "
            "last-level cache "
            f"set to 8 MiB, 16-way); {described}. The router's own work, with no sockets: "
            "64 KiB reads of the loopback benchmarks' 30-byte queries (or 85 % pings, 15 % "
            "queries, of the same size), TTL 2, "
            f"every GUID unique, cut by the real decoder and routed {BATCH} frames a batch from "
            "one ultrapeer to two, each sink's queue joined after every batch. The figure "
            f"is the difference between routing {args.messages:,} and {made:,} messages, "
            "per message, so startup cancels out. Unlike the loopback figures it does not "
            "move from run to run, so it shows what a change does to the router's own "
            "work; it leaves out the kernel's (reads, writes, wake-ups), which the "
            "loopback benchmarks carry.",
            "",
            "| load | instructions per routed message | last-level cache misses per message |",
            "|---|---:|---:|",
            *rows,
            "",
            "Rerun: `.venv/bin/python scripts/bench_instructions.py --write` (about two "
            "minutes; needs valgrind).",
        ]
        print(f"wrote {replace_section('instructions', lines)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
