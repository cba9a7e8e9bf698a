"""The daemon's settings, one frozen msgspec struct per TOML table.

Each field declares its type, range and default once; :mod:`.rules` turns the same
declarations into error messages. What each setting is for, and why its default, is said
once, beside it in ``docs/router.example.toml`` (a test holds that file to these
defaults and to every setting). A section's ``_check`` holds what a declaration cannot
say (addresses, rules tying fields together); :meth:`Config._check` the rules that span
sections. Every struct is checked whenever it is made: by :func:`.converted` when
loaded, and by ``__post_init__`` when built directly or with
``msgspec.structs.replace``, so no invalid :class:`Config` can exist.
"""

from __future__ import annotations

import ipaddress
import math
import re
import sys
import urllib.parse
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import msgspec
from msgspec import Meta

from gnutella_router import __version__
from gnutella_router.addresses import is_loopback_host
from gnutella_router.config.rules import (
    ConfigError,
    Fraction,
    Seconds,
    bad,
    converted,
    is_trusted,
    parse_host_port,
)
from gnutella_router.logs import LogFormat, LogLevel
from protocol.compression import DEFAULT_DEFLATE_LEVEL
from protocol.constants import HEADER_SIZE

SlowPeerPolicy = Literal["threshold", "flow-control"]
SheddingPolicy = Literal["backpressure", "drop-tail", "red", "queries-first", "response-time"]
GovernorSizing = Literal["littles-law", "queue-threshold"]


def _says(words: str, pattern: str | None = None) -> Meta:
    """A constraint (or none) whose message is ``expected {words}``."""
    return Meta(pattern=pattern, extra={"expected": f"expected {words}"})


_ADVERTISE = (
    'IPV4:PORT with a port from 1 to 65535 (pongs carry IPv4), or "" for the listen address'
)
_TOKEN = (
    'up to 256 printable ASCII characters without spaces (it is sent as "Authorization: Bearer '
    'TOKEN"), or "" for none'
)
PathText = Annotated[str, _says("a non-empty path without NUL characters", r"\A[^\x00]+\Z")]
HostPort = Annotated[str, _says("HOST:PORT")]
Advertise = Annotated[str, _says(_ADVERTISE)]
UserAgent = Annotated[
    str,
    _says("1 to 200 printable ASCII characters (it is sent as a header line)", r"\A[ -~]{1,200}\Z"),
]
Guid = Annotated[
    str, _says('32 hex digits, or "" for a random GUID at start', r"\A(?:[0-9A-Fa-f]{32})?\Z")
]
Token = Annotated[
    str, Meta(pattern=r"\A[!-~]{0,256}\Z", extra={"secret": True, "expected": f"expected {_TOKEN}"})
]
OpenPage = Literal["/metrics", "/healthz"]
OPEN_PAGE_CHOICES = ("/metrics", "/healthz")
"""The admin pages that may be read without the token: they say how the router is
doing, not whom it is talking to (``/connections``, ``/routes`` and ``/dump`` do)."""


class Section(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Checks itself when made; ``SECTION`` is its table's name."""

    SECTION: ClassVar[str] = ""

    def __init_subclass__(cls, **options: Any) -> None:
        super().__init_subclass__(**options)  # NodeConfig -> "node", SlowPeerConfig -> "slow_peer"
        cls.SECTION = re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__.removesuffix("Config")).lower()

    def __post_init__(self) -> None:
        if is_trusted():
            self._check()
            return
        checked = converted(type(self), msgspec.to_builtins(self), section=self.SECTION)
        for name in self.__struct_fields__:  # keep the normalised values (5 -> 5.0)
            msgspec.structs.force_setattr(self, name, getattr(checked, name))

    def _check(self) -> None:
        """Rules a declaration cannot say (none by default)."""

    def _fail(self, name: str, allowed: str) -> ConfigError:
        return bad(f"{self.SECTION}.{name}", getattr(self, name), allowed)

    def _require(self, ok: bool, key: str, allowed: str) -> None:
        """Refuse ``key`` (``name`` of this section or ``section.name`` below it) unless ok."""
        if not ok:
            section, _, name = key.rpartition(".")
            raise (
                getattr(self, section)._fail(name, allowed)
                if section
                else self._fail(name, allowed)
            )


