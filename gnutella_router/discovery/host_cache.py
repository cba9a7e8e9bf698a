"""The hosts the bootstrap stage may dial: bounded, ranked, with backoff, saved atomically.

Theory of operation. A Gnutella node learns far more addresses than it will ever dial:
every pong, every X-Try-Ultrapeers header and every GWebCache reply brings more, and
anyone on the network can send them. The cache is therefore bounded. When it is full a
newcomer replaces the least useful host, the one that failed most often and, among
equals, was heard of longest ago. Seeds, the hosts the operator configured, are kept
while anything else can go, since they are the way back in when everything learned
has gone stale. Hosts not heard of for ``max_age`` are expired for the same reason.

Addresses are checked on the way in, and every refusal is counted by reason: a node on
the public network has no use for loopback or RFC 1918 addresses (``allow_private=False``),
while a test network on one machine consists of nothing else (the default).

Dialing a dead host over and over wastes connection slots and annoys the host if it is
merely busy, so each failure doubles the time before the host is offered again, up to
``backoff_max``; a successful connection clears it.

The cache is saved so that a restart does not depend on the seeds alone. The file is
written beside the old one, flushed to disk and renamed over it: a crash or a full disk
mid-save leaves either the old file or the new one, never half of each. Ages rather than
timestamps are stored, because ``now`` here comes from a monotonic clock whose origin
changes with every run.

Nothing here reads a clock or does network I/O; time is passed in as ``now``.

File format (UTF-8 text, one host per line, fields separated by single spaces)::

    # gnutella-router host cache v1: host port source age_seconds failures
    203.0.113.7 6346 pong 12.5 0
    2001:db8::1 6348 x-try 301.0 2

Blank lines and lines starting with ``#`` are ignored. ``source`` records where the
host was learned; a loaded host is given the source ``cache-file`` whatever the file
says, because only the configuration decides which hosts are seeds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import glob
import heapq
import ipaddress
import itertools
import math
import os
import tempfile
import types
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CACHE_FILE",
    "FILE_HEADER",
    "REJECT_REASONS",
    "SEED",
    "HostCache",
    "HostCacheStatistics",
    "HostRecord",
]

#: Source of hosts given by the operator; they are never expired and evicted last.
SEED = "seed"
#: Source given to hosts read back by `HostCache.load`.
CACHE_FILE = "cache-file"
FILE_HEADER = "# gnutella-router host cache v1: host port source age_seconds failures"

#: Every reason an address can be refused for, as counted in
#: `HostCacheStatistics.rejected`.
REJECT_REASONS = (
    "bad-address",  # not an IPv4 or IPv6 literal (without a zone id)
    "bad-port",  # not an integer in 1..65535
    "port-zero",  # port 0: hosts that cannot accept connections advertise it
    "unspecified",  # 0.0.0.0/8 or ::
    "multicast",
    "reserved",  # 240.0.0.0/4 (with the broadcast address), unallocated IPv6 space
    "private",  # loopback, RFC 1918, link-local, unique-local; only when not allowed
    "bad-line",  # a line of a saved cache that does not parse
)

_RFC1918 = (
    ipaddress.IPv4Network("10.0.0.0/8"),
    ipaddress.IPv4Network("172.16.0.0/12"),
    ipaddress.IPv4Network("192.168.0.0/16"),
)
_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")
_UNIQUE_LOCAL = ipaddress.IPv6Network("fc00::/7")
# 2 ** 64 times any sane initial backoff is far past any sane maximum.
_MAX_BACKOFF_EXPONENT = 64


@dataclass(slots=True)
class HostRecord:
    """What the cache knows about one host. `HostCache.hosts` hands out copies."""

    host: str
    port: int
    #: Where the host was first learned: ``seed``, ``pong``, ``x-try``, ``gwebcache``,
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
    #: Hosts dropped by `HostCache.expire`.
    expired: int
    #: Refused addresses and unreadable cache-file lines, by reason (see `REJECT_REASONS`).
    rejected: Mapping[str, int]
    attempts: int
    dial_failures: int
    connections: int


@functools.lru_cache(maxsize=4096)
def classify_address(host: str) -> tuple[str, str | None]:
    """``(canonical host, None)`` for a public address, ``(canonical, "private")``, or
    ``("", reason)`` for an address that is never dialable.

    Cached because pongs repeat the same addresses many times over. IPv6 zone ids
    ("fe80::1%eth0") are refused: they name an interface of the host that sent them.
    """
    if "%" in host:
        return "", "bad-address"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "", "bad-address"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if isinstance(address, ipaddress.IPv4Address):
        if address in _THIS_NETWORK:
            return "", "unspecified"
        if address.is_multicast:
            return "", "multicast"
        if address.is_reserved:
            return "", "reserved"
        if address.is_loopback or address.is_link_local or any(address in n for n in _RFC1918):
            return str(address), "private"
        return str(address), None
    if address.is_unspecified:
        return "", "unspecified"
    if address.is_multicast:
        return "", "multicast"
    if (
        address.is_loopback
        or address.is_link_local
        or address.is_site_local
        or address in _UNIQUE_LOCAL
    ):
        return str(address), "private"
    if address.is_reserved:
        return "", "reserved"
    return str(address), None


def _port_problem(port: object) -> str | None:
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 0xFFFF:
        return "bad-port"
    if port == 0:
        return "port-zero"
    return None


def _canonical_key(host: object, port: object) -> tuple[str, int] | None:
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


def _ascii_int(text: str) -> int:
    # int() alone would also take "+5", "5_0" and non-ASCII digits.
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise ValueError(text)
    return int(text)


class HostCache:
    """Hosts to dial, at most ``capacity`` of them."""

    def __init__(
        self,
        capacity: int = 10_000,
        *,
        allow_private: bool = True,
        backoff_initial: float = 5.0,
        backoff_max: float = 300.0,
        max_age: float = 1800.0,
    ):
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {capacity!r}")
        if not 0.0 < backoff_initial <= backoff_max:
            raise ValueError("backoff must satisfy 0 < backoff_initial <= backoff_max")
        if not max_age > 0.0:
            raise ValueError(f"max_age must be positive, not {max_age!r}")
        self._capacity = capacity
        self._allow_private = allow_private
        self._backoff_initial = float(backoff_initial)
        self._backoff_max = float(backoff_max)
        self._max_age = float(max_age)
        self._records: dict[tuple[str, int], HostRecord] = {}
        # Eviction order without scanning the cache: a heap of
        # (-failures, last_seen, stamp, key) for every non-seed host. Entries go stale
        # when a host changes; only the one whose stamp matches `_stamps[key]` is live,
        # and the heap is rebuilt when stale entries outnumber live ones.
        self._heap: list[tuple[int, float, int, tuple[str, int]]] = []
        self._stamps: dict[tuple[str, int], int] = {}
        self._stamp_counter = itertools.count()
        self._added = 0
        self._refreshed = 0
        self._evicted = 0
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

    # -- learning hosts

    def add(self, host: str, port: int, source: str, now: float) -> bool:
        """Take in an advertised address; False if it was refused (the reason is counted).

        A host already cached is only refreshed: its failure count and backoff stay,
        since being advertised again says nothing about whether it accepts connections.
        A host given as a seed stays a seed.
        """
        if not source or len(source.split()) != 1 or source != source.strip():
            raise ValueError(f"source must be a single word, not {source!r}")
        key = self._admit(host, port)
        if key is None:
            return False
        record = self._records.get(key)
        if record is not None:
            self._refreshed += 1
            changed = False
            if now > record.last_seen:
                record.last_seen = now
                changed = True
            if source == SEED and record.source != SEED:
                record.source = SEED
                changed = True
            if changed:
                self._touch(key, record)
            return True
        self._insert(HostRecord(key[0], key[1], source, now, now, 0, now, None))
        return True

    def _admit(self, host: object, port: object) -> tuple[str, int] | None:
        reason = _port_problem(port)
        canonical = ""
        if isinstance(host, str):
            canonical, address_reason = classify_address(host)
            if address_reason == "private" and self._allow_private:
                address_reason = None
        else:
            address_reason = "bad-address"
        reason = address_reason or reason
        if reason is not None:
            self._rejected[reason] += 1
            return None
        assert isinstance(port, int)
        return canonical, port

    def _insert(self, record: HostRecord) -> None:
        if len(self._records) >= self._capacity:
            victim = self._pop_victim()
            del self._records[victim]
            self._evicted += 1
        key = (record.host, record.port)
        self._records[key] = record
        self._added += 1
        self._touch(key, record)

    # -- choosing hosts to dial

    def candidates(
        self, now: float, exclude: Collection[tuple[str, int]], limit: int
    ) -> list[tuple[str, int]]:
        """Up to ``limit`` hosts worth dialing now, the most promising first.

        ``exclude`` is this node's own address and every peer connected or being
        connected to; dialing those is wasted at best. Hosts in backoff are left out.
        """
        if limit <= 0:
            return []
        excluded = {key for host, port in exclude if (key := _canonical_key(host, port))}
        eligible = (
            record
            for key, record in self._records.items()
            if record.next_attempt <= now and key not in excluded
        )
        return [(r.host, r.port) for r in heapq.nsmallest(limit, eligible, key=_promise)]

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
        if key is None or self._records.pop(key, None) is None:
            return False
        self._stamps.pop(key, None)
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
            del self._records[key]
            self._stamps.pop(key, None)
        self._expired += len(doomed)
        return len(doomed)

    # -- eviction bookkeeping

    def _touch(self, key: tuple[str, int], record: HostRecord) -> None:
        """Re-rank ``key`` after its failures, last_seen or source changed."""
        if record.source == SEED:
            self._stamps.pop(key, None)
            return
        stamp = next(self._stamp_counter)
        self._stamps[key] = stamp
        heapq.heappush(self._heap, (-record.failures, record.last_seen, stamp, key))
        if len(self._heap) > 2 * len(self._stamps) + 64:
            self._heap = [
                (-self._records[k].failures, self._records[k].last_seen, s, k)
                for k, s in self._stamps.items()
            ]
            heapq.heapify(self._heap)

    def _pop_victim(self) -> tuple[str, int]:
        heap = self._heap
        stamps = self._stamps
        while heap:
            _, _, stamp, key = heapq.heappop(heap)
            if stamps.get(key) == stamp:
                del stamps[key]
                return key
        # Nothing but seeds left: the least useful seed goes after all.
        records = self._records
        return min(records, key=lambda k: (-records[k].failures, records[k].last_seen))

    # -- inspection

    def _find(self, host: object, port: object) -> HostRecord | None:
        key = _canonical_key(host, port)
        return None if key is None else self._records.get(key)

    def source_of(self, host: str, port: int) -> str | None:
        """Where the cached host was learned (``seed``, ``pong``, ...), or None."""
        record = self._find(host, port)
        return None if record is None else record.source

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
            expired=self._expired,
            rejected=types.MappingProxyType(dict(self._rejected)),
            attempts=self._attempts,
            dial_failures=self._dial_failures,
            connections=self._connections,
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
            f"{r.host} {r.port} {r.source} {max(0.0, now - r.last_seen):.3f} {r.failures}"
            for r in records
        )
        return "\n".join(lines) + "\n", len(records)

    def load(self, path: Path, now: float) -> int:
        """Merge hosts saved by `save`; return how many new hosts were taken in.

        A missing file is an empty cache. Whatever the file holds, this does not raise:
        a line that does not parse counts as ``bad-line``, an address refused by this
        cache's rules counts under the reason `add` would give, and a host already
        cached keeps its current record. I/O errors other than a missing file do raise.
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
                fields = line.split()
                try:
                    if len(fields) != 5:
                        raise ValueError(line)
                    host, port_text, _source, age_text, failures_text = fields
                    port = _ascii_int(port_text)
                    age = float(age_text)
                    if not (math.isfinite(age) and age >= 0.0):
                        raise ValueError(age_text)
                    failures = _ascii_int(failures_text)
                except ValueError:
                    self._rejected["bad-line"] += 1
                    continue
                key = self._admit(host, port)
                if key is None or key in self._records:
                    continue
                seen = now - age
                self._insert(HostRecord(key[0], key[1], CACHE_FILE, seen, seen, failures, now))
                loaded += 1
        return loaded


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable; best effort, as not every platform allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_leftovers(path: Path) -> int:
    """Delete the temporary files a killed writer of ``path`` left behind; how many.

    :func:`write_atomically` cleans up after itself unless the process dies mid-write
    (``kill -9``, a power cut); only the owner of the state directory may call this,
    when no write of its own is under way.
    """
    removed = 0
    for leftover in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()
            removed += 1
    return removed


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a crash leaves the old or the new file.

    Written to a temporary file in the same directory, flushed to disk, renamed over
    the old one, and the directory synced so the rename itself survives a power cut.
    """
    directory = path.parent
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp_name)
        raise
    _fsync_directory(directory)
