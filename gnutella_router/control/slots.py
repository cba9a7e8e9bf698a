"""Who may hold a connection slot: one address's share, and diversity when the node is full.

Theory of operation
-------------------
A node has ``network.max_connections`` slots for ultrapeers (every peer that does not
announce ``X-Ultrapeer: False``, dialled or accepted) and ``network.max_leaves`` slots
for leaves. A slot is held from the moment a peer's handshake request is accepted until
its connection starts to close. Without more rules, whoever comes first keeps the
slots: from one address an attacker took all 32 ultrapeer slots in 0.2 s, and every
other peer was then answered ``503``. Two rules stop that, both skipped for addresses
in ``network.trusted`` (loopback by default, where one address stands for many peers:
a test network, its load clients):

* **One address's share.** An address may hold at most ``network.connections_per_address``
  live connections (1 by default: one host is one peer), of either kind, in either
  direction, handshakes being accepted included. The next one is answered ``409 Already
  connected``, gtk-gnutella's answer to a second connection from a peer it already has.
  IPv6 addresses count by their /64, because one host is routinely given a whole /64
  and could otherwise take every slot with addresses of its own.

* **Diversity when full.** Peers are grouped by network: an IPv4 address by its /24, an
  IPv6 address by its /48 (what one organisation, or one rented block, usually holds).
  When the slots of a newcomer's kind are all taken, the *evictable* connections in
  them (accepted, not dialled by us, from outside the trusted networks, not closing)
  are counted per group. If the newcomer is from outside the trusted networks too and
  the largest group holds at least two more of them than the newcomer's own group, that
  group's newest evictable connection is sent Bye 202 and closed, and the newcomer takes
  its slot; otherwise the newcomer gets ``503`` as before. (gtk-gnutella sends Bye 202,
  "local node preferred", when it closes one peer to make room for a preferred one.)

Why this rule:

* An attacker who filled the slots from one network loses them, one per newcomer from
  any other network, until its network holds no more than one over the newcomer's. A
  slot held by a crowd is given back to the diverse; a full node of honest,
  diverse peers (every group holds one) never evicts anyone.
* It cannot cycle. Each eviction moves one slot from a group of size ``a`` to a group
  of size ``b`` with ``b + 2 <= a``, so the sum of the squares of the group sizes falls
  by ``2 (a - b - 1) >= 2``; a full node admits only by eviction, so the sum falls with
  every admission until new slots free up. An evicted peer that comes straight back
  finds no group two larger than its own (its group was the largest), and is refused.
* The newest member goes, not the oldest: long-lived connections are the proven ones,
  and the newest member of a crowd is the one most likely to belong to it.
* Connections we dialled were chosen by us and trusted peers by the operator; neither
  is evicted or counted. Nor does a trusted newcomer evict anyone: behind a trusted
  address stand many peers (a test network, load clients), whose networks cannot be
  told apart, so a crowd of them would count as a network of none and push out every
  pair of public peers that happen to share a /24.
* The eviction happens when the newcomer's request is accepted, before its handshake
  ends: if that handshake then fails, the slot is free for whoever comes next. A
  newcomer that gives up on purpose costs a crowd one member per attempt (each attempt
  under the per-address limit on attempts), and never pushes a network below one
  connection: only a group of two or more loses one.

Nothing here does I/O or reads a clock: the server passes the connections in.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
from collections.abc import Iterable, Sequence

from gnutella_router.control.abuse import in_networks

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

IPV6_HOST_PREFIX = 64
"""An IPv6 address counts as the /64 it is in for the per-address limit."""
IPV4_GROUP_PREFIX = 24
IPV6_GROUP_PREFIX = 48
"""The networks that diversity counts peers by."""
EVICTION_BYE_CODE = 202
TRUSTED_LOOKUPS_KEPT = 16_384


@dataclasses.dataclass(frozen=True, slots=True)
class Occupant:
    """A connection holding a slot, as the slot policy sees it."""

    id: int
    host: str
    """The address the peer connects from (or that we dialled)."""
    leaf: bool
    """Whether it holds a leaf slot (it announced ``X-Ultrapeer: False``)."""
    evictable: bool
    """Whether it may lose its slot to diversity: accepted, not dialled by us
    (:meth:`SlotPolicy.admit` also spares the trusted networks, and looks that up only
    when the node is full)."""
    since: float
    """When it connected: of a group's members, the newest goes first."""


