"""The GnutellaCatcher stage: joining the network and staying joined.

Hosts arrive from four places: the configured seeds, the host cache saved by an earlier
run, a GWebCache (asked only when the cache has too few candidates), and the running
network itself (pongs routed to us, ``X-Try-Ultrapeers`` in handshakes). Each request
to the GWebCache also reports our own address to it (``update=1``), and so does one an
hour while the router runs, so that servents that ask after us can find us, as
ultrapeers do; an address that is no use to others (``0.0.0.0``: set
``node.advertise``) is not reported. They reach the
catcher through its own bounded stage queue, so a flood of pongs costs at most a
counted drop, never unbounded memory, and the router never waits for the catcher.

Each host is learned with its teller: the address of the peer whose pong or handshake
named it, the GWebCache that listed it, or the configuration. The host cache
(:mod:`gnutella_router.discovery.host_cache`) keeps a bounded share per teller, per
network and per address, and no private or special-purpose address unless allowed or
local, so that no one peer fills it; when it refuses hosts, that is logged at most once
every 10 s with the counts.

A maintenance loop keeps at least ``min_connections`` outgoing connections: when short,
it dials candidates in parallel, spread over tellers and networks, never itself, a peer
it is already connected to or another port of an address it is dialling, with
exponential backoff per host after a failure. A peer the operator dropped
(``ctl peers drop``) is held back for ``catcher.drop_hold`` seconds: it is not dialled
again meanwhile, or the drop would be undone within a second; ``ctl peers add`` lifts
the hold. Each new outgoing connection gets one ping of our own (TTL 2) so its
neighbours' pongs teach us more hosts, as the paper's catcher did. The cache is saved
atomically now and then and at shutdown.

With ``catcher.learn_from_peers`` off, hosts named by peers are counted and not
cached, so the only candidates are the seeds, the GWebCache's hosts and the
operator's: a test network (:mod:`gnutella_router.lab.testnet`) keeps its planned shape
that way, each router dialling its planned peers and retrying one that refused or was
not up yet, after its backoff, instead of filling its slots with whoever a neighbour
named.
"""

from __future__ import annotations

import collections
import dataclasses
import ipaddress
from collections.abc import Iterable
from pathlib import Path

import structlog
import trio

from gnutella_router.config import Config
from gnutella_router.control.holds import PeerHolds
from gnutella_router.discovery.gwebcache import GWebCacheError, fetch_hosts
from gnutella_router.discovery.host_cache import (
    OPERATOR,
    SEED,
    HostCache,
    HostCacheStatistics,
)
from gnutella_router.discovery.ranges import classify_address
from gnutella_router.discovery.saving import remove_leftovers, write_atomically
from gnutella_router.logs import RateLimitedWarnings
from gnutella_router.net.connection import format_address
from gnutella_router.runtime.stage import Stage, StageStatistics
from gnutella_router.stages.router import GnutellaRouter
from gnutella_router.stages.server import DialError, GnutellaServer

LearnedHost = tuple[str, int, str, str | None]
"""A host, its port, how it was learned, and the address of the peer that told us."""
LIMIT_REASONS = ("ports-per-address", "group-full")
MAINTENANCE_INTERVAL = 1.0
MAX_HELD = 256
"""Most addresses held back after an operator's drop (each drop holds two at most)."""
GWEBCACHE_REPORT_INTERVAL = 3600.0
"""A router reports itself to its GWebCache at least this often (caches forget hosts
that stay silent for about an hour)."""
KEEPALIVE_PING_INTERVAL = 30.0
"""Seconds between our pings to a neighbour while we have all the peers we want: TTL 1,
answered with the neighbour's own pong (it proves the link alive and keeps its address
fresh)."""
DISCOVERY_PING_INTERVAL = 10.0
"""Seconds between our pings to a neighbour while outgoing connections are missing:
TTL 2, answered with pongs from its cache or for its neighbours (gtk-gnutella answers a
TTL 2 ping with its neighbours, a Pong-Caching router from its cache)."""
FIRST_DISCOVERY_DELAY = 5.0
"""After the TTL 1 ping at connect, the first TTL 2 one waits this long, so the two do
not trip a neighbour's ping throttle."""


