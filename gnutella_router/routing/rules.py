"""The routing rules a ping or query passes on its way in, each written once.

Theory of operation
-------------------
Every ping and query the router takes is judged by the same few rules: its TTL and
hops against the hard limit, its payload's shape, whether its source may send queries
now (a peer we flow-control may not, nor one past its query rate), whether it is in
the pre-0.6 form; and the copy
it leaves with: its TTL clamped so that hops + TTL stays within ``max_ttl``, less the
admission controller's cut, and at its last hop either kept for the leaves (marked by
TTL 0) or not sent at all.

These are pure functions of a frame's fields and the router's settings, answering a
:data:`Verdict` code rather than acting: the run router (:mod:`.flood`) calls them in
its one pass over a run, where a frame that is not :data:`OK` ends the stretch it
routes in bulk, and the router acts on that very code for that frame (which drop
reason, which offence; :meth:`.replies.ReplyRouting.refuse`). So the rule and the order in
which the rules apply live here only, and the path that routes in bulk and the frame
that breaks it can never disagree. The module is compiled with the hot path
(:mod:`gnutella_router.native`): calls into it from the run router are C calls.
"""

from __future__ import annotations

from typing import Final

from mypy_extensions import i64

from gnutella_router.control.abuse import Offence

OK: Final = 0
"""The frame passes: route it."""
TTL_ZERO: Final = 1
"""It arrived with TTL 0 (an offence: a peer must not send what has no hop left)."""
HARD_TTL_LIMIT: Final = 2
"""TTL + hops over the hard limit (an offence: TTL abuse)."""
MALFORMED: Final = 3
"""The payload is not the shape of its type (an offence)."""
SOURCE_FLOW_CONTROLLED: Final = 4
"""A query from a peer whose outgoing queue we flow-control: it clogs us, so its own
queries are dropped (not an offence)."""
ANCIENT_FORMAT: Final = 5
"""A query in the pre-0.6 form (flags 0) where the router drops them."""
SOURCE_OVER_RATE: Final = 6
"""A query from a peer that has used up its query rate
(:mod:`gnutella_router.control.query_rate`): not an offence, a bound."""

DROP_REASONS: Final = {
    TTL_ZERO: "ttl-zero",
    HARD_TTL_LIMIT: "hard-ttl-limit",
    MALFORMED: "malformed",
    SOURCE_FLOW_CONTROLLED: "source-flow-controlled",
    ANCIENT_FORMAT: "ancient-format",
    SOURCE_OVER_RATE: "source-over-rate",
}
"""The drop reason each verdict is counted under."""
OFFENCES: Final = {
    TTL_ZERO: Offence.TTL_ZERO,
    HARD_TTL_LIMIT: Offence.HIGH_TTL,
    MALFORMED: Offence.MALFORMED,
}
"""The verdicts that are the sender's own offence (the others are the router's choice)."""

NO_COPY: Final = -1
"""What :func:`query_copy_ttl` answers for a query that goes no further."""


def ttl_verdict(ttl: i64, hops: i64, hard_limit: i64) -> i64:
    """TTL 0 on arrival, or TTL + hops over the hard limit, or :data:`OK`: every routed
    message's first rule (replies too)."""
    if ttl == 0:
        return TTL_ZERO
    if ttl + hops > hard_limit:
        return HARD_TTL_LIMIT
    return OK


def ping_verdict(ttl: i64, hops: i64, payload: bytes, hard_limit: i64) -> i64:
    """A ping's verdict: the TTL rule, then its payload, empty or a GGEP block (0xC3)."""
    verdict = ttl_verdict(ttl, hops, hard_limit)
    if verdict != OK:
        return verdict
    if payload and payload[0] != 0xC3:
        return MALFORMED
    return OK


def query_verdict(
    ttl: i64,
    hops: i64,
    payload: bytes,
    hard_limit: i64,
    source_flow_controlled: bool,
    source_over_rate: bool,
    drop_ancient: bool,
) -> i64:
    """A query's verdict: the TTL rule, its source's flow control and query rate, then
    its payload (two bytes of flags or speed and a NUL-terminated search text), then its
    form."""
    verdict = ttl_verdict(ttl, hops, hard_limit)
    if verdict != OK:
        return verdict
    if source_flow_controlled:
        return SOURCE_FLOW_CONTROLLED
    if source_over_rate:
        return SOURCE_OVER_RATE
    # Most queries end in their text's NUL (no extensions after it), which settles the
    # shape without a search.
    if len(payload) < 3 or (payload[-1] != 0 and payload.find(b"\x00", 2) < 0):
        return MALFORMED
    if drop_ancient and is_ancient(payload):
        return ANCIENT_FORMAT
    return OK


def is_ancient(payload: bytes) -> bool:
    """Whether a (well-formed) query is in the pre-0.6 form: flags 0, the old minimum
    speed. gtk-gnutella drops these; the fan-out keeps them from peers that do."""
    return payload[0] == 0 and payload[1] == 0


def clamped_ttl(ttl: i64, hops: i64, max_ttl: i64) -> i64:
    """The TTL a broadcast may keep: hops + TTL never over ``max_ttl``."""
    room = max_ttl - hops
    return room if ttl > room else ttl


def query_copy_ttl(ttl: i64, leaves: bool) -> i64:
    """The TTL of a query's copy, from the TTL it may keep (clamped and degraded): one
    less; at its last hop 0, the mark of a copy for matching leaves only (sent with
    TTL 1) when the router has leaves, else :data:`NO_COPY`."""
    if ttl > 1:
        return ttl - 1
    return 0 if leaves else NO_COPY


def relay_copy_ttl(ttl: i64) -> i64:
    """The TTL of a relayed copy (a query seen before, now with more TTL): for
    ultrapeers only, so nothing at its last hop."""
    return ttl - 1 if ttl > 1 else NO_COPY


def ping_copy_ttl(ttl: i64) -> i64:
    """The TTL of a broadcast ping's copy, from the TTL it may keep (clamped)."""
    return ttl - 1 if ttl > 1 else NO_COPY
