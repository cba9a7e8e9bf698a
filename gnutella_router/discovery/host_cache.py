"""The hosts the bootstrap stage may dial: bounded, shared out, ranked, saved atomically.

Theory of operation. A Gnutella node learns far more addresses than it will ever dial:
every pong, every X-Try-Ultrapeers header and every GWebCache reply brings more, and
anyone on the network can send them. A cache that takes them first come, first served
lets one peer fill it (10,000 pongs fill 10,000 slots) and then choose every peer the
router dials: an eclipse. So, in the manner of Bitcoin Core's address manager, the
cache remembers who told it of each host (its *teller*) and shares itself out:

* **per teller**: one teller holds at most ``source_share`` of the capacity. A teller
  is a peer's network (its /16, or /32 for IPv6: addrman's source group, so that one
  operator's many addresses count once), a GWebCache, or the configuration. A teller at
  its share may still teach new hosts, but each replaces its own least useful one, so
  it churns its share and nobody else's;
* **per group**: at most ``group_share`` of the capacity lies in one /16 (IPv6: /32),
  and at most ``ports_per_address`` hosts share one address, so that the router is not
  made to knock on one victim's ports one after the other. Past either, a newcomer is
  refused;
* **by range** (:mod:`.ranges`): addresses that are never peers are refused, and
  non-public ones (loopback, RFC 1918, link-local, CGNAT, documentation...) unless
  ``allow_private`` is set.

Not everything is a stranger's say. Hosts the operator names (sources ``seed`` and
``operator``) are taken whatever their range and count against no share. So are hosts
inside ``local_networks`` that a teller inside them named: a test network on loopback
or in namespaces, where every router has the same address or the same /16 and all of
them are the operator's. A stranger naming a local address gets no such exemption.

When the cache is full a newcomer replaces the least useful host overall: the one that
failed most often and, among equals, was heard of longest ago. Seeds are kept while
anything else can go, since they are the way back in when everything learned has gone
stale. Hosts not heard of for ``max_age`` are expired for the same reason.

Whom to dial is chosen across tellers and networks, not in the cache's order, which a
teller could steer (:mod:`.dialling`). Each failure doubles the time before a host is
offered again, up to ``backoff_max``; a successful connection clears it.

The cache is saved (atomically, :mod:`.saving`) so that a restart does not depend on
the seeds alone, with ages rather than timestamps (``now`` comes from a monotonic clock
whose origin changes with every run) and with each host's teller, so that the shares
hold across a restart.

Nothing here reads a clock or does network I/O; time is passed in as ``now``.

File format (UTF-8 text, one host per line, fields separated by single spaces)::

    # gnutella-router host cache v2: host port source teller age_seconds failures
    81.2.69.7 6346 pong peer/93.184.0.0/16 12.5 0
    2a00:1450::1 6348 x-try peer/2a02:6b8::/32 301.0 2

Blank lines and lines starting with ``#`` are ignored. ``source`` records how the host
was learned; a loaded host is given the source ``cache-file`` whatever the file says,
because only the configuration decides which hosts are seeds. A line of the first
format (five fields, no teller) is read with the teller ``cache-file``: all such hosts
count as one teller.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
import random
import types
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gnutella_router.discovery.cache_file import (
    CACHE_FILE,
    FILE_HEADER,
    format_line,
    one_word,
    parse_line,
)
from gnutella_router.discovery.dialling import choose
from gnutella_router.discovery.ranges import (
    NON_PUBLIC_REASONS,
    address_group,
    classify_address,
)
from gnutella_router.discovery.saving import write_atomically
from gnutella_router.discovery.tellers import (
    EXPLICIT,
    OPERATOR,
    SEED,
    LocalNetworks,
    Network,
    gwebcache_teller,
)

__all__ = [
    "CACHE_FILE",
    "DEFAULT_LOCAL_NETWORKS",
    "FILE_HEADER",
    "OPERATOR",
    "REJECT_REASONS",
    "SEED",
    "HostCache",
    "HostCacheStatistics",
    "HostRecord",
    "classify_address",
]

#: Every reason an address can be refused for, as counted in
#: `HostCacheStatistics.rejected`.
REJECT_REASONS = (
    "bad-address",  # not an IPv4 or IPv6 literal (without a zone id)
    "bad-port",  # not an integer in 1..65535
    "port-zero",  # port 0: hosts that cannot accept connections advertise it
    "unspecified",  # 0.0.0.0/8 or ::
    "multicast",
    "reserved",  # 240.0.0.0/4 (with the broadcast address), unallocated IPv6 space
    *NON_PUBLIC_REASONS,  # only when private addresses are not allowed
    "ports-per-address",  # the address already has ports_per_address ports cached
    "group-full",  # its /16 (IPv6: /32) already holds group_share of the cache
    "bad-line",  # a line of a saved cache that does not parse
)

#: Where hosts are all the operator's unless configured otherwise: this machine.
DEFAULT_LOCAL_NETWORKS = ("127.0.0.0/8", "::1/128")

_NON_PUBLIC = frozenset(NON_PUBLIC_REASONS)
# 2 ** 64 times any sane initial backoff is far past any sane maximum.
_MAX_BACKOFF_EXPONENT = 64

Key = tuple[str, int]
# (-failures, last_seen, stamp, key): the least useful host first.
_Ranked = tuple[int, float, int, Key]


@dataclass(slots=True)
class HostRecord:
    """What the cache knows about one host. `HostCache.hosts` hands out copies."""

    host: str
    port: int
    #: How the host was first learned: ``seed``, ``pong``, ``x-try``, ``gwebcache``,
    #: ``cache-file`` or any other word the caller uses.
    source: str
    first_seen: float
    #: Last time the host was advertised or connected to.
    last_seen: float
    #: Failed dials since the last successful connection.
    failures: int = 0
    #: The host is not offered as a candidate before this time.
    next_attempt: float = 0.0
    last_connected: float | None = None
    #: Who first told us: ``peer/NETWORK``, ``gwebcache/HOST``, ``seed``, ...; the shares
    #: are counted per teller.
    teller: str = ""
    #: Whether the host counts against its teller's, its group's and its address's
    #: limits (False for the operator's hosts and local ones, see the module docstring).
    limited: bool = True


@dataclass(frozen=True, slots=True)
class HostCacheStatistics:
    size: int
    capacity: int
    #: New hosts taken in, by `HostCache.add` or `HostCache.load`.
    added: int
    #: `HostCache.add` calls for a host already cached.
    refreshed: int
    #: Hosts dropped to make room for a newcomer.
    evicted: int
    #: Hosts dropped because their teller, at its share, taught a newer one.
    replaced: int
    #: Hosts dropped by `HostCache.expire`.
    expired: int
    #: Refused addresses and unreadable cache-file lines, by reason (see `REJECT_REASONS`).
    rejected: Mapping[str, int]
    attempts: int
    dial_failures: int
    connections: int
    #: Tellers that hold limited hosts now, and the most hosts one of them holds.
    tellers: int
    largest_teller: int
    #: The limits in force: hosts per teller, per group, ports per address.
    per_teller: int
    per_group: int
    ports_per_address: int


def _port_problem(port: object) -> str | None:
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 0xFFFF:
        return "bad-port"
    if port == 0:
        return "port-zero"
    return None


def _canonical_key(host: object, port: object) -> Key | None:
    """The key a host is stored under, or None if it could never have been stored."""
    if not isinstance(host, str) or _port_problem(port) is not None:
        return None
    canonical, _ = classify_address(host)
    if not canonical:
        return None
    assert isinstance(port, int)
    return canonical, port


def _promise(record: HostRecord) -> tuple[bool, bool, float, float, int]:
    """Sort key, most promising first: seeds, then hosts we reached (latest first), then
    the most recently advertised, then the fewest failures."""
    return (
        record.source != SEED,
        record.last_connected is None,
        -(record.last_connected or 0.0),
        -record.last_seen,
        record.failures,
    )


def _share(capacity: int, share: float) -> int:
    """Hosts ``share`` of ``capacity`` stands for: at least one; a share of 1 is no limit
    (one more than the cache can hold)."""
    return capacity + 1 if share >= 1.0 else max(1, math.floor(capacity * share))


class HostCache:
    """Hosts to dial, at most ``capacity`` of them; see the module docstring."""

    def __init__(
        self,
        capacity: int = 10_000,
        *,
        allow_private: bool = False,
        local_networks: Iterable[str | Network] = DEFAULT_LOCAL_NETWORKS,
        source_share: float = 0.05,
        group_share: float = 0.01,
        ports_per_address: int = 2,
        backoff_initial: float = 5.0,
        backoff_max: float = 300.0,
        max_age: float = 1800.0,
        rng: random.Random | None = None,
    ):
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity!r}")
        if not 0.0 < backoff_initial <= backoff_max:
            raise ValueError("backoff must satisfy 0 < backoff_initial <= backoff_max")
        if not max_age > 0.0:
            raise ValueError(f"max_age must be positive, not {max_age!r}")
        for name, share in (("source_share", source_share), ("group_share", group_share)):
            if not 0.0 < share <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], not {share!r}")
        if ports_per_address < 1:
            raise ValueError(f"ports_per_address must be at least 1, not {ports_per_address!r}")
        self._capacity = capacity
        self._allow_private = allow_private
        self._local = LocalNetworks(local_networks)
        self._per_teller = _share(capacity, source_share)
        self._per_group = _share(capacity, group_share)
        self._ports_per_address = ports_per_address
        self._backoff_initial = float(backoff_initial)
        self._backoff_max = float(backoff_max)
        self._max_age = float(max_age)
        self._rng = rng or random.Random()
        self._records: dict[Key, HostRecord] = {}
        # Eviction order without scanning: a heap of (-failures, last_seen, stamp, key)
        # for every non-seed host, and one for each teller's limited hosts. Entries go
        # stale when a host changes; only the one whose stamp matches `_stamps[key]` is
        # live, and a heap is rebuilt when its stale entries outnumber the live ones.
        self._heap: list[_Ranked] = []
        self._stamps: dict[Key, int] = {}
        self._stamp_counter = itertools.count()
        # Limited hosts only: by teller (with that teller's heap), by group, by address.
        self._teller_keys: dict[str, set[Key]] = {}
        self._teller_heaps: dict[str, list[_Ranked]] = {}
        self._group_counts: dict[str, int] = {}
        self._address_counts: dict[str, int] = {}
        self._added = 0
        self._refreshed = 0
        self._evicted = 0
        self._replaced = 0
        self._expired = 0
        self._attempts = 0
        self._dial_failures = 0
        self._connections = 0
        self._rejected = dict.fromkeys(REJECT_REASONS, 0)

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def allow_private(self) -> bool:
        return self._allow_private

    # -- tellers

    def peer_teller(self, ip: str) -> str:
        """The teller name of a peer at ``ip`` (:mod:`.tellers`)."""
        return self._local.peer_teller(ip)

    @staticmethod
    def gwebcache_teller(url: str) -> str:
        """The teller name of the GWebCache at ``url`` (:mod:`.tellers`)."""
        return gwebcache_teller(url)

    # -- learning hosts

    def add(self, host: str, port: int, source: str, now: float, teller: str | None = None) -> bool:
        """Take in an advertised address; False if it was refused (the reason is counted).

        ``teller`` says who told us (:meth:`peer_teller`, :meth:`gwebcache_teller`); by
        default the source word itself, so that e.g. all seeds are one teller. A host
        already cached is only refreshed: its failure count and backoff stay, since being
        advertised again says nothing about whether it accepts connections, and so does
        its teller. A host given as a seed stays a seed.
        """
        if not one_word(source, 64):
            raise ValueError(f"source must be a single word, not {source!r}")
        teller = source if teller is None else teller
        if not one_word(teller):
            raise ValueError(f"teller must be a single word, not {teller!r}")
        admitted = self._admit(host, port, source, teller)
        if admitted is None:
            return False
        key, limited = admitted
        record = self._records.get(key)
        if record is not None:
            self._refresh(key, record, source, limited, now)
            return True
        return self._take(
            HostRecord(key[0], key[1], source, now, now, 0, now, None, teller, limited)
        )

    def _refresh(
        self, key: Key, record: HostRecord, source: str, limited: bool, now: float
    ) -> None:
        self._refreshed += 1
        changed = False
        if now > record.last_seen:
            record.last_seen = now
            changed = True
        if source == SEED and record.source != SEED:
            record.source = SEED
            changed = True
        if record.limited and (not limited or record.source == SEED):
            # Named by the operator, or by a local teller: out of the shares.
            self._unindex(key, record)
            record.limited = False
            changed = True
        if changed:
            self._touch(key, record)

    def _admit(
        self, host: object, port: object, source: str, teller: str
    ) -> tuple[Key, bool] | None:
        """``(key, limited)`` for an address the cache may hold, else None (counted)."""
        reason = _port_problem(port)
        canonical = ""
        limited = True
        if isinstance(host, str):
            canonical, address_reason = classify_address(host)
        else:
            address_reason = "bad-address"
        if canonical and (address_reason is None or address_reason in _NON_PUBLIC):
            if (
                source in EXPLICIT
                or teller in EXPLICIT
                or (canonical in self._local and self._local.speaks_for_them(teller))
            ):
                limited = False
                address_reason = None
            elif self._allow_private:
                address_reason = None
        reason = address_reason or reason
        if reason is not None:
            self._rejected[reason] += 1
            return None
        assert isinstance(port, int)
        return (canonical, port), limited

    def _take(self, record: HostRecord) -> bool:
        """Insert a new host within the limits; False if a limit refused it (counted)."""
        key = (record.host, record.port)
        if record.limited:
            if self._address_counts.get(record.host, 0) >= self._ports_per_address:
                self._rejected["ports-per-address"] += 1
                return False
            if self._group_counts.get(address_group(record.host), 0) >= self._per_group:
                self._rejected["group-full"] += 1
                return False
            if len(self._teller_keys.get(record.teller, ())) >= self._per_teller:
                victim = self._least_useful(
                    self._teller_heaps.get(record.teller, []),
                    lambda k: self._records[k].limited,
                )
                if victim is None:  # cannot happen while the counts are right
                    return False
                self._drop(victim)
                self._replaced += 1
        if len(self._records) >= self._capacity:
            victim = self._least_useful(self._heap, lambda k: True)
            if victim is None:
                # Nothing but seeds left: the least useful seed goes after all.
                records = self._records
                victim = min(records, key=lambda k: (-records[k].failures, records[k].last_seen))
            self._drop(victim)
            self._evicted += 1
        self._records[key] = record
        if record.limited:
            self._index(key, record)
        self._added += 1
        self._touch(key, record)
        return True

    # -- the limits' bookkeeping

    def _index(self, key: Key, record: HostRecord) -> None:
        self._teller_keys.setdefault(record.teller, set()).add(key)
        group = address_group(record.host)
        self._group_counts[group] = self._group_counts.get(group, 0) + 1
        self._address_counts[record.host] = self._address_counts.get(record.host, 0) + 1

    def _unindex(self, key: Key, record: HostRecord) -> None:
        keys = self._teller_keys.get(record.teller)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._teller_keys[record.teller]
                self._teller_heaps.pop(record.teller, None)
        group = address_group(record.host)
        _decrement(self._group_counts, group)
        _decrement(self._address_counts, record.host)

    def _drop(self, key: Key) -> HostRecord:
        record = self._records.pop(key)
        self._stamps.pop(key, None)
        if record.limited:
            self._unindex(key, record)
        return record

    # -- choosing hosts to dial

    def candidates(self, now: float, exclude: Collection[Key], limit: int) -> list[Key]:
        """Up to ``limit`` hosts worth dialing now, spread over tellers and groups
        (:func:`.dialling.choose`).

        ``exclude`` is this node's own address and every peer connected or being
        connected to; dialing those is wasted at best, and a limited host on an address
        among them is left out too (one port of an address at a time). Hosts in backoff
        are left out.
        """
        if limit <= 0:
            return []
        excluded = {key for host, port in exclude if (key := _canonical_key(host, port))}
        eligible = (
            record
            for key, record in self._records.items()
            if record.next_attempt <= now and key not in excluded
        )
        return choose(eligible, {host for host, _ in excluded}, limit, self._rng, _promise)

    def mark_attempt(self, host: str, port: int, now: float) -> bool:
        """Note a dial; False if the host is not cached.

        The host is held back for ``backoff_initial`` so that it is not offered twice
        even if the caller forgets to exclude it while connecting; the outcome
        (`mark_failure` or `mark_connected`) then decides when it is next offered.
        """
        record = self._find(host, port)
        if record is None:
            return False
        self._attempts += 1
        record.next_attempt = max(record.next_attempt, now + self._backoff_initial)
        return True

    def mark_failure(self, host: str, port: int, now: float) -> bool:
        """Note a failed dial and back off exponentially; False if the host is not cached."""
        key = _canonical_key(host, port)
        record = None if key is None else self._records.get(key)
        if key is None or record is None:
            return False
        self._dial_failures += 1
        record.failures += 1
        exponent = min(record.failures - 1, _MAX_BACKOFF_EXPONENT)
        delay = min(self._backoff_max, self._backoff_initial * 2**exponent)
        record.next_attempt = now + delay
        self._touch(key, record)
        return True

    def mark_connected(self, host: str, port: int, now: float) -> bool:
        """Note a successful connection, which clears the backoff; False if not cached."""
        key = _canonical_key(host, port)
        record = None if key is None else self._records.get(key)
        if key is None or record is None:
            return False
        self._connections += 1
        record.failures = 0
        record.last_connected = now
        record.last_seen = max(record.last_seen, now)
        record.next_attempt = now
        self._touch(key, record)
        return True

    # -- forgetting hosts

    def remove(self, host: str, port: int) -> bool:
        key = _canonical_key(host, port)
        if key is None or key not in self._records:
            return False
        self._drop(key)
        return True

    def expire(self, now: float) -> int:
        """Drop hosts not advertised or connected to for ``max_age``, seeds excepted.

        A peer that stays connected for longer than that is expired too unless it is
        advertised again (its own pongs do that); it is not a dial candidate meanwhile.
        """
        horizon = now - self._max_age
        doomed = [
            key
            for key, record in self._records.items()
            if record.last_seen < horizon and record.source != SEED
        ]
        for key in doomed:
            self._drop(key)
        self._expired += len(doomed)
        return len(doomed)

    # -- eviction bookkeeping

    def _touch(self, key: Key, record: HostRecord) -> None:
        """Re-rank ``key`` after its failures, last_seen, source or limits changed."""
        if record.source == SEED:
            self._stamps.pop(key, None)
            return
        stamp = next(self._stamp_counter)
        self._stamps[key] = stamp
        entry = (-record.failures, record.last_seen, stamp, key)
        heapq.heappush(self._heap, entry)
        if len(self._heap) > 2 * len(self._stamps) + 64:
            self._heap = self._ranked(self._stamps)
        if record.limited:
            heap = self._teller_heaps.setdefault(record.teller, [])
            heapq.heappush(heap, entry)
            keys = self._teller_keys[record.teller]
            if len(heap) > 2 * len(keys) + 64:
                self._teller_heaps[record.teller] = self._ranked(keys)

    def _ranked(self, keys: Iterable[Key]) -> list[_Ranked]:
        """A fresh heap of ``keys`` (all ranked hosts)."""
        heap = [
            (-self._records[k].failures, self._records[k].last_seen, self._stamps[k], k)
            for k in keys
            if k in self._stamps
        ]
        heapq.heapify(heap)
        return heap

    def _least_useful(self, heap: list[_Ranked], eligible: Callable[[Key], bool]) -> Key | None:
        """Pop ``heap`` down to its live least useful host and return it (not removed)."""
        stamps = self._stamps
        while heap:
            _, _, stamp, key = heapq.heappop(heap)
            if stamps.get(key) == stamp and eligible(key):
                return key
        return None

    # -- inspection

    def _find(self, host: object, port: object) -> HostRecord | None:
        key = _canonical_key(host, port)
        return None if key is None else self._records.get(key)

    def source_of(self, host: str, port: int) -> str | None:
        """How the cached host was learned (``seed``, ``pong``, ...), or None."""
        record = self._find(host, port)
        return None if record is None else record.source

    def teller_of(self, host: str, port: int) -> str | None:
        """Who told us of the cached host (``peer/203.0.0.0/16``, ...), or None."""
        record = self._find(host, port)
        return None if record is None else record.teller

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, item: object) -> bool:
        if not isinstance(item, tuple) or len(item) != 2:
            return False
        return self._find(item[0], item[1]) is not None

    def hosts(self) -> list[HostRecord]:
        """Copies of every record, the most promising first."""
        return [dataclasses.replace(r) for r in sorted(self._records.values(), key=_promise)]

    def statistics(self) -> HostCacheStatistics:
        return HostCacheStatistics(
            size=len(self._records),
            capacity=self._capacity,
            added=self._added,
            refreshed=self._refreshed,
            evicted=self._evicted,
            replaced=self._replaced,
            expired=self._expired,
            rejected=types.MappingProxyType(dict(self._rejected)),
            attempts=self._attempts,
            dial_failures=self._dial_failures,
            connections=self._connections,
            tellers=len(self._teller_keys),
            largest_teller=max(map(len, self._teller_keys.values()), default=0),
            per_teller=self._per_teller,
            per_group=self._per_group,
            ports_per_address=self._ports_per_address,
        )

    # -- persistence

    def save(self, path: Path, now: float) -> int:
        """Write every host to ``path`` atomically; return how many.

        Hosts are written most promising first, so that a smaller cache loading the
        file keeps the best of them.
        """
        text, count = self.render(now)
        write_atomically(path, text)
        return count

    def render(self, now: float) -> tuple[str, int]:
        """The file's text and the number of hosts in it.

        Separate from the write so that a daemon can take the snapshot on its event loop
        and leave the slow part (the write and its fsyncs) to a worker thread.
        """
        records = sorted(self._records.values(), key=_promise)
        lines = [FILE_HEADER]
        lines.extend(
            format_line(r.host, r.port, r.source, r.teller, now - r.last_seen, r.failures)
            for r in records
        )
        return "\n".join(lines) + "\n", len(records)

    def load(self, path: Path, now: float) -> int:
        """Merge hosts saved by `save`; return how many new hosts were taken in.

        A missing file is an empty cache. Whatever the file holds, this does not raise:
        a line that does not parse counts as ``bad-line``, an address refused by this
        cache's rules counts under the reason `add` would give (the shares included),
        and a host already cached keeps its current record. I/O errors other than a
        missing file do raise.
        """
        try:
            stream = path.open("r", encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return 0
        loaded = 0
        with stream:
            for raw in stream:
                line = raw.strip()
                if not line or line.startswith("#"):
                    continue
                try:
                    host, port, teller, age, failures = parse_line(line)
                except ValueError:
                    self._rejected["bad-line"] += 1
                    continue
                admitted = self._admit(host, port, CACHE_FILE, teller)
                if admitted is None or admitted[0] in self._records:
                    continue
                (address, port), limited = admitted
                seen = now - age
                record = HostRecord(
                    address, port, CACHE_FILE, seen, seen, failures, now, None, teller, limited
                )
                loaded += self._take(record)
        return loaded


def _decrement(counts: dict[str, int], key: str) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
