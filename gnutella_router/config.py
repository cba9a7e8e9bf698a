"""The daemon's settings: a TOML file plus command-line overrides, as one frozen object.

Theory of operation
-------------------
Settings come in seven sections, one frozen dataclass each (:class:`NodeConfig`,
:class:`NetworkConfig`, :class:`SlowPeerConfig`, :class:`RouterConfig`,
:class:`CatcherConfig`, :class:`LogConfig`, :class:`TraceConfig`), gathered in
:class:`Config`. The TOML file uses the same names: a ``[network]`` table holds
:class:`NetworkConfig`'s fields.

Precedence, lowest first: the built-in defaults, the file, then overrides given as
dotted keys (``{"network.max_ttl": 5}``), which is how command-line flags arrive. The
defaults work with no file at all: a node listening on 127.0.0.1:6346 that dials no
one until it is given seeds.

Validation lives in the dataclasses themselves (``__post_init__``), so every
:class:`Config` that exists is valid, including one made with
:func:`dataclasses.replace`. Each field declares its type and allowed range next to its
default (``metadata=_int(1, 15)``); rules that tie fields together are in the
section's ``_check`` (or :meth:`Config._check` when they span sections). Every failure
is a :class:`ConfigError` whose message names the dotted key, the bad value and what is
allowed. Unknown sections and keys are errors too, so a typo never silently leaves a
default in place.

Types: integers are accepted where a float is expected, booleans are never accepted
as numbers, floats must be finite, and a string never stands in for a list. Paths
(``node.state_dir``, ``catcher.host_cache_file``, ``trace.record``) are kept as
strings, as in the file; relative ones are relative to the working directory and to
``node.state_dir`` respectively.

Ranges, beyond the obvious "positive":

* ``network.max_ttl`` 1..15 and ``network.hard_ttl_limit`` from ``max_ttl`` to 255
  (the spec trims broadcasts to 7 and drops above 15);
* ``network.max_payload`` 1024..65536 (64 KiB is the architectural maximum that
  gtk-gnutella and LimeWire enforce);
* ``slow_peer.flow_control_leave`` < ``flow_control_enter``, both in (0, 1]
  (gtk-gnutella uses 25 % and 50 %);
* ``slow_peer.threshold_messages`` >= 1; 0 means "no limit" (on bytes too) and is
  allowed only with ``unbounded_experiment = true``;
* ``slow_peer.threshold_bytes`` and ``slow_peer.queue_bytes`` hold at least one
  message of the largest size allowed (23-byte header + ``network.max_payload``);
* ``router.threads`` <= ``router.max_threads`` <= 1024;
* ``catcher.min_connections`` <= ``network.max_connections``, and
  ``catcher.backoff_initial`` <= ``catcher.backoff_max``;
* ``node.advertise`` is an IPv4 address with a non-zero port, because a pong carries
  four address bytes.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import ipaddress
import math
import os
import re
import reprlib
import tomllib
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import ClassVar, TypeVar

from gnutella_router import __version__
from gnutella_router.logs import LOG_FORMATS, LOG_LEVELS
from protocol.constants import HEADER_SIZE

__all__ = [
    "AdminConfig",
    "CatcherConfig",
    "Config",
    "ConfigError",
    "LogConfig",
    "NetworkConfig",
    "NodeConfig",
    "ProfilerConfig",
    "RouterConfig",
    "SlowPeerConfig",
    "TraceConfig",
    "add_config_arguments",
    "admin_listen_address",
    "config_as_dict",
    "config_as_toml",
    "config_from_args",
    "load_config",
    "parse_host_port",
]

SLOW_PEER_POLICIES = ("threshold", "flow-control")


class ConfigError(ValueError):
    """A setting is missing its mark: unknown, of the wrong type, or out of range.

    ``str(error)`` is a complete sentence for the operator, naming the key, the bad
    value and what is allowed. :attr:`key` is the dotted key (``"network.max_ttl"``),
    the section alone for a misplaced table, or ``None`` when the file itself cannot
    be read.
    """

    def __init__(self, key: str | None, message: str) -> None:
        super().__init__(message)
        self.key = key


_show = reprlib.Repr()
_show.maxstring = 80
_show.maxother = 80
_show.maxlist = 8


def _bad(key: str, value: object, allowed: str) -> ConfigError:
    return ConfigError(key, f"{key} = {_show.repr(value)}: {allowed}")


# --- Field rules -------------------------------------------------------------------
#
# A rule takes the dotted key and the raw value and returns the value to store
# (possibly normalised: int -> float, list -> tuple, PathLike -> str), or raises
# ConfigError. Each is attached to its field as ``metadata={"check": rule}``.

Check = Callable[[str, object], object]


def _rule(check: Check) -> Mapping[str, Check]:
    return {"check": check}


def _int(lo: int, hi: int) -> Mapping[str, Check]:
    allowed = f"expected an integer from {lo} to {hi}"

    def check(key: str, value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise _bad(key, value, allowed)
        return value

    return _rule(check)


def _number(lo: float, hi: float, *, above: bool = False) -> Mapping[str, Check]:
    """A finite number from ``lo`` to ``hi``; ``above`` excludes ``lo`` itself."""
    allowed = (
        f"expected a number above {lo:g} and at most {hi:g}"
        if above
        else f"expected a number from {lo:g} to {hi:g}"
    )

    def check(key: str, value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _bad(key, value, allowed)
        number = float(value)
        low_ok = number > lo if above else number >= lo
        if not (math.isfinite(number) and low_ok and number <= hi):
            raise _bad(key, value, allowed)
        return number

    return _rule(check)


def _bool() -> Mapping[str, Check]:
    def check(key: str, value: object) -> bool:
        if not isinstance(value, bool):
            raise _bad(key, value, "expected true or false")
        return value

    return _rule(check)


def _choice(options: tuple[str, ...]) -> Mapping[str, Check]:
    allowed = "expected one of " + ", ".join(repr(o) for o in options)

    def check(key: str, value: object) -> str:
        if not isinstance(value, str) or value.lower() not in options:
            raise _bad(key, value, allowed)
        return value.lower()

    return _rule(check)


def _string(key: str, value: object, what: str) -> str:
    """``value`` as a string TOML can hold (no lone surrogates), else ConfigError."""
    if not isinstance(value, str):
        raise _bad(key, value, f"expected {what}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _bad(key, value, f"expected {what} in valid Unicode") from None
    return value


def _path() -> Mapping[str, Check]:
    what = "a non-empty path"

    def check(key: str, value: object) -> str:
        text = _string(key, os.fspath(value) if isinstance(value, os.PathLike) else value, what)
        if not text or "\0" in text:
            raise _bad(key, value, f"expected {what} without NUL characters")
        return text

    return _rule(check)


def _optional_path() -> Mapping[str, Check]:
    what = 'a path, or "" for none'

    def check(key: str, value: object) -> str:
        text = _string(key, os.fspath(value) if isinstance(value, os.PathLike) else value, what)
        if "\0" in text:
            raise _bad(key, value, f"expected {what}, without NUL characters")
        return text

    return _rule(check)


def _user_agent() -> Mapping[str, Check]:
    what = "1 to 200 printable ASCII characters (it is sent as a header line)"

    def check(key: str, value: object) -> str:
        text = _string(key, value, what)
        if not 1 <= len(text) <= 200 or not all(" " <= c <= "~" for c in text):
            raise _bad(key, value, f"expected {what}")
        return text

    return _rule(check)


def _guid() -> Mapping[str, Check]:
    what = '32 hex digits, or "" for a random GUID at start'

    def check(key: str, value: object) -> str:
        text = _string(key, value, what)
        if text and not re.fullmatch(r"[0-9A-Fa-f]{32}", text):
            raise _bad(key, value, f"expected {what}")
        return text

    return _rule(check)


def _listen() -> Mapping[str, Check]:
    def check(key: str, value: object) -> str:
        parse_host_port(value, key=key)
        return _string(key, value, "HOST:PORT")

    return _rule(check)


def _advertise() -> Mapping[str, Check]:
    what = 'IPV4:PORT with a port from 1 to 65535 (pongs carry IPv4), or "" for the listen address'

    def check(key: str, value: object) -> str:
        text = _string(key, value, what)
        if text:
            try:
                host, _ = parse_host_port(text, key=key, allow_port_zero=False)
                ipaddress.IPv4Address(host)
            except (ConfigError, ValueError):
                raise _bad(key, value, f"expected {what}") from None
        return text

    return _rule(check)


def _seeds() -> Mapping[str, Check]:
    what = 'a list of "HOST:PORT" strings'

    def check(key: str, value: object) -> tuple[str, ...]:
        if not isinstance(value, list | tuple):
            raise _bad(key, value, f"expected {what}")
        for item in value:
            parse_host_port(item, key=key, allow_port_zero=False)
        return tuple(value)

    return _rule(check)


def _gwebcache() -> Mapping[str, Check]:
    what = 'an http:// URL (GWebCache v2), or "" for none'

    def check(key: str, value: object) -> str:
        text = _string(key, value, what)
        if not text:
            return text
        if any(c <= " " or c == "\x7f" for c in text):
            raise _bad(key, value, f"expected {what}, without spaces or control characters")
        try:
            parts = urllib.parse.urlsplit(text)
            _ = parts.port  # raises ValueError for a bad port
        except ValueError:
            raise _bad(key, value, f"expected {what}") from None
        if parts.scheme.lower() != "http" or not parts.hostname:
            raise _bad(key, value, f"expected {what}; https is not supported")
        return text

    return _rule(check)


# --- HOST:PORT -----------------------------------------------------------------------

_PORT = re.compile(r"[0-9]{1,5}")
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_HOST_PORT_HELP = "expected HOST:PORT, e.g. 127.0.0.1:6346, [::1]:6346 or localhost:6346"


def parse_host_port(text: object, *, key: str, allow_port_zero: bool = True) -> tuple[str, int]:
    """Split ``"HOST:PORT"`` into a host and a port number.

    HOST is an IPv4 address, a bracketed IPv6 address (``[::1]:6346``) or a DNS name
    (``localhost``). IP addresses come back in canonical form, IPv6 without brackets.

    Args:
        text: the string to parse; anything else is an error.
        key: the dotted setting name to blame in errors.
        allow_port_zero: whether port 0 ("pick a free port", for listening) is valid.

    Returns:
        ``(host, port)``.

    Raises:
        ConfigError: naming ``key``, for a missing or bad host or port.
    """
    if not isinstance(text, str):
        raise _bad(key, text, _HOST_PORT_HELP)
    if text.startswith("["):
        address, sep, port_text = text[1:].partition("]:")
        try:
            if not sep:
                raise ValueError
            host = str(ipaddress.IPv6Address(address))
        except ValueError:
            raise _bad(key, text, f"bad bracketed IPv6 address; {_HOST_PORT_HELP}") from None
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise _bad(key, text, f"missing :PORT; {_HOST_PORT_HELP}")
        if ":" in host:
            raise _bad(key, text, f"write IPv6 addresses in brackets; {_HOST_PORT_HELP}")
        host = _check_host(key, text, host)
    low = 0 if allow_port_zero else 1
    if not _PORT.fullmatch(port_text) or not low <= int(port_text) <= 65535:
        raise _bad(key, text, f"the port must be a number from {low} to 65535")
    return host, int(port_text)


def _check_host(key: str, text: str, host: str) -> str:
    if not host:
        raise _bad(key, text, f"missing HOST; {_HOST_PORT_HELP}")
    labels = host.split(".")
    if labels[-1].isdigit():  # looks numeric, so it must be a real IPv4 address
        try:
            return str(ipaddress.IPv4Address(host))
        except ValueError:
            raise _bad(key, text, f"bad IPv4 address; {_HOST_PORT_HELP}") from None
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise _bad(key, text, f"bad host name; {_HOST_PORT_HELP}")
    return host


# --- Sections ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Section:
    """Runs each field's rule, then the section's own cross-field checks."""

    SECTION: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for f in fields(self):
            check: Check = f.metadata["check"]
            value = check(f"{self.SECTION}.{f.name}", getattr(self, f.name))
            object.__setattr__(self, f.name, value)
        self._check()

    def _check(self) -> None:
        """Rules tying this section's fields together (none by default)."""

    def _fail(self, name: str, allowed: str) -> ConfigError:
        return _bad(f"{self.SECTION}.{name}", getattr(self, name), allowed)


