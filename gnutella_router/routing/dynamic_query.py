"""Dynamic querying: a leaf's query widens step by step until it has enough hits.

Theory of operation
-------------------
A query flooded at TTL 7 from an ultrapeer with 30 neighbours reaches far more of the
network than a popular file needs, and pays for it in every ultrapeer's bandwidth.
LimeWire's answer, which gtk-gnutella follows and which a leaf expects of its ultrapeer
when both announced ``X-Dynamic-Querying``, is to send a leaf's query to a few
ultrapeer neighbours at a low TTL first, count the hits that come back for the leaf,
and only then widen: one more neighbour at a time, with a growing TTL, until enough
hits have come back or every neighbour has had it.

This module holds the plan: :class:`DynamicQuery` is one leaf query's
state, and :meth:`DynamicQuery.next_step` says, at a given moment, which neighbours to
send it to and at what TTL; :class:`DynamicQuerying` keeps them all, at most
:data:`MAX_DYNAMIC_QUERIES` and :data:`MAX_DYNAMIC_QUERIES_PER_LEAF` from one leaf, and
queues the copies on the router's links. The router
counts the hits routed back to each leaf (:meth:`DynamicQuerying.note_hit`) and calls
:meth:`DynamicQuerying.widen` every :data:`TICK_SECONDS`.

The plan, as numbers (LimeWire's and gtk-gnutella's, simplified):

* the probe: :data:`PROBE_PEERS` neighbours at TTL 1 (they pass it only to their own
  leaves whose QRP tables match);
* then every :data:`STEP_SECONDS`, while fewer than ``wanted`` results came back: one
  neighbour not yet queried, at TTL 2 for the first widening, 3 for the second and so
  on, never above the TTL the leaf's query still had;
* once every neighbour has had a copy, a step sends the next TTL again to the neighbour
  whose copy carried the least: it relays a duplicate that comes with more TTL than
  its first copy to its own ultrapeers (as gtk-gnutella does). LimeWire and
  gtk-gnutella stop instead, but their ultrapeers have some thirty ultrapeer
  neighbours; on an overlay of a few neighbours each (a test network, a young
  network), the TTL 1 probe would use them all up and leave the query two hops deep
  (``testnet --nodes 20 --leaves 200``: of the leaf queries another leaf could answer,
  75 % found their file without the re-sends, 99 % with them, for 5 copies per leaf
  query instead of 1.5);
* it ends when enough results came back, every neighbour has had the highest TTL the
  query may carry, the leaf is gone, or :data:`LIFETIME_SECONDS` have passed;
* a leaf that understands Query Status (``BEAR/11v1``) is asked at each step how many
  results it kept, and its answer (``BEAR/12v1``, also taken unasked) replaces our own
  count of the results routed to it; 0xFFFF stops the query.
"""

from __future__ import annotations

import collections
import dataclasses
import enum

from gnutella_router.routing.link import Link, Outbox
from gnutella_router.routing.query_routing import QueryRouting
from protocol.codec import encode_message
from protocol.constants import GUID_SIZE, MessageType
from protocol.header import TTL_OFFSET, with_ttl
from protocol.vendor import QUERY_STATUS_REQUEST, STOP_QUERY, query_status_request

QUERY = MessageType.QUERY
VENDOR = MessageType.VENDOR

PROBE_PEERS = 3
PROBE_TTL = 1
STEP_SECONDS = 2.4
TICK_SECONDS = 0.4
LIFETIME_SECONDS = 120.0
WANTED_RESULTS = 150
"""Results (not hits: a hit may carry many) after which a query stops widening."""
MAX_DYNAMIC_QUERIES = 2000
"""Leaf queries widened at once; beyond, a leaf's query is dropped and counted."""
MAX_DYNAMIC_QUERIES_PER_LEAF = 32
"""One leaf's queries widened at once: far more than a person searching starts within
the two minutes a query lives, and a sixtieth of :data:`MAX_DYNAMIC_QUERIES`, so one
leaf sending queries as fast as it can cannot take every other leaf's place."""
TOO_MANY = "dynamic-query-limit"
"""Why a leaf's query is dropped when :data:`MAX_DYNAMIC_QUERIES` are under way."""
TOO_MANY_FROM_LEAF = "leaf-query-limit"
"""Why a leaf's query is dropped when that leaf has its own limit's worth under way."""


