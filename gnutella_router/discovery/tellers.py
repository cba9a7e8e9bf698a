"""Who told the router of a host (its *teller*), and which tellers speak for local hosts.

The host cache (:mod:`.host_cache`) keeps a share per teller, so a teller's name decides
what counts as one source. A peer is named by its network, ``peer/203.0.0.0/16`` (IPv6:
its /32), as Bitcoin Core's address manager keys sources by group: one operator's many
addresses then count once. A peer inside the local networks is named by its own
address, ``peer/127.0.0.1/32``, since there every peer shares one network. A GWebCache is
``gwebcache/`` and its host; the configuration is ``seed`` or ``operator``.

Names are single words that parse back, so that they are saved in the host cache's file
and judged again when it is loaded: :meth:`LocalNetworks.speaks_for_them` tells from the
name alone whether a teller lies inside the local networks (or is the operator), which
is what lets its local hosts past the address ranges and the shares.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Iterable

from gnutella_router.discovery.ranges import address_group, classify_address, single_host_network

__all__ = ["EXPLICIT", "OPERATOR", "SEED", "LocalNetworks", "gwebcache_teller"]

#: Source of hosts given by the operator; they are never expired and evicted last.
SEED = "seed"
#: Source of hosts the operator added while running (``ctl peers add``).
OPERATOR = "operator"
#: Sources (and tellers) that are the operator's own word: no range or share applies.
EXPLICIT = frozenset({SEED, OPERATOR})
_REMEMBERED = 4096

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def gwebcache_teller(url: str) -> str:
    """The teller name of the GWebCache at ``url``: ``gwebcache/`` and its host."""
    try:
        host = urllib.parse.urlsplit(url).hostname or "unknown"
    except ValueError:
        host = "unknown"
    return f"gwebcache/{host.lower()}"


class LocalNetworks:
    """The networks whose hosts are all the operator's, and the tellers inside them."""

    def __init__(self, networks: Iterable[str | Network]) -> None:
        self.networks = tuple(ipaddress.ip_network(n, strict=False) for n in networks)
        self._tellers: dict[str, bool] = {}

    def __contains__(self, canonical: object) -> bool:
        """Whether ``canonical`` (an address as :func:`.classify_address` names it) is
        inside them."""
        if not self.networks or not isinstance(canonical, str) or not canonical:
            return False
        address = ipaddress.ip_address(canonical)
        return any(address in network for network in self.networks)

    def peer_teller(self, ip: str) -> str:
        """The teller name of a peer at ``ip`` (see the module docstring)."""
        canonical, _ = classify_address(ip)
        if not canonical:
            return "peer/unknown"
        if canonical in self:
            return f"peer/{single_host_network(canonical)}"
        return f"peer/{address_group(canonical)}"

    def speaks_for_them(self, teller: str) -> bool:
        """Whether ``teller`` is the operator, or a peer or GWebCache inside them."""
        known = self._tellers.get(teller)
        if known is not None:
            return known
        local = teller in EXPLICIT
        kind, _, rest = teller.partition("/")
        if kind == "peer":
            try:
                network = ipaddress.ip_network(rest, strict=False)
            except ValueError:
                network = None
            local = network is not None and any(
                network.version == n.version and network.subnet_of(n)  # type: ignore[arg-type]
                for n in self.networks
            )
        elif kind == "gwebcache":
            canonical, _ = classify_address("127.0.0.1" if rest == "localhost" else rest)
            local = canonical in self
        if len(self._tellers) >= _REMEMBERED:
            self._tellers.clear()
        self._tellers[teller] = local
        return local
