"""What the router tells about itself: its statistics record and every drop reason.

Kept apart from :mod:`gnutella_router.stages.router` so that observers (dumps,
metrics) can name what they show without importing the routing stage.
"""

from __future__ import annotations

import dataclasses

from gnutella_router.routing import rules
from gnutella_router.routing.route_table import RouteTableStatistics


@dataclasses.dataclass(frozen=True, slots=True)
class RouterStatistics:
    """What the router did, per message type (names), and why it dropped what it dropped."""

    received: dict[str, int]
    forwarded: dict[str, int]
    generated: dict[str, int]
    consumed: dict[str, int]
    dropped: dict[str, dict[str, int]]
    """reason -> message type -> count."""
    tables: dict[str, RouteTableStatistics]
    pong_cache_size: int
    pongs_not_cached: dict[str, int]
    """Pongs routed but not cached, by reason: private addresses on a public network,
    unspecified, multicast or reserved ones anywhere."""
    ttl_trimmed: dict[str, int]
    """Broadcast copies sent with a lower TTL because the peer's X-Max-TTL asked for it."""
    dynamic_queries: dict[str, int]
    """Leaf queries being widened (``active``), the copies sent for them (``copies``),
    Query Status requests sent to their leaves (``status-requests``) and how the
    finished ones ended (``satisfied``, ``exhausted``, ``expired``, ``leaf-gone``,
    ``cancelled``)."""
    relayed_higher_ttl: int = 0
    """Duplicate queries relayed because they came with a higher TTL than the first copy."""
    degraded_queries: int = 0
    """Queries forwarded with less TTL under degradation (``[shedding] degrade_ttl_by``)."""
    degraded_hops: int = 0
    """The hops of TTL those lost, in all."""


DROP_REASONS = (
    "duplicate",
    *rules.DROP_REASONS.values(),  # what the routing rules' verdicts are counted under
    "ttl-expired",
    "no-route",
    "route-closed",
    "unknown-type",
    "outgoing-queue",
    "connection-closing",
    "bye-relayed",
    "peer-refuses-format",
    "peer-hops-flow",
    "qrp-miss",
    "qrp-too-soon",
    "dynamic-query-limit",
    "leaf-query-limit",
)
"""Every reason the router drops a message for (shed reasons come from the shedder)."""
