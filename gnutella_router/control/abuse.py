"""Abuse kicks and bans: when a peer's misbehaviour is a pattern, not an accident.

Theory of operation
-------------------
The router drops what a peer should not have sent and names the reason. Most reasons
are accidents a healthy network produces now and then (a query seen through two
neighbours, a hit whose query was forgotten); a few, repeated, are abuse: the same GUID
sent again and again by the same peer, messages whose TTL exceeds any sane limit, TTL 0
messages, payloads that do not parse, message types nobody routes, replies to queries
nobody asked, QRP tables sent too often or broken. Public ultrapeers (gtk-gnutella,
LimeWire) disconnect such peers; so does this router.

Each connection has an :class:`AbuseMeter`: one decaying count per :class:`Offence`
(exponential decay with ``half_life`` seconds, updated only when an offence happens, so
well-behaved traffic costs nothing). A count that reaches its threshold kicks the peer
with the Bye code gtk-gnutella uses for that offence. Decay makes the rule about rates,
not totals: with a 10 s half-life a steady trickle of ``r`` offences a second settles at
about ``14.9 r``, so a peer that sends one malformed message a second is tolerated for
ever, and one that sends a burst of 20 is not. Unroutable replies are judged only when
configured (a replayed trace sends them by the thousand, honestly), and then they also
have to be at least half of what the peer sent lately (decayed the same way), because
an overloaded router that forgets routes early makes honest peers' hits unroutable too.
One offence is not metered: a message held back half-sent past
``network.partial_message_timeout`` (:mod:`gnutella_router.control.deadlines`) kicks the
peer the first time, with Bye 405.

A kicked peer is banned for ``ban_seconds`` (:class:`BanList`): by its announced GUID
and listening address always, and by its IP address unless that address is in a trusted
network (loopback by default), where many unrelated peers share one IP. A banned peer's
handshakes are refused with ``403``. The table is bounded; the oldest ban goes first.

Before any of that, :class:`RateLimiter` bounds how often one address may try to
connect (``network.connects_per_ip_per_minute``), so a reconnect loop costs one short
refusal per attempt and never a handshake.

Nothing here does I/O or reads a clock: times are passed in.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import ipaddress
from collections.abc import Iterable, Mapping

from gnutella_router.config.sections import AbuseConfig
from protocol.constants import ByeCode

LARGE_HIT = 4096
"""Payload bytes past which a query hit with no route is not parsed (see
:attr:`Offence.UNROUTABLE_LARGE`)."""


class Offence(enum.StrEnum):
    """What a peer did that, repeated, gets it kicked."""

    DUPLICATE = "duplicate"
    """The same GUID from the same peer again, with no higher TTL."""
    HIGH_TTL = "high-ttl"
    """TTL + hops over the hard limit (15)."""
    TTL_ZERO = "ttl-zero"
    MALFORMED = "malformed"
    UNKNOWN_TYPE = "unknown-type"
    UNROUTABLE = "unroutable"
    """A pong, query hit or push with no route back."""
    UNROUTABLE_LARGE = "unroutable-large"
    """A query hit larger than :data:`LARGE_HIT` with no route back: honest peers send
    one when a route expired, rarely; each costs the router what hundreds of small
    messages do, so it is left unparsed and counted on its own."""
    QRP_TOO_SOON = "qrp-too-soon"
    """A QRP table begun sooner than ``router.qrp_table_interval`` after the last."""
    QRP_INVALID = "qrp-invalid"
    """A QRP sequence that breaks the protocol (the link is closed with Bye 413 anyway)."""
    DEFLATE_RATIO = "deflate-ratio"
    """A deflated stream that inflates past :data:`protocol.compression.MAX_RATIO` to 1:
    a decompression bomb; one is enough."""
    PARTIAL_MESSAGE = "partial-message"
    """Part of a message held back past ``network.partial_message_timeout``: not
    counted by the meter, one is enough (:mod:`gnutella_router.control.deadlines`)."""


BYE_CODES: Mapping[Offence, ByeCode] = {
    Offence.DUPLICATE: ByeCode.TOO_MANY_DUPLICATES,
    Offence.HIGH_TTL: ByeCode.RELAYED_HIGH_TTL,
    Offence.TTL_ZERO: ByeCode.TTL_ZERO,
    Offence.MALFORMED: ByeCode.INVALID_PAYLOAD,
    Offence.UNKNOWN_TYPE: ByeCode.TOO_MANY_UNKNOWN,
    Offence.UNROUTABLE: ByeCode.TOO_MANY_ERRORS,
    Offence.UNROUTABLE_LARGE: ByeCode.TOO_MANY_ERRORS,
    Offence.QRP_TOO_SOON: ByeCode.EXCESSIVE_MESSAGES,
    Offence.QRP_INVALID: ByeCode.INVALID_QRP_SEQUENCE,
    Offence.PARTIAL_MESSAGE: ByeCode.ACTIVITY_TIMEOUT,
    Offence.DEFLATE_RATIO: ByeCode.INVALID_PAYLOAD,
}
"""The Bye each offence earns (gtk-gnutella's codes)."""

SHARE_OF_TRAFFIC: Mapping[Offence, float] = {Offence.UNROUTABLE: 0.5}
"""Offences that must also be at least this share of what the peer sent lately."""

_DESCRIPTIONS: Mapping[Offence, str] = {
    Offence.DUPLICATE: "duplicate messages",
    Offence.HIGH_TTL: "messages over the hard TTL limit",
    Offence.TTL_ZERO: "messages with TTL 0",
    Offence.MALFORMED: "malformed messages",
    Offence.UNKNOWN_TYPE: "messages of unknown types",
    Offence.UNROUTABLE: "replies with no route",
    Offence.UNROUTABLE_LARGE: "large query hits with no route",
    Offence.QRP_TOO_SOON: "QRP tables sent too often",
    Offence.QRP_INVALID: "broken QRP sequences",
    Offence.PARTIAL_MESSAGE: "messages left half-sent",
    Offence.DEFLATE_RATIO: "a deflate stream inflating past its ratio cap",
}


@dataclasses.dataclass(frozen=True, slots=True)
class Kick:
    """The verdict that ends a connection."""

    offence: Offence
    level: float
    """The decayed count that reached the threshold."""
    detail: str | None = None
    """What happened, for an offence that one occurrence is enough for."""

    @property
    def bye_code(self) -> int:
        return int(BYE_CODES[self.offence])

    @property
    def reason(self) -> str:
        if self.detail is not None:
            return f"kicked: {self.detail}"
        return f"kicked: about {self.level:.0f} {_DESCRIPTIONS[self.offence]} lately"


def configured_thresholds(config: AbuseConfig) -> dict[Offence, int]:
    """Each offence's kick threshold as ``[abuse]`` sets it (0: never kicked for it)."""
    return {
        Offence.DUPLICATE: config.duplicates,
        Offence.HIGH_TTL: config.high_ttl,
        Offence.TTL_ZERO: config.ttl_zero,
        Offence.MALFORMED: config.malformed,
        Offence.UNKNOWN_TYPE: config.unknown_types,
        Offence.UNROUTABLE: config.unroutable,
        Offence.UNROUTABLE_LARGE: config.unroutable_large,
        Offence.QRP_TOO_SOON: config.qrp_too_soon,
        Offence.QRP_INVALID: config.qrp_invalid,
    }


class AbuseMeter:
    """Decaying offence counts of one connection, and the verdict when one is too high."""

    __slots__ = (
        "_half_life",
        "_last",
        "_levels",
        "_received",
        "_received_at",
        "_received_seen",
        "_thresholds",
    )

    def __init__(self, thresholds: Mapping[Offence, int], half_life: float) -> None:
        self._thresholds = {offence: t for offence, t in thresholds.items() if t > 0}
        self._half_life = half_life
        self._levels: dict[Offence, float] = {}
        self._last: dict[Offence, float] = {}
        self._received = 0.0
        self._received_at = 0.0
        self._received_seen = 0

    def level(self, offence: Offence, now: float) -> float:
        """The decayed count of ``offence`` at ``now``."""
        return self._levels.get(offence, 0.0) * self._decay(now - self._last.get(offence, now))

    def offend(self, offence: Offence, now: float, received_total: int) -> Kick | None:
        """Count one offence; a :class:`Kick` when the peer has had enough chances.

        ``received_total`` is how many messages the peer has sent so far, for the
        offences judged by their share of its traffic.
        """
        level = self.level(offence, now) + 1.0
        self._levels[offence] = level
        self._last[offence] = now
        threshold = self._thresholds.get(offence)
        share = SHARE_OF_TRAFFIC.get(offence)
        if share is not None:
            # Messages since the last look are lumped at this instant: exact enough for
            # a ratio, and nothing is paid on the messages that are not offences.
            self._received = self._received * self._decay(now - self._received_at) + (
                received_total - self._received_seen
            )
            self._received_at = now
            self._received_seen = received_total
        if threshold is None or level < threshold:
            return None
        if share is not None and level < share * self._received:
            return None
        return Kick(offence, level)

    def _decay(self, elapsed: float) -> float:
        return 0.5 ** (elapsed / self._half_life) if elapsed > 0 else 1.0


BanKey = tuple[str, str]
"""("guid", hex), ("listen", "host:port") or ("ip", address)."""


def ban_keys(
    ip: str, guid: bytes | None, listen: tuple[str, int] | None, *, trusted_ip: bool
) -> list[BanKey]:
    """Everything that identifies a peer for a ban: never the IP of a trusted network."""
    keys: list[BanKey] = []
    if guid is not None:
        keys.append(("guid", guid.hex()))
    if listen is not None:
        keys.append(("listen", f"{listen[0]}:{listen[1]}"))
    if not trusted_ip:
        keys.append(("ip", ip))
    return keys


class BanList:
    """Temporary bans, by key, bounded to ``capacity`` entries (the oldest goes first)."""

    def __init__(self, capacity: int = 10_000) -> None:
        self.capacity = capacity
        self._until: collections.OrderedDict[BanKey, float] = collections.OrderedDict()
        self.evicted = 0
        """Bans forgotten early because the table was full."""

    def __len__(self) -> int:
        return len(self._until)

    def ban(self, keys: Iterable[BanKey], until: float) -> None:
        for key in keys:
            self._until[key] = until
            self._until.move_to_end(key)
        while len(self._until) > self.capacity:
            self._until.popitem(last=False)
            self.evicted += 1

    def banned(self, keys: Iterable[BanKey], now: float) -> bool:
        """Whether any key is banned at ``now``; expired bans are forgotten."""
        for key in keys:
            until = self._until.get(key)
            if until is None:
                continue
            if until > now:
                return True
            del self._until[key]
        return False


def in_networks(
    host: str, networks: Iterable[ipaddress.IPv4Network | ipaddress.IPv6Network]
) -> bool:
    """Whether ``host`` (an IP address, IPv4-mapped IPv6 included) is in any network."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in network for network in networks)


class RateLimiter:
    """At most ``limit`` attempts per ``period`` seconds per key, with a bounded memory."""

    def __init__(self, limit: int, period: float = 60.0, max_keys: int = 10_000) -> None:
        self.limit = limit
        self.period = period
        self.max_keys = max_keys
        self._attempts: collections.OrderedDict[str, collections.deque[float]] = (
            collections.OrderedDict()
        )

    def allow(self, key: str, now: float) -> bool:
        attempts = self._attempts.get(key)
        if attempts is None:
            attempts = collections.deque()
            self._attempts[key] = attempts
            if len(self._attempts) > self.max_keys:
                self._attempts.popitem(last=False)
        else:
            self._attempts.move_to_end(key)
        horizon = now - self.period
        while attempts and attempts[0] <= horizon:
            attempts.popleft()
        if len(attempts) >= self.limit:
            return False
        attempts.append(now)
        return True