class Outcome(enum.StrEnum):
    SATISFIED = "satisfied"
    """Enough results came back."""
    EXHAUSTED = "exhausted"
    """Every ultrapeer neighbour had it, with the highest TTL it may carry."""
    EXPIRED = "expired"
    LEAF_GONE = "leaf-gone"
    CANCELLED = "cancelled"
    """The leaf asked to stop it (a query status of 0xFFFF)."""


Step = tuple[list[int], int]
"""The neighbours (link ids) to send a query to, and the TTL of the copies."""


@dataclasses.dataclass(slots=True)
class DynamicQuery:
    """One leaf query being widened."""

    guid: bytes
    data: bytes
    """The query as forwarded (hops + 1); its TTL byte is set per copy."""
    leaf: int
    """The link id of the leaf it came from."""
    max_ttl: int
    """The highest TTL a copy may carry (the leaf's TTL less one, within max_ttl)."""
    started: float
    wanted: int = WANTED_RESULTS
    results: int = 0
    steps: int = 0
    next_at: float = 0.0
    queried: dict[int, int] = dataclasses.field(default_factory=dict)
    """Neighbours (link ids) sent a copy, with the highest TTL sent to each."""
    guided: bool = False
    """The leaf has told us how many results it kept: its word replaces our count."""

    def note_hits(self, results: int) -> None:
        if not self.guided:
            self.results += results

    def note_status(self, kept: int) -> None:
        """The leaf's query status: the results it kept so far."""
        self.guided = True
        self.results = kept

    def next_step(self, now: float, ultrapeers: list[int]) -> Step | Outcome | None:
        """What to do at ``now``, given the live ultrapeer neighbours' ids (in the order
        to prefer them): ``(neighbours, ttl)`` to send to, an :class:`Outcome` when the
        query is over, or None to wait."""
        if self.results >= self.wanted:
            return Outcome.SATISFIED
        if now - self.started >= LIFETIME_SECONDS:
            return Outcome.EXPIRED
        if now < self.next_at:
            return None
        fresh = [peer for peer in ultrapeers if peer not in self.queried]
        if self.steps == 0:
            if not fresh:
                return None
            chosen, ttl = fresh[:PROBE_PEERS], PROBE_TTL
        else:
            ttl = max(1, min(PROBE_TTL + self.steps, self.max_ttl))
            if fresh:
                chosen = fresh[:1]
            else:
                # Every neighbour has had it: widen through the one whose copy carried
                # the least TTL, if a higher one is left (see the module docstring).
                again = [peer for peer in ultrapeers if self.queried[peer] < ttl]
                if not again:
                    return Outcome.EXHAUSTED
                chosen = [min(again, key=self.queried.__getitem__)]
        self.steps += 1
        for peer in chosen:
            self.queried[peer] = max(self.queried.get(peer, 0), ttl)
        self.next_at = now + STEP_SECONDS
        return chosen, max(1, min(ttl, self.max_ttl))


