"""Which addresses a router may dial, and which addresses count as one network.

Theory of operation. Every address a router dials was named to it by somebody else: a
pong, an ``X-Try-Ultrapeers`` header, a GWebCache answer. A router on the public
internet that dials whatever it is told can be pointed at hosts that are not Gnutella
peers at all: its own loopback services, the operator's LAN (RFC 1918), a cloud's
metadata service (link-local), a carrier's NAT (CGNAT, 100.64.0.0/10). So each address
is put in one of three kinds by :func:`classify_address`:

* **never dialable**: the unspecified network (0.0.0.0/8, ``::``), multicast, the
  reserved 240.0.0.0/4 with the broadcast address, and unallocated IPv6 space. No
  configuration makes these peers;
* **non-public** (:data:`NON_PUBLIC_REASONS`): loopback, RFC 1918 and unique-local,
  link-local, shared (CGNAT), the documentation ranges and the other special-purpose
  blocks (benchmarking, IETF protocol assignments...). They are right on a LAN or a test
  network, wrong on the internet: the host cache keeps them only when the operator
  allows private addresses, names them (seeds), or they lie in the local networks;
* **public**: everything else.

:func:`address_group` names the network an address belongs to for the purpose of
diversity, as Bitcoin Core's address manager does: its /16 for IPv4, its /32 for IPv6.
Hosts in one group usually share an operator, so one group may hold only a share of the
cache, and dialling spreads over groups.

Nothing here does I/O; answers are cached because pongs repeat addresses many times.
"""

from __future__ import annotations

import functools
import ipaddress

__all__ = [
    "NEVER_DIALABLE_REASONS",
    "NON_PUBLIC_REASONS",
    "address_group",
    "classify_address",
    "single_host_network",
]

#: Reasons an address is never a peer, whatever the configuration.
NEVER_DIALABLE_REASONS = ("bad-address", "unspecified", "multicast", "reserved")
#: Reasons an address is not on the public internet (allowed by configuration only).
NON_PUBLIC_REASONS = (
    "loopback",
    "private",  # RFC 1918, IPv6 unique-local and the deprecated site-local
    "link-local",
    "shared",  # 100.64.0.0/10, carrier-grade NAT (RFC 6598)
    "documentation",  # 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32, 3fff::/20
    "special",  # any other block IANA marks not globally reachable
)

_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")
_RFC1918 = (
    ipaddress.IPv4Network("10.0.0.0/8"),
    ipaddress.IPv4Network("172.16.0.0/12"),
    ipaddress.IPv4Network("192.168.0.0/16"),
)
_SHARED = ipaddress.IPv4Network("100.64.0.0/10")
_DOCUMENTATION_V4 = (
    ipaddress.IPv4Network("192.0.2.0/24"),
    ipaddress.IPv4Network("198.51.100.0/24"),
    ipaddress.IPv4Network("203.0.113.0/24"),
)
_DOCUMENTATION_V6 = (ipaddress.IPv6Network("2001:db8::/32"), ipaddress.IPv6Network("3fff::/20"))
_UNIQUE_LOCAL = ipaddress.IPv6Network("fc00::/7")
_SITE_LOCAL = ipaddress.IPv6Network("fec0::/10")


@functools.lru_cache(maxsize=4096)
def classify_address(host: str) -> tuple[str, str | None]:
    """``(canonical, None)`` for a public address, ``(canonical, reason)`` for a
    non-public one (a reason in :data:`NON_PUBLIC_REASONS`), ``("", reason)`` for one
    that is never dialable (:data:`NEVER_DIALABLE_REASONS`).

    IPv4-mapped IPv6 addresses are judged, and named, as the IPv4 address they carry:
    ``::ffff:10.0.0.1`` is as private as ``10.0.0.1``. IPv6 zone ids ("fe80::1%eth0")
    are refused: they name an interface of the host that sent them.
    """
    if "%" in host:
        return "", "bad-address"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "", "bad-address"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    canonical = str(address)
    if isinstance(address, ipaddress.IPv4Address):
        return _classify_v4(address, canonical)
    return _classify_v6(address, canonical)


def _classify_v4(address: ipaddress.IPv4Address, canonical: str) -> tuple[str, str | None]:
    if address in _THIS_NETWORK:
        return "", "unspecified"
    if address.is_multicast:
        return "", "multicast"
    if address.is_reserved:  # 240.0.0.0/4, the broadcast address included
        return "", "reserved"
    if address.is_loopback:
        return canonical, "loopback"
    if any(address in network for network in _RFC1918):
        return canonical, "private"
    if address.is_link_local:
        return canonical, "link-local"
    if address in _SHARED:
        return canonical, "shared"
    if any(address in network for network in _DOCUMENTATION_V4):
        return canonical, "documentation"
    if not address.is_global:
        return canonical, "special"
    return canonical, None


def _classify_v6(address: ipaddress.IPv6Address, canonical: str) -> tuple[str, str | None]:
    if address.is_unspecified:
        return "", "unspecified"
    if address.is_multicast:
        return "", "multicast"
    if address.is_loopback:
        return canonical, "loopback"
    if address.is_link_local:
        return canonical, "link-local"
    if address in _UNIQUE_LOCAL or address in _SITE_LOCAL:
        return canonical, "private"
    if any(address in network for network in _DOCUMENTATION_V6):
        return canonical, "documentation"
    if address.is_reserved:
        return "", "reserved"
    if not address.is_global:
        return canonical, "special"
    return canonical, None


@functools.lru_cache(maxsize=4096)
def address_group(canonical: str) -> str:
    """The network ``canonical`` (an address as :func:`classify_address` returns it)
    counts as for diversity: ``"203.0.0.0/16"``, ``"2001:db8::/32"``."""
    address = ipaddress.ip_address(canonical)
    prefix = 16 if address.version == 4 else 32
    return str(ipaddress.ip_network(f"{canonical}/{prefix}", strict=False))


def single_host_network(canonical: str) -> str:
    """``canonical`` as a network of one address: ``"127.0.0.1/32"``, ``"::1/128"``."""
    return f"{canonical}/{32 if ':' not in canonical else 128}"