@dataclass(frozen=True, slots=True)
class NodeConfig(_Section):
    """Who this node is and where it listens."""

    SECTION: ClassVar[str] = "node"

    listen: str = field(default="127.0.0.1:6346", metadata=_listen())
    """HOST:PORT to accept peers on; IPv6 as ``[::1]:6346``; port 0 picks a free port."""
    advertise: str = field(default="", metadata=_advertise())
    """IPV4:PORT announced in pongs and ``Listen-IP``; empty means the listen address."""
    user_agent: str = field(default=f"gnutella-router/{__version__}", metadata=_user_agent())
    """Sent in the ``User-Agent`` handshake header."""
    guid: str = field(default="", metadata=_guid())
    """Servent GUID as 32 hex digits; empty means a random one at each start."""
    state_dir: str = field(default=".gnutella-router", metadata=_path())
    """Directory for the host cache and dumps; created if missing."""

    @property
    def listen_address(self) -> tuple[str, int]:
        """:attr:`listen` as ``(host, port)``."""
        return parse_host_port(self.listen, key="node.listen")

    @property
    def guid_bytes(self) -> bytes | None:
        """:attr:`guid` as 16 bytes, or ``None`` when one should be drawn at random."""
        return bytes.fromhex(self.guid) if self.guid else None