@dataclasses.dataclass(frozen=True, slots=True)
class CatcherStatistics:
    stage: StageStatistics
    hosts: HostCacheStatistics
    outgoing: int
    target: int
    dialing: int
    dials: int
    dial_failures: int
    dropped_hosts: int
    """Learned hosts dropped because the catcher's queue was full."""
    ignored_hosts: int
    """Hosts peers named that were not cached, ``catcher.learn_from_peers`` being off."""
    dials_by_range: dict[str, int]
    """Dials by the kind of address dialled: ``public``, or the reason it is not
    (``loopback``, ``private``, ...; see :mod:`gnutella_router.discovery.ranges`)."""
    own_addresses_skipped: int
    """Learned hosts that were this router's own address, never cached."""
    gwebcache_requests: int
    gwebcache_failures: int
    saves: int


def own_addresses(
    advertised: tuple[str, int], listening: Iterable[tuple[str, int]]
) -> set[tuple[str, int]]:
    """Every address by which a peer could name this router: what it advertises, where
    it listens, and loopback on the port of a wildcard listener (which answers there)."""
    own = {advertised, *listening}
    wildcard_ports = {port for host, port in own if host in ("0.0.0.0", "::")}
    own.update((host, port) for port in wildcard_ports for host in ("127.0.0.1", "::1"))
    return own


