"""Leaves in the test network (``testnet --leaves N``): they share, publish and search.

Theory of operation
-------------------
Each leaf is a :class:`~gnutella_router.lab.traffic.leaf.LeafServent` (its library drawn
from the traffic model's Zipf vocabulary, its QRP table, its searches and answers) on a
TCP connection of this process to one ultrapeer: leaf ``i`` goes to the ``i``-th
ultrapeer in turn (in a two-tier plan, the nodes not planned as leaves), so they are
spread evenly. The run:

1. **Join.** The leaves connect and send their tables after the routers have started
   and before the bootstrap cache answers anyone (:meth:`LeafPopulation.join`, called
   from the launcher), and the run waits, bounded, until every router holds its leaves'
   tables. So when ultrapeers link up they already have leaves, and the last-hop table
   each sends the others on connecting covers them; otherwise the first would go out
   empty and the next only a minute later.
2. **Search.** During the traffic phase every leaf sends a query every
   ``query_interval`` seconds (from a random offset, so they do not all search at
   once), answers the queries its ultrapeer passes it, and counts the hits for its own.
3. **Drain and leave.** After the traffic, :data:`DRAIN_SECONDS` for the last dynamic
   queries' hits, then the leaves close.

What is reported: the queries sent, the share that found a file on another leaf
(success rate) beside the share that could have (the *oracle*: another leaf's library
matches every keyword), results and time to the first file found, the queries the
leaves were passed that none of their files matched (QRP false positives, or an
ultrapeer that does not filter), and the overlay's query and hit messages per query
(from the routers' counters: every query of the run, the load client's included, is in
them). Every count is bounded: queries per leaf are remembered up to
:data:`~gnutella_router.lab.traffic.leaf.MAX_OUTSTANDING`.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import random
import statistics
from collections.abc import Sequence
from typing import Any, Protocol

import structlog
import trio

from gnutella_router.lab.testnet.nodes import NodeError
from gnutella_router.lab.traffic.leaf import LeafServent, draw_library
from gnutella_router.lab.traffic.load import ClientPeer, LoadError, open_client_peer
from protocol.codec import encode_message
from protocol.errors import RemoteProtocolError
from protocol.messages import Bye, Message, random_guid
from traffic_models.content import Vocabulary

MAX_LEAVES = 2000
"""Leaves one run may hold: each is a connection and two tasks of this process."""
DRAIN_SECONDS = 6.0
"""After the traffic: dynamic querying widens a query every few seconds, and its late
hits count."""
CONNECTING_AT_ONCE = 32
TABLES_TIMEOUT = 15.0
"""Seconds the run waits for the routers to hold their leaves' tables."""
READ_SIZE = 65536

log = structlog.get_logger("testnet.leaves")


@dataclasses.dataclass(frozen=True, slots=True)
class LeafSettings:
    count: int = 0
    files: int = 20
    """Files each leaf shares."""
    query_interval: float = 5.0
    """Seconds between one leaf's queries."""
    seed: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.count <= MAX_LEAVES:
            raise ValueError(f"--leaves must be from 0 to {MAX_LEAVES}")
        if not 1 <= self.files <= 1000:
            raise ValueError("--leaf-files must be from 1 to 1000")
        if not (math.isfinite(self.query_interval) and 0.05 <= self.query_interval <= 3600):
            raise ValueError("--leaf-query-interval must be from 0.05 to 3600 seconds")


def leaves_per_node(count: int, ultrapeers: Sequence[int]) -> dict[int, int]:
    """How many of ``count`` leaves each ultrapeer gets (spread in turn)."""
    placed = dict.fromkeys(ultrapeers, 0)
    for index in range(count):
        placed[ultrapeers[index % len(ultrapeers)]] += 1
    return placed


@dataclasses.dataclass(slots=True)
class _Leaf:
    servent: LeafServent
    node: int
    peer: ClientPeer | None = None
    closed: str | None = None


