"""A batch's broadcasts, collected until the fan-out hands them to every destination.

The router makes one collection per batch and hands it to the run router
(:mod:`.flood`) with every run; the run router adds each stretch's copies here with what
it found of them while building them, and returns. Once the whole batch is routed, the
router's fan-out gives every destination one list from the collection, cut down for it
by :mod:`.destinations`. One call per destination per batch instead of one per message
and destination is where a flooding router saves most of its time. A collection is a
value of one batch: the query delay hook keeps its one query's copy in a collection of
its own while it sleeps, so that another worker's fan-out cannot send it early.
"""

from __future__ import annotations

from gnutella_router.routing.flood import RunCopies
from gnutella_router.routing.link import Link


class Broadcasts:
    """Copies to broadcast, in order, with who sent each stretch and, of the queries
    among them, what the fan-out must know."""

    __slots__ = (
        "ancient",
        "datas",
        "highest_ttl",
        "last_hop",
        "not_leaves",
        "queries",
        "runs",
        "size",
    )

    def __init__(self) -> None:
        self.datas: list[bytes] = []
        self.size = 0
        """The bytes of :attr:`datas` in all."""
        self.runs: list[tuple[Link, int]] = []
        """Who each stretch of :attr:`datas` came from: (source, index it starts at), an
        entry only where the source changes (a batch holds runs of one link's frames,
        so this is one entry per run, and nothing to write per message)."""
        self.queries = 0
        self.highest_ttl = 0
        """The highest TTL of any copy (a peer announcing a lower X-Max-TTL gets copies
        trimmed to it), known from when they were made: no copy is read again for it."""
        self.ancient: set[bytes] = set()
        """Queries in the pre-0.6 form, kept from peers that drop them."""
        self.last_hop: set[bytes] = set()
        """Queries at their last hop (TTL 0 here): for leaves only."""
        self.not_leaves: set[int] = set()
        """Relayed copies of queries seen before, for ultrapeers only, by identity
        (``id``): a relay's copy can be byte for byte the first copy of its query (both
        clamped to the same TTL), which a leaf must still get."""

    def __bool__(self) -> bool:
        return bool(self.datas)

    def add(self, source: Link, datas: list[bytes], copies: RunCopies) -> None:
        """A stretch's copies from ``source``, in order."""
        runs = self.runs
        if not runs or runs[-1][0] is not source:
            runs.append((source, len(self.datas)))
        self.datas.extend(datas)
        self.size += copies.size
        if copies.highest_ttl > self.highest_ttl:
            self.highest_ttl = copies.highest_ttl
        if copies.count:
            self.queries += copies.count
            if copies.ancient:
                self.ancient.update(copies.ancient)
            if copies.last_hop:
                self.last_hop.update(copies.last_hop)
            if copies.not_leaves:
                self.not_leaves.update(map(id, copies.not_leaves))

    def not_from(self, link: Link) -> list[bytes]:
        """The copies that did not come from ``link`` (a message never goes back to its
        source), by whole stretches: nothing at all for a batch of one link's."""
        datas = self.datas
        runs = self.runs
        out: list[bytes] = []
        ends = [start for _, start in runs[1:]]
        ends.append(len(datas))
        for (source, start), end in zip(runs, ends, strict=True):
            if source is not link:
                out += datas[start:end]
        return out