@dataclass(frozen=True, slots=True)
class NetworkConfig(_Section):
    """How many peers, and which of their messages are acceptable."""

    SECTION: ClassVar[str] = "network"

    max_connections: int = field(default=32, metadata=_int(1, 10_000))
    """Peer connections allowed at once, incoming and outgoing together."""
    max_ttl: int = field(default=7, metadata=_int(1, 15))
    """Broadcast clamp: a forwarded message gets hops + TTL <= this (spec: 7)."""
    hard_ttl_limit: int = field(default=15, metadata=_int(1, 255))
    """Drop a message whose hops + TTL exceeds this; at least :attr:`max_ttl`."""
    max_payload: int = field(default=65536, metadata=_int(1024, 65536))
    """Largest payload accepted; a peer announcing more is disconnected."""
    allow_private_addresses: bool = field(default=True, metadata=_bool())
    """Keep loopback and private hosts from pongs and X-Try (true for test networks)."""
    handshake_timeout: float = field(default=10.0, metadata=_number(0, 600, above=True))
    """Seconds a peer has to complete the handshake."""
    connects_per_ip_per_minute: int = field(default=60, metadata=_int(1, 100_000))
    """Incoming connection attempts accepted from one IP per minute."""
    deflate: bool = field(default=True, metadata=_bool())
    """Offer and accept ``Content-Encoding: deflate``."""

    def _check(self) -> None:
        if self.hard_ttl_limit < self.max_ttl:
            raise self._fail(
                "hard_ttl_limit", f"must be at least network.max_ttl ({self.max_ttl}) and <= 255"
            )


