"""What peers announce in the handshake, and what we announce to them.

Interpreting headers is kept apart from the handshake state machines: the router reads
:class:`Capabilities` for as long as a connection lives (may it send Bye? GGEP? deflate?),
while the machines are done after three steps. Every reader here is total: a garbled
optional header counts as absent and never fails a handshake. The writers are strict,
since what we send must be accepted by gtk-gnutella 1.2 and parse back the same.
"""

from __future__ import annotations

import datetime
import email.utils
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .constants import HARD_TTL_LIMIT
from .errors import LocalProtocolError
from .headers import HeaderBlock

__all__ = [
    "MAX_TRY_HOSTS",
    "Capabilities",
    "busy_response_headers",
    "content_encoding",
    "format_host",
    "parse_host_port",
    "parse_try_hosts",
    "router_headers",
]

_NUMBER = re.compile(r"[0-9]{1,6}", re.ASCII)
_VERSION = re.compile(r"([0-9]{1,6})\.([0-9]{1,6})", re.ASCII)
_HEX_GUID = re.compile(r"[0-9a-fA-F]{32}", re.ASCII)

MAX_TRY_HOSTS = 100
"""Most hosts taken from a peer's X-Try headers; more is either noise or an attack."""

DEFAULT_PEER_MAX_TTL = 7
"""What gtk-gnutella assumes of a peer that sends no usable ``X-Max-TTL``."""

DEFAULT_PEER_DEGREE = 8
"""What gtk-gnutella assumes of a peer that sends no usable ``X-Degree``."""

MIN_ULTRAPEER_DEGREE = 16
"""gtk-gnutella leaves refuse ultrapeers announcing a lower ``X-Degree``."""

# ---------------------------------------------------------------------------
# Header values


def parse_host_port(text: str) -> tuple[str, int] | None:
    """``"1.2.3.4:6346"`` or ``"[::1]:6346"`` as ``(host, port)``; None if malformed.

    Only literal addresses are accepted: every Gnutella header carrying an address
    (Listen-IP, X-Try, Node) carries an IP, and resolving names is not ours to do.
    """
    text = text.strip()
    if text.startswith("["):
        host, separator, port_text = text[1:].partition("]:")
    else:
        host, separator, port_text = text.partition(":")
    if not separator or not _NUMBER.fullmatch(port_text):
        return None
    port = int(port_text)
    if not 0 < port < 65536:
        return None
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if address.is_unspecified or (address.version == 6) != text.startswith("["):
        return None
    return str(address), port


