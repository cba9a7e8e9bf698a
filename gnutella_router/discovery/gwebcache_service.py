"""A GWebCache, the service side: what hosts and caches to hand out, what updates to keep.

Theory of operation
-------------------
A test overlay outgrows one machine the way Gnutella grew: more hosts run routers, and
a GWebCache they all know tells each newcomer whom to dial. :class:`GWebCacheService`
is that cache's logic without a socket (in the manner of h11): :meth:`answer` takes a
request target (``/?get=1&net=gnutella``) and the client's IP address and returns the
body to send; the clock is injected, so the rules are tested without waiting.

It speaks both protocols servents use (the client side is
:mod:`gnutella_router.discovery.gwebcache`):

* v2: ``get=1`` answers ``H|ip:port|age`` host lines and ``U|url|age`` cache lines;
  ``update=1&ip=IP:PORT[&url=URL]`` registers the client (``I|update|OK``);
  ``ping=1`` answers ``I|pong|NAME|gnutella``. A request that names a network other
  than ``gnutella`` gets ``I|ERROR|...``.
* v1: ``hostfile=1`` (bare ``ip:port`` lines), ``urlfile=1`` (URL lines), ``ping=1``
  (``PONG NAME``) and ``update=1`` (``OK``).

The rules a public cache applies, and why:

* **Bounded.** At most ``max_hosts`` hosts and ``max_urls`` caches are kept (the
  stalest goes first), hosts expire after ``host_max_age`` seconds without an update
  (seed hosts, at most :data:`MAX_SEEDS`, never do: they only fill answers that have
  too few reported hosts), one answer lists at most ``answer_hosts`` hosts and
  ``answer_urls`` caches, and the tables of clients' last requests are bounded too.
* **A client registers itself only.** An update's IP must be the address the request
  came from, so nobody can point the overlay at a victim; ``trust_updates`` lifts this
  for a test network whose controller registers its nodes.
* **A share per client.** One client address (an IPv6 client: its /64) may have at
  most ``hosts_per_address`` hosts and ``urls_per_address`` caches registered at once
  (a new one replaces its oldest), may update at most once every ``update_interval``
  seconds, and one /16 (IPv6: /32) holds at most ``hosts_per_group`` hosts (a new one
  replaces the group's stalest). Without these one address registers hundreds of hosts
  of its own in a second and every answer lists only them. Clients in ``trusted``
  (loopback by default: a test network where many routers share one address) are
  exempt.
* **Diverse answers.** ``get`` draws hosts one contributing client and one network at a
  time, the freshest first within each round, so that the clients who registered most
  recently do not fill the answer.
* **Patience.** A client that asks for hosts again within ``client_interval`` seconds
  is told ``You came back too early`` instead (0, the default here, turns this off: on
  a test network many routers share one address).
* **Only what can be dialled.** Hosts must be literal IPv4/IPv6 addresses with a port.
  A cache URL must be ``http://`` or ``https://``, at most
  :data:`MAX_CACHE_URL_LENGTH` characters, without a user name, naming a host by a DNS
  name or a public address: a loopback, private, link-local (a cloud's metadata
  service at 169.254.169.254) or otherwise special address, or a name that only ever
  means a local host (``localhost``, ``*.local``, ``*.internal``...), would turn every
  client that follows the list into a probe of its own network; ``allow_private_urls``
  lifts this for a test network. Anything else is refused with a reason, never a crash.
"""

from __future__ import annotations

import collections
import dataclasses
import ipaddress
import re
import urllib.parse
from collections.abc import Callable

from gnutella_router import __version__
from gnutella_router.control.abuse import in_networks
from gnutella_router.discovery.gwebcache import parse_cache_url, parse_literal_host_port
from gnutella_router.discovery.ranges import address_group, classify_address