class NodeConfig(Section, frozen=True):
    """Who this node is and where it listens."""

    listen: HostPort = "127.0.0.1:6346"
    advertise: Advertise = ""
    user_agent: UserAgent = f"gnutella-router/{__version__}"
    guid: Guid = ""
    state_dir: PathText = ".gnutella-router"

    def _check(self) -> None:
        parse_host_port(self.listen, key="node.listen")
        if self.advertise:
            try:
                host, _ = parse_host_port(self.advertise, key="", allow_port_zero=False)
                ipaddress.IPv4Address(host)
            except (ConfigError, ValueError):
                raise self._fail("advertise", f"expected {_ADVERTISE}") from None

    @property
    def listen_address(self) -> tuple[str, int]:
        """:attr:`listen` as ``(host, port)``."""
        return parse_host_port(self.listen, key="node.listen")

    @property
    def guid_bytes(self) -> bytes | None:
        """:attr:`guid` as 16 bytes, or ``None`` when one should be drawn at random."""
        return bytes.fromhex(self.guid) if self.guid else None


class NetworkConfig(Section, frozen=True):
    """How many peers, and which of their messages are acceptable."""

    max_connections: Annotated[int, Meta(ge=1, le=10_000)] = 32
    max_leaves: Annotated[int, Meta(ge=0, le=10_000)] = 64
    max_ttl: Annotated[int, Meta(ge=1, le=15)] = 7
    hard_ttl_limit: Annotated[int, Meta(ge=1, le=255)] = 15
    max_payload: Annotated[int, Meta(ge=1024, le=65536)] = 65536
    allow_private_addresses: bool = False
    handshake_timeout: Annotated[float, Meta(gt=0, le=600)] = 10.0
    idle_timeout: Annotated[float, Meta(ge=0, le=86_400)] = 180.0
    partial_message_timeout: Annotated[float, Meta(ge=0, le=86_400)] = 60.0
    connects_per_ip_per_minute: Annotated[int, Meta(ge=1, le=100_000)] = 60
    connections_per_address: Annotated[int, Meta(ge=1, le=10_000)] = 1
    trusted: Annotated[
        tuple[str, ...], _says('a list of networks ("127.0.0.0/8", "::1", "10.0.0.0/16")')
    ] = ("127.0.0.0/8", "::1/128")
    local_networks: Annotated[
        tuple[str, ...], _says('a list of networks ("127.0.0.0/8", "::1", "10.64.0.0/16")')
    ] = ("127.0.0.0/8", "::1/128")
    deflate: bool = True
    deflate_level: Annotated[int, Meta(ge=1, le=9)] = DEFAULT_DEFLATE_LEVEL
    deflate_threads: Annotated[int, Meta(ge=0, le=64)] = 1

    def _check(self) -> None:
        if self.hard_ttl_limit < self.max_ttl:
            raise self._fail(
                "hard_ttl_limit", f"must be at least network.max_ttl ({self.max_ttl}) and <= 255"
            )
        for name in ("trusted", "local_networks"):
            for network in getattr(self, name):
                try:
                    ipaddress.ip_network(network, strict=False)
                except ValueError:
                    raise self._fail(
                        name,
                        f'expected networks such as "127.0.0.0/8" or "::1"; {network!r} is not one',
                    ) from None

    @property
    def trusted_networks(self) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        """:attr:`trusted`, parsed."""
        return tuple(ipaddress.ip_network(n, strict=False) for n in self.trusted)

    @property
    def local_networks_parsed(self) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        """:attr:`local_networks`, parsed."""
        return tuple(ipaddress.ip_network(n, strict=False) for n in self.local_networks)