@dataclass(frozen=True, slots=True)
class SlowPeerConfig(_Section):
    """What to do about a peer that reads more slowly than we write to it."""

    SECTION: ClassVar[str] = "slow_peer"

    policy: str = field(default="threshold", metadata=_choice(SLOW_PEER_POLICIES))
    """``"threshold"`` closes a connection whose queue grows too long;
    ``"flow-control"`` drops low-priority messages instead, for a while."""
    threshold_messages: int = field(default=500, metadata=_int(0, 10_000_000))
    """Threshold policy: messages queued for one peer before the connection is closed.
    0 (no limit) only with :attr:`unbounded_experiment`."""
    threshold_bytes: int = field(default=4 * 1024 * 1024, metadata=_int(1, 1 << 30))
    """Threshold policy: the same in bytes, as a safety net (lifted too when
    :attr:`threshold_messages` is 0)."""
    queue_bytes: int = field(default=98304, metadata=_int(1, 1 << 30))
    """Flow-control policy: size of a connection's outgoing queue."""
    flow_control_enter: float = field(default=0.5, metadata=_number(0, 1, above=True))
    """Flow-control policy: enter flow control above this fraction of :attr:`queue_bytes`."""
    flow_control_leave: float = field(default=0.25, metadata=_number(0, 1, above=True))
    """Flow-control policy: leave flow control below this fraction (< enter)."""
    flow_control_timeout: float = field(default=180.0, metadata=_number(0, 86400, above=True))
    """Flow-control policy: seconds in flow control before the peer gets Bye 405."""
    unbounded_experiment: bool = field(default=False, metadata=_bool())
    """Allow ``threshold_messages = 0`` (no limit). For overload experiments only: an
    unbounded queue lets one slow peer eat all memory."""

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


@dataclass(frozen=True, slots=True)
class RouterConfig(_Section):
    """The routing stage: its queue, its workers and its tables."""

    SECTION: ClassVar[str] = "router"

    queue_threshold: int = field(default=1000, metadata=_int(1, 1_000_000))
    """Bound of the routing stage's event queue, in messages."""
    batch_size: int = field(default=250, metadata=_int(1, 65536))
    """Events a worker takes from the queue at once."""
    threads: int = field(default=1, metadata=_int(1, 1024))
    """Workers at start; the governor may add more up to :attr:`max_threads`."""
    max_threads: int = field(default=20, metadata=_int(1, 1024))
    """Largest worker pool the governor may grow to."""
    query_delay_ms: float = field(default=0.0, metadata=_number(0, 60_000))
    """Blocking delay injected per query, in milliseconds (the SEDA paper's experiment)."""
    ping_route_seconds: float = field(default=120.0, metadata=_number(0, 86400, above=True))
    """Generation length of the ping route table (routes live one to two generations)."""
    query_route_seconds: float = field(default=300.0, metadata=_number(0, 86400, above=True))
    """Generation length of the query route table."""
    push_route_seconds: float = field(default=420.0, metadata=_number(0, 86400, above=True))
    """Generation length of the push route table."""
    route_table_capacity: int = field(default=50_000, metadata=_int(1, 10_000_000))
    """Entries per route table generation; a full generation is rotated early."""
    pong_cache_seconds: float = field(default=20.0, metadata=_number(0, 3600, above=True))
    """How long a cached pong may be handed out."""
    pongs_per_ping: int = field(default=10, metadata=_int(1, 255))
    """Cached pongs sent in answer to one ping."""

    def _check(self) -> None:
        if self.threads > self.max_threads:
            raise self._fail("threads", f"must not exceed router.max_threads ({self.max_threads})")


@dataclass(frozen=True, slots=True)
class CatcherConfig(_Section):
    """Finding peers: seeds, a GWebCache, the host cache and dialing."""

    SECTION: ClassVar[str] = "catcher"

    seeds: tuple[str, ...] = field(default=(), metadata=_seeds())
    """HOST:PORT addresses to dial first."""
    gwebcache: str = field(default="", metadata=_gwebcache())
    """A GWebCache v2 URL (http:// only) to ask for hosts; empty for none."""
    min_connections: int = field(default=4, metadata=_int(0, 10_000))
    """Dial out while fewer peers than this are connected; 0 never dials."""
    host_cache_size: int = field(default=10_000, metadata=_int(1, 1_000_000))
    """Known hosts kept."""
    host_cache_file: str = field(default="hosts.txt", metadata=_path())
    """Where the host cache is saved, relative to ``node.state_dir``."""
    save_interval: float = field(default=60.0, metadata=_number(0, 86400, above=True))
    """Seconds between host cache saves."""
    dial_timeout: float = field(default=10.0, metadata=_number(0, 600, above=True))
    """Seconds allowed for one outgoing TCP connect."""
    backoff_initial: float = field(default=5.0, metadata=_number(0, 86400, above=True))
    """First wait before redialing a failed host; doubles per failure."""
    backoff_max: float = field(default=300.0, metadata=_number(0, 86400, above=True))
    """Longest wait before redialing a failed host."""

    def _check(self) -> None:
        if self.backoff_initial > self.backoff_max:
            raise self._fail(
                "backoff_initial", f"must not exceed catcher.backoff_max ({self.backoff_max:g})"
            )

    @property
    def seed_addresses(self) -> tuple[tuple[str, int], ...]:
        """:attr:`seeds` as ``(host, port)`` pairs."""
        return tuple(parse_host_port(s, key="catcher.seeds") for s in self.seeds)