NAME = f"gnutella-router-gwebcache/{__version__}"
MAX_TARGET_LENGTH = 4096
MAX_CLIENTS_REMEMBERED = 10_000
MAX_PARAMETERS = 32
NETWORK = "gnutella"
MAX_SEEDS = 100
"""Seed hosts one cache holds at most (``--seed-host``)."""
MAX_CACHE_URL_LENGTH = 256
"""Longest cache URL kept (real ones are well under 100 characters)."""
LOCAL_NAME_SUFFIXES = (".localhost", ".local", ".internal", ".lan", ".home.arpa", ".localdomain")
"""Host names under these mean a host on the client's own network, never a public cache."""
DEFAULT_TRUSTED = ("127.0.0.0/8", "::1/128")
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")

Host = tuple[str, int]


@dataclasses.dataclass(frozen=True, slots=True)
class ServiceSettings:
    max_hosts: int = 200
    max_urls: int = 20
    host_max_age: float = 3600.0
    answer_hosts: int = 20
    answer_urls: int = 10
    client_interval: float = 0.0
    """Least seconds between two host requests from one client; 0: no limit."""
    trust_updates: bool = False
    """Accept an update for any address, not only the requester's own."""
    hosts_per_address: int = 2
    """Hosts one client address (IPv6: /64) may have registered at once."""
    urls_per_address: int = 2
    """Caches one client address (IPv6: /64) may have registered at once."""
    hosts_per_group: int = 10
    """Hosts one /16 (IPv6: /32) may hold at once."""
    update_interval: float = 300.0
    """Least seconds between two updates from one client address; 0: no limit."""
    trusted: tuple[str, ...] = DEFAULT_TRUSTED
    """Networks whose clients the per-address limits above do not apply to."""
    allow_private_urls: bool = False
    """Keep cache URLs that name loopback, private or local hosts (a test network)."""

    def __post_init__(self) -> None:
        for name in ("max_hosts", "max_urls", "answer_hosts", "answer_urls"):
            if not 1 <= getattr(self, name) <= 100_000:
                raise ValueError(f"{name} must be from 1 to 100000")
        for name in ("hosts_per_address", "urls_per_address", "hosts_per_group"):
            if not 1 <= getattr(self, name) <= 100_000:
                raise ValueError(f"{name} must be from 1 to 100000")
        if not self.host_max_age > 0:
            raise ValueError("host_max_age must be positive")
        if not self.client_interval >= 0:
            raise ValueError("client_interval must be 0 or more")
        if not self.update_interval >= 0:
            raise ValueError("update_interval must be 0 or more")
        for network in self.trusted:
            ipaddress.ip_network(network, strict=False)  # ValueError for a bad one

    @property
    def trusted_networks(self) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        return tuple(ipaddress.ip_network(n, strict=False) for n in self.trusted)


@dataclasses.dataclass(slots=True)
class ServiceStatistics:
    requests: int = 0
    hosts_given: int = 0
    updates_accepted: int = 0
    updates_refused: int = 0
    updates_too_early: int = 0
    """Updates refused because the client updated less than update_interval ago."""
    hosts_replaced: int = 0
    """Hosts dropped for a newer one of the same client or network (the shares)."""
    too_early: int = 0
    errors: int = 0


def client_key(client: str) -> str:
    """Whose share a request counts against: its IPv4 address, or its IPv6 /64 (one
    customer's allocation: per address would give one client 2**64 shares)."""
    try:
        address = ipaddress.ip_address(client)
    except ValueError:
        return client
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network(f"{address}/64", strict=False))
    return str(address)


