"""The GWebCache client against a canned HTTP server on loopback, and its parser alone."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from functools import partial

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from gnutella_router import __version__
from gnutella_router.discovery.gwebcache import (
    GWebCacheError,
    GWebCacheReply,
    build_request_target,
    fetch_hosts,
    parse_gwebcache_body,
)

# Generous bound for one loopback exchange; a hang fails the test instead of the run.
TEST_DEADLINE = 10.0


@dataclass
class CannedServer:
    """Answers every connection with ``response`` and remembers what was asked."""

    port: int = 0
    response: bytes = b""
    hang: bool = False
    requests: list[bytes] = field(default_factory=list)

    def url(self, path: str = "/gwc.php") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def handle(self, stream: trio.SocketStream) -> None:
        try:
            request = b""
            while b"\r\n\r\n" not in request and len(request) < 65536:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                request += chunk
            self.requests.append(request)
            if self.hang:
                await trio.sleep_forever()
            await stream.send_all(self.response)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client gave up first, which several tests make it do
        finally:
            await stream.aclose()


@pytest.fixture
async def server(nursery: trio.Nursery) -> CannedServer:
    canned = CannedServer()
    listeners = await nursery.start(partial(trio.serve_tcp, canned.handle, 0, host="127.0.0.1"))
    canned.port = listeners[0].socket.getsockname()[1]
    return canned


def ok_response(body: bytes, *, extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
        + extra
        + b"Content-Length: "
        + str(len(body)).encode()
        + b"\r\nConnection: close\r\n\r\n"
        + body
    )


V2_BODY = (
    b"I|pong|Example Cache 1.2|gnutella-gnutella2\r\n"
    b"H|203.0.113.7:6346|120\r\n"
    b"H|[2001:db8::5]:6348|45|cluster\r\n"
    b"H|198.51.100.20:4000|3600\n"
    b"U|http://cache.example.net/gwc.php|7200\r\n"
    b"U|http://other.example.org:8080/skulls.php|300\r\n"
    b"I|WARNING|You came back too early\r\n"
)


@pytest.mark.e2e
async def test_v2_reply_is_parsed(server: CannedServer) -> None:
    server.response = ok_response(V2_BODY)
    with trio.fail_after(TEST_DEADLINE):
        reply = await fetch_hosts(server.url())
    assert reply == GWebCacheReply(
        hosts=(("203.0.113.7", 6346), ("2001:db8::5", 6348), ("198.51.100.20", 4000)),
        caches=("http://cache.example.net/gwc.php", "http://other.example.org:8080/skulls.php"),
        info=("pong|Example Cache 1.2|gnutella-gnutella2", "WARNING|You came back too early"),
        skipped_lines=0,
    )


async def test_request_carries_the_v2_parameters_and_headers(server: CannedServer) -> None:
    server.response = ok_response(b"H|203.0.113.7:6346|1\n")
    with trio.fail_after(TEST_DEADLINE):
        await fetch_hosts(
            server.url("/cgi/gcache.cgi?lang=en&net=gnutella2"), client="TEST", version="9.8"
        )
    [raw] = server.requests
    head = raw.decode("ascii").split("\r\n")
    assert head[0] == (
        "GET /cgi/gcache.cgi?lang=en&get=1&net=gnutella&client=TEST&version=9.8 HTTP/1.1"
    )
    headers = {name.lower(): value for name, _, value in (h.partition(": ") for h in head[1:] if h)}
    assert headers["host"] == f"127.0.0.1:{server.port}"
    assert headers["user-agent"] == "TEST/9.8"
    assert headers["connection"] == "close"


async def test_v1_hostfile_body(server: CannedServer) -> None:
    server.response = ok_response(b"PONG OldCache 0.9\r\n192.0.2.1:6346\r\n192.0.2.2:6347\r\n")
    with trio.fail_after(TEST_DEADLINE):
        reply = await fetch_hosts(server.url())
    assert reply.hosts == (("192.0.2.1", 6346), ("192.0.2.2", 6347))
    assert reply.info == ("PONG OldCache 0.9",)
    assert reply.caches == ()
    assert reply.skipped_lines == 0


async def test_http_1_0_body_read_until_close(server: CannedServer) -> None:
    server.response = b"HTTP/1.0 200 OK\r\n\r\nH|192.0.2.9:6346|5\n"
    with trio.fail_after(TEST_DEADLINE):
        reply = await fetch_hosts(server.url())
    assert reply.hosts == (("192.0.2.9", 6346),)


async def test_chunked_body(server: CannedServer) -> None:
    server.response = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"a\r\nH|192.0.2.\r\n"
        b"a\r\n3:6346|10\n\r\n"
        b"0\r\n\r\n"
    )
    with trio.fail_after(TEST_DEADLINE):
        reply = await fetch_hosts(server.url())
    assert reply.hosts == (("192.0.2.3", 6346),)


async def test_malformed_lines_are_skipped_and_counted(server: CannedServer) -> None:
    body = (
        b"H|192.0.2.1:6346|10\n"
        b"H|cache.example.com:6346|10\n"  # a name, not an address
        b"H|192.0.2.1:0|10\n"  # port 0
        b"H|192.0.2.1:65536|10\n"
        b"H|192.0.2.999:6346|10\n"
        b"H|0.0.0.0:6346|10\n"
        b"H|[fe80::1%eth0]:6346|10\n"
        b"U|ftp://cache.example.com/|10\n"
        b"X|whatever\n"
        b"\n\r\n   \n"  # blank lines are not malformed, just empty
        b"this is not a host\n"
        b"192.0.2.4:6346\n"
        b"\xff\xfe garbage\n"
    )
    server.response = ok_response(body)
    with trio.fail_after(TEST_DEADLINE):
        reply = await fetch_hosts(server.url())
    assert reply.hosts == (("192.0.2.1", 6346), ("192.0.2.4", 6346))
    assert reply.skipped_lines == 10


@pytest.mark.e2e
async def test_non_200_status_is_an_error(server: CannedServer) -> None:
    server.response = (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 29\r\n\r\n"
        b"Required network not accepted"
    )
    with trio.fail_after(TEST_DEADLINE), pytest.raises(GWebCacheError, match="HTTP 503"):
        await fetch_hosts(server.url())


@pytest.mark.e2e
async def test_redirect_is_an_error_naming_the_location(server: CannedServer) -> None:
    server.response = (
        b"HTTP/1.1 302 Found\r\nLocation: http://elsewhere.example/gwc.php\r\n"
        b"Content-Length: 0\r\n\r\n"
    )
    with (
        trio.fail_after(TEST_DEADLINE),
        pytest.raises(GWebCacheError, match=r"302.*http://elsewhere\.example/gwc\.php"),
    ):
        await fetch_hosts(server.url())


@pytest.mark.e2e
async def test_oversized_body_without_length_is_an_error(server: CannedServer) -> None:
    server.response = b"HTTP/1.0 200 OK\r\n\r\n" + b"H|192.0.2.1:6346|1\n" * 4000  # ~76 KB
    assert len(server.response) > 65536
    with trio.fail_after(TEST_DEADLINE), pytest.raises(GWebCacheError, match="exceeds 65536"):
        await fetch_hosts(server.url())


@pytest.mark.e2e
async def test_oversized_content_length_is_refused_before_the_body(server: CannedServer) -> None:
    server.response = ok_response(b"x" * 70000)
    with trio.fail_after(TEST_DEADLINE), pytest.raises(GWebCacheError, match="70000 bytes"):
        await fetch_hosts(server.url())


@pytest.mark.e2e
async def test_too_many_hosts_is_an_error(server: CannedServer) -> None:
    server.response = ok_response(b"".join(b"H|192.0.2.%d:6346|1\n" % i for i in range(1, 5)))
    with trio.fail_after(TEST_DEADLINE), pytest.raises(GWebCacheError, match="more than 3 hosts"):
        await fetch_hosts(server.url(), max_hosts=3)
    with trio.fail_after(TEST_DEADLINE):
        reply = await fetch_hosts(server.url(), max_hosts=4)
    assert len(reply.hosts) == 4


@pytest.mark.e2e
async def test_silent_server_times_out(server: CannedServer) -> None:
    server.hang = True
    with trio.fail_after(TEST_DEADLINE), pytest.raises(GWebCacheError, match="timed out"):
        await fetch_hosts(server.url(), timeout=0.5)


@pytest.mark.e2e
async def test_truncated_response_is_an_error(server: CannedServer) -> None:
    server.response = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nH|192.0.2.1:6346|1\n"
    with trio.fail_after(TEST_DEADLINE), pytest.raises(GWebCacheError):
        await fetch_hosts(server.url())


@pytest.mark.e2e
async def test_garbage_instead_of_http_is_an_error(server: CannedServer) -> None:
    server.response = b"GNUTELLA/0.6 200 OK\r\n\r\n"
    with trio.fail_after(TEST_DEADLINE), pytest.raises(GWebCacheError, match="bad HTTP response"):
        await fetch_hosts(server.url())


@pytest.mark.e2e
async def test_connection_refused_is_an_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with trio.fail_after(TEST_DEADLINE), pytest.raises(GWebCacheError, match="cannot connect"):
        await fetch_hosts(f"http://127.0.0.1:{port}/gwc.php")


@pytest.mark.e2e
async def test_https_is_refused() -> None:
    with (
        trio.fail_after(TEST_DEADLINE),
        pytest.raises(GWebCacheError, match="TLS is not supported"),
    ):
        await fetch_hosts("https://cache.example.com/gwc.php")


# --------------------------------------------------------------------------- URLs


def test_build_request_target_defaults() -> None:
    assert build_request_target("http://Cache.Example.com") == (
        "cache.example.com",
        80,
        f"/?get=1&net=gnutella&client=GRTR&version={__version__}",
    )


def test_build_request_target_ipv6_and_fragment() -> None:
    host, port, target = build_request_target("http://[2001:db8::1]:8080/g.php?x=a%20b#frag")
    assert (host, port) == ("2001:db8::1", 8080)
    assert target == f"/g.php?x=a%20b&get=1&net=gnutella&client=GRTR&version={__version__}"


def test_build_request_target_quotes_parameters() -> None:
    _, _, target = build_request_target("http://c.example/", client="A&B", version="1+2")
    assert target.endswith("client=A%26B&version=1%2B2")


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("https://c.example/", "TLS is not supported"),
        ("ftp://c.example/", "only http://"),
        ("c.example/gwc.php", "only http://"),
        ("http:///gwc.php", "host name"),
        ("http://c.example:0/", "out of range"),
        ("http://c.example:70000/", "bad cache URL"),
        ("http://c.example:port/", "bad cache URL"),
        ("http://user:pw@c.example/", "credentials"),
        ("http://c.example/a b", "printable ASCII"),
        ("http://c.example/\r\nX: y", "printable ASCII"),
        ("http://caché.example/", "printable ASCII"),
        ("http://[fe80::1%25eth0]/", "scoped IPv6"),
        ("http://[::1/", "bad cache URL"),
        ("http://c.example/" + "a" * 3000, "printable ASCII"),
        ("", "printable ASCII"),
    ],
)
def test_build_request_target_rejects(url: str, message: str) -> None:
    with pytest.raises(GWebCacheError, match=message):
        build_request_target(url)


@pytest.mark.e2e
def test_build_request_target_rejects_header_breaking_client() -> None:
    with pytest.raises(GWebCacheError, match="client"):
        build_request_target("http://c.example/", client="A\r\nB")


# --------------------------------------------------------------------------- parser


def test_parser_caps_hosts_and_counts_the_rest() -> None:
    body = b"".join(b"H|192.0.2.%d:6346|1\n" % i for i in range(1, 11))
    reply = parse_gwebcache_body(body, max_hosts=4)
    assert len(reply.hosts) == 4
    assert reply.skipped_lines == 6


def test_parser_drops_duplicates_and_cleans_info() -> None:
    body = b"H|192.0.2.1:6346|1\n192.0.2.1:6346\nI|pong|evil\x1b[31m name\nU|http://c/|1\nU|http://c/|2\n"
    reply = parse_gwebcache_body(body)
    assert reply.hosts == (("192.0.2.1", 6346),)
    assert reply.caches == ("http://c/",)
    assert reply.info == ("pong|evil?[31m name",)
    assert reply.skipped_lines == 0


_line = st.one_of(
    st.binary(max_size=40),
    st.builds(
        lambda a, b, port: f"H|192.0.{a}.{b}:{port}|1".encode(),
        st.integers(0, 300),
        st.integers(0, 300),
        st.integers(0, 70000),
    ),
    st.builds(
        lambda a, port: f"[2001:db8::{a:x}]:{port}".encode(), st.integers(0, 99), st.integers(1, 9)
    ),
    st.sampled_from([b"U|http://c.example/g.php|1", b"I|pong|x", b"ERROR", b"H|", b"|", b"\r"]),
)


@given(st.binary(max_size=2048), st.integers(0, 20))
def test_parser_never_raises_on_arbitrary_bytes(body: bytes, max_hosts: int) -> None:
    reply = parse_gwebcache_body(body, max_hosts=max_hosts)
    assert len(reply.hosts) <= max_hosts
    assert reply.skipped_lines <= body.count(b"\n") + 1


@given(st.lists(_line, max_size=60), st.sampled_from([b"\n", b"\r\n"]), st.integers(0, 20))
def test_parser_respects_the_cap_on_plausible_bodies(
    lines: list[bytes], separator: bytes, max_hosts: int
) -> None:
    reply = parse_gwebcache_body(separator.join(lines), max_hosts=max_hosts)
    assert len(reply.hosts) <= max_hosts
    assert len(set(reply.hosts)) == len(reply.hosts)
    assert all(1 <= port <= 65535 for _, port in reply.hosts)
