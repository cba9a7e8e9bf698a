"""A small GWebCache client for bootstrapping: ask one web cache for Gnutella hosts.

Theory of operation
-------------------
A servent that starts with an empty host cache knows nobody to connect to. A GWebCache
("GWC") solves that first step: it is a plain HTTP script that keeps a short, rotating
list of recently seen ultrapeers and of other caches. One ``GET`` returns a handful of
``ip:port`` addresses; after that the servent learns further hosts from pongs and
``X-Try`` headers, so a cache is asked rarely, normally once per start-up.

Two answer formats exist. The original protocol (v1, ``?hostfile=1``) returns bare
``ip:port`` lines. The second protocol (v2, ``?get=1&net=gnutella``) returns hosts and
caches in one answer, each line tagged: ``H|ip:port|age`` for a host, ``U|url|age`` for
another cache and ``I|...`` for information such as ``I|pong|...`` or
``I|WARNING|You came back too early``. The ``net`` parameter matters because many
caches serve Gnutella and Gnutella2 at once, and a G2 hub is no use to a Gnutella 0.6
router. The request therefore speaks v2, but the parser also accepts v1 lines (and v1
status words such as ``PONG`` or ``ERROR``) because old caches ignore ``get=1`` and
answer the way they always have.

Why everything is bounded
-------------------------
A cache is a stranger on the internet, and the addresses it returns are addresses the
router will dial. A broken or hostile cache can stall forever, send an endless body,
or list thousands of addresses to turn every client into a flood aimed at one victim.
So one fetch has a hard overall deadline, a byte budget for the body, exactly one
accepted status (200, no redirects to follow into somebody else's server), and a cap
on the number of hosts; crossing any of them fails the whole fetch rather than using
a partial answer. Only literal IPv4/IPv6 addresses are accepted as hosts: a name
would need a DNS lookup the cache could steer, and an ``ip:port`` is what real caches
send anyway. Every failure surfaces as :class:`GWebCacheError`, so the bootstrap stage
can log it and move on to the next cache with a single ``except``.

The HTTP exchange uses h11 (sans-IO) over ``trio.open_tcp_stream``; only plain
``http://`` URLs are supported. :func:`parse_gwebcache_body` is pure and never raises
on content, so it can be tested and fuzzed without a network.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass

import h11
import trio

from gnutella_router import __version__

__all__ = [
    "GWebCacheError",
    "GWebCacheReply",
    "build_request_target",
    "fetch_hosts",
    "parse_gwebcache_body",
]

DEFAULT_CLIENT = "GRTR"  # the vendor code our pongs carry in "VC" too
DEFAULT_VERSION = __version__
DEFAULT_TIMEOUT = 10.0
DEFAULT_MAX_BODY = 64 * 1024
DEFAULT_MAX_HOSTS = 500

# Cache URLs arrive from other caches (U| lines) and are fed back into fetch_hosts, so
# their size is bounded like everything else a cache hands us.
MAX_URL_LENGTH = 2048
# Info lines end up in logs; keep them short.
MAX_INFO_LENGTH = 256
# Bytes requested from the socket per read; h11 never buffers much more than this.
_RECEIVE_CHUNK = 16 * 1024
# Response head limit; a GWC answer has a handful of short headers.
_MAX_HEAD_SIZE = 16 * 1024
_MAX_PARAMETER_LENGTH = 64

_OUR_PARAMETERS = frozenset({"get", "net", "client", "version", "update", "ip"})
_PORT_DIGITS = re.compile(r"[0-9]{1,5}")
_HOSTNAME = re.compile(r"[a-z0-9._-]{1,253}")
_V1_STATUS_WORDS = frozenset({"PONG", "OK", "OKWARNING", "WARNING", "ERROR"})
_IPV4_BROADCAST = ipaddress.IPv4Address("255.255.255.255")


class GWebCacheError(Exception):
    """Any reason a cache gave us no usable answer.

    One type on purpose: to the bootstrap stage every failure means the same thing
    ("try another cache"), and the message says which limit or fault it was.
    """


@dataclass(frozen=True, slots=True)
class GWebCacheReply:
    """What one cache answered, already validated.

    ``hosts`` holds unique ``(address, port)`` pairs in the cache's order, ``caches``
    the unique cache URLs it knows, ``info`` the text of its ``I|`` lines (without the
    ``I|`` tag) and of v1 status lines. ``skipped_lines`` counts non-blank lines that
    contributed nothing (malformed, or hosts beyond the cap), so a caller can tell a
    sloppy cache from a quiet one.
    """

    hosts: tuple[tuple[str, int], ...]
    caches: tuple[str, ...]
    info: tuple[str, ...]
    skipped_lines: int


# --------------------------------------------------------------------------- parsing


def _show(text: str, limit: int = 100) -> str:
    """Quote untrusted text for an error message without letting it take the message over."""
    if len(text) > limit:
        return repr(text[:limit]) + "..."
    return repr(text)


def _is_url_text(text: str) -> bool:
    return 0 < len(text) <= MAX_URL_LENGTH and all("!" <= ch <= "~" for ch in text)


def parse_literal_host_port(text: str) -> tuple[str, int] | None:
    """Accept only a literal address and a plain decimal port.

    Names are refused because resolving them would let the cache point us anywhere
    through DNS; scoped IPv6 (``%eth0``) is refused because a zone is meaningless off
    the cache's own machine. Unspecified, multicast and broadcast addresses can never
    be a peer, so they count as malformed too.
    """
    address: ipaddress.IPv4Address | ipaddress.IPv6Address
    if text.startswith("["):
        address_text, bracket, port_text = text[1:].partition("]")
        if not bracket or not port_text.startswith(":") or "%" in address_text:
            return None
        port_text = port_text[1:]
        try:
            address = ipaddress.IPv6Address(address_text)
        except ValueError:
            return None
    else:
        address_text, colon, port_text = text.rpartition(":")
        if not colon:
            return None
        try:
            address = ipaddress.IPv4Address(address_text)
        except ValueError:
            return None
    if _PORT_DIGITS.fullmatch(port_text) is None:
        return None
    port = int(port_text)
    if not 1 <= port <= 65535:
        return None
    if address.is_unspecified or address.is_multicast or address == _IPV4_BROADCAST:
        return None
    return str(address), port


def parse_cache_url(text: str) -> str | None:
    """Keep a cache URL only if it is well formed enough to be fetched later.

    ``https://`` caches are kept: they are genuine caches, and whether to use them is
    the caller's decision, not the parser's.
    """
    if not _is_url_text(text):
        return None
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    if port == 0:
        return None
    return text


def _clean_info(text: str) -> str:
    """Make cache-supplied text safe to log: no control characters, bounded length."""
    return "".join(ch if ch.isprintable() else "?" for ch in text[:MAX_INFO_LENGTH])


def parse_gwebcache_body(body: bytes, *, max_hosts: int = DEFAULT_MAX_HOSTS) -> GWebCacheReply:
    """Turn a cache's answer into validated hosts, caches and info lines.

    Pure and total on content: any bytes at all produce a reply, because a bad cache
    must cost us one skipped answer, never an exception in the bootstrap stage. Lines
    end with ``\\n`` or ``\\r\\n``; v2 tagged lines and v1 bare lines may be mixed, as
    some caches do. Hosts past ``max_hosts`` are counted as skipped so the caller can
    see that the cache said more than it was allowed to.
    """
    if max_hosts < 0:
        raise ValueError(f"max_hosts must be >= 0, got {max_hosts}")
    hosts: dict[tuple[str, int], None] = {}
    caches: dict[str, None] = {}
    info: list[str] = []
    skipped = 0

    def add_host(host: tuple[str, int]) -> bool:
        if host in hosts:
            return True
        if len(hosts) >= max_hosts:
            return False
        hosts[host] = None
        return True

    for raw_line in body.decode("utf-8", errors="replace").split("\n"):
        line = raw_line.strip()
        if not line:
            continue
        tag, bar, rest = line.partition("|")
        ok = False
        if bar and len(tag) == 1:
            kind = tag.upper()
            first_field = rest.split("|", 1)[0].strip()
            if kind == "H":
                host = parse_literal_host_port(first_field)
                ok = host is not None and add_host(host)
            elif kind == "U":
                url = parse_cache_url(first_field)
                if url is not None:
                    caches[url] = None
                    ok = True
            elif kind == "I" and rest.strip():
                info.append(_clean_info(rest.strip()))
                ok = True
        elif not bar:
            host = parse_literal_host_port(line)
            if host is not None:
                ok = add_host(host)
            elif (url := parse_cache_url(line)) is not None:
                caches[url] = None
                ok = True
            elif line.split(None, 1)[0].rstrip(":").upper() in _V1_STATUS_WORDS:
                info.append(_clean_info(line))
                ok = True
        if not ok:
            skipped += 1
    return GWebCacheReply(
        hosts=tuple(hosts),
        caches=tuple(caches),
        info=tuple(info),
        skipped_lines=skipped,
    )


# --------------------------------------------------------------------------- requests


def _check_parameter(name: str, value: str) -> None:
    # These go into the query string and the User-Agent header; refusing odd values
    # here keeps a bad configuration from turning into a malformed request.
    if not 0 < len(value) <= _MAX_PARAMETER_LENGTH or not all("!" <= ch <= "~" for ch in value):
        raise GWebCacheError(
            f"{name} must be 1..{_MAX_PARAMETER_LENGTH} printable ASCII characters "
            f"without spaces, got {_show(value)}"
        )


def build_request_target(
    url: str,
    *,
    client: str = DEFAULT_CLIENT,
    version: str = DEFAULT_VERSION,
    update: tuple[str, int] | None = None,
) -> tuple[str, int, str]:
    """Validate a cache URL and work out where to connect and what to ask for.

    Returns ``(host, port, target)`` with ``host`` bare (no IPv6 brackets) for the
    socket. The cache's own query string is kept, because some caches are reached
    through a script that needs its own parameters, but our four parameters replace
    any same-named ones so a URL cannot switch us to another network. URLs come
    from other caches, so anything unusual (TLS, credentials, odd characters, bad
    ports) is refused here rather than discovered on the wire. With ``update``, the
    same request also reports that address (ours) to the cache (``update=1&ip=``), as
    v2 caches allow, so that servents that ask after us can find us.
    """
    _check_parameter("client", client)
    _check_parameter("version", version)
    if not _is_url_text(url):
        raise GWebCacheError(
            f"bad cache URL {_show(url)}: must be 1..{MAX_URL_LENGTH} printable ASCII "
            "characters without spaces"
        )
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise GWebCacheError(f"bad cache URL {_show(url)}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme == "https":
        raise GWebCacheError(f"cache URL {_show(url)} uses https: TLS is not supported")
    if scheme != "http":
        raise GWebCacheError(f"bad cache URL {_show(url)}: only http:// is supported")
    if parts.username is not None or parts.password is not None:
        raise GWebCacheError(f"bad cache URL {_show(url)}: credentials are not supported")
    host = parts.hostname or ""
    if parts.netloc.startswith("["):
        if "%" in host:
            raise GWebCacheError(f"bad cache URL {_show(url)}: scoped IPv6 is not supported")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise GWebCacheError(f"bad cache URL {_show(url)}: bad IPv6 address") from None
    elif _HOSTNAME.fullmatch(host) is None:
        raise GWebCacheError(f"bad cache URL {_show(url)}: bad or missing host name")
    if port is None:
        port = 80
    elif not 1 <= port <= 65535:
        raise GWebCacheError(f"bad cache URL {_show(url)}: port {port} out of range")

    kept = [
        part
        for part in parts.query.split("&")
        if part and urllib.parse.unquote(part.split("=", 1)[0]).lower() not in _OUR_PARAMETERS
    ]
    asked = {"get": "1", "net": "gnutella", "client": client, "version": version}
    if update is not None:
        address, update_port = update
        shown = f"[{address}]" if ":" in address else address
        asked |= {"update": "1", "ip": f"{shown}:{update_port}"}
    ours = urllib.parse.urlencode(asked, quote_via=urllib.parse.quote)
    query = "&".join([*kept, ours])
    target = f"{parts.path or '/'}?{query}"
    return host, port, target


def _host_header(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return shown if port == 80 else f"{shown}:{port}"


def _header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


async def _exchange(
    url: str,
    host: str,
    port: int,
    request: h11.Request,
    max_body: int,
) -> bytes:
    """One request, one response, then close; returns the complete 200 body."""
    try:
        stream = await trio.open_tcp_stream(host, port)
    except OSError as exc:
        raise GWebCacheError(f"{url}: cannot connect to {host} port {port}: {exc}") from exc
    async with stream:
        connection = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEAD_SIZE)
        try:
            outgoing = connection.send(request) + connection.send(h11.EndOfMessage())
        except h11.LocalProtocolError as exc:
            raise GWebCacheError(f"{url}: cannot build request: {exc}") from None
        try:
            await stream.send_all(outgoing)
        except trio.BrokenResourceError as exc:
            raise GWebCacheError(f"{url}: connection lost while sending: {exc}") from exc

        body = bytearray()
        at_eof = False
        while True:
            try:
                event = connection.next_event()
            except h11.RemoteProtocolError as exc:
                raise GWebCacheError(f"{url}: bad HTTP response: {exc}") from None
            if event is h11.NEED_DATA:
                if at_eof:
                    raise GWebCacheError(f"{url}: connection closed mid-response")
                try:
                    chunk = await stream.receive_some(_RECEIVE_CHUNK)
                except trio.BrokenResourceError as exc:
                    raise GWebCacheError(f"{url}: connection lost while reading: {exc}") from exc
                at_eof = not chunk
                connection.receive_data(chunk)
            elif isinstance(event, h11.InformationalResponse):
                continue
            elif isinstance(event, h11.Response):
                _check_response(url, event, max_body)
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > max_body:
                    raise GWebCacheError(f"{url}: response body exceeds {max_body} bytes")
            elif isinstance(event, h11.EndOfMessage):
                return bytes(body)
            else:
                # ConnectionClosed before the end, or PAUSED after a protocol switch
                # we never asked for: either way there is no complete answer.
                raise GWebCacheError(f"{url}: no complete HTTP response ({event!r})")


def _check_response(url: str, response: h11.Response, max_body: int) -> None:
    """Refuse everything but a 200 whose announced size fits, before reading the body."""
    status = response.status_code
    reason = response.reason.decode("latin-1")
    if 300 <= status < 400:
        location = _header(response.headers, b"location")
        target = "no Location" if location is None else f"Location {_show(location, 200)}"
        raise GWebCacheError(
            f"{url}: HTTP {status} redirect to {target}; redirects are not followed"
        )
    if status != 200:
        raise GWebCacheError(f"{url}: HTTP {status} {_show(reason)}, expected 200")
    length = _header(response.headers, b"content-length")
    if length is not None and length.isdigit() and int(length) > max_body:
        raise GWebCacheError(
            f"{url}: response body of {int(length)} bytes exceeds {max_body} bytes"
        )


async def fetch_hosts(
    url: str,
    *,
    client: str = DEFAULT_CLIENT,
    version: str = DEFAULT_VERSION,
    timeout: float = DEFAULT_TIMEOUT,  # noqa: ASYNC109 - the deadline is part of the contract
    max_body: int = DEFAULT_MAX_BODY,
    max_hosts: int = DEFAULT_MAX_HOSTS,
    update: tuple[str, int] | None = None,
) -> GWebCacheReply:
    """Ask one cache for hosts, within hard limits, and return its validated answer;
    with ``update``, report that address (ours) in the same request.

    The deadline covers the whole exchange, DNS included, because a slow cache is as
    useless to bootstrap as a dead one. An answer listing more than ``max_hosts``
    hosts is refused outright: real caches send a few dozen, so a longer list is a
    broken or hostile cache and none of it should be dialled.
    """
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0, got {timeout}")
    if max_body < 0 or max_hosts < 0:
        raise ValueError("max_body and max_hosts must be >= 0")
    host, port, target = build_request_target(url, client=client, version=version, update=update)
    request = h11.Request(
        method="GET",
        target=target,
        headers=[
            ("Host", _host_header(host, port)),
            ("User-Agent", f"{client}/{version}"),
            ("Connection", "close"),
        ],
    )
    try:
        with trio.fail_after(timeout):
            body = await _exchange(url, host, port, request, max_body)
    except trio.TooSlowError:
        raise GWebCacheError(f"{url}: timed out after {timeout:g} s") from None
    reply = parse_gwebcache_body(body, max_hosts=max_hosts + 1)
    if len(reply.hosts) > max_hosts:
        raise GWebCacheError(f"{url}: cache listed more than {max_hosts} hosts")
    return reply
