"""The 0.6 handshake machines, fed the way a socket feeds them: in any chunking."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import LocalProtocolError
from protocol.handshake import (
    MAX_TRY_HOSTS,
    NEED_DATA,
    Acceptor,
    Capabilities,
    ConnectRequest,
    HandshakeComplete,
    HandshakeRejected,
    HandshakeResponse,
    Initiator,
    busy_response_headers,
    format_refusal,
    parse_try_hosts,
    router_headers,
)
from protocol.headers import HeaderBlock
from tests.support.gtk_vectors import GTKG_STEP1, GTKG_STEP2, GTKG_UA
from tests.support.handshake import (
    OUR_HEADERS,
    PING,
    Chunker,
    Endpoint,
    S,
    acceptor_after,
    bytewise,
    drain,
    failure,
    send,
    split_at,
    whole,
)

# -- gtk-gnutella vectors -----------------------------------------------------------------


def test_gtk_gnutella_step2_reply_capabilities() -> None:
    initiator = Initiator()
    initiator.start(OUR_HEADERS)
    initiator.receive_data(GTKG_STEP2)
    (event,) = drain(initiator)
    assert isinstance(event, HandshakeResponse)
    assert (event.version, event.status_code, event.reason) == ("0.6", 200, "OK")
    assert event.headers.get("X-Live-Since") == "Sat, 21 Nov 2026 05:33:17 +0000"
    assert event.capabilities == Capabilities(
        user_agent=GTKG_UA,
        ultrapeer=True,
        ultrapeer_needed=True,
        bye_packet=True,
        ggep=True,
        pong_caching=True,
        vendor_messages=True,
        query_routing="0.1",
        ultrapeer_query_routing="0.1",
        dynamic_querying=True,
        max_ttl=4,
        degree=46,
        accepts_deflate=True,
        content_deflate=True,
        listen_address=None,
        remote_ip="127.0.0.1",
        guid=bytes.fromhex("142831024a0db6acd4bad81123a12da5"),
        try_hosts=(),
        features=(("sflag", "0.1"), ("HSEP", "0.2")),
    )
    initiator.confirm(deflate=True)
    done = initiator.next_event()
    assert isinstance(done, HandshakeComplete)
    assert done.decompress_incoming
    assert done.compress_outgoing
    assert done.peer == event.capabilities


def test_gtk_gnutella_step1_request_capabilities() -> None:
    acceptor, events = acceptor_after(GTKG_STEP1)
    (event,) = events
    assert event == ConnectRequest("0.6", HeaderBlock.parse(GTKG_STEP1.split(b"\r\n", 1)[1]))
    assert event.headers.get("X-Token") == "awEuNmWHNslmckFxN/k1pNO68O8j087dKkfk; Oq6lGFoy"
    assert event.capabilities == Capabilities(
        user_agent=GTKG_UA,
        ultrapeer=True,
        bye_packet=True,
        ggep=True,
        pong_caching=True,
        vendor_messages=True,
        query_routing="0.2",
        ultrapeer_query_routing="0.1",
        dynamic_querying=True,
        max_ttl=4,
        degree=46,
        accepts_deflate=True,
        listen_address=("127.0.0.1", 16347),
        remote_ip="127.0.0.1",
        guid=bytes.fromhex("87733102ae1fbac582dd3d4b2aa8f3bf"),
        features=(("sflag", "0.1"), ("HSEP", "0.2")),
    )
    assert acceptor.state is S.DECIDING


def test_gtk_gnutella_as_leaf_and_its_bare_step3() -> None:
    leaf_step1 = GTKG_STEP1.replace(b"X-Ultrapeer: True", b"X-Ultrapeer: False")
    leaf_step1 = leaf_step1.replace(b"X-Degree: 46", b"X-Degree: 32")
    leaf_step1 = leaf_step1.replace(b"X-Ext-Probes: 0.1\r\n", b"")
    acceptor, (request,) = acceptor_after(leaf_step1)
    assert isinstance(request, ConnectRequest)
    assert request.capabilities.ultrapeer is False
    assert request.capabilities.degree == 32
    step2 = acceptor.accept(OUR_HEADERS, deflate=True)
    assert b"Content-Encoding: deflate\r\n" in step2
    acceptor.receive_data(b"GNUTELLA/0.6 200 OK\r\nContent-Encoding: deflate\r\n\r\n" + PING)
    response, complete = drain(acceptor)
    assert isinstance(response, HandshakeResponse)
    assert isinstance(complete, HandshakeComplete)
    assert complete.compress_outgoing
    assert complete.decompress_incoming
    assert complete.trailing_data == PING
    assert complete.peer.ultrapeer is False
    assert complete.peer.listen_address == ("127.0.0.1", 16347)


@pytest.mark.parametrize(
    ("line", "code", "reason"),
    [
        (b"GNUTELLA/0.6 403 Normal nodes refused", 403, "Normal nodes refused"),
        (b"GNUTELLA/0.6 409 Already connected", 409, "Already connected"),
        (b"GNUTELLA/0.6 429 Banned for 5m 0s", 429, "Banned for 5m 0s"),
        (
            b"GNUTELLA/0.6 204 Shielded leaf node (4 peers max)",
            204,
            "Shielded leaf node (4 peers max)",
        ),
        (b"GNUTELLA/0.6 503", 503, ""),
    ],
)
def test_gtk_gnutella_refusals(line: bytes, code: int, reason: str) -> None:
    initiator = Initiator()
    initiator.start(OUR_HEADERS)
    initiator.receive_data(line + b"\r\nUser-Agent: x\r\n\r\n")
    (event,) = drain(initiator)
    assert event == HandshakeRejected(code, reason, HeaderBlock([("User-Agent", "x")]), ())
    assert initiator.state is S.CLOSED
    initiator.receive_data(b"ignored after the refusal")
    with pytest.raises(LocalProtocolError):
        initiator.next_event()


# -- Full exchanges -------------------------------------------------------------------------


def exchange(
    chunker: Chunker,
    *,
    initiator_accepts: bool = True,
    acceptor_accepts: bool = True,
    acceptor_deflates: bool = True,
    initiator_deflates: bool = True,
) -> tuple[Endpoint, Endpoint]:
    initiator = Endpoint(Initiator())
    acceptor = Endpoint(Acceptor())
    init_headers = router_headers(
        user_agent="A/1", listen=None, remote_ip=None, deflate=initiator_accepts
    )
    acc_headers = router_headers(
        user_agent="B/1", listen=None, remote_ip=None, deflate=acceptor_accepts
    )
    assert isinstance(initiator.machine, Initiator)
    assert isinstance(acceptor.machine, Acceptor)
    send(acceptor, initiator.machine.start(init_headers), chunker)
    assert [type(e) for e in acceptor.events] == [ConnectRequest]
    step2 = acceptor.machine.accept(acc_headers, deflate=acceptor_deflates)
    assert (b"Content-Encoding: deflate\r\n" in step2) == (acceptor_deflates and initiator_accepts)
    send(initiator, step2, chunker)
    assert [type(e) for e in initiator.events] == [HandshakeResponse]
    step3 = initiator.machine.confirm([("Private-Data", "a04fce")], deflate=initiator_deflates)
    assert (b"Content-Encoding: deflate\r\n" in step3) == (initiator_deflates and acceptor_accepts)
    initiator.collect()
    assert initiator.machine.state is S.COMPLETE
    # The initiator may send messages right behind its step 3.
    send(acceptor, step3 + PING + PING, chunker)
    assert [type(e) for e in acceptor.events] == [
        ConnectRequest,
        HandshakeResponse,
        HandshakeComplete,
    ]
    assert acceptor.machine.state is S.COMPLETE
    assert bytes(acceptor.framer) == PING + PING
    return initiator, acceptor


@pytest.mark.parametrize("chunker", [whole, bytewise], ids=["whole", "bytewise"])
@pytest.mark.parametrize("initiator_accepts", [True, False])
@pytest.mark.parametrize("acceptor_accepts", [True, False])
@pytest.mark.parametrize("deflate_param", [True, False])
def test_exchange_negotiates_deflate_per_direction(
    chunker: Chunker, initiator_accepts: bool, acceptor_accepts: bool, deflate_param: bool
) -> None:
    initiator, acceptor = exchange(
        chunker,
        initiator_accepts=initiator_accepts,
        acceptor_accepts=acceptor_accepts,
        acceptor_deflates=deflate_param,
        initiator_deflates=True,
    )
    i_done, a_done = initiator.complete, acceptor.complete
    # Acceptor -> initiator: only if the initiator accepts and the acceptor wants to.
    assert a_done.compress_outgoing == (initiator_accepts and deflate_param)
    assert i_done.decompress_incoming == a_done.compress_outgoing
    # Initiator -> acceptor: the initiator always wants to here.
    assert i_done.compress_outgoing == acceptor_accepts
    assert a_done.decompress_incoming == i_done.compress_outgoing
    assert not a_done.legacy
    assert not i_done.legacy
    assert a_done.peer.user_agent == "A/1"
    assert i_done.peer.user_agent == "B/1"
    assert a_done.peer.accepts_deflate == initiator_accepts


def test_whole_chunk_puts_messages_in_trailing_data() -> None:
    _, acceptor = exchange(whole)
    assert acceptor.complete.trailing_data == PING + PING


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2000), max_size=12), st.booleans())
def test_exchange_survives_any_chunking(cuts: list[int], deflate: bool) -> None:
    initiator, acceptor = exchange(split_at(cuts), acceptor_deflates=deflate)
    assert initiator.complete.decompress_incoming == deflate
    assert acceptor.complete.compress_outgoing == deflate


def test_step3_headers_override_step1_for_the_peer_capabilities() -> None:
    acceptor, _ = acceptor_after(GTKG_STEP1)
    acceptor.accept(OUR_HEADERS)
    acceptor.receive_data(b"GNUTELLA/0.6 200 OK\r\nX-Ultrapeer: False\r\n\r\n")
    response, complete = drain(acceptor)
    assert isinstance(response, HandshakeResponse)
    assert response.headers.items() == (("X-Ultrapeer", "False"),)
    assert isinstance(complete, HandshakeComplete)
    assert complete.peer.ultrapeer is False
    assert complete.peer.degree == 46
    assert not complete.decompress_incoming


def test_message_glued_to_step2_reaches_the_framer_after_confirm() -> None:
    """The acceptor should wait for step 3; if it does not, nothing is lost."""
    initiator = Initiator()
    initiator.start(OUR_HEADERS)
    initiator.receive_data(b"GNUTELLA/0.6 200 OK\r\nX-Ultrapeer: True\r\n\r\n" + PING)
    assert isinstance(initiator.next_event(), HandshakeResponse)
    with pytest.raises(LocalProtocolError):
        initiator.next_event()
    initiator.receive_data(PING)
    initiator.confirm()
    done = initiator.next_event()
    assert isinstance(done, HandshakeComplete)
    assert done.trailing_data == PING + PING
    with pytest.raises(LocalProtocolError):
        initiator.receive_data(PING)
    with pytest.raises(LocalProtocolError):
        initiator.next_event()


def test_higher_minor_version_is_treated_as_0_6() -> None:
    acceptor, (request,) = acceptor_after(b"GNUTELLA CONNECT/0.7\r\nX-Ultrapeer: True\r\n\r\n")
    assert request == ConnectRequest("0.7", HeaderBlock([("X-Ultrapeer", "True")]), False)
    assert acceptor.accept().startswith(b"GNUTELLA/0.6 200 OK\r\n")
    initiator = Initiator()
    initiator.start()
    initiator.receive_data(b"GNUTELLA/0.8 200 Fine\r\n\r\n")
    response = initiator.next_event()
    assert response == HandshakeResponse("0.8", 200, "Fine", HeaderBlock())


def test_acceptor_reads_bare_lf_lines() -> None:
    _, (request,) = acceptor_after(b"GNUTELLA CONNECT/0.6\nUser-Agent: old\n\n")
    assert isinstance(request, ConnectRequest)
    assert request.headers.get("User-Agent") == "old"


# -- Refusals ---------------------------------------------------------------------------


def test_busy_acceptor_refuses_with_try_hosts() -> None:
    acceptor, _ = acceptor_after(GTKG_STEP1)
    hosts = [("10.0.0.1", 6346), ("10.0.0.2", 6347), ("10.0.0.1", 6346), ("::1", 6348)]
    refusal = acceptor.reject(503, "Busy", busy_response_headers(hosts))
    assert refusal == (
        b"GNUTELLA/0.6 503 Busy\r\n"
        b"X-Try-Ultrapeers: 10.0.0.1:6346, 10.0.0.2:6347, [::1]:6348\r\n"
        b"\r\n"
    )
    assert acceptor.state is S.CLOSED
    with pytest.raises(LocalProtocolError):
        acceptor.accept()
    initiator = Initiator()
    initiator.start(OUR_HEADERS)
    initiator.receive_data(refusal)
    (event,) = drain(initiator)
    assert isinstance(event, HandshakeRejected)
    assert event.status_code == 503
    assert event.reason == "Busy"
    assert event.try_hosts == (("10.0.0.1", 6346), ("10.0.0.2", 6347), ("::1", 6348))


def test_initiator_declines_and_acceptor_sees_the_refusal() -> None:
    initiator = Initiator()
    acceptor = Acceptor()
    acceptor.receive_data(initiator.start(OUR_HEADERS))
    drain(acceptor)
    initiator.receive_data(acceptor.accept(OUR_HEADERS))
    drain(initiator)
    refusal = initiator.decline(403, "High Outdegree and Dynamic Querying Required")
    assert refusal == b"GNUTELLA/0.6 403 High Outdegree and Dynamic Querying Required\r\n\r\n"
    assert initiator.state is S.CLOSED
    acceptor.receive_data(refusal)
    (event,) = drain(acceptor)
    assert event == HandshakeRejected(
        403, "High Outdegree and Dynamic Querying Required", HeaderBlock(), ()
    )
    assert acceptor.state is S.CLOSED


def test_try_hosts_parsing_is_forgiving_and_capped() -> None:
    block = HeaderBlock.parse(
        b"X-Try:1.2.3.4:1234,3.4.5.6:3456,\r\n"
        b"X-Try: bogus, 999.1.1.1:1, 1.2.3.4:0, 1.2.3.4:70000, 0.0.0.0:5, 5.6.7.8\r\n"
        b"X-Try-Ultrapeers: 9.9.9.9:9 ,\r\n"
        b"  8.8.8.8:8, [2001:db8::1]:6346, [1.2.3.4]:5, 1.2.3.4:1234\r\n"
    )
    assert parse_try_hosts(block) == (
        ("9.9.9.9", 9),
        ("8.8.8.8", 8),
        ("2001:db8::1", 6346),
        ("1.2.3.4", 1234),
        ("3.4.5.6", 3456),
    )
    many = ",".join(f"10.0.{i // 256}.{i % 256}:6346" for i in range(500))
    assert len(parse_try_hosts(HeaderBlock([("X-Try", many)]))) == MAX_TRY_HOSTS


def test_busy_response_headers_limit() -> None:
    hosts = [(f"10.0.0.{i}", 6346) for i in range(1, 30)]
    ((name, value),) = busy_response_headers(hosts)
    assert name == "X-Try-Ultrapeers"
    assert len(value.split(", ")) == 10
    assert len(busy_response_headers(hosts, limit=3)[0][1].split(", ")) == 3
    assert busy_response_headers([]) == []
    with pytest.raises(LocalProtocolError):
        busy_response_headers([("not-an-ip", 1)])


@pytest.mark.parametrize(("code", "reason"), [(200, "OK"), (99, "x"), (1000, "x"), (503, "a\r\nb")])
def test_bad_refusals_are_local_errors(code: int, reason: str) -> None:
    with pytest.raises(LocalProtocolError):
        format_refusal(code, reason)


# -- Legacy 0.4 ---------------------------------------------------------------------------


@pytest.mark.parametrize("chunker", [whole, bytewise], ids=["whole", "bytewise"])
def test_legacy_0_4_both_ways(chunker: Chunker) -> None:
    initiator = Endpoint(Initiator())
    acceptor = Endpoint(Acceptor())
    assert isinstance(initiator.machine, Initiator)
    assert isinstance(acceptor.machine, Acceptor)
    request = initiator.machine.start(OUR_HEADERS, version="0.4")
    assert request == b"GNUTELLA CONNECT/0.4\n\n"
    send(acceptor, request, chunker)
    assert acceptor.events == [ConnectRequest("0.4", HeaderBlock(), True)]
    answer = acceptor.machine.accept(OUR_HEADERS, deflate=True)
    assert answer == b"GNUTELLA OK\n\n"
    acceptor.collect()
    assert acceptor.complete.legacy
    assert acceptor.complete.peer == Capabilities()
    assert not acceptor.complete.compress_outgoing
    send(initiator, answer + PING, chunker)
    assert initiator.complete.legacy
    assert not initiator.complete.decompress_incoming
    assert bytes(initiator.framer) == PING
    assert initiator.machine.state is S.COMPLETE


def test_legacy_request_with_headers_is_refused() -> None:
    error = failure(Acceptor(), b"GNUTELLA CONNECT/0.4\nUser-Agent: x\n\n")
    assert error.status_code == 400


def test_legacy_initiator_refused_by_a_modern_node() -> None:
    initiator = Initiator()
    initiator.start(version="0.4")
    initiator.receive_data(b"GNUTELLA/0.6 505 Protocol version not supported\r\n\r\n")
    event = initiator.next_event()
    assert isinstance(event, HandshakeRejected)
    assert event.status_code == 505
    initiator = Initiator()
    initiator.start(version="0.4")
    assert failure(initiator, b"GNUTELLA/0.6 200 OK\r\n\r\n").status_code == 400


@pytest.mark.parametrize("version", ["1.0", "0.5", "0.3", "2.6"])
def test_unsupported_versions_are_refused_with_505(version: str) -> None:
    error = failure(Acceptor(), f"GNUTELLA CONNECT/{version}\r\n\r\n".encode())
    assert error.status_code == 505
    initiator = Initiator()
    initiator.start()
    error = failure(initiator, f"GNUTELLA/{version} 200 OK\r\n\r\n".encode())
    assert error.status_code == 505


def test_small_api_details() -> None:
    assert repr(NEED_DATA) == "NEED_DATA"
    initiator = Initiator()
    initiator.start(version="0.4")
    assert initiator.legacy
    assert failure(initiator, b"GNUTELLA OK\nServer: x\n\n").status_code == 400
    with pytest.raises(LocalProtocolError):
        busy_response_headers([("10.0.0.1", 1)], limit=-1)
    assert Acceptor().next_event() is NEED_DATA


def test_reasons_quote_peer_text_in_ascii() -> None:
    error = failure(Acceptor(), "GNUTELLA CONNECT/zéro\r\n\r\n".encode("latin-1"))
    assert error.reason.isascii()
    assert format_refusal(error.status_code, error.reason).endswith(b"\r\n\r\n")


def test_live_since_is_written_as_gtk_gnutella_writes_it() -> None:
    headers = dict(router_headers(user_agent="R/1", listen=None, remote_ip=None, live_since=0.0))
    assert headers["X-Live-Since"] == "Thu, 01 Jan 1970 00:00:00 +0000"
    assert "X-Live-Since" not in dict(router_headers(user_agent="R/1", listen=None, remote_ip=None))
