"""What one destination of a broadcast may be sent: the batch, less what it must not get.

The router hands every connection the same list of encoded broadcasts, one list for the
whole batch; this is where that list is cut down for one destination, only when
something differs for it (most of the time nothing does, and the shared list goes out
as it is):

* queries in the pre-0.6 form (flags 0) are kept from peers that drop them as ancient
  (gtk-gnutella), counted ``peer-refuses-format``;
* a leaf gets only the queries its QRP table matches (and no relayed copy of a query
  it was offered before), an ultrapeer none of the
  leaves-only copies and, at their last hop, only what its last-hop table matches
  (:mod:`.query_routing`), counted ``qrp-miss``;
* a peer that sent Hops Flow gets no query of as many hops or more, counted
  ``peer-hops-flow``;
* a peer that announced ``X-Max-TTL`` gets copies trimmed to it, counted per type in
  ``ttl_trimmed``.
"""

from __future__ import annotations

import collections
from collections.abc import Set as AbstractSet

from gnutella_router.routing.link import Link
from gnutella_router.routing.query_routing import QueryRouting
from protocol.constants import MessageType
from protocol.header import HOPS_OFFSET, TTL_OFFSET, TYPE_OFFSET, with_ttl
from protocol.vendor import NO_HOPS_FLOW

QUERY = MessageType.QUERY


class DestinationFilter:
    """Cuts a batch's broadcasts down for one destination, counting what it cut."""

    def __init__(
        self,
        routing: QueryRouting,
        dropped: collections.Counter[tuple[str, int]],
        ttl_trimmed: collections.Counter[int],
    ) -> None:
        self.routing = routing
        self.dropped = dropped
        self.ttl_trimmed = ttl_trimmed

    def apply(
        self,
        link: Link,
        out: list[bytes],
        *,
        ancient: set[bytes],
        last_hop: set[bytes],
        not_leaves: AbstractSet[int] = frozenset(),
        queries: int,
        highest_ttl: int,
    ) -> list[bytes]:
        """``out`` as ``link`` may get it: the very list when nothing differs.

        ``not_leaves`` names the relayed copies by identity (``id``), not by value: see
        :attr:`.broadcasts.Broadcasts.not_leaves`."""
        capabilities = link.capabilities
        dropped = self.dropped
        if ancient and capabilities.refuses_ancient_queries:
            kept = [d for d in out if d not in ancient]
            dropped["peer-refuses-format", QUERY] += len(out) - len(kept)
            out = kept
        if capabilities.ultrapeer is False:  # a leaf: what its QRP table matches
            if not_leaves:
                out = [d for d in out if id(d) not in not_leaves]
            out, missed = self.routing.for_leaf(link.id, out)
            dropped["qrp-miss", QUERY] += missed
        else:
            if last_hop:
                out = [d for d in out if d not in last_hop]
            if self.routing.ultrapeers and queries:
                out, missed = self.routing.for_last_hop(link.id, out)
                dropped["qrp-miss", QUERY] += missed
        if link.hops_flow != NO_HOPS_FLOW and queries:
            limit = link.hops_flow
            kept = [d for d in out if d[TYPE_OFFSET] != QUERY or d[HOPS_OFFSET] < limit]
            dropped["peer-hops-flow", QUERY] += len(out) - len(kept)
            out = kept
        if capabilities.max_ttl < highest_ttl:
            out = self._ttl_clamped(out, capabilities.max_ttl)
        return out

    def _ttl_clamped(self, datas: list[bytes], limit: int) -> list[bytes]:
        """Copies of ``datas`` whose TTL is at most ``limit``: a peer that announced
        ``X-Max-TTL`` would trim (and complain about) anything above it."""
        out = []
        for data in datas:
            if data[TTL_OFFSET] > limit:
                self.ttl_trimmed[data[TYPE_OFFSET]] += 1
                data = with_ttl(data, limit)
            out.append(data)
        return out