class SlowPeerConfig(Section, frozen=True):
    """What to do about a peer that reads more slowly than we write to it."""

    policy: SlowPeerPolicy = "threshold"
    threshold_messages: Annotated[int, Meta(ge=0, le=10_000_000)] = 2000
    threshold_bytes: Annotated[int, Meta(ge=1, le=1 << 30)] = 4 * 1024 * 1024
    threshold_grace: Annotated[float, Meta(ge=0, le=3600)] = 10.0
    queue_bytes: Annotated[int, Meta(ge=1, le=1 << 30)] = 98304
    flow_control_enter: Fraction = 0.5
    flow_control_leave: Fraction = 0.25
    flow_control_timeout: Seconds = 180.0
    unbounded_experiment: bool = False

    def _check(self) -> None:
        if self.flow_control_leave >= self.flow_control_enter:
            raise self._fail(
                "flow_control_leave",
                f"must be below slow_peer.flow_control_enter ({self.flow_control_enter:g})",
            )
        if self.threshold_messages == 0 and not self.unbounded_experiment:
            raise self._fail(
                "threshold_messages",
                "0 (no limit) needs slow_peer.unbounded_experiment = true; otherwise 1 or more",
            )


UNBOUNDED_QUEUE = sys.maxsize
"""The router queue's bound with ``queue_threshold = 0``: no bound memory could reach."""


class RouterConfig(Section, frozen=True):
    """The routing stage: its queue, its workers and its tables."""

    queue_threshold: Annotated[int, Meta(ge=0, le=1_000_000)] = 1000
    batch_size: Annotated[int, Meta(ge=1, le=65536)] = 1000
    threads: Annotated[int, Meta(ge=1, le=1024)] = 1
    max_threads: Annotated[int, Meta(ge=1, le=1024)] = 20
    query_delay_ms: Annotated[float, Meta(ge=0, le=60_000)] = 0.0
    ping_route_seconds: Seconds = 120.0
    query_route_seconds: Seconds = 300.0
    push_route_seconds: Seconds = 420.0
    route_table_capacity: Annotated[int, Meta(ge=1, le=10_000_000)] = 50_000
    pong_cache_seconds: Annotated[float, Meta(gt=0, le=3600)] = 20.0
    pongs_per_ping: Annotated[int, Meta(ge=1, le=255)] = 10
    qrp_table_interval: Annotated[float, Meta(ge=0, le=3600)] = 10.0
    peer_query_rate: Annotated[float, Meta(ge=0, le=10_000_000)] = 1000.0
    peer_query_burst: Annotated[int, Meta(ge=1, le=10_000_000)] = 2000
    drop_ancient_queries: bool = False
    unbounded_experiment: bool = False

    def _check(self) -> None:
        most = self.max_threads
        self._require(
            self.threads <= most, "threads", f"must not exceed router.max_threads ({most})"
        )
        if self.queue_threshold == 0 and not self.unbounded_experiment:
            raise self._fail(
                "queue_threshold",
                "0 (no limit) needs router.unbounded_experiment = true; otherwise 1 or more",
            )

    @property
    def queue_bound(self) -> int:
        """The router queue's bound: :attr:`queue_threshold`, or :data:`UNBOUNDED_QUEUE`
        for 0."""
        return self.queue_threshold or UNBOUNDED_QUEUE