class GnutellaCatcher:
    """Keeps the router connected; the handler of the catcher stage."""

    def __init__(
        self,
        config: Config,
        *,
        server: GnutellaServer,
        router: GnutellaRouter,
        log: structlog.typing.FilteringBoundLogger | None = None,
    ) -> None:
        self.config = config
        self.settings = config.catcher
        self.server = server
        self.router = router
        self.log = log or structlog.get_logger("catcher")
        self.hosts = HostCache(
            self.settings.host_cache_size,
            allow_private=config.network.allow_private_addresses,
            local_networks=config.network.local_networks_parsed,
            source_share=self.settings.source_share,
            group_share=self.settings.group_share,
            ports_per_address=self.settings.ports_per_address,
            backoff_initial=self.settings.backoff_initial,
            backoff_max=self.settings.backoff_max,
        )
        self.stage: Stage[LearnedHost] = Stage(
            "catcher", self._handle, threshold=1000, batch_size=256
        )
        self.cache_path = Path(config.node.state_dir) / self.settings.host_cache_file
        self._dialing: set[tuple[str, int]] = set()
        self.dropped = PeerHolds(MAX_HELD)
        """Addresses the operator dropped, held back from our dials for
        ``catcher.drop_hold`` (a drop alone keeps the peer from nothing else: it may dial
        in; ``ctl``'s holds, :attr:`GnutellaServer.holds`, refuse that too)."""
        self._pings_due: dict[int, float] = {}
        """When each neighbour (by connection id) gets our next ping; pruned to the live ones."""
        self.own_addresses_skipped = 0
        """Hosts not cached because they were this router's own address."""
        self.dial_warnings = RateLimitedWarnings(self.log)
        """A seed that cannot be dialled is named each time (at most every 10 s per
        seed); other hosts that fail are summed into one line every 10 s."""
        self.refusal_warnings = RateLimitedWarnings(self.log)
        """The host cache's refusals and replacements, summed into one line every 10 s."""
        self._refusals_logged: dict[str, int] = {}
        self.dials = 0
        self.dials_by_range: collections.Counter[str] = collections.Counter()
        self.dial_failures = 0
        self.dropped_hosts = 0
        self.ignored_hosts = 0
        self.gwebcache_requests = 0
        self.gwebcache_failures = 0
        self.saves = 0
        self._last_gwebcache = -1e9
        self._asking = False
        """A GWebCache request is waiting for its answer."""

    # ------------------------------------------------------------------ learning

    def learn(self, host: str, port: int, source: str, teller: str | None = None) -> None:
        """Called by the router and the server: queue a host, never wait.

        ``teller`` is the IP address of the peer that named the host (None for the
        operator's own word); the host cache counts its share by it. With
        ``catcher.learn_from_peers`` off, only the operator's hosts are taken: the router
        then dials only its seeds, its GWebCache's hosts and the operator's.
        """
        if source != OPERATOR and not self.settings.learn_from_peers:
            self.ignored_hosts += 1
            return
        if not self.stage.queue.admit_one((host, port, source, teller)):
            self.dropped_hosts += 1

    def learn_many(self, hosts: list[tuple[str, int]], source: str, teller: str | None) -> None:
        for host, port in hosts:
            self.learn(host, port, source, teller)

    async def _handle(self, batch: list[LearnedHost]) -> None:
        now = trio.current_time()
        own = self._own_addresses()
        tellers: dict[str, str] = {}
        for host, port, source, peer in batch:
            if (host, port) in own:
                # Our own address, heard back in a pong, an X-Try header or a cache: a
                # host cache that holds it makes the router dial itself.
                self.own_addresses_skipped += 1
                continue
            teller = None
            if peer is not None:
                teller = tellers.get(peer) or tellers.setdefault(peer, self.hosts.peer_teller(peer))
            self.hosts.add(host, port, source, now, teller)
        self._log_refusals()

    def _log_refusals(self) -> None:
        """One warning line at most every 10 s while the host cache refuses or replaces
        hosts for its limits, with the counts since the last line: under an eclipse
        attempt that is thousands a second, each of which alone says nothing."""
        stats = self.hosts.statistics()
        counts = dict(stats.rejected) | {"replaced": stats.replaced}
        changed = {
            reason: count - self._refusals_logged.get(reason, 0)
            for reason, count in counts.items()
            if reason != "bad-line" and count > self._refusals_logged.get(reason, 0)
        }
        if changed and self.refusal_warnings.warn(
            "host-cache-refusals",
            "host cache refused hosts",
            since_last=changed,
            largest_teller=stats.largest_teller,
            per_teller=stats.per_teller,
        ):
            self._refusals_logged = counts

    def _own_addresses(self) -> set[tuple[str, int]]:
        return own_addresses(self.server.advertised_address(), self.server.listen_addresses)

    def try_hosts(self) -> list[tuple[str, int]]:
        """Hosts to suggest to a peer we must refuse (X-Try-Ultrapeers)."""
        return self.hosts.candidates(trio.current_time(), exclude=self._excluded(), limit=10)

    # ------------------------------------------------------------------ running

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        now = trio.current_time()
        try:
            leftovers = remove_leftovers(self.cache_path)
            loaded = self.hosts.load(self.cache_path, now)
        except OSError as exc:
            leftovers = 0
            loaded = 0
            self.log.warning("host cache not read", path=str(self.cache_path), error=str(exc))
        for host, port in self.settings.seed_addresses:
            for address in await self._resolve(host, port):
                self.hosts.add(address, port, SEED, now)
        self.log.info(
            "catcher started",
            seeds=len(self.settings.seeds),
            cached_hosts=loaded,
            target=self.settings.min_connections,
            **({"unfinished_saves_removed": leftovers} if leftovers else {}),
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(self.stage.serve)
            nursery.start_soon(self._maintain, nursery)
            nursery.start_soon(self._save_periodically)
            if self.settings.gwebcache:
                nursery.start_soon(self._report_periodically)
            task_status.started()

    async def _resolve(self, host: str, port: int) -> list[str]:
        """A seed's addresses: itself if it is an IP, else what the resolver says.

        The host cache holds only literal addresses; a seed may be a name
        ("localhost:6346"). A name that does not resolve is logged and skipped.
        """
        try:
            ipaddress.ip_address(host)
        except ValueError:
            pass
        else:
            return [host]
        try:
            with trio.fail_after(self.settings.dial_timeout):
                infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
        except (OSError, trio.TooSlowError) as exc:
            self.log.warning("seed does not resolve", seed=f"{host}:{port}", error=str(exc))
            return []
        addresses: list[str] = []
        for *_, sockaddr in infos:
            address = str(sockaddr[0])
            if address not in addresses:
                addresses.append(address)
        return addresses

    def _excluded(self) -> set[tuple[str, int]]:
        """Hosts not to dial: ourselves, our peers, those being dialled, and those the
        operator holds down (:mod:`gnutella_router.control.holds`)."""
        excluded = self.server.connections.addresses() | self._dialing
        excluded |= self.server.holds.addresses(trio.current_time())
        excluded.add(self.server.advertised_address())
        excluded.update(self.server.listen_addresses)
        excluded |= self.dropped.addresses(trio.current_time())
        return excluded

    def is_dialling(self, host: str, port: int) -> bool:
        """Whether the catcher is dialling ``host:port`` right now."""
        return (host, port) in self._dialing

    def hold_back(self, addresses: Iterable[tuple[str, int]], now: float) -> None:
        """Dial none of ``addresses`` for ``catcher.drop_hold`` seconds (the operator
        dropped that peer). Bounded: at most :data:`MAX_HELD` addresses, the hold
        nearest its end giving way."""
        for address in addresses:
            self.dropped.hold(address, now, self.settings.drop_hold)

    def release(self, host: str, port: int) -> None:
        """Lift a drop's hold (the operator adds the peer again)."""
        self.dropped.release((host, port))

    def _ping_neighbours(self, missing: bool, now: float) -> None:
        """Ping each neighbour when it is due: TTL 1 at once when it connects, then TTL 2
        every :data:`DISCOVERY_PING_INTERVAL` seconds while peers are missing, or TTL 1
        every :data:`KEEPALIVE_PING_INTERVAL` seconds once they are not."""
        due = self._pings_due
        first = FIRST_DISCOVERY_DELAY if missing else KEEPALIVE_PING_INTERVAL
        every = DISCOVERY_PING_INTERVAL if missing else KEEPALIVE_PING_INTERVAL
        alive: set[int] = set()
        for connection in self.server.connections.snapshot():
            if connection.closing:
                continue
            alive.add(connection.id)
            when = due.get(connection.id)
            if when is None:
                self.router.originate_ping(connection, 1, now)
                due[connection.id] = now + first
            elif now >= when:
                self.router.originate_ping(connection, 2 if missing else 1, now)
                due[connection.id] = now + every
        if len(due) > len(alive):
            self._pings_due = {link: when for link, when in due.items() if link in alive}

    async def _maintain(self, nursery: trio.Nursery) -> None:
        while True:
            missing = (
                self.settings.min_connections
                - self.server.connections.count("outgoing")
                - len(self._dialing)
            )
            self._ping_neighbours(missing > 0, trio.current_time())
            if missing > 0 and not self.server.holds.offline:
                now = trio.current_time()
                candidates = self.hosts.candidates(now, exclude=self._excluded(), limit=missing)
                if len(candidates) < missing and self.settings.gwebcache:
                    nursery.start_soon(self._ask_gwebcache)
                for host, port in candidates:
                    self._dialing.add((host, port))
                    self.hosts.mark_attempt(host, port, now)
                    nursery.start_soon(self._dial, host, port)
            await trio.sleep(MAINTENANCE_INTERVAL)

    async def _dial(self, host: str, port: int) -> None:
        self.dials += 1
        canonical, kind = classify_address(host)
        self.dials_by_range[kind or ("public" if canonical else "name")] += 1
        try:
            connection = await self.server.dial(host, port, timeout=self.settings.dial_timeout)
        except DialError as exc:
            self.dial_failures += 1
            is_seed = self.hosts.source_of(host, port) == SEED
            self.hosts.mark_failure(host, port, trio.current_time())
            self.dial_warnings.warn(
                f"seed {host}:{port}" if is_seed else "dial-failed",
                "seed cannot be dialled" if is_seed else "peer cannot be dialled",
                peer=format_address(host, port),
                error=str(exc),
            )
            return
        finally:
            self._dialing.discard((host, port))
        self.hosts.mark_connected(host, port, trio.current_time())
        del connection  # pinged by _ping_neighbours, like every other neighbour

    async def _report_periodically(self) -> None:
        """Report our address to the GWebCache once an hour, needing hosts or not."""
        while True:
            await trio.sleep(GWEBCACHE_REPORT_INTERVAL)
            await self._ask_gwebcache()

    def _reportable_address(self) -> tuple[str, int] | None:
        """Our advertised address, if it is one another host could dial."""
        host, port = self.server.advertised_address()
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return None
        if address.is_unspecified or address.is_multicast or not port:
            return None
        return host, port

    async def _ask_gwebcache(self) -> None:
        """Ask the GWebCache for hosts (and report our address), unless asked less than
        ``gwebcache_interval`` ago or a request is still waiting for its answer: a cache
        slow to answer is not sent a second request on top of the first."""
        now = trio.current_time()
        if self._asking or now - self._last_gwebcache < self.settings.gwebcache_interval:
            return
        self._last_gwebcache = now
        self.gwebcache_requests += 1
        self._asking = True
        try:
            reply = await fetch_hosts(
                self.settings.gwebcache,
                timeout=self.settings.dial_timeout,
                update=self._reportable_address(),
            )
        except GWebCacheError as exc:
            self.gwebcache_failures += 1
            self.log.warning("gwebcache failed", url=self.settings.gwebcache, error=str(exc))
            return
        finally:
            self._asking = False
        now = trio.current_time()
        teller = self.hosts.gwebcache_teller(self.settings.gwebcache)
        for host, port in reply.hosts:
            self.hosts.add(host, port, "gwebcache", now, teller)
        self._log_refusals()
        self.log.info("gwebcache answered", hosts=len(reply.hosts), skipped=reply.skipped_lines)

    async def _save_periodically(self) -> None:
        while True:
            await trio.sleep(self.settings.save_interval)
            await self.save()

    async def save(self) -> None:
        """Write the host cache atomically; a failure is logged, never fatal.

        The snapshot is taken here, on the event loop; the write and its fsyncs run in
        a worker thread, so routing does not stall on the disk.
        """
        text, count = self.hosts.render(trio.current_time())
        try:
            await trio.to_thread.run_sync(self._write, text)
        except OSError as exc:
            self.log.warning("host cache not saved", path=str(self.cache_path), error=str(exc))
            return
        self.saves += 1
        self.log.debug("host cache saved", path=str(self.cache_path), hosts=count)

    def _write(self, text: str) -> None:
        self.cache_path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.cache_path, text)

    def statistics(self) -> CatcherStatistics:
        return CatcherStatistics(
            stage=self.stage.statistics(),
            hosts=self.hosts.statistics(),
            outgoing=self.server.connections.count("outgoing"),
            target=self.settings.min_connections,
            dialing=len(self._dialing),
            dials=self.dials,
            dial_failures=self.dial_failures,
            dropped_hosts=self.dropped_hosts,
            ignored_hosts=self.ignored_hosts,
            dials_by_range=dict(self.dials_by_range),
            own_addresses_skipped=self.own_addresses_skipped,
            gwebcache_requests=self.gwebcache_requests,
            gwebcache_failures=self.gwebcache_failures,
            saves=self.saves,
        )