class LeafPopulation:
    """The run's leaves (see the module docstring)."""

    def __init__(
        self, settings: LeafSettings, ultrapeers: Sequence[int], *, user_agent: str
    ) -> None:
        if not ultrapeers:
            raise ValueError("leaves need at least one ultrapeer node")
        self.settings = settings
        self.user_agent = user_agent
        self.vocabulary = Vocabulary()  # the traffic models' own: the same Zipf words
        rng = random.Random(f"leaves:{settings.seed}")
        self.leaves = [
            _Leaf(
                LeafServent(
                    f"leaf{i:04d}",
                    draw_library(self.vocabulary, rng, settings.files),
                    seed=settings.seed,
                ),
                ultrapeers[i % len(ultrapeers)],
            )
            for i in range(settings.count)
        ]
        self.placement = leaves_per_node(settings.count, ultrapeers)
        self.guids = frozenset(leaf.servent.servent_guid for leaf in self.leaves)
        self.joined_after: float | None = None
        self.searching = False
        self.searched = False
        self._rows: list[dict[str, object]] | None = None

    async def join(self, addresses: dict[int, tuple[str, int]], nursery: trio.Nursery) -> None:
        """Connect every leaf to its ultrapeer and publish its table; their readers run
        in ``nursery``. A leaf that cannot connect is reported, not fatal."""
        started = trio.current_time()
        limiter = trio.CapacityLimiter(CONNECTING_AT_ONCE)

        async def connect(leaf: _Leaf) -> None:
            address = addresses.get(leaf.node)
            if address is None:
                leaf.closed = f"node-{leaf.node} did not start"
                return
            headers = [
                ("User-Agent", self.user_agent),
                ("X-Ultrapeer", "False"),
                ("X-Query-Routing", "0.1"),
                ("Bye-Packet", "0.1"),
                ("GGEP", "0.5"),
                ("GUID", leaf.servent.servent_guid.hex()),
            ]
            async with limiter:
                try:
                    peer = await open_client_peer(
                        address, leaf.servent.name, legacy=False, user_agent=self.user_agent,
                        headers=headers,
                    )  # fmt: skip
                    await peer.send(b"".join(leaf.servent.table_messages()))
                except (LoadError, trio.BrokenResourceError, OSError) as exc:
                    leaf.closed = str(exc)
                    return
            leaf.peer = peer
            nursery.start_soon(self._read, leaf)

        async with trio.open_nursery() as connecting:
            for leaf in self.leaves:
                connecting.start_soon(connect, leaf)
        self.joined_after = trio.current_time() - started
        failed = [leaf for leaf in self.leaves if leaf.peer is None]
        if failed:
            log.warning("leaves did not join", count=len(failed), first=failed[0].closed)

    def tables_expected(self) -> dict[int, int]:
        """Per node, the leaves that joined it (their tables should be there)."""
        expected: dict[int, int] = {}
        for leaf in self.leaves:
            if leaf.peer is not None:
                expected[leaf.node] = expected.get(leaf.node, 0) + 1
        return expected

    async def _read(self, leaf: _Leaf) -> None:
        assert leaf.peer is not None
        peer, servent = leaf.peer, leaf.servent
        data = peer.leftover
        try:
            while True:
                if data:
                    replies: list[bytes] = []
                    now = trio.current_time()
                    for frame in peer.decoder.receive_data(data):
                        replies.extend(servent.receive(frame, self.guids, now))
                    if replies:
                        await peer.send(b"".join(replies))
                data = await peer.stream.receive_some(READ_SIZE)
                if not data:
                    leaf.closed = leaf.closed or "closed by the ultrapeer"
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            leaf.closed = leaf.closed or exc.__class__.__name__
        except RemoteProtocolError as exc:
            leaf.closed = leaf.closed or exc.reason

    async def search(self, duration: float) -> None:
        """Every joined leaf searches every ``query_interval`` for ``duration`` seconds,
        then the hits of the last queries are waited for."""
        self.searching = True
        interval = self.settings.query_interval
        deadline = trio.current_time() + duration
        rng = random.Random(f"leaf-offsets:{self.settings.seed}")

        async def searching(leaf: _Leaf, offset: float) -> None:
            assert leaf.peer is not None
            at = trio.current_time() + offset
            while at < deadline and leaf.closed is None:
                await trio.sleep_until(at)
                try:
                    await leaf.peer.send(leaf.servent.query(self.vocabulary, trio.current_time()))
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                    leaf.closed = leaf.closed or exc.__class__.__name__
                    return
                at += interval

        async with trio.open_nursery() as nursery:
            for leaf in self.leaves:
                if leaf.peer is not None:
                    nursery.start_soon(searching, leaf, rng.uniform(0, interval))
        await trio.sleep(DRAIN_SECONDS)
        self.searching = False
        self.searched = True

    async def leave(self) -> None:
        """Bye and close, every leaf (bounded)."""
        bye = encode_message(Message(random_guid(), 1, 0, Bye(200, "leaving")))

        async def close(leaf: _Leaf) -> None:
            assert leaf.peer is not None
            leaf.closed = "left"  # before the reader sees the stream end
            with trio.move_on_after(1.0):
                try:
                    await leaf.peer.send(bye)
                    await leaf.peer.stream.aclose()
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass

        async with trio.open_nursery() as nursery:
            for leaf in self.leaves:
                if leaf.peer is not None and leaf.closed is None:
                    nursery.start_soon(close, leaf)

    # ------------------------------------------------------------------ report

    def _answerable(self) -> Any:
        """The oracle: whether another joined leaf shares a file matching every keyword
        of a query, through an index from keyword to the files that have it."""
        owners: list[int] = []
        having: dict[str, set[int]] = {}
        for number, leaf in enumerate(self.leaves):
            if leaf.peer is None:
                continue
            for shared in leaf.servent.library:
                for word in shared.keywords:
                    having.setdefault(word, set()).add(len(owners))
                owners.append(number)

        def answerable(number: int, words: Sequence[str]) -> bool:
            if not words:
                return False
            sets = sorted((having.get(word, set()) for word in set(words)), key=len)
            files = set.intersection(*sets)
            return any(owners[f] != number for f in files)

        return answerable

    def rows(self) -> list[dict[str, object]]:
        """One row per query a leaf sent, for ``leaf-queries.csv`` (taken once the
        leaves are done searching)."""
        if self._rows is not None:
            return self._rows
        answerable = self._answerable()
        out: list[dict[str, object]] = []
        for number, leaf in enumerate(self.leaves):
            for query in leaf.servent.queries.values():
                first = query.first_leaf_hit_at
                out.append(
                    {
                        "leaf": leaf.servent.name,
                        "node": leaf.node,
                        "query": query.text.decode("ascii", "replace"),
                        "answerable": answerable(number, query.words),
                        "found": query.leaf_hits > 0,
                        "leaf_hits": query.leaf_hits,
                        "hits": query.hits,
                        "results": query.results,
                        "first_hit_ms": ""
                        if first is None
                        else round((first - query.sent_at) * 1000.0, 1),
                    }
                )
        if self.searched:
            self._rows = out
        return out

    def summary(self, stats_pages: Sequence[Any], load_queries: int) -> dict[str, Any]:
        """The leaves' figures, with the overlay's cost per query from the routers'
        ``/stats`` pages at the end of the run (:func:`router_totals`) and the queries the
        load client sent."""
        rows = self.rows()
        routers = router_totals(stats_pages, len(rows), load_queries)
        sent = len(rows)
        found = [row for row in rows if row["found"]]
        answerable = [row for row in rows if row["answerable"]]
        firsts = [float(str(row["first_hit_ms"])) for row in found if row["first_hit_ms"] != ""]
        results = sum(int(str(row["results"])) for row in rows)
        issued = max(1, routers.get("queries_issued", 0))
        lost = [
            leaf
            for leaf in self.leaves
            if leaf.peer is not None and leaf.closed not in (None, "left")
        ]

        def share(part: int, whole: int) -> float | None:
            return round(part / whole, 4) if whole else None

        return {
            "leaves": self.settings.count,
            "joined": sum(1 for leaf in self.leaves if leaf.peer is not None),
            "files_per_leaf": self.settings.files,
            "query_interval_seconds": self.settings.query_interval,
            "per_node": {str(node): count for node, count in self.placement.items()},
            "joined_after_seconds": None
            if self.joined_after is None
            else round(self.joined_after, 3),
            "queries": sent,
            "found": len(found),
            "success_rate": share(len(found), sent),
            "answerable": len(answerable),
            "oracle_success_rate": share(len(answerable), sent),
            "success_rate_of_answerable": share(
                sum(1 for row in answerable if row["found"]), len(answerable)
            ),
            "first_file_ms_median": round(statistics.median(firsts), 1) if firsts else None,
            "results_per_query": round(results / sent, 2) if sent else None,
            "queries_passed_to_leaves": sum(leaf.servent.queries_received for leaf in self.leaves),
            "passed_unmatched": sum(leaf.servent.queries_unmatched for leaf in self.leaves),
            "dynamic_copies_per_leaf_query": round(routers.get("dynamic_copies", 0) / sent, 2)
            if sent
            else None,
            "query_copies_per_query": round(routers.get("query_copies", 0) / issued, 2),
            "hit_copies_per_query": round(routers.get("hit_copies", 0) / issued, 2),
            "lost_ultrapeer": len(lost),
            "lost_reasons": dict(collections.Counter(str(leaf.closed) for leaf in lost)),
        }