class CatcherConfig(Section, frozen=True):
    """Finding peers: seeds, a GWebCache, the host cache and dialing."""

    seeds: Annotated[tuple[str, ...], _says('a list of "HOST:PORT" strings')] = ()
    gwebcache: Annotated[str, _says('an http:// URL (GWebCache v2), or "" for none')] = ""
    gwebcache_interval: Annotated[float, Meta(ge=1, le=86_400)] = 60.0
    min_connections: Annotated[int, Meta(ge=0, le=10_000)] = 4
    host_cache_size: Annotated[int, Meta(ge=1, le=1_000_000)] = 10_000
    source_share: Fraction = 0.05
    group_share: Fraction = 0.01
    ports_per_address: Annotated[int, Meta(ge=1, le=65535)] = 2
    host_cache_file: PathText = "hosts.txt"
    save_interval: Seconds = 60.0
    dial_timeout: Annotated[float, Meta(gt=0, le=600)] = 10.0
    backoff_initial: Seconds = 5.0
    backoff_max: Seconds = 300.0
    drop_hold: Seconds = 300.0
    """A peer the operator dropped (``ctl peers drop``) is not dialled again for this
    long: otherwise the catcher, missing a connection, redials it within a second."""
    learn_from_peers: bool = True

    def _check(self) -> None:
        for seed in self.seeds:
            parse_host_port(seed, key="catcher.seeds", allow_port_zero=False)
        if self.gwebcache:
            self._check_gwebcache()
        if self.backoff_initial > self.backoff_max:
            raise self._fail(
                "backoff_initial", f"must not exceed catcher.backoff_max ({self.backoff_max:g})"
            )

    def _check_gwebcache(self) -> None:
        what = 'expected an http:// URL (GWebCache v2), or "" for none'
        if any(c <= " " or c == "\x7f" for c in self.gwebcache):
            raise self._fail("gwebcache", f"{what}, without spaces or control characters")
        try:
            parts = urllib.parse.urlsplit(self.gwebcache)
            usable = parts.scheme.lower() == "http" and bool(parts.hostname) and parts.port != 0
        except ValueError:  # a bad port
            usable = False
        if not usable:
            raise self._fail("gwebcache", f"{what}; https is not supported")

    @property
    def seed_addresses(self) -> tuple[tuple[str, int], ...]:
        """:attr:`seeds` as ``(host, port)`` pairs."""
        return tuple(parse_host_port(s, key="catcher.seeds") for s in self.seeds)


class LogConfig(Section, frozen=True):
    """Log output; see :mod:`gnutella_router.logs`."""

    format: LogFormat = "auto"
    level: LogLevel = "info"


class TraceConfig(Section, frozen=True):
    """Recording what peers send into a trace file (:mod:`gnutella_router.observe.recorder`);
    off unless :attr:`record` is set."""

    record: Annotated[
        str, _says('a path, or "" for none, without NUL characters', pattern=r"\A[^\x00]*\Z")
    ] = ""
    max_bytes: Annotated[int, Meta(ge=1 << 20, le=1 << 40)] = 64 * 1024 * 1024
    max_files: Annotated[int, Meta(ge=1, le=1000)] = 4
    buffer_bytes: Annotated[int, Meta(ge=64 * 1024, le=1 << 30)] = 1024 * 1024


class GovernorConfig(Section, frozen=True):
    """The router stage's thread governor (SEDA's thread pool controller); off by default."""

    enabled: bool = False
    sizing: GovernorSizing = "littles-law"
    interval: Annotated[float, Meta(ge=0.1, le=3600)] = 2.0
    threshold: Annotated[int, Meta(ge=1, le=1_000_000)] = 100
    max_threads: Annotated[int, Meta(ge=1, le=1024)] = 20
    idle_timeout: Seconds = 5.0
    thrashing_guard: bool = False
    headroom: Annotated[float, Meta(ge=0, le=10)] = 0.0


class BatchingConfig(Section, frozen=True):
    """The router stage's batching controller (SEDA's): on, ``router.batch_size`` is the
    largest batch and the one it starts from; off, every batch may hold that many."""

    enabled: bool = True
    interval: Annotated[float, Meta(ge=0.05, le=3600)] = 1.0
    min_batch: Annotated[int, Meta(ge=1, le=65536)] = 8
    window: Annotated[int, Meta(ge=1, le=1000)] = 3
    decrease: Annotated[float, Meta(ge=0.1, le=0.99)] = 0.8
    increase: Annotated[float, Meta(gt=0, le=1)] = 0.1
    tolerance: Annotated[float, Meta(ge=0, le=0.9)] = 0.05
    drop_share: Annotated[float, Meta(ge=0, le=0.99)] = 0.5