def format_host(host: str, port: int) -> str:
    """The inverse of :func:`parse_host_port`."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_try_hosts(headers: HeaderBlock) -> tuple[tuple[str, int], ...]:
    """Hosts offered in ``X-Try-Ultrapeers`` then ``X-Try``, without duplicates.

    A refusal is the peer being helpful, so one bad entry only loses that entry.
    """
    hosts: dict[tuple[str, int], None] = {}
    for name in ("X-Try-Ultrapeers", "X-Try"):
        for value in headers.get_all(name):
            for entry in value.split(","):
                host = parse_host_port(entry)
                if host is not None:
                    hosts[host] = None
                    if len(hosts) >= MAX_TRY_HOSTS:
                        return tuple(hosts)
    return tuple(hosts)


def _text(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return value or None


def _boolean(value: str | None) -> bool | None:
    if value is None:
        return None
    lowered = value.strip().lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    return None


def _integer(value: str | None, *, default: int, low: int, high: int) -> int:
    if value is None:
        return default
    value = value.strip()
    if not _NUMBER.fullmatch(value):
        return default
    number = int(value)
    return number if low <= number <= high else default


def _version_at_least(value: str | None, minimum: tuple[int, int]) -> bool:
    if value is None:
        return False
    match = _VERSION.fullmatch(value.strip())
    if match is None:
        return False
    return (int(match[1]), int(match[2])) >= minimum


def _lists_token(value: str | None, token: str) -> bool:
    if value is None:
        return False
    return any(item.split(";")[0].strip().lower() == token for item in value.split(","))


def content_encoding(headers: HeaderBlock) -> str | None:
    value = headers.get("Content-Encoding")
    if value is None:
        return None
    value = value.strip().lower()
    return None if value in ("", "identity") else value


def _listen_address(headers: HeaderBlock) -> tuple[str, int] | None:
    for name in ("Listen-IP", "X-My-Address", "Node"):
        for value in headers.get_all(name):
            for entry in value.split(","):
                address = parse_host_port(entry)
                if address is not None:
                    return address
    return None


def _ip(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        return None


def _guid(value: str | None) -> bytes | None:
    if value is None:
        return None
    value = value.strip()
    return bytes.fromhex(value) if _HEX_GUID.fullmatch(value) else None


def _features(value: str | None) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    features: list[tuple[str, str]] = []
    for item in value.split(","):
        name, slash, version = item.strip().partition("/")
        name, version = name.strip(), version.strip()
        if slash and name and version and " " not in name:
            features.append((name, version))
    return tuple(features)


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a peer announced in its handshake headers, with gtk-gnutella's defaults.

    The router gates behaviour on these (no Bye to a peer without ``Bye-Packet``, no
    GGEP without ``GGEP``...), so a header that is present but garbled counts as
    absent: a peer must never make parsing fail through an optional header.
    """

    user_agent: str | None = None
    ultrapeer: bool | None = None
    """``X-Ultrapeer``; None when the peer did not say (a legacy "normal" node)."""
    ultrapeer_needed: bool | None = None
    bye_packet: bool = False
    ggep: bool = False
    pong_caching: bool = False
    vendor_messages: bool = False
    query_routing: str | None = None
    """``X-Query-Routing`` version: the peer can send (leaf) or take QRP tables."""
    ultrapeer_query_routing: str | None = None
    dynamic_querying: bool = False
    max_ttl: int = DEFAULT_PEER_MAX_TTL
    degree: int = DEFAULT_PEER_DEGREE
    accepts_deflate: bool = False
    """The peer can inflate what we send (``Accept-Encoding: deflate``)."""
    content_deflate: bool = False
    """The peer will deflate what it sends (``Content-Encoding: deflate``)."""
    listen_address: tuple[str, int] | None = None
    remote_ip: str | None = None
    """Our address as the peer sees it."""
    guid: bytes | None = None
    try_hosts: tuple[tuple[str, int], ...] = ()
    features: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_headers(cls, headers: HeaderBlock) -> Capabilities:
        """Read the capabilities out of one peer's headers; never raises."""
        return cls(
            user_agent=_text(headers.get("User-Agent")) or _text(headers.get("Server")),
            ultrapeer=_boolean(headers.get("X-Ultrapeer")),
            ultrapeer_needed=_boolean(headers.get("X-Ultrapeer-Needed")),
            bye_packet="Bye-Packet" in headers,
            ggep="GGEP" in headers,
            pong_caching=_version_at_least(headers.get("Pong-Caching"), (0, 1)),
            vendor_messages="Vendor-Message" in headers,
            query_routing=_text(headers.get("X-Query-Routing")),
            ultrapeer_query_routing=_text(headers.get("X-Ultrapeer-Query-Routing")),
            dynamic_querying="X-Dynamic-Querying" in headers,
            max_ttl=_integer(
                headers.get("X-Max-TTL"), default=DEFAULT_PEER_MAX_TTL, low=1, high=255
            ),
            degree=_integer(
                headers.get("X-Degree"), default=DEFAULT_PEER_DEGREE, low=1, high=65535
            ),
            accepts_deflate=_lists_token(headers.get("Accept-Encoding"), "deflate"),
            content_deflate=content_encoding(headers) == "deflate",
            listen_address=_listen_address(headers),
            remote_ip=_ip(headers.get("Remote-IP")),
            guid=_guid(headers.get("GUID")),
            try_hosts=parse_try_hosts(headers),
            features=_features(headers.get("X-Features")),
        )

    @property
    def refuses_ancient_queries(self) -> bool:
        """Whether this servent drops queries whose flags word is 0 (the pre-0.6 "minimum
        speed" form): gtk-gnutella does, as "Ancient query format", neither answering
        nor forwarding them."""
        return (self.user_agent or "").lower().startswith("gtk-gnutella")