@dataclasses.dataclass(frozen=True, slots=True)
class Admission:
    """The policy's answer to a handshake request."""

    code: int
    """200 to accept, else the refusal's status code (409, 503)."""
    reason: str = "OK"
    evict: Occupant | None = None
    """The connection to close first, so the newcomer can have its slot."""

    @property
    def accepted(self) -> bool:
        return self.code == 200


ACCEPT = Admission(200)


@functools.lru_cache(maxsize=4096)
def address_key(host: str) -> str:
    """What stands for one host in the per-address limit: an IPv4 address (IPv4-mapped
    IPv6 included), an IPv6 address's /64, or the text itself if it is no address."""
    address = _address(host)
    if address is None:
        return host
    if address.version == 6:
        return str(ipaddress.ip_network(f"{address}/{IPV6_HOST_PREFIX}", strict=False))
    return str(address)


@functools.lru_cache(maxsize=4096)
def group_key(host: str) -> str:
    """The network a host is counted in for diversity: its IPv4 /24 or IPv6 /48."""
    address = _address(host)
    if address is None:
        return host
    prefix = IPV6_GROUP_PREFIX if address.version == 6 else IPV4_GROUP_PREFIX
    return str(ipaddress.ip_network(f"{address}/{prefix}", strict=False))


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def choose_eviction(newcomer: str, occupants: Iterable[Occupant]) -> Occupant | None:
    """The connection whose slot ``newcomer`` may take when the slots are full, or None.

    ``occupants`` are the connections holding slots of the newcomer's kind; only the
    evictable ones are counted. See the module docstring for the rule and why.
    """
    groups: dict[str, list[Occupant]] = {}
    for occupant in occupants:
        if occupant.evictable:
            groups.setdefault(group_key(occupant.host), []).append(occupant)
    if not groups:
        return None
    own = len(groups.get(group_key(newcomer), ()))
    largest = max(groups.values(), key=_crowd_order)
    if len(largest) < own + 2:
        return None
    return max(largest, key=_age_order)


def _crowd_order(members: list[Occupant]) -> tuple[int, tuple[float, int]]:
    """Larger groups sort higher; of equal ones, the one with the newest member."""
    return len(members), max(map(_age_order, members))


def _age_order(occupant: Occupant) -> tuple[float, int]:
    """Newer sorts higher; ids break ties (they grow with every connection)."""
    return occupant.since, occupant.id


class SlotPolicy:
    """Decides each handshake request against the slots (see the module docstring)."""

    def __init__(
        self,
        *,
        max_connections: int,
        max_leaves: int,
        per_address: int,
        trusted: Sequence[Network],
    ) -> None:
        self.max_connections = max_connections
        self.max_leaves = max_leaves
        self.per_address = per_address
        self.trusted_networks = tuple(trusted)
        self._trusted: dict[str, bool] = {}
        """Hosts already looked up (every live connection is, at every handshake)."""

    def trusted(self, host: str) -> bool:
        """Whether ``host`` is in ``network.trusted``."""
        known = self._trusted.get(host)
        if known is None:
            if len(self._trusted) >= TRUSTED_LOOKUPS_KEPT:
                self._trusted.clear()
            known = self._trusted[host] = in_networks(host, self.trusted_networks)
        return known

    def admit(
        self,
        host: str,
        *,
        leaf: bool,
        occupants: Sequence[Occupant],
        admitting: Sequence[str],
    ) -> Admission:
        """Whether a peer connecting from ``host`` may have a slot.

        ``occupants`` are the live connections that are not closing; ``admitting`` the
        addresses of handshakes already accepted but not yet connections (they hold a
        slot each, of either kind: several peers handshaking at once must not all slip
        under a limit).
        """
        if not self.trusted(host):
            key = address_key(host)
            held = sum(address_key(o.host) == key for o in occupants)
            held += sum(address_key(h) == key for h in admitting)
            if held >= self.per_address:
                return Admission(409, "Already connected")
        same_kind = [o for o in occupants if o.leaf == leaf]
        if len(same_kind) + len(admitting) < (self.max_leaves if leaf else self.max_connections):
            return ACCEPT
        if self.trusted(host):
            return Admission(503, "Too many leaves" if leaf else "Too many connections")
        # Only a full node asks which occupants are trusted: asked at every handshake,
        # that was a lookup per live connection per handshake.
        trusted = self.trusted
        candidates = [
            o if not o.evictable or not trusted(o.host) else dataclasses.replace(o, evictable=False)
            for o in same_kind
        ]
        victim = choose_eviction(host, candidates)
        if victim is None:
            return Admission(503, "Too many leaves" if leaf else "Too many connections")
        return Admission(200, evict=victim)