class SheddingConfig(Section, frozen=True):
    """What the router's queue refuses under overload (:mod:`gnutella_router.control.shedding`)."""

    policy: SheddingPolicy = "backpressure"
    red_min: Annotated[float, Meta(ge=0, le=1)] = 0.5
    red_max: Fraction = 1.0
    red_max_p: Annotated[float, Meta(ge=0, le=1)] = 0.2
    queries_first_at: Fraction = 0.8
    rate_limit: Annotated[float, Meta(ge=0, le=1e9)] = 0.0
    rate_burst: Annotated[float, Meta(gt=0, le=1e9)] = 1000.0
    response_time_target_ms: Annotated[float, Meta(gt=0, le=600_000)] = 100.0
    response_time_initial_rate: Annotated[float, Meta(gt=0, le=1e9)] = 200.0
    response_time_min_rate: Annotated[float, Meta(gt=0, le=1e9)] = 5.0
    response_time_max_rate: Annotated[float, Meta(gt=0, le=1e9)] = 100_000.0
    response_time_additive_increase: Annotated[float, Meta(ge=0, le=1e9)] = 20.0
    response_time_decrease_factor: Annotated[float, Meta(gt=1, le=100)] = 1.2
    response_time_samples: Annotated[int, Meta(ge=1, le=1_000_000)] = 100
    response_time_interval: Seconds = 0.25
    response_time_classes: bool = False
    weight_others: Annotated[float, Meta(gt=0, le=1000)] = 4.0
    weight_leaf_queries: Annotated[float, Meta(gt=0, le=1000)] = 2.0
    weight_queries: Annotated[float, Meta(gt=0, le=1000)] = 1.0
    degrade_ttl_by: Annotated[int, Meta(ge=0, le=6)] = 0
    degrade_recovery: Annotated[float, Meta(gt=0, le=1)] = 0.1

    def _check(self) -> None:
        self._require(self.red_min < self.red_max, "red_min", "must be below shedding.red_max")
        self._require(
            self.response_time_min_rate
            <= self.response_time_initial_rate
            <= self.response_time_max_rate,
            "response_time_initial_rate",
            "must lie between shedding.response_time_min_rate and response_time_max_rate",
        )


Threshold = Annotated[int, Meta(ge=0, le=1_000_000)]
"""A kick threshold: the decayed count of an offence that ends a connection; 0 never."""


class AbuseConfig(Section, frozen=True):
    """Kicking and banning abusive peers (:mod:`gnutella_router.control.abuse`)."""

    enabled: bool = True
    half_life: Annotated[float, Meta(gt=0, le=3600)] = 10.0
    duplicates: Threshold = 50
    high_ttl: Threshold = 20
    ttl_zero: Threshold = 200
    malformed: Threshold = 20
    unknown_types: Threshold = 200
    unroutable: Threshold = 0
    unroutable_large: Threshold = 20
    qrp_too_soon: Threshold = 5
    qrp_invalid: Threshold = 1
    ban_seconds: Annotated[float, Meta(ge=0, le=86_400)] = 60.0


class AdminConfig(Section, frozen=True):
    """The admin interface (:mod:`gnutella_router.observe.admin`): JSON dumps, Prometheus
    metrics and control over HTTP. It listens on loopback unless told otherwise, and a
    non-loopback address needs both :attr:`allow_remote` and a :attr:`token`."""

    listen: Annotated[str, _says('HOST:PORT, or "" for the node\'s host and port + 1')] = ""
    token: Token = ""
    allow_remote: bool = False
    open_pages: Annotated[
        tuple[OpenPage, ...], _says(f"a list of pages from {', '.join(OPEN_PAGE_CHOICES)}")
    ] = ("/metrics", "/healthz")
    """Pages read without the token even when one is set: a Prometheus scraper and a
    health check have no secret to send, and these two pages change nothing and show
    no peer's address. Control requests always need the token."""

    def _check(self) -> None:
        if self.allow_remote and not self.token:
            raise ConfigError(
                "admin.token",
                "admin.allow_remote = true needs admin.token: a secret that every request "
                'must then carry as "Authorization: Bearer TOKEN"',
            )
        if self.listen:
            host, _ = parse_host_port(self.listen, key="admin.listen")
            if not self.allow_remote and not is_loopback_host(host):
                raise self._fail(
                    "listen",
                    "a non-loopback address needs admin.allow_remote = true and admin.token "
                    "(loopback: 127.0.0.1, [::1] or localhost)",
                )