class _Readable(Protocol):
    index: int

    async def get(self, target: str) -> Any: ...


async def wait_for_tables(nodes: Sequence[_Readable], expected: dict[int, int]) -> list[int]:
    """Wait, at most :data:`TABLES_TIMEOUT`, until every node holds a complete QRP table
    from each of the leaves that joined it; the nodes that still do not."""
    pending = {node.index: node for node in nodes if expected.get(node.index)}
    deadline = trio.current_time() + TABLES_TIMEOUT
    while pending and trio.current_time() < deadline:
        for index, node in list(pending.items()):
            try:
                page = await node.get("/qrp")
            except NodeError:  # a node that cannot answer yet is asked again
                continue
            peers = page.get("peers", []) if isinstance(page, dict) else []
            tables = sum(1 for p in peers if p.get("leaf") and p.get("tables_received"))
            if tables >= expected[index]:
                del pending[index]
        if pending:
            await trio.sleep(0.2)
    return sorted(pending)


def router_totals(
    stats_pages: Sequence[Any], leaf_queries: int, load_queries: int
) -> dict[str, int]:
    """The routers' counters that :meth:`LeafPopulation.summary` divides by queries."""
    totals = {"query_copies": 0, "hit_copies": 0, "dynamic_copies": 0}
    for stats in stats_pages:
        router = stats.get("router") if isinstance(stats, dict) else None
        if not isinstance(router, dict):
            continue
        forwarded = router.get("forwarded") or {}
        totals["query_copies"] += int(forwarded.get("query", 0))
        totals["hit_copies"] += int(forwarded.get("query_hit", 0))
        totals["dynamic_copies"] += int((router.get("dynamic_queries") or {}).get("copies", 0))
    totals["queries_issued"] = leaf_queries + load_queries
    return totals