@dataclass(frozen=True, slots=True)
class LogConfig(_Section):
    """Log output; see :mod:`gnutella_router.logs`."""

    SECTION: ClassVar[str] = "log"

    format: str = field(default="auto", metadata=_choice(LOG_FORMATS))
    """``"auto"`` (console on a TTY, JSON lines otherwise), ``"console"`` or ``"json"``."""
    level: str = field(default="info", metadata=_choice(tuple(LOG_LEVELS)))
    """Lowest level written: debug, info, warning or error (any case)."""


# --- [trace]: packet trace recording (see gnutella_router.observe.recorder) ---


@dataclass(frozen=True, slots=True)
class TraceConfig(_Section):
    """Recording what peers send into a trace file (off unless :attr:`record` is set)."""

    SECTION: ClassVar[str] = "trace"

    record: str = field(default="", metadata=_optional_path())
    """Trace file to write, relative to ``node.state_dir`` unless absolute; "" records
    nothing."""
    max_bytes: int = field(default=64 * 1024 * 1024, metadata=_int(1024 * 1024, 1 << 40))
    """Largest trace file; a full file is rotated to ``FILE.1``, ``FILE.2``, ..."""
    max_files: int = field(default=4, metadata=_int(1, 1000))
    """Trace files kept, the one being written included; the oldest is deleted."""
    buffer_bytes: int = field(default=1024 * 1024, metadata=_int(64 * 1024, 1 << 30))
    """Records held in memory until a worker thread writes them; when the disk falls
    this far behind, records are dropped (and counted) rather than memory grown."""


# --- end [trace] ---

# --- [governor] and [shedding]: load conditioning (see governor.py, shedding.py) ---


@dataclass(frozen=True, slots=True)
class GovernorConfig(_Section):
    """The router stage's thread governor (SEDA's thread pool controller); off by default."""

    SECTION: ClassVar[str] = "governor"

    enabled: bool = field(default=False, metadata=_bool())
    interval: float = field(default=2.0, metadata=_number(0.1, 3600))
    """Seconds between samples of the router queue (the paper's controller: 2 s)."""
    threshold: int = field(default=1000, metadata=_int(1, 1_000_000))
    """Queue length at or over which a thread is added (the paper's: 1000)."""
    max_threads: int = field(default=20, metadata=_int(1, 1024))
    """The pool never grows past this, nor past ``router.max_threads``."""
    idle_timeout: float = field(default=5.0, metadata=_number(0, 86400, above=True))
    """Seconds a thread must go unneeded before it is removed."""
    thrashing_guard: bool = field(default=False, metadata=_bool())
    """Go back to the best pool size seen when an added thread did not raise throughput."""


@dataclass(frozen=True, slots=True)
class SheddingConfig(_Section):
    """What the router's queue refuses under overload.

    See :mod:`gnutella_router.control.shedding`.
    """

    SECTION: ClassVar[str] = "shedding"

    policy: str = field(
        default="backpressure",
        metadata=_choice(("backpressure", "drop-tail", "red", "queries-first")),
    )
    red_min: float = field(default=0.5, metadata=_number(0, 1))
    """RED: early drops start at this fraction of router.queue_threshold ..."""
    red_max: float = field(default=1.0, metadata=_number(0, 1, above=True))
    """... and everything is dropped from this fraction on."""
    red_max_p: float = field(default=0.2, metadata=_number(0, 1))
    queries_first_at: float = field(default=0.8, metadata=_number(0, 1, above=True))
    """queries-first: queries are dropped once the queue passes this fraction."""
    rate_limit: float = field(default=0.0, metadata=_number(0, 1e9))
    """Messages/s each connection may send (a token bucket); 0 = no limit."""
    rate_burst: float = field(default=1000.0, metadata=_number(0, 1e9, above=True))

    def __post_init__(self) -> None:
        _Section.__post_init__(self)
        if self.red_min >= self.red_max:
            raise _bad("shedding.red_min", self.red_min, "must be below shedding.red_max")


# --- end [governor] and [shedding] ---

