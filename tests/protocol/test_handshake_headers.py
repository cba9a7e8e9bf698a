"""Handshake headers: the ones the router sends (checked against what gtk-gnutella
needs) and the capabilities read from odd ones, which fall back to defaults and never
raise.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import LocalProtocolError
from protocol.handshake import (
    MAX_TRY_HOSTS,
    Capabilities,
    parse_host_port,
    router_headers,
)
from protocol.headers import HeaderBlock


def test_router_headers_satisfy_gtk_gnutella() -> None:
    guid = bytes(range(16))
    headers = router_headers(
        user_agent="GnutellaRouter/0.1",
        listen=("192.0.2.7", 6346),
        remote_ip="198.51.100.1",
        guid=guid,
    )
    block = HeaderBlock(headers)
    caps = Capabilities.from_headers(block)
    assert caps.ultrapeer is True
    assert caps.degree >= 16
    assert caps.dynamic_querying
    assert caps.bye_packet
    assert caps.ggep
    assert caps.pong_caching
    assert caps.vendor_messages
    assert caps.query_routing == "0.2"
    assert caps.ultrapeer_query_routing == "0.1"
    assert caps.max_ttl == 4
    assert caps.accepts_deflate
    assert not caps.content_deflate
    assert caps.listen_address == ("192.0.2.7", 6346)
    assert caps.remote_ip == "198.51.100.1"
    assert caps.guid == guid
    assert caps.features == ()
    assert "X-Features" not in block
    assert not caps.user_agent or not caps.user_agent.lower().startswith("gtk-gnutella")
    no_deflate = HeaderBlock(
        router_headers(user_agent="R/1", listen=None, remote_ip=None, deflate=False)
    )
    assert "Accept-Encoding" not in no_deflate
    assert "Listen-IP" not in no_deflate
    assert "Remote-IP" not in no_deflate


@pytest.mark.parametrize(
    "kwargs",
    [
        {"user_agent": "gtk-gnutella/1.2.3"},
        {"user_agent": "GTK-Gnutella/1.2.3"},
        {"user_agent": ""},
        {"user_agent": "R/1", "degree": 15},
        {"user_agent": "R/1", "max_ttl": 0},
        {"user_agent": "R/1", "max_ttl": 16},
        {"user_agent": "R/1", "guid": b"short"},
        {"user_agent": "R/1", "listen": ("example.org", 6346)},
        {"user_agent": "R/1", "listen": ("1.2.3.4", 0)},
        {"user_agent": "R/1", "remote_ip": "nowhere"},
        {"user_agent": "R/1\r\nX-Injected: 1"},
    ],
)
def test_router_headers_refuse_bad_settings(kwargs: dict[str, object]) -> None:
    arguments: dict[str, object] = {"listen": None, "remote_ip": None, **kwargs}
    with pytest.raises(LocalProtocolError):
        router_headers(**arguments)  # type: ignore[arg-type]


# -- Capabilities from odd headers --------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "field", "expected"),
    [
        ([], "max_ttl", 7),
        ([], "degree", 8),
        ([("X-Max-TTL", "lots")], "max_ttl", 7),
        ([("X-Max-TTL", "0")], "max_ttl", 7),
        ([("X-Max-TTL", "+5")], "max_ttl", 7),
        ([("X-Max-TTL", "1_0")], "max_ttl", 7),
        ([("X-Max-TTL", " 5 ")], "max_ttl", 5),
        ([("X-Degree", "-3")], "degree", 8),
        ([("X-Degree", "99999999999")], "degree", 8),
        ([("X-Ultrapeer", "true")], "ultrapeer", True),
        ([("X-Ultrapeer", "FALSE")], "ultrapeer", False),
        ([("X-Ultrapeer", "maybe")], "ultrapeer", None),
        ([("Pong-Caching", "0.0")], "pong_caching", False),
        ([("Pong-Caching", "0.2")], "pong_caching", True),
        ([("Pong-Caching", "yes")], "pong_caching", False),
        ([("GUID", "xyz")], "guid", None),
        ([("GUID", "00" * 15)], "guid", None),
        ([("Remote-IP", "1.2.3")], "remote_ip", None),
        ([("Remote-IP", "::1")], "remote_ip", "::1"),
        ([("Listen-IP", "1.2.3.4")], "listen_address", None),
        ([("Listen-IP", "junk"), ("X-My-Address", "5.6.7.8:9")], "listen_address", ("5.6.7.8", 9)),
        ([("Listen-IP", "1.2.3.4:5, [::1]:6")], "listen_address", ("1.2.3.4", 5)),
        ([("Accept-Encoding", "gzip, Deflate;q=1")], "accepts_deflate", True),
        ([("Accept-Encoding", "deflated")], "accepts_deflate", False),
        ([("Content-Encoding", "DEFLATE")], "content_deflate", True),
        ([("X-Features", "sflag, /1, HSEP/0.2, a b/1, x/")], "features", (("HSEP", "0.2"),)),
        ([("Server", "BearShare 4.0")], "user_agent", "BearShare 4.0"),
        ([("User-Agent", "  ")], "user_agent", None),
        ([("X-Query-Routing", "")], "query_routing", None),
    ],
)
def test_odd_values_give_defaults(
    headers: list[tuple[str, str]], field: str, expected: object
) -> None:
    caps = Capabilities.from_headers(HeaderBlock(headers))
    assert getattr(caps, field) == expected


def test_parse_host_port() -> None:
    assert parse_host_port(" 1.2.3.4:6346 ") == ("1.2.3.4", 6346)
    assert parse_host_port("[::ffff:1.2.3.4]:1") == ("::ffff:102:304", 1)
    assert parse_host_port("::1:6346") is None
    assert parse_host_port("1.2.3.4:") is None
    assert parse_host_port("01.2.3.4:5") is None


header_text = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"),
    max_size=30,
)
known_names = st.sampled_from(
    [
        "User-Agent", "X-Ultrapeer", "X-Ultrapeer-Needed", "Pong-Caching", "X-Max-TTL",
        "X-Degree", "Accept-Encoding", "Content-Encoding", "Listen-IP", "X-My-Address",
        "Node", "Remote-IP", "GUID", "X-Try", "X-Try-Ultrapeers", "X-Features",
    ]
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(known_names, header_text), max_size=12))
def test_capabilities_never_raise(headers: list[tuple[str, str]]) -> None:
    caps = Capabilities.from_headers(HeaderBlock(headers))
    assert 1 <= caps.max_ttl <= 255
    assert caps.degree >= 1
    assert len(caps.try_hosts) <= MAX_TRY_HOSTS
    assert caps.guid is None or len(caps.guid) == 16
