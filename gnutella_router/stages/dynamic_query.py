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

This module holds the plan, without I/O: :class:`DynamicQuery` is one leaf query's
state, and :meth:`DynamicQuery.next_step` says, at a given moment, which neighbours to
send it to and at what TTL. The router sends the copies and counts the hits
(:meth:`DynamicQuery.note_hits`, the result count of each hit routed back to the leaf);
a timer task calls the router every :data:`TICK_SECONDS`.

The plan, as numbers (LimeWire's and gtk-gnutella's, simplified):

* the probe: :data:`PROBE_PEERS` neighbours at TTL 1 (they pass it only to their own
  leaves whose QRP tables match);
* then every :data:`STEP_SECONDS`, while fewer than ``wanted`` results came back: one
  neighbour not yet queried, at TTL 2 for the first widening, 3 for the second and so
  on, never above the TTL the leaf's query still had;
* it ends when enough results came back, every neighbour has been queried, the leaf is
  gone, or :data:`LIFETIME_SECONDS` have passed.
"""

from __future__ import annotations

import dataclasses
import enum

PROBE_PEERS = 3
PROBE_TTL = 1
STEP_SECONDS = 2.4
TICK_SECONDS = 0.4
LIFETIME_SECONDS = 120.0
WANTED_RESULTS = 150
"""Results (not hits: a hit may carry many) after which a query stops widening."""


class Outcome(enum.StrEnum):
    SATISFIED = "satisfied"
    """Enough results came back."""
    EXHAUSTED = "exhausted"
    """Every ultrapeer neighbour had it."""
    EXPIRED = "expired"
    LEAF_GONE = "leaf-gone"


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
    queried: set[int] = dataclasses.field(default_factory=set)

    def note_hits(self, results: int) -> None:
        self.results += results

    def next_step(
        self, now: float, ultrapeers: list[int]
    ) -> tuple[list[int], int] | Outcome | None:
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
        if not fresh:
            return Outcome.EXHAUSTED if self.steps else None
        if self.steps == 0:
            chosen, ttl = fresh[:PROBE_PEERS], PROBE_TTL
        else:
            chosen, ttl = fresh[:1], PROBE_TTL + self.steps
        self.steps += 1
        self.queried.update(chosen)
        self.next_at = now + STEP_SECONDS
        return chosen, max(1, min(ttl, self.max_ttl))

    def copy_with_ttl(self, ttl: int) -> bytes:
        data = self.data
        return data[:17] + bytes((ttl,)) + data[18:]