# --- [admin]: the operator's interface (see gnutella_router.observe.admin) ---


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (an address as :func:`parse_host_port` returns it, or a name)
    is this machine's loopback: 127.0.0.0/8, ::1, an IPv4-mapped loopback, localhost."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def _admin_listen() -> Mapping[str, Check]:
    what = 'HOST:PORT, or "" for the node\'s host and port + 1'

    def check(key: str, value: object) -> str:
        text = _string(key, value, what)
        if text:
            parse_host_port(text, key=key)
        return text

    return _rule(check)


def _token() -> Mapping[str, Check]:
    def check(key: str, value: object) -> str:
        # Never echo the value: it is a secret.
        allowed = (
            "expected up to 256 printable ASCII characters without spaces (it is sent as "
            '"Authorization: Bearer TOKEN"), or "" for none'
        )
        if not isinstance(value, str):
            raise ConfigError(key, f"{key}: {allowed}")
        if len(value) > 256 or not all("!" <= c <= "~" for c in value):
            raise ConfigError(key, f"{key}: {allowed}")
        return value

    return _rule(check)


@dataclass(frozen=True, slots=True)
class AdminConfig(_Section):
    """The admin interface: JSON dumps and Prometheus metrics over HTTP.

    It listens on loopback unless told otherwise, and a non-loopback address needs both
    :attr:`allow_remote` and a :attr:`token`.
    """

    SECTION: ClassVar[str] = "admin"

    listen: str = field(default="", metadata=_admin_listen())
    """HOST:PORT to serve on; port 0 picks one. "" means the node's listen port + 1 (0
    when the node's is 0) on the node's host if that is loopback (or remote admin is
    allowed), else on 127.0.0.1 (``[::1]`` for an IPv6 node)."""
    token: str = field(default="", metadata=_token())
    """A secret; when set, every request must carry ``Authorization: Bearer TOKEN``."""
    allow_remote: bool = field(default=False, metadata=_bool())
    """Accept requests from other machines (needs :attr:`token`); otherwise requests
    from non-loopback addresses are refused, whatever the listen address."""

    def _check(self) -> None:
        if self.allow_remote and not self.token:
            raise ConfigError(
                "admin.token",
                "admin.allow_remote = true needs admin.token: a secret that every request "
                'must then carry as "Authorization: Bearer TOKEN"',
            )
        if self.listen and not self.allow_remote:
            host, _ = parse_host_port(self.listen, key="admin.listen")
            if not is_loopback_host(host):
                raise self._fail(
                    "listen",
                    "a non-loopback address needs admin.allow_remote = true and admin.token "
                    "(loopback: 127.0.0.1, [::1] or localhost)",
                )

    @property
    def require_token(self) -> bool:
        """Whether requests must carry the bearer token (whenever one is set)."""
        return bool(self.token)


def admin_listen_address(admin: AdminConfig, node: NodeConfig) -> tuple[str, int]:
    """Where the admin interface listens: :attr:`AdminConfig.listen`, or derived from
    ``node.listen`` as that field describes.

    Raises:
        ConfigError: the node listens on port 65535, so there is no port + 1.
    """
    if admin.listen:
        return parse_host_port(admin.listen, key="admin.listen")
    host, port = node.listen_address
    if port == 65535:
        raise ConfigError(
            "admin.listen",
            'admin.listen = "" means node.listen\'s port + 1, and node.listen uses port 65535; '
            "set admin.listen",
        )
    if not admin.allow_remote and not is_loopback_host(host):
        host = "::1" if ":" in host else "127.0.0.1"
    return host, port + 1 if port else 0


# --- end [admin] ---

# --- [profiler]: periodic samples of the stages (see gnutella_router.observe.profiler) ---


@dataclass(frozen=True, slots=True)
class ProfilerConfig(_Section):
    """The profiler: queue lengths, pool size, outgoing queues, RSS and rates over time."""

    SECTION: ClassVar[str] = "profiler"

    enabled: bool = field(default=False, metadata=_bool())
    interval: float = field(default=0.1, metadata=_number(0.01, 3600))
    """Seconds between samples."""
    samples: int = field(default=6000, metadata=_int(10, 10_000_000))
    """Samples kept (a ring: the oldest go first); 6000 is 10 minutes at 0.1 s."""
    export: str = field(default="profile.json", metadata=_path())
    """Written at shutdown under node.state_dir (unless absolute), with the stage graph
    beside it as the same name ending in .dot."""


# --- end [profiler] ---

_S = TypeVar("_S", bound=_Section)

_SECTIONS: dict[str, type[_Section]] = {
    cls.SECTION: cls
    for cls in (
        NodeConfig,
        NetworkConfig,
        SlowPeerConfig,
        RouterConfig,
        CatcherConfig,
        LogConfig,
        TraceConfig,
        GovernorConfig,
        SheddingConfig,
        AdminConfig,
        ProfilerConfig,
    )
}


