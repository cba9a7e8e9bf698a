"""The network settings the router's parts read while they run, kept in one place.

The router (:mod:`gnutella_router.stages.router`), its run router (:mod:`.flood`,
through the router) and its reply routing (:mod:`.replies`) all judge messages by the
same few ``[network]`` settings: the TTL limits, and which addresses a pong may name to
be handed out again. Each part reads them from the one :class:`NetworkSettings` the
router makes and passes on, never from a copy of its own, so that a setting changed
while the router runs (the daemon sets the local networks; an operator or a test may
change any of them) is seen by every part at once.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(slots=True)
class NetworkSettings:
    """What the router's parts read of ``[network]`` (see the module); mutable on
    purpose: whoever changes a field changes it for every part."""

    max_ttl: int
    """Broadcasts are clamped so that hops + TTL never exceed this."""
    hard_ttl_limit: int
    """A message whose hops + TTL exceed this is dropped on arrival."""
    allow_private: bool = True
    """Whether pongs naming private addresses are cached (handed out again)."""
    local_networks: tuple[Network, ...] = ()
    """Networks whose pongs are cached even when private addresses are not allowed: a
    test network on loopback or in namespaces."""