def cache_url_problem(text: str, *, allow_private: bool = False) -> str | None:
    """Why ``text`` is no cache URL to hand out, or None; see the module docstring."""
    if len(text) > MAX_CACHE_URL_LENGTH:
        return f"is longer than {MAX_CACHE_URL_LENGTH} characters"
    if parse_cache_url(text) is None:
        return "is not an http:// or https:// URL"
    parts = urllib.parse.urlsplit(text)
    if parts.username is not None or parts.password is not None:
        return "has a user name"
    host = (parts.hostname or "").rstrip(".")
    canonical, reason = classify_address(host)
    if canonical or reason != "bad-address":  # a literal address
        if not canonical:
            return f"names an address that is never a host ({reason})"
        if reason is not None and not allow_private:
            return f"names a {reason} address"
        return None
    labels = host.split(".")
    if not all(_LABEL.fullmatch(label) for label in labels) or len(host) > 253:
        return "does not name a valid host"
    if host == "localhost" or host.endswith(LOCAL_NAME_SUFFIXES):
        return None if allow_private else "names a local host"
    if len(labels) < 2 or labels[-1][0].isdigit():
        # One label is local by definition; a numeric last label is how other parsers
        # spell an IPv4 address ("2852039166", "0xa9.0xfe.0xa9.0xfe").
        return "does not name a public host"
    return None