class ProfilerConfig(Section, frozen=True):
    """The profiler (:mod:`gnutella_router.observe.profiler`): queue lengths, pool size,
    outgoing queues, RSS and rates over time."""

    enabled: bool = False
    interval: Annotated[float, Meta(ge=0.01, le=3600)] = 0.1
    samples: Annotated[int, Meta(ge=10, le=10_000_000)] = 6000
    export: PathText = "profile.json"


class EmulationConfig(Section, frozen=True):
    """Emulated link delay for test networks (:mod:`gnutella_router.net.link_emulation`):
    writes to peers are held for their link's delay. Off by default."""

    enabled: bool = False
    delay_ms: Annotated[float, Meta(ge=0, le=60_000)] = 0.0
    jitter_ms: Annotated[float, Meta(ge=0, le=60_000)] = 0.0
    links: Annotated[
        tuple[str, ...],
        _says('a list of "HOST:PORT=DELAY_MS[,JITTER_MS]" or "HOST=DELAY_MS[,JITTER_MS]"'),
    ] = ()
    held_bytes: Annotated[int, Meta(ge=64 * 1024, le=1 << 30)] = 1024 * 1024

    def _check(self) -> None:
        for link in self.links:
            try:
                parse_link(link)
            except ValueError as exc:
                raise self._fail("links", str(exc)) from None


def parse_link(text: str) -> tuple[str, int | None, float, float]:
    """An ``[emulation] links`` entry, ``"HOST:PORT=DELAY_MS[,JITTER_MS]"`` or
    ``"HOST=..."``: the host (one spelling per address), the port (None for any), the
    delay and the jitter in milliseconds.

    Raises:
        ValueError: the text is none of those (the message says what is wrong).
    """
    where, equals, amounts = text.partition("=")
    where = where.strip()
    if not equals or not where:
        raise ValueError(f"{text!r} is not HOST:PORT=DELAY_MS[,JITTER_MS]")
    numbers = amounts.split(",")
    if len(numbers) > 2:
        raise ValueError(f"{text!r}: at most a delay and a jitter, in milliseconds")
    try:
        values = [float(n) for n in numbers]
    except ValueError:
        raise ValueError(f"{text!r}: the delay and jitter must be milliseconds") from None
    if not all(math.isfinite(v) and 0 <= v <= 60_000 for v in values):
        raise ValueError(f"{text!r}: delay and jitter must be from 0 to 60000 ms")
    jitter = values[1] if len(values) > 1 else 0.0
    try:
        host, port = parse_host_port(where, key="", allow_port_zero=False)
    except ConfigError:
        return host_spelling(where.strip("[]")), None, values[0], jitter
    return host_spelling(host), port, values[0], jitter


