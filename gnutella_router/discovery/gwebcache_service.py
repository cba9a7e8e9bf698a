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
  too few reported hosts),
  one answer lists at most ``answer_hosts`` hosts (the freshest first) and
  ``answer_urls`` caches, and the table of clients' last requests is bounded too.
* **A client registers itself only.** An update's IP must be the address the request
  came from, so nobody can point the overlay at a victim; ``trust_updates`` lifts this
  for a test network whose controller registers its nodes.
* **Patience.** A client that asks for hosts again within ``client_interval`` seconds
  is told ``You came back too early`` instead (0, the default here, turns this off: on
  a test network many routers share one address).
* **Only what can be dialled.** Hosts must be literal IPv4/IPv6 addresses with a port;
  cache URLs plain ``http://``; anything else is refused with a reason, never a crash.
"""

from __future__ import annotations

import collections
import dataclasses
import ipaddress
import urllib.parse
from collections.abc import Callable

from gnutella_router import __version__
from gnutella_router.discovery.gwebcache import parse_cache_url, parse_literal_host_port

NAME = f"gnutella-router-gwebcache/{__version__}"
MAX_TARGET_LENGTH = 4096
MAX_CLIENTS_REMEMBERED = 10_000
MAX_PARAMETERS = 32
NETWORK = "gnutella"
MAX_SEEDS = 100
"""Seed hosts one cache holds at most (``--seed-host``)."""


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

    def __post_init__(self) -> None:
        for name in ("max_hosts", "max_urls", "answer_hosts", "answer_urls"):
            if not 1 <= getattr(self, name) <= 100_000:
                raise ValueError(f"{name} must be from 1 to 100000")
        if not self.host_max_age > 0:
            raise ValueError("host_max_age must be positive")
        if not self.client_interval >= 0:
            raise ValueError("client_interval must be 0 or more")


@dataclasses.dataclass(slots=True)
class ServiceStatistics:
    requests: int = 0
    hosts_given: int = 0
    updates_accepted: int = 0
    updates_refused: int = 0
    too_early: int = 0
    errors: int = 0


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
        self.hosts: collections.OrderedDict[tuple[str, int], float] = collections.OrderedDict()
        """Host -> when it was last reported; oldest first."""
        self.seeds: dict[tuple[str, int], float] = {}
        """Hosts the operator named -> when; never expired nor evicted (:meth:`add_seed`)."""
        self.urls: collections.OrderedDict[str, float] = collections.OrderedDict()
        self.last_asked: collections.OrderedDict[str, float] = collections.OrderedDict()
        self.statistics = ServiceStatistics()

    # ------------------------------------------------------------------ state

    def add_host(self, host: tuple[str, int]) -> None:
        """Keep ``host`` as fresh; the stalest is dropped when the table is full."""
        self.hosts.pop(host, None)
        self.hosts[host] = self.clock()
        while len(self.hosts) > self.settings.max_hosts:
            self.hosts.popitem(last=False)

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

    def add_url(self, url: str) -> None:
        self.urls.pop(url, None)
        self.urls[url] = self.clock()
        while len(self.urls) > self.settings.max_urls:
            self.urls.popitem(last=False)

    def _expire(self, now: float) -> None:
        limit = now - self.settings.host_max_age
        while self.hosts and next(iter(self.hosts.values())) < limit:
            self.hosts.popitem(last=False)
        while self.urls and next(iter(self.urls.values())) < limit:
            self.urls.popitem(last=False)

    def fresh_hosts(self) -> list[tuple[tuple[str, int], float]]:
        """Hosts and their ages, the freshest first, at most ``answer_hosts``."""
        now = self.clock()
        self._expire(now)
        wanted = self.settings.answer_hosts
        chosen = list(reversed(self.hosts.items()))[:wanted]
        listed = {host for host, _ in chosen}
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
        problems = []
        if "ip" in params:
            host = parse_literal_host_port(params["ip"])
            if host is None:
                problems.append(f"ip {params['ip'][:60]!r} is not a literal IP:PORT")
            elif not self.settings.trust_updates and not _same_address(host[0], client):
                problems.append(f"ip {params['ip'][:60]!r} is not your own address")
            else:
                self.add_host(host)
        if "url" in params:
            url = parse_cache_url(params["url"])
            if url is None or not url.lower().startswith("http://"):
                problems.append(f"url {params['url'][:60]!r} is not a plain http:// URL")
            else:
                self.add_url(url)
        if "ip" not in params and "url" not in params:
            problems.append("an update needs ip=IP:PORT or url=URL")
        if problems:
            self.statistics.updates_refused += 1
            reason = "; ".join(problems)
            return [f"I|update|WARNING|{reason}" if v2 else f"WARNING: {reason}"]
        self.statistics.updates_accepted += 1
        return ["I|update|OK" if v2 else "OK"]

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