@dataclass(frozen=True, slots=True)
class Config:
    """Every setting of the daemon, validated; build it with :func:`load_config`."""

    node: NodeConfig = field(default_factory=NodeConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    slow_peer: SlowPeerConfig = field(default_factory=SlowPeerConfig)
    router: RouterConfig = field(default_factory=RouterConfig)
    catcher: CatcherConfig = field(default_factory=CatcherConfig)
    log: LogConfig = field(default_factory=LogConfig)
    trace: TraceConfig = field(default_factory=TraceConfig)
    governor: GovernorConfig = field(default_factory=GovernorConfig)
    shedding: SheddingConfig = field(default_factory=SheddingConfig)
    admin: AdminConfig = field(default_factory=AdminConfig)
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)

    def __post_init__(self) -> None:
        for name, cls in _SECTIONS.items():
            if not isinstance(getattr(self, name), cls):
                raise ConfigError(name, f"{name} must be a {cls.__name__}")
        self._check()

    def _check(self) -> None:
        """Rules that span sections."""
        admin_listen_address(self.admin, self.node)  # a derived admin port must exist
        max_connections = self.network.max_connections
        if self.catcher.min_connections > max_connections:
            raise _bad(
                "catcher.min_connections",
                self.catcher.min_connections,
                f"must not exceed network.max_connections ({max_connections})",
            )
        if self.governor.enabled and self.governor.threshold > self.router.queue_threshold:
            raise _bad(
                "governor.threshold",
                self.governor.threshold,
                f"must not exceed router.queue_threshold ({self.router.queue_threshold}): "
                "the queue never gets longer, so the governor would never act",
            )
        threshold = self.slow_peer.threshold_messages
        if threshold and threshold < 2 * self.router.batch_size:
            # One router batch can land on a connection between two of its writes; a
            # threshold below two batches would close healthy, fast peers.
            raise _bad(
                "slow_peer.threshold_messages",
                threshold,
                f"must be at least twice router.batch_size ({self.router.batch_size}), "
                "or a burst from one router batch closes healthy peers",
            )
        largest = HEADER_SIZE + self.network.max_payload
        for name in ("threshold_bytes", "queue_bytes"):
            size = getattr(self.slow_peer, name)
            if size < largest:
                raise _bad(
                    f"slow_peer.{name}",
                    size,
                    f"must hold one message of the largest size allowed ({largest} bytes: "
                    "a 23-byte header and network.max_payload)",
                )

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


# --- Loading -------------------------------------------------------------------------


def load_config(path: Path | None = None, overrides: Mapping[str, object] | None = None) -> Config:
    """Build the configuration from the defaults, a TOML file and overrides.

    Args:
        path: a TOML file; ``None`` for the built-in defaults alone.
        overrides: dotted keys and values (``{"network.max_ttl": 5,
            "catcher.seeds": ["10.0.0.1:6346"]}``), applied after the file and
            validated like it. A list value replaces the file's list.

    Returns:
        The validated, frozen configuration.

    Raises:
        ConfigError: the file cannot be read or parsed, a section or key is unknown, or
            a value has the wrong type or is out of range.
    """
    tables: dict[str, dict[str, object]] = {name: {} for name in _SECTIONS}
    if path is not None:
        for section, values in _read_toml(path).items():
            _known_section(section)
            if not isinstance(values, dict):
                raise ConfigError(section, f"{section} must be a table, as in [{section}]")
            for name, value in values.items():
                _known_key(section, name)
                tables[section][name] = value
    for dotted, value in (overrides or {}).items():
        section, _, name = dotted.partition(".")
        _known_section(section)
        if not name:
            raise ConfigError(dotted, f"override {dotted!r} names no setting; use SECTION.KEY")
        _known_key(section, name)
        tables[section][name] = value

    def build(cls: type[_S]) -> _S:
        return cls(**tables[cls.SECTION])

    return Config(
        node=build(NodeConfig),
        network=build(NetworkConfig),
        slow_peer=build(SlowPeerConfig),
        router=build(RouterConfig),
        catcher=build(CatcherConfig),
        log=build(LogConfig),
        trace=build(TraceConfig),
        governor=build(GovernorConfig),
        shedding=build(SheddingConfig),
        admin=build(AdminConfig),
        profiler=build(ProfilerConfig),
    )