def host_spelling(host: str) -> str:
    """An address in one spelling (``::1`` and ``0:0::1`` are one host)."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host.lower()


class Config(Section, frozen=True):
    """Every setting of the daemon, checked; build it with :func:`.load_config`."""

    node: NodeConfig = msgspec.field(default_factory=NodeConfig)
    network: NetworkConfig = msgspec.field(default_factory=NetworkConfig)
    slow_peer: SlowPeerConfig = msgspec.field(default_factory=SlowPeerConfig)
    router: RouterConfig = msgspec.field(default_factory=RouterConfig)
    catcher: CatcherConfig = msgspec.field(default_factory=CatcherConfig)
    log: LogConfig = msgspec.field(default_factory=LogConfig)
    trace: TraceConfig = msgspec.field(default_factory=TraceConfig)
    governor: GovernorConfig = msgspec.field(default_factory=GovernorConfig)
    batching: BatchingConfig = msgspec.field(default_factory=BatchingConfig)
    shedding: SheddingConfig = msgspec.field(default_factory=SheddingConfig)
    abuse: AbuseConfig = msgspec.field(default_factory=AbuseConfig)
    admin: AdminConfig = msgspec.field(default_factory=AdminConfig)
    profiler: ProfilerConfig = msgspec.field(default_factory=ProfilerConfig)
    emulation: EmulationConfig = msgspec.field(default_factory=EmulationConfig)

    def _check(self) -> None:
        _ = self.admin_address  # a derived admin port must exist
        most, batch, queue = (
            self.network.max_connections,
            self.router.batch_size,
            self.router.queue_bound,
        )
        self._require(
            self.catcher.min_connections <= most,
            "catcher.min_connections",
            f"must not exceed network.max_connections ({most})",
        )
        self._require(
            not self.governor.enabled or self.governor.threshold < queue,
            "governor.threshold",
            f"must be below router.queue_threshold ({queue}): the queue never gets longer, "
            "and at its bound the router stops reading, so a backlog would look like a full "
            "queue and its growth could not be seen",
        )
        # Shedding thresholds are shares of the queue's bound, meaningless without one.
        self._require(
            self.router.queue_threshold > 0 or self.shedding.policy == "backpressure",
            "shedding.policy",
            "must be backpressure when router.queue_threshold is 0 (no bound to shed at)",
        )
        self._require(
            not self.batching.enabled or self.batching.min_batch <= batch,
            "batching.min_batch",
            f"must not exceed router.batch_size ({batch}), the largest batch the batching "
            "controller may choose",
        )
        # One router batch can land on a connection between two of its writes; a threshold
        # below two batches would close healthy, fast peers.
        threshold = self.slow_peer.threshold_messages
        self._require(
            not threshold or threshold >= 2 * batch,
            "slow_peer.threshold_messages",
            f"must be at least twice router.batch_size ({batch}), or a burst from one router "
            "batch closes healthy peers",
        )
        largest = HEADER_SIZE + self.network.max_payload
        for name in ("threshold_bytes", "queue_bytes"):
            self._require(
                getattr(self.slow_peer, name) >= largest,
                f"slow_peer.{name}",
                f"must hold one message of the largest size allowed ({largest} bytes: a "
                "23-byte header and network.max_payload)",
            )

    @property
    def admin_address(self) -> tuple[str, int]:
        """Where the admin interface listens: ``admin.listen``, or ``node.listen``'s port + 1
        on its host when that is loopback (or remote admin is allowed), else on loopback."""
        if self.admin.listen:
            return parse_host_port(self.admin.listen, key="admin.listen")
        host, port = self.node.listen_address
        if port == 65535:
            raise ConfigError(
                "admin.listen",
                'admin.listen = "" means node.listen\'s port + 1, and node.listen uses port '
                "65535; set admin.listen",
            )
        if not self.admin.allow_remote and not is_loopback_host(host):
            host = "::1" if ":" in host else "127.0.0.1"
        return host, port + 1 if port else 0

    @property
    def state_path(self) -> Path:
        """``node.state_dir`` as a path."""
        return Path(self.node.state_dir)

    @property
    def host_cache_path(self) -> Path:
        """Where the host cache is saved: ``catcher.host_cache_file`` under the state dir."""
        return self.state_path / self.catcher.host_cache_file

    @property
    def trace_path(self) -> Path | None:
        """Where to record a trace (``trace.record`` under the state dir unless absolute),
        or ``None`` when recording is off."""
        return self.state_path / self.trace.record if self.trace.record else None


SECTIONS: dict[str, type[Section]] = {s.SECTION: s for s in Section.__subclasses__() if s.SECTION}
"""The TOML tables, in :class:`Config`'s order (which is the order they are defined in)."""