def router_headers(
    *,
    user_agent: str,
    listen: tuple[str, int] | None,
    remote_ip: str | None,
    max_ttl: int = 4,
    degree: int = 32,
    guid: bytes | None = None,
    deflate: bool = True,
    live_since: float | None = None,
) -> list[tuple[str, str]]:
    """The headers we announce as an ultrapeer, in steps 1 and 2.

    ``live_since`` (seconds since the epoch) becomes ``X-Live-Since``, in the RFC 1123
    form gtk-gnutella writes and reads to show a peer's uptime.

    Chosen from what gtk-gnutella 1.2 demands of an ultrapeer: ``X-Ultrapeer`` (else
    "403 Normal nodes refused"), ``X-Degree`` of at least 16 and
    ``X-Dynamic-Querying`` (else its leaves refuse us; a leaf's query is widened step by
    step). ``X-Query-Routing`` because leaves' QRP tables are taken and queries routed
    to leaves by them. ``X-Ultrapeer-Query-Routing`` because ultrapeers that announce
    it are sent our leaves' keywords as a table, and their own tables decide which
    last-hop queries they get. ``X-Features: sflag`` is left out because we do not
    implement size-field flags. Nothing here pretends to be gtk-gnutella, whose own
    name is checked against a token we cannot produce.
    """
    if not isinstance(user_agent, str) or not user_agent.strip():
        raise LocalProtocolError("a User-Agent is required")
    if user_agent.strip().lower().startswith("gtk-gnutella"):
        raise LocalProtocolError("the User-Agent must not claim to be gtk-gnutella")
    if type(degree) is not int or not MIN_ULTRAPEER_DEGREE <= degree <= 65535:
        raise LocalProtocolError(f"X-Degree must be at least {MIN_ULTRAPEER_DEGREE}")
    if type(max_ttl) is not int or not 1 <= max_ttl <= HARD_TTL_LIMIT:
        raise LocalProtocolError(f"X-Max-TTL must be within 1..{HARD_TTL_LIMIT}")
    headers = [
        ("User-Agent", user_agent.strip()),
        ("X-Ultrapeer", "True"),
        ("X-Degree", str(degree)),
        ("X-Dynamic-Querying", "0.1"),
        ("X-Max-TTL", str(max_ttl)),
        ("Bye-Packet", "0.1"),
        ("GGEP", "0.5"),
        ("Pong-Caching", "0.1"),
        ("Vendor-Message", "0.2"),
        ("X-Query-Routing", "0.2"),
        ("X-Ultrapeer-Query-Routing", "0.1"),
    ]
    if listen is not None:
        address = parse_host_port(format_host(*listen))
        if address is None:
            raise LocalProtocolError(f"listen address {listen!r} is not an IP and port")
        headers.append(("Listen-IP", format_host(*address)))
    if remote_ip is not None:
        ip = _ip(remote_ip)
        if ip is None:
            raise LocalProtocolError(f"remote IP {remote_ip!r} is not an IP address")
        headers.append(("Remote-IP", ip))
    if guid is not None:
        if len(guid) != 16:
            raise LocalProtocolError("a servent GUID is 16 bytes")
        headers.append(("GUID", guid.hex()))
    if deflate:
        headers.append(("Accept-Encoding", "deflate"))
    if live_since is not None:
        moment = datetime.datetime.fromtimestamp(live_since, datetime.UTC)
        headers.append(("X-Live-Since", email.utils.format_datetime(moment, usegmt=False)))
    HeaderBlock(headers)  # validates the text before anyone sends it
    return headers


def busy_response_headers(
    try_hosts: Sequence[tuple[str, int]], limit: int = 10
) -> list[tuple[str, str]]:
    """``X-Try-Ultrapeers`` for a 503 refusal: the spec asks a full node to say where
    else to go, so the refused peer does not fall back on a web cache."""
    if type(limit) is not int or limit < 0:
        raise LocalProtocolError("limit must be a non-negative int")
    entries: list[str] = []
    for host, port in try_hosts:
        address = parse_host_port(format_host(host, port))
        if address is None:
            raise LocalProtocolError(f"try host {(host, port)!r} is not an IP and port")
        entry = format_host(*address)
        if entry not in entries:
            entries.append(entry)
        if len(entries) >= limit:
            break
    return [("X-Try-Ultrapeers", ", ".join(entries))] if entries else []