def _read_toml(path: Path) -> dict[str, object]:
    try:
        with Path(path).open("rb") as stream:
            return tomllib.load(stream)
    except OSError as exc:
        raise ConfigError(None, f"cannot read config file {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(None, f"config file {path} is not valid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(None, f"config file {path} is not UTF-8: {exc}") from exc


def _known_section(section: str) -> None:
    if section in _SECTIONS:
        return
    owners = [name for name, cls in _SECTIONS.items() if section in _field_names(cls)]
    hint = (
        f" ({section} is a setting of [{owners[0]}]: {owners[0]}.{section})"
        if owners
        else _suggest(section, _SECTIONS)
    )
    raise ConfigError(
        section, f"unknown section {section!r}{hint}; sections are {', '.join(_SECTIONS)}"
    )


def _known_key(section: str, name: str) -> None:
    names = _field_names(_SECTIONS[section])
    if name not in names:
        key = f"{section}.{name}"
        raise ConfigError(
            key,
            f"unknown setting {key}{_suggest(name, names, prefix=section + '.')}; "
            f"[{section}] has {', '.join(names)}",
        )


def _field_names(cls: type[_Section]) -> list[str]:
    return [f.name for f in fields(cls)]


def _suggest(word: str, choices: Iterable[str], prefix: str = "") -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


def config_as_dict(config: Config) -> dict[str, dict[str, object]]:
    """Every setting as plain TOML-shaped data: ``{"network": {"max_ttl": 7, ...}, ...}``.

    Lists are lists, so the result dumps as JSON or TOML, and flattening it into dotted
    keys gives overrides that rebuild the same configuration with :func:`load_config`.
    """
    result: dict[str, dict[str, object]] = {}
    for name in _SECTIONS:
        section = getattr(config, name)
        result[name] = {
            f.name: list(value) if isinstance(value := getattr(section, f.name), tuple) else value
            for f in fields(section)
        }
    return result


def config_as_toml(config: Config) -> str:
    """The configuration as a TOML document that :func:`load_config` reads back."""
    lines: list[str] = []
    for section, values in config_as_dict(config).items():
        lines.append(f"[{section}]")
        lines.extend(f"{name} = {_toml_value(value)}" for name, value in values.items())
        lines.append("")
    return "\n".join(lines)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)  # finite by validation; repr is valid TOML
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def _toml_string(text: str) -> str:
    """A TOML basic string: escape quotes, backslashes and control characters."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char == "\t" or (char >= " " and char != "\x7f"):
            out.append(char)
        else:
            out.append(f"\\u{ord(char):04x}")
    return '"' + "".join(out) + '"'


# --- Command line --------------------------------------------------------------------

_FLAG_KEYS: dict[str, str] = {
    "listen": "node.listen",
    "state_dir": "node.state_dir",
    "max_connections": "network.max_connections",
    "max_ttl": "network.max_ttl",
    "slow_peer": "slow_peer.policy",
    "query_delay_ms": "router.query_delay_ms",
    "min_connections": "catcher.min_connections",
    "log_format": "log.format",
    "log_level": "log.level",
    "record": "trace.record",
    "profile": "profiler.enabled",
}
"""argparse destination -> the dotted key it overrides. ``--seed`` appends instead."""


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--config`` and the flags that override single settings to ``parser``.

    Every flag defaults to ``None`` (``--seed`` to no list), meaning "not given", so the
    file's value stands. Read the result with :func:`config_from_args`.
    """
    d = Config()
    group = parser.add_argument_group(
        "configuration", "settings come from --config FILE; these flags override it"
    )
    group.add_argument("--config", type=Path, metavar="FILE", help="TOML configuration file")
    group.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help=f"address to accept peers on; port 0 picks one (default {d.node.listen})",
    )
    group.add_argument(
        "--seed",
        action="append",
        metavar="HOST:PORT",
        help="peer to dial first; repeatable, added to the file's seeds",
    )
    group.add_argument(
        "--max-ttl",
        type=int,
        metavar="N",
        help=f"broadcast clamp on hops + TTL, 1 to 15 (default {d.network.max_ttl})",
    )
    group.add_argument(
        "--slow-peer",
        choices=SLOW_PEER_POLICIES,
        help=f"slow peer policy (default {d.slow_peer.policy})",
    )
    group.add_argument(
        "--query-delay-ms",
        type=float,
        metavar="MS",
        help="blocking delay injected per query, for overload experiments (default 0)",
    )
    group.add_argument(
        "--log-format", choices=LOG_FORMATS, help=f"log output (default {d.log.format})"
    )
    group.add_argument(
        "--log-level",
        type=str.lower,
        choices=tuple(LOG_LEVELS),
        help=f"lowest level logged (default {d.log.level})",
    )
    group.add_argument(
        "--state-dir",
        metavar="DIR",
        help=f"directory for the host cache and dumps (default {d.node.state_dir})",
    )
    group.add_argument(
        "--min-connections",
        type=int,
        metavar="N",
        help=f"dial out while fewer peers are connected (default {d.catcher.min_connections})",
    )
    group.add_argument(
        "--max-connections",
        type=int,
        metavar="N",
        help=f"most peer connections at once (default {d.network.max_connections})",
    )
    group.add_argument(
        "--profile",
        action="store_const",
        const=True,
        help="sample queues, pool, RSS and rates ([profiler]); written to the state dir at exit",
    )


def config_from_args(args: argparse.Namespace) -> Config:
    """The configuration that the flags of :func:`add_config_arguments` describe.

    Reads ``--config`` if given, applies the other flags that were given as
    overrides, and appends ``--seed`` addresses to the file's seeds.

    Raises:
        ConfigError: as :func:`load_config`; callers usually pass the message to
            ``parser.error``.
    """
    overrides = {
        key: value
        for dest, key in _FLAG_KEYS.items()
        if (value := getattr(args, dest, None)) is not None
    }
    config = load_config(getattr(args, "config", None), overrides)
    extra_seeds = getattr(args, "seed", None)
    if extra_seeds:
        seeds = (*config.catcher.seeds, *extra_seeds)
        config = dataclasses.replace(
            config, catcher=dataclasses.replace(config.catcher, seeds=seeds)
        )
    return config