class DynamicQuerying:
    """Every leaf query being widened: started, stepped by the clock, ended.

    It sends through the router's links: the other leaves get a leaf's query at once,
    when their QRP tables match it (:class:`.query_routing.QueryRouting`), and each
    ultrapeer gets its copy within its ``X-Max-TTL``, unless the copy is at its last hop
    and the ultrapeer's last-hop table says its leaves have nothing for it.
    """

    def __init__(
        self,
        outbox: Outbox,
        routing: QueryRouting,
        forwarded: list[int],
        limit: int = MAX_DYNAMIC_QUERIES,
        per_leaf: int = MAX_DYNAMIC_QUERIES_PER_LEAF,
    ) -> None:
        self._outbox = outbox
        self._routing = routing
        self._forwarded = forwarded
        """The router's per-type forwarded counters, which these copies add to."""
        self.limit = limit
        self.per_leaf = per_leaf
        self.queries: dict[bytes, DynamicQuery] = {}
        self._by_leaf: collections.Counter[int] = collections.Counter()
        """Queries under way per leaf (a leaf is gone from it once it has none)."""
        self.counts: collections.Counter[str] = collections.Counter(
            {"copies": 0, "status-requests": 0, **{outcome.value: 0 for outcome in Outcome}}
        )

    def start(self, leaf: Link, data: bytes, now: float) -> str | None:
        """A leaf's query (``data`` as forwarded): to the other leaves it matches now,
        then its first step; or why it goes no further (:data:`TOO_MANY`,
        :data:`TOO_MANY_FROM_LEAF`)."""
        outbox = self._outbox
        for link in outbox.links():
            if link.capabilities.ultrapeer is False and link is not leaf and not link.closing:
                copies, _ = self._routing.for_leaf(link.id, [data])
                for copy in copies:
                    self._forwarded[QUERY] += outbox.offer(link.id, copy, now)
        if len(self.queries) >= self.limit:
            return TOO_MANY
        if self._by_leaf[leaf.id] >= self.per_leaf:
            return TOO_MANY_FROM_LEAF
        query = DynamicQuery(data[:GUID_SIZE], data, leaf.id, data[TTL_OFFSET], now)
        self.queries[query.guid] = query
        self._by_leaf[leaf.id] += 1
        self._step(query, now, self._ultrapeers())
        return None

    def widen(self, now: float) -> None:
        """Every query's next step, if due; the queries of leaves that left end."""
        ultrapeers = self._ultrapeers()
        for query in list(self.queries.values()):
            leaf = self._outbox.link(query.leaf)
            if leaf is None or leaf.closing:
                self._end(query, Outcome.LEAF_GONE)
            else:
                self._step(query, now, ultrapeers)

    def note_hit(self, guid: bytes, route: int, results: int) -> None:
        """A hit for ``guid`` routed back towards link ``route`` with ``results``."""
        query = self.queries.get(guid)
        if query is not None and query.leaf == route:
            query.note_hits(results)

    def note_status(self, guid: bytes, link_id: int, kept: int) -> None:
        """A leaf's query status (BEAR 12) for ``guid``: the results it kept, or
        :data:`~protocol.vendor.STOP_QUERY` to stop the query at once."""
        query = self.queries.get(guid)
        if query is None or query.leaf != link_id:
            return
        if kept == STOP_QUERY:
            self._end(query, Outcome.CANCELLED)
        else:
            query.note_status(kept)

    def statistics(self) -> dict[str, int]:
        return {"active": len(self.queries), **self.counts}

    def _ultrapeers(self) -> list[int]:
        return [
            link.id
            for link in self._outbox.links()
            if link.capabilities.ultrapeer is not False and not link.closing
        ]

    def _step(self, query: DynamicQuery, now: float, ultrapeers: list[int]) -> None:
        step = query.next_step(now, ultrapeers)
        if step is None:
            return
        if isinstance(step, Outcome):
            self._end(query, step)
            return
        chosen, ttl = step
        for link_id in chosen:
            if self._send(link_id, with_ttl(query.data, ttl), now):
                self.counts["copies"] += 1
        outbox = self._outbox
        leaf = outbox.link(query.leaf)
        if leaf is not None and leaf.understands(QUERY_STATUS_REQUEST):
            # Ask how many results it kept: its answer guides the next step.
            if outbox.offer(leaf.id, encode_message(query_status_request(query.guid)), now):
                self.counts["status-requests"] += 1
            outbox.write(leaf.id)

    def _send(self, link_id: int, copy: bytes, now: float) -> bool:
        outbox = self._outbox
        link = outbox.link(link_id)
        if link is None:
            return False
        if copy[TTL_OFFSET] > link.capabilities.max_ttl:
            copy = with_ttl(copy, link.capabilities.max_ttl)
        if copy[TTL_OFFSET] == 1 and not self._routing.for_last_hop(link_id, [copy])[0]:
            return False  # its last-hop table says its leaves have nothing for it
        sent = outbox.offer(link_id, copy, now)
        self._forwarded[QUERY] += sent
        outbox.write(link_id)
        return sent

    def _end(self, query: DynamicQuery, outcome: Outcome) -> None:
        del self.queries[query.guid]
        self.counts[outcome.value] += 1
        by_leaf = self._by_leaf
        by_leaf[query.leaf] -= 1
        if by_leaf[query.leaf] <= 0:
            del by_leaf[query.leaf]