class GWebCacheService:
    """The cache's state and rules; see the module docstring."""

    def __init__(
        self,
        settings: ServiceSettings | None = None,
        *,
        clock: Callable[[], float],
    ) -> None:
        self.settings = settings or ServiceSettings()
        self.clock = clock
        self.hosts: collections.OrderedDict[Host, float] = collections.OrderedDict()
        """Host -> when it was last reported; oldest first."""
        self.contributors: dict[Host, str] = {}
        """Host -> the client (:func:`client_key`) that registered it."""
        self.seeds: dict[Host, float] = {}
        """Hosts the operator named -> when; never expired nor evicted (:meth:`add_seed`)."""
        self.urls: collections.OrderedDict[str, float] = collections.OrderedDict()
        self.url_contributors: dict[str, str] = {}
        self.last_asked: collections.OrderedDict[str, float] = collections.OrderedDict()
        self.last_update: collections.OrderedDict[str, float] = collections.OrderedDict()
        """Client -> when its last update was accepted; bounded."""
        self.statistics = ServiceStatistics()
        self.trusted_networks = self.settings.trusted_networks
        """Clients exempt from the per-address limits (parsed once)."""
        # The shares' bookkeeping, for hosts registered by untrusted clients only.
        self._hosts_of: dict[str, list[Host]] = {}
        self._urls_of: dict[str, list[str]] = {}
        self._group_hosts: dict[str, set[Host]] = {}

    # ------------------------------------------------------------------ state

    def add_host(self, host: Host, contributor: str | None = None) -> None:
        """Keep ``host`` as fresh; the stalest is dropped when the table is full.

        ``contributor`` is the untrusted client (:func:`client_key`) that registered it:
        its share and the host's network's share then apply. None: the operator's
        word, or a trusted client; no share applies.
        """
        if host in self.hosts:
            self._forget_host(host)
        if contributor is not None:
            mine = self._hosts_of.get(contributor, [])
            if len(mine) >= self.settings.hosts_per_address:
                self._forget_host(mine[0])
                self.statistics.hosts_replaced += 1
            group = self._group_hosts.get(address_group(host[0]), set())
            if len(group) >= self.settings.hosts_per_group:
                self._forget_host(min(group, key=self.hosts.__getitem__))
                self.statistics.hosts_replaced += 1
            self._hosts_of.setdefault(contributor, []).append(host)
            self._group_hosts.setdefault(address_group(host[0]), set()).add(host)
            self.contributors[host] = contributor
        self.hosts[host] = self.clock()
        while len(self.hosts) > self.settings.max_hosts:
            self._forget_host(next(iter(self.hosts)))

    def _forget_host(self, host: Host) -> None:
        del self.hosts[host]
        contributor = self.contributors.pop(host, None)
        if contributor is None:
            return
        mine = self._hosts_of[contributor]
        mine.remove(host)
        if not mine:
            del self._hosts_of[contributor]
        group = address_group(host[0])
        members = self._group_hosts[group]
        members.discard(host)
        if not members:
            del self._group_hosts[group]

    def add_seed(self, host: tuple[str, int]) -> None:
        """A host the operator vouches for: it fills answers that have too few reported
        hosts (the first routers of an overlay find it, later ones find each other),
        and it never expires, so a cache restarted on a quiet overlay still bootstraps.

        Raises:
            ValueError: more than :data:`MAX_SEEDS` seeds.
        """
        if host not in self.seeds and len(self.seeds) >= MAX_SEEDS:
            raise ValueError(f"at most {MAX_SEEDS} seed hosts")
        self.seeds.setdefault(host, self.clock())

    def add_url(self, url: str, contributor: str | None = None) -> None:
        """Keep ``url`` as fresh; ``contributor`` as for :meth:`add_host`."""
        if url in self.urls:
            self._forget_url(url)
        if contributor is not None:
            mine = self._urls_of.get(contributor, [])
            if len(mine) >= self.settings.urls_per_address:
                self._forget_url(mine[0])
            self._urls_of.setdefault(contributor, []).append(url)
            self.url_contributors[url] = contributor
        self.urls[url] = self.clock()
        while len(self.urls) > self.settings.max_urls:
            self._forget_url(next(iter(self.urls)))

    def _forget_url(self, url: str) -> None:
        del self.urls[url]
        contributor = self.url_contributors.pop(url, None)
        if contributor is not None:
            mine = self._urls_of[contributor]
            mine.remove(url)
            if not mine:
                del self._urls_of[contributor]

    def _expire(self, now: float) -> None:
        limit = now - self.settings.host_max_age
        while self.hosts and next(iter(self.hosts.values())) < limit:
            self._forget_host(next(iter(self.hosts)))
        while self.urls and next(iter(self.urls.values())) < limit:
            self._forget_url(next(iter(self.urls)))

    def fresh_hosts(self) -> list[tuple[Host, float]]:
        """Hosts and their ages, at most ``answer_hosts``: one per contributing client
        and network first, then one per client not listed yet, then any, the freshest
        first in each round; seeds fill what is left."""
        now = self.clock()
        self._expire(now)
        wanted = self.settings.answer_hosts
        newest_first = list(reversed(self.hosts.items()))
        chosen: list[tuple[Host, float]] = []
        listed: set[Host] = set()
        clients: set[str] = set()  # across rounds: a client listed once waits for round 0
        for strictness in (2, 1, 0):
            groups: set[str] = set()
            for host, seen in newest_first:
                if len(chosen) >= wanted:
                    break
                client = self.contributors.get(host, host[0])
                group = address_group(host[0])
                if host in listed or (
                    strictness and (client in clients or (strictness > 1 and group in groups))
                ):
                    continue
                chosen.append((host, seen))
                listed.add(host)
                clients.add(client)
                groups.add(group)
        chosen += [(h, since) for h, since in self.seeds.items() if h not in listed][
            : wanted - len(chosen)
        ]
        return [(host, now - seen) for host, seen in chosen]

    # ------------------------------------------------------------------ requests

    def answer(self, target: str, client: str) -> bytes:
        """The body answering ``target`` for a client at IP address ``client``."""
        self.statistics.requests += 1
        if len(target) > MAX_TARGET_LENGTH:
            self.statistics.errors += 1
            return b"ERROR: request too long\n"
        query = urllib.parse.urlsplit(target).query
        try:
            params = dict(urllib.parse.parse_qsl(query, max_num_fields=MAX_PARAMETERS))
        except ValueError:
            params = {}
        v2 = "get" in params or "net" in params or "getnetworks" in params
        network = params.get("net", NETWORK).lower()
        if v2 and network != NETWORK:
            self.statistics.errors += 1
            return _lines([f"I|ERROR|network {network[:40]!r} not supported, only gnutella"])
        lines: list[str] = []
        if params.get("ping") == "1":
            lines.append(f"I|pong|{NAME}|{NETWORK}" if v2 else f"PONG {NAME}")
        if params.get("update") == "1":
            lines += self._update(params, client, v2)
        if params.get("get") == "1" or params.get("hostfile") == "1":
            lines += self._hosts(client, v2)
        if params.get("get") == "1" or params.get("urlfile") == "1":
            lines += self._urls(v2)
        if not lines:
            self.statistics.errors += 1
            lines.append(
                "I|ERROR|ask get=1, update=1 or ping=1"
                if v2
                else "ERROR: ask hostfile=1, urlfile=1, update=1 or ping=1"
            )
        return _lines(lines)

    def _update(self, params: dict[str, str], client: str, v2: bool) -> list[str]:
        trusted = in_networks(client, self.trusted_networks)
        contributor = None if trusted else client_key(client)
        if contributor is not None and self._too_early(contributor):
            self.statistics.updates_refused += 1
            self.statistics.updates_too_early += 1
            reason = f"updates from one address at most every {self.settings.update_interval:g} s"
            return [f"I|update|WARNING|{reason}" if v2 else f"WARNING: {reason}"]
        problems = []
        accepted = False
        if "ip" in params:
            host = parse_literal_host_port(params["ip"])
            if host is None:
                problems.append(f"ip {params['ip'][:60]!r} is not a literal IP:PORT")
            elif not self.settings.trust_updates and not _same_address(host[0], client):
                problems.append(f"ip {params['ip'][:60]!r} is not your own address")
            else:
                self.add_host(host, contributor)
                accepted = True
        if "url" in params:
            problem = cache_url_problem(
                params["url"], allow_private=self.settings.allow_private_urls
            )
            if problem is not None:
                problems.append(f"url {params['url'][:60]!r} {problem}")
            else:
                self.add_url(params["url"], contributor)
                accepted = True
        if "ip" not in params and "url" not in params:
            problems.append("an update needs ip=IP:PORT or url=URL")
        if accepted and contributor is not None:
            self.last_update.pop(contributor, None)
            self.last_update[contributor] = self.clock()
            while len(self.last_update) > MAX_CLIENTS_REMEMBERED:
                self.last_update.popitem(last=False)
        if problems:
            self.statistics.updates_refused += 1
            reason = "; ".join(problems)
            return [f"I|update|WARNING|{reason}" if v2 else f"WARNING: {reason}"]
        self.statistics.updates_accepted += 1
        return ["I|update|OK" if v2 else "OK"]

    def _too_early(self, contributor: str) -> bool:
        interval = self.settings.update_interval
        last = self.last_update.get(contributor)
        return bool(interval) and last is not None and self.clock() - last < interval

    def _hosts(self, client: str, v2: bool) -> list[str]:
        now = self.clock()
        interval = self.settings.client_interval
        if interval:
            last = self.last_asked.pop(client, None)
            self.last_asked[client] = now if last is None or now - last >= interval else last
            while len(self.last_asked) > MAX_CLIENTS_REMEMBERED:
                self.last_asked.popitem(last=False)
            if last is not None and now - last < interval:
                self.statistics.too_early += 1
                return ["I|WARNING|You came back too early" if v2 else "ERROR: too early"]
        hosts = self.fresh_hosts()
        self.statistics.hosts_given += len(hosts)
        return [f"H|{_format(h)}|{int(age)}" if v2 else _format(h) for h, age in hosts]

    def _urls(self, v2: bool) -> list[str]:
        self._expire(self.clock())
        urls = list(reversed(self.urls.items()))[: self.settings.answer_urls]
        now = self.clock()
        return [f"U|{url}|{int(now - seen)}" if v2 else url for url, seen in urls]


def _same_address(reported: str, client: str) -> bool:
    try:
        one, other = ipaddress.ip_address(reported), ipaddress.ip_address(client)
    except ValueError:
        return False
    if isinstance(other, ipaddress.IPv6Address) and other.ipv4_mapped is not None:
        other = other.ipv4_mapped
    return one == other


def _format(host: tuple[str, int]) -> str:
    address, port = host
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _lines(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode()
