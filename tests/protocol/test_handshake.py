"""The 0.6 handshake machines, fed the way a socket feeds them: in any chunking."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence

import pytest
from hypothesis import event as note_event
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from protocol.errors import HandshakeError, LocalProtocolError
from protocol.handshake import (
    MAX_TRY_HOSTS,
    NEED_DATA,
    Acceptor,
    Capabilities,
    ConnectRequest,
    HandshakeComplete,
    HandshakeEvent,
    HandshakeRejected,
    HandshakeResponse,
    HandshakeState,
    Initiator,
    busy_response_headers,
    format_refusal,
    parse_host_port,
    parse_try_hosts,
    router_headers,
)
from protocol.headers import HandshakeLimits, HeaderBlock
from tests.support.gtk_vectors import GTKG_STEP1, GTKG_STEP2, GTKG_UA

S = HandshakeState
Machine = Acceptor | Initiator

# -- Test vectors: what gtk-gnutella 1.2.3 sent on loopback -----------------------------

# A Ping (GUID, type 0, TTL 1, hops 0, empty payload): what follows a head on the wire.
PING = bytes(range(16)) + b"\x00\x01\x00\x00\x00\x00\x00"
OUR_HEADERS = router_headers(
    user_agent="TestRouter/0.1", listen=("127.0.0.1", 6346), remote_ip="127.0.0.1"
)

# -- Helpers ------------------------------------------------------------------------------


def drain(machine: Machine) -> list[HandshakeEvent]:
    """Every event available now, stopping where the application must act."""
    events: list[HandshakeEvent] = []
    while machine.state not in (S.DECIDING, S.CONFIRMING, S.COMPLETE, S.CLOSED, S.IDLE):
        event = machine.next_event()
        if event is NEED_DATA:
            break
        events.append(event)
    return events


class Endpoint:
    """A machine plus what an I/O layer does with its bytes after completion."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.events: list[HandshakeEvent] = []
        self.framer = bytearray()

    def deliver(self, chunk: bytes) -> None:
        if self.machine.state is S.COMPLETE:
            self.framer += chunk
            return
        self.machine.receive_data(chunk)
        self.collect()

    def collect(self) -> None:
        for event in drain(self.machine):
            self.events.append(event)
            if isinstance(event, HandshakeComplete):
                self.framer += event.trailing_data

    @property
    def complete(self) -> HandshakeComplete:
        (event,) = [e for e in self.events if isinstance(e, HandshakeComplete)]
        return event


Chunker = Callable[[bytes], Iterator[bytes]]


def whole(data: bytes) -> Iterator[bytes]:
    yield data


def bytewise(data: bytes) -> Iterator[bytes]:
    for i in range(len(data)):
        yield data[i : i + 1]


def split_at(cuts: Sequence[int]) -> Chunker:
    def chunker(data: bytes) -> Iterator[bytes]:
        points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
        for start, end in itertools.pairwise(points):
            yield data[start:end]

    return chunker


def send(endpoint: Endpoint, data: bytes, chunker: Chunker) -> None:
    for chunk in chunker(data):
        endpoint.deliver(chunk)


def acceptor_after(data: bytes) -> tuple[Acceptor, list[HandshakeEvent]]:
    acceptor = Acceptor()
    acceptor.receive_data(data)
    return acceptor, drain(acceptor)


def failure(machine: Machine, data: bytes, *, eof: bool = False) -> HandshakeError:
    """Feed ``data`` (and EOF) and return the HandshakeError it must cause."""

    def feed() -> None:
        machine.receive_data(data)
        drain(machine)
        if eof:
            machine.receive_data(b"")
            drain(machine)

    with pytest.raises(HandshakeError) as info:
        feed()
    assert machine.state is S.ERROR
    return info.value


def feed_until_refused(machine: Machine, chunks: Iterable[bytes]) -> tuple[HandshakeError, int]:
    """Feed ``chunks`` until one is refused: the error, and how many bytes went in before."""
    fed = 0
    for chunk in chunks:
        try:
            machine.receive_data(chunk)
        except HandshakeError as exc:
            return exc, fed
        fed += len(chunk)
    pytest.fail("the machine never refused the input")


def assert_stays_failed(machine: Machine, status: int) -> None:
    for _ in range(2):
        with pytest.raises(HandshakeError) as info:
            machine.receive_data(b"more")
        assert info.value.status_code == status
        with pytest.raises(HandshakeError) as info:
            machine.next_event()
        assert info.value.status_code == status
    assert machine.state is S.ERROR


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


# -- Hostile input ----------------------------------------------------------------------


def test_endless_headers_are_refused_at_the_limit() -> None:
    acceptor = Acceptor()
    acceptor.receive_data(b"GNUTELLA CONNECT/0.6\r\n")
    line = b"X-Junk: 1\r\n"
    error, fed = feed_until_refused(acceptor, [line] * 10_000)
    assert error.status_code == 413
    assert fed == HandshakeLimits().max_headers * len(line)  # refused on the 129th line
    assert_stays_failed(acceptor, 413)


def test_a_megabyte_line_is_refused_once_it_passes_the_limit() -> None:
    for prefix in (b"GNUTELLA CONNECT/0.6\r\nX-Long: ", b"GNUTELLA CONNECT/0.6"):
        acceptor = Acceptor()
        acceptor.receive_data(prefix)
        error, fed = feed_until_refused(acceptor, [b"a" * 1024] * 1024)
        assert error.status_code == 413
        assert fed < HandshakeLimits().max_line_length
        assert_stays_failed(acceptor, 413)


def test_a_line_is_refused_one_byte_past_the_limit() -> None:
    limits = HandshakeLimits(max_line_length=30)
    head = b"GNUTELLA CONNECT/0.6\r\n"
    acceptor = Acceptor(limits)
    acceptor.receive_data(head + b"X: " + b"a" * 27 + b"\r")  # 30 bytes and a CR
    acceptor.receive_data(b"\n\r\n")
    assert isinstance(acceptor.next_event(), ConnectRequest)
    acceptor = Acceptor(limits)
    acceptor.receive_data(head + b"X: " + b"a" * 28)  # 31: might still be 30 and a CR
    with pytest.raises(HandshakeError) as info:
        acceptor.receive_data(b"a")
    assert info.value.status_code == 413
    acceptor = Acceptor(limits)
    acceptor.receive_data(head + b"X: " + b"a" * 28)
    with pytest.raises(HandshakeError):
        acceptor.receive_data(b"\n")


def test_a_large_block_is_refused_before_it_ends() -> None:
    limits = HandshakeLimits(max_headers=10_000)
    acceptor = Acceptor(limits)
    acceptor.receive_data(b"GNUTELLA CONNECT/0.6\r\n")
    line = b"X-Filler: " + b"f" * 190 + b"\r\n"
    error, fed = feed_until_refused(acceptor, [line] * 1000)
    assert error.status_code == 413
    assert 22 + fed <= limits.max_block_size < 22 + fed + len(line)


@pytest.mark.parametrize(
    "state_after",
    ["request", "deciding", "response", "confirming"],
)
def test_a_peer_that_should_wait_cannot_make_us_buffer(state_after: str) -> None:
    flood = b"\x00" * 4096
    machine: Machine
    if state_after in ("request", "deciding"):
        machine = Acceptor()
        machine.receive_data(b"GNUTELLA CONNECT/0.6\r\n\r\n")
        if state_after == "deciding":
            assert isinstance(machine.next_event(), ConnectRequest)
    else:
        machine = Initiator()
        machine.start()
        machine.receive_data(b"GNUTELLA/0.6 200 OK\r\n\r\n")
        if state_after == "confirming":
            assert isinstance(machine.next_event(), HandshakeResponse)
    error, fed = feed_until_refused(machine, [flood] * 100)
    assert error.status_code == 413
    assert fed <= machine.limits.max_block_size
    assert_stays_failed(machine, 413)


def test_messages_after_the_last_head_are_not_limited() -> None:
    acceptor, _ = acceptor_after(b"GNUTELLA CONNECT/0.6\r\n\r\n")
    acceptor.accept()
    bulk = PING * 10_000
    acceptor.receive_data(b"GNUTELLA/0.6 200 OK\r\n\r\n" + bulk)
    acceptor.receive_data(bulk)
    assert isinstance(acceptor.next_event(), HandshakeResponse)
    complete = acceptor.next_event()
    assert isinstance(complete, HandshakeComplete)
    assert complete.trailing_data == bulk + bulk


def test_missing_crlf_then_eof() -> None:
    error = failure(Acceptor(), b"GNUTELLA CONNECT/0.6", eof=True)
    assert error.status_code == 400
    assert "closed" in error.reason


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS ClientHello
        b"\x00" * 64,
        b"\xff\xfe\xfd",
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\r\n\r\n",
        b"gnutella connect/0.6\r\n\r\n",
    ],
)
def test_garbage_is_refused_at_once(garbage: bytes) -> None:
    """Anything not starting with GNUTELLA is refused at the first byte that differs."""
    acceptor = Acceptor()
    error, fed = feed_until_refused(acceptor, bytewise(garbage))
    assert error.status_code == 400
    assert fed == (1 if garbage.startswith(b"G") else 0)
    assert_stays_failed(acceptor, 400)


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GNUTELLA CONNECT/0.6\r\nNo colon here\r\n\r\n",
        b"GNUTELLA CONNECT/0.6\r\n continuation first\r\n\r\n",
        b"GNUTELLA CONNECT/0.6 extra\r\n\r\n",
        b"GNUTELLA CONNECT/six\r\n\r\n",
        b"GNUTELLA CONNECT/0.6\r\nUser-Agent: a\x01b\r\n\r\n",
        b"GNUTELLA\x00CONNECT/0.6\r\n\r\n",
        b"GNUTELLA CONNECT/0.6\rX: 1\r\n\r\n",
        b"GNUTELLA OK\r\n\r\n",
        b"GNUTELLA/0.6 200 OK\r\n\r\n",
    ],
)
def test_malformed_requests_are_400(request_bytes: bytes) -> None:
    acceptor = Acceptor()
    assert failure(acceptor, request_bytes).status_code == 400
    assert_stays_failed(acceptor, 400)


@pytest.mark.parametrize(
    "status_line",
    [
        b"GNUTELLA/0.6 2000 OK",
        b"GNUTELLA/0.6 OK",
        b"GNUTELLA/0.6 099 Low",
        b"GNUTELLA 200 OK",
        b"HTTP/1.1 200 OK",
        b"GNUTELLA CONNECT/0.6",
    ],
)
def test_malformed_status_lines_are_400(status_line: bytes) -> None:
    initiator = Initiator()
    initiator.start()
    assert failure(initiator, status_line + b"\r\n\r\n").status_code == 400
    acceptor, _ = acceptor_after(b"GNUTELLA CONNECT/0.6\r\n\r\n")
    acceptor.accept()
    assert failure(acceptor, status_line + b"\r\n\r\n").status_code == 400


def test_eof_at_each_point_of_the_handshake() -> None:
    # Before step 1 is complete.
    acceptor = Acceptor()
    error = failure(acceptor, b"GNUTELLA CONNECT/0.6\r\nUser-Agent: x\r\n", eof=True)
    assert error.status_code == 400
    # While waiting for step 3.
    acceptor, _ = acceptor_after(b"GNUTELLA CONNECT/0.6\r\n\r\n")
    acceptor.accept()
    assert failure(acceptor, b"GNUTELLA/0.6 200", eof=True).status_code == 400
    # Closed while we decide: accepting is still possible, then the step 3 never comes.
    acceptor, _ = acceptor_after(b"GNUTELLA CONNECT/0.6\r\n\r\n")
    acceptor.receive_data(b"")
    acceptor.accept()
    with pytest.raises(HandshakeError):
        acceptor.next_event()
    assert_stays_failed(acceptor, 400)
    # The initiator waiting for step 2.
    initiator = Initiator()
    initiator.start()
    assert failure(initiator, b"", eof=True).status_code == 400
    # A complete head followed by EOF is still delivered.
    initiator = Initiator()
    initiator.start()
    initiator.receive_data(b"GNUTELLA/0.6 503 Busy\r\n\r\n")
    initiator.receive_data(b"")
    assert isinstance(initiator.next_event(), HandshakeRejected)


def test_bytes_after_eof_are_a_local_error() -> None:
    acceptor = Acceptor()
    acceptor.receive_data(b"GNUTELLA")
    acceptor.receive_data(b"")
    acceptor.receive_data(b"")
    with pytest.raises(LocalProtocolError):
        acceptor.receive_data(b" CONNECT/0.6\r\n\r\n")


def test_unknown_content_encoding_is_415() -> None:
    initiator = Initiator()
    initiator.start(OUR_HEADERS)
    error = failure(initiator, b"GNUTELLA/0.6 200 OK\r\nContent-Encoding: lz4\r\n\r\n")
    assert error.status_code == 415
    acceptor, _ = acceptor_after(b"GNUTELLA CONNECT/0.6\r\n\r\n")
    acceptor.accept()
    acceptor.receive_data(b"GNUTELLA/0.6 200 OK\r\nContent-Encoding: identity\r\n\r\n")
    *_, complete = drain(acceptor)
    assert isinstance(complete, HandshakeComplete)
    assert not complete.decompress_incoming


# -- Misuse -----------------------------------------------------------------------------


def test_calls_in_the_wrong_state_change_nothing() -> None:
    initiator = Initiator()
    acceptor = Acceptor()
    for call in (
        initiator.next_event,
        initiator.confirm,
        lambda: initiator.decline(503, "x"),
        lambda: initiator.receive_data(b"GNUTELLA/0.6 200 OK\r\n\r\n"),
        acceptor.accept,
        lambda: acceptor.reject(503, "x"),
    ):
        with pytest.raises(LocalProtocolError):
            call()
    assert {initiator.state} == {S.IDLE}
    assert {acceptor.state} == {S.READING_REQUEST}  # a set: mypy must not narrow the property
    with pytest.raises(LocalProtocolError):
        initiator.start(version="0.5")
    with pytest.raises(LocalProtocolError):
        initiator.start([("Content-Encoding", "deflate")])
    with pytest.raises(LocalProtocolError):
        initiator.start([("Bad\nName", "x")])
    assert {initiator.state} == {S.IDLE}
    acceptor.receive_data(initiator.start(OUR_HEADERS))
    with pytest.raises(LocalProtocolError):
        initiator.start()
    assert isinstance(acceptor.next_event(), ConnectRequest)
    with pytest.raises(LocalProtocolError):
        acceptor.next_event()
    with pytest.raises(LocalProtocolError):
        acceptor.accept([("Content-Encoding", "deflate")])
    with pytest.raises(LocalProtocolError):
        acceptor.reject(200, "OK")
    assert acceptor.state is S.DECIDING
    initiator.receive_data(acceptor.accept(OUR_HEADERS))
    with pytest.raises(LocalProtocolError):
        acceptor.accept()
    assert isinstance(initiator.next_event(), HandshakeResponse)
    with pytest.raises(LocalProtocolError):
        initiator.confirm([("X", "a\r\nb")])
    assert initiator.state is S.CONFIRMING
    acceptor.receive_data(initiator.confirm())
    assert isinstance(initiator.next_event(), HandshakeComplete)
    with pytest.raises(LocalProtocolError):
        initiator.decline(503, "late")


def test_after_an_error_actions_are_local_errors() -> None:
    acceptor = Acceptor()
    failure(acceptor, b"GNUTELLA CONNECT/9.9\r\n\r\n")
    with pytest.raises(LocalProtocolError):
        acceptor.accept()
    with pytest.raises(LocalProtocolError):
        acceptor.reject(503, "Busy")
    assert_stays_failed(acceptor, 505)


# -- Our own headers --------------------------------------------------------------------


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


# -- Fuzzing --------------------------------------------------------------------------------

FRAGMENTS = [
    b"GNUTELLA",
    b"GNUTELLA CONNECT/0.6\r\n",
    b"GNUTELLA CONNECT/0.4\n",
    b"GNUTELLA/0.6 200 OK\r\n",
    b"GNUTELLA/0.6 503 Busy\r\n",
    b"GNUTELLA OK\n",
    b" CONNECT/",
    b"0.6",
    b"9.9",
    b"\r\n",
    b"\n",
    b"\r",
    b":",
    b" ",
    b"\t",
    b"X-Try: 1.2.3.4:5,",
    b"Content-Encoding: ",
    b"Accept-Encoding: deflate\r\n",
    b"deflate",
    b"gzip",
    b"X-Degree: 99999999999999999999",
    b"\x00",
    b"\xff",
]
wire_soup = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.binary(max_size=8)), max_size=30).map(
    b"".join
)
small_limits = st.builds(
    HandshakeLimits,
    max_line_length=st.integers(1, 80),
    max_headers=st.integers(1, 6),
    max_block_size=st.integers(1, 300),
)


def push_through(machine: Machine, chunks: Sequence[bytes], eof: bool) -> None:
    """Feed the chunks like an application that accepts whatever it is offered."""
    for chunk in chunks:
        if machine.state is S.COMPLETE:
            return
        machine.receive_data(chunk)
        for event in drain(machine):
            assert isinstance(
                event, ConnectRequest | HandshakeResponse | HandshakeComplete | HandshakeRejected
            )
        if machine.state is S.DECIDING and isinstance(machine, Acceptor):
            machine.accept(OUR_HEADERS, deflate=True)
        if machine.state is S.CONFIRMING and isinstance(machine, Initiator):
            machine.confirm(deflate=True)
    if eof and machine.state is not S.COMPLETE:
        machine.receive_data(b"")
        drain(machine)


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    return list(split_at(cuts)(data))


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(wire_soup, st.binary(max_size=200)),
    st.lists(st.integers(0, 400), max_size=6),
    st.booleans(),
    st.one_of(st.none(), small_limits),
    st.booleans(),
)
def test_arbitrary_bytes_only_raise_handshake_errors(
    data: bytes,
    cuts: list[int],
    eof: bool,
    limits: HandshakeLimits | None,
    as_acceptor: bool,
) -> None:
    machine: Machine
    if as_acceptor:
        machine = Acceptor(limits)
    else:
        machine = Initiator(limits)
        machine.start(OUR_HEADERS, version="0.4" if eof and not cuts else "0.6")
    error: HandshakeError | None = None
    try:
        push_through(machine, chunked(data, cuts), eof)
    except HandshakeError as exc:
        error = exc
    if error is None:
        assert machine.state is not S.ERROR
    else:
        assert machine.state is S.ERROR
        assert 400 <= error.status_code <= 599
        assert_stays_failed(machine, error.status_code)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_mutated_real_handshakes_only_raise_handshake_errors(data: st.DataObject) -> None:
    original = data.draw(st.sampled_from([GTKG_STEP1, GTKG_STEP2]))
    mutated = bytearray(original)
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(mutated) - 1))
        action = data.draw(st.sampled_from(["flip", "insert", "delete"]))
        if action == "flip":
            mutated[position] = data.draw(st.integers(0, 255))
        elif action == "insert":
            mutated[position:position] = data.draw(st.sampled_from([b"\r", b"\n", b" ", b":"]))
        else:
            del mutated[position]
    machine: Machine
    if original is GTKG_STEP1:
        machine = Acceptor()
    else:
        machine = Initiator()
        machine.start(OUR_HEADERS)
    cuts = data.draw(st.lists(st.integers(0, len(mutated)), max_size=5))
    try:
        push_through(machine, chunked(bytes(mutated), cuts), eof=data.draw(st.booleans()))
    except HandshakeError:
        assert machine.state is S.ERROR


# -- Stateful: an honest initiator and acceptor, driven in any order -------------------------

ACCEPTOR_STATES = {
    S.READING_REQUEST,
    S.DECIDING,
    S.READING_CONFIRMATION,
    S.COMPLETING,
    S.COMPLETE,
    S.CLOSED,
    S.ERROR,
}
INITIATOR_STATES = {
    S.IDLE,
    S.READING_RESPONSE,
    S.CONFIRMING,
    S.COMPLETING,
    S.COMPLETE,
    S.CLOSED,
    S.ERROR,
}
ACCEPTOR_STORIES = (
    (ConnectRequest, HandshakeResponse, HandshakeComplete),
    (ConnectRequest, HandshakeRejected),
    (ConnectRequest, HandshakeComplete),  # 0.4
)
INITIATOR_STORIES = (
    (HandshakeResponse, HandshakeComplete),
    (HandshakeRejected,),
    (HandshakeComplete,),  # 0.4
)


class HandshakePair(RuleBasedStateMachine):
    """Both machines joined by two in-memory pipes; the rules play network and apps.

    Rules are always enabled and do nothing when their moment has not come, so that
    Hypothesis never has to hunt for an applicable rule.
    """

    def __init__(self) -> None:
        super().__init__()
        self.initiator = Endpoint(Initiator())
        self.acceptor = Endpoint(Acceptor())
        self.pipes = {"initiator": bytearray(), "acceptor": bytearray()}
        self.sent = {"initiator": bytearray(), "acceptor": bytearray()}
        self.may_close = False
        self.closed_towards: set[str] = set()
        self.errors: dict[str, int] = {"initiator": 0, "acceptor": 0}
        self.initiator_accepts = False
        self.acceptor_accepts = False
        self.acceptor_deflates: bool | None = None
        self.initiator_deflates: bool | None = None

    @property
    def i(self) -> Initiator:
        machine = self.initiator.machine
        assert isinstance(machine, Initiator)
        return machine

    @property
    def a(self) -> Acceptor:
        machine = self.acceptor.machine
        assert isinstance(machine, Acceptor)
        return machine

    def endpoint(self, side: str) -> Endpoint:
        return self.initiator if side == "initiator" else self.acceptor

    def guarded(self, side: str, action: Callable[[], None]) -> None:
        """Run ``action``; an honest exchange fails only after an injected close."""
        try:
            action()
        except HandshakeError:
            assert side in self.closed_towards, "an honest peer caused a HandshakeError"
            assert self.endpoint(side).machine.state is S.ERROR
            self.errors[side] += 1

    @initialize(
        version=st.sampled_from(["0.6", "0.6", "0.4"]),
        initiator_accepts=st.booleans(),
        acceptor_accepts=st.booleans(),
        may_close=st.sampled_from([False, False, True]),
    )
    def start(
        self, version: str, initiator_accepts: bool, acceptor_accepts: bool, may_close: bool
    ) -> None:
        self.initiator_accepts = initiator_accepts
        self.acceptor_accepts = acceptor_accepts
        self.may_close = may_close
        headers = router_headers(
            user_agent="I/1", listen=None, remote_ip=None, deflate=initiator_accepts
        )
        self.pipes["acceptor"] += self.i.start(headers, version)

    @rule(size=st.one_of(st.integers(1, 8), st.integers(1, 400)))
    def deliver_to_acceptor(self, size: int) -> None:
        self.deliver("acceptor", size)

    @rule(size=st.one_of(st.integers(1, 8), st.integers(1, 400)))
    def deliver_to_initiator(self, size: int) -> None:
        self.deliver("initiator", size)

    @rule()
    def deliver_everything(self) -> None:
        self.deliver("acceptor", len(self.pipes["acceptor"]))
        self.deliver("initiator", len(self.pipes["initiator"]))

    def deliver(self, side: str, size: int) -> None:
        """Some of the bytes in flight towards ``side`` arrive."""
        if side in self.closed_towards:
            return
        queue = self.pipes[side]
        chunk = bytes(queue[:size])
        del queue[:size]
        if chunk:  # b"" would mean end of stream
            self.guarded(side, lambda: self.endpoint(side).deliver(chunk))

    @rule(accept=st.booleans(), deflate=st.booleans(), code=st.sampled_from([204, 409, 503]))
    def acceptor_decides(self, accept: bool, deflate: bool, code: int) -> None:
        if self.a.state is not S.DECIDING:
            return
        if accept:
            headers = router_headers(
                user_agent="A/1", listen=None, remote_ip=None, deflate=self.acceptor_accepts
            )
            self.acceptor_deflates = deflate
            self.pipes["initiator"] += self.a.accept(headers, deflate=deflate)
            self.guarded("acceptor", self.acceptor.collect)
        else:
            hosts = busy_response_headers([("10.0.0.1", 6346)])
            self.pipes["initiator"] += self.a.reject(code, "No", hosts)

    @rule(confirm=st.booleans(), deflate=st.booleans())
    def initiator_decides(self, confirm: bool, deflate: bool) -> None:
        if self.i.state is not S.CONFIRMING:
            return
        if confirm:
            self.initiator_deflates = deflate
            step3 = self.i.confirm([("Private-Data", "5ef89a")], deflate=deflate)
            self.pipes["acceptor"] += step3
            self.guarded("initiator", self.initiator.collect)
        else:
            self.pipes["acceptor"] += self.i.decline(403, "Not today")

    @rule(side=st.sampled_from(["initiator", "acceptor"]), message=st.binary(min_size=1))
    def send_message(self, side: str, message: bytes) -> None:
        """Once its handshake is complete, a side's application sends a message."""
        if self.endpoint(side).machine.state is not S.COMPLETE:
            return
        other = "acceptor" if side == "initiator" else "initiator"
        self.pipes[other] += message
        self.sent[side] += message

    @rule(side=st.sampled_from(["initiator", "acceptor"]))
    def peer_closes(self, side: str) -> None:
        """The socket towards ``side`` closes: pending bytes arrive, then end of stream."""
        if not self.may_close or self.closed_towards:
            return
        queue = self.pipes[side]
        endpoint = self.endpoint(side)
        chunk = bytes(queue)
        queue.clear()
        if chunk:
            self.guarded(side, lambda: endpoint.deliver(chunk))
        self.closed_towards.add(side)
        if endpoint.machine.state is not S.COMPLETE:
            self.guarded(side, lambda: endpoint.deliver(b""))

    @rule(
        call=st.sampled_from(
            ["start", "confirm", "decline", "accept", "reject", "i.next", "a.next"]
        )
    )
    def call_out_of_turn(self, call: str) -> None:
        """Any call the state does not allow is refused and changes nothing."""
        legal = {
            "start": (self.i, S.IDLE),
            "confirm": (self.i, S.CONFIRMING),
            "decline": (self.i, S.CONFIRMING),
            "accept": (self.a, S.DECIDING),
            "reject": (self.a, S.DECIDING),
        }
        actions: dict[str, Callable[[], object]] = {
            "start": self.i.start,
            "confirm": self.i.confirm,
            "decline": lambda: self.i.decline(503, "x"),
            "accept": self.a.accept,
            "reject": lambda: self.a.reject(503, "x"),
            "i.next": self.i.next_event,
            "a.next": self.a.next_event,
        }
        if call in legal:
            machine, allowed = legal[call]
            if machine.state is allowed:
                return
        else:
            machine = self.i if call == "i.next" else self.a
            if machine.state not in (S.DECIDING, S.CONFIRMING, S.COMPLETE, S.CLOSED, S.IDLE):
                return
        before = (self.i.state, self.a.state)
        with pytest.raises(LocalProtocolError):
            actions[call]()
        assert (self.i.state, self.a.state) == before

    @invariant()
    def states_are_legal(self) -> None:
        assert self.i.state in INITIATOR_STATES
        assert self.a.state in ACCEPTOR_STATES

    @invariant()
    def events_tell_a_possible_story(self) -> None:
        for endpoint, stories in (
            (self.initiator, INITIATOR_STORIES),
            (self.acceptor, ACCEPTOR_STORIES),
        ):
            kinds = tuple(type(event) for event in endpoint.events)
            assert any(story[: len(kinds)] == kinds for story in stories), kinds

    @invariant()
    def terminal_states_produce_nothing(self) -> None:
        for machine in (self.i, self.a):
            if machine.state in (S.COMPLETE, S.CLOSED):
                with pytest.raises(LocalProtocolError):
                    machine.next_event()
            elif machine.state is S.ERROR:
                with pytest.raises(HandshakeError):
                    machine.next_event()
                with pytest.raises(HandshakeError):
                    machine.receive_data(b"x")

    @invariant()
    def outcomes_agree(self) -> None:
        states = {self.i.state, self.a.state}
        assert not {S.COMPLETE, S.CLOSED} <= states
        if self.i.state is S.COMPLETE and self.a.state is S.COMPLETE:
            i_done, a_done = self.initiator.complete, self.acceptor.complete
            assert i_done.legacy == a_done.legacy
            assert a_done.compress_outgoing == i_done.decompress_incoming
            assert i_done.compress_outgoing == a_done.decompress_incoming
            assert a_done.compress_outgoing == bool(
                self.acceptor_deflates and self.initiator_accepts and not a_done.legacy
            )
            assert i_done.compress_outgoing == bool(
                self.initiator_deflates and self.acceptor_accepts and not i_done.legacy
            )

    @invariant()
    def messages_arrive_in_order(self) -> None:
        assert self.sent["initiator"].startswith(self.acceptor.framer)
        assert self.sent["acceptor"].startswith(self.initiator.framer)

    def teardown(self) -> None:
        """Play the honest exchange out: it must end the same way on both sides."""
        note_event(f"before teardown: {self.i.state.name}, {self.a.state.name}")
        if self.closed_towards:
            note_event(f"closed towards {sorted(self.closed_towards)}, errors {self.errors}")
            return
        for _ in range(4):
            self.acceptor_decides(accept=True, deflate=True, code=503)
            self.initiator_decides(confirm=True, deflate=False)
            self.deliver("acceptor", len(self.pipes["acceptor"]) + 1)
            self.deliver("initiator", len(self.pipes["initiator"]) + 1)
        assert self.errors == {"initiator": 0, "acceptor": 0}
        assert (self.i.state, self.a.state) in (
            (S.COMPLETE, S.COMPLETE),
            (S.CLOSED, S.CLOSED),
        )
        assert bytes(self.acceptor.framer) == bytes(self.sent["initiator"])
        assert bytes(self.initiator.framer) == bytes(self.sent["acceptor"])


HandshakePair.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestHandshakePair = HandshakePair.TestCase


def test_small_api_details() -> None:
    assert repr(NEED_DATA) == "NEED_DATA"
    initiator = Initiator()
    initiator.start(version="0.4")
    assert initiator.legacy
    assert failure(initiator, b"GNUTELLA OK\nServer: x\n\n").status_code == 400
    with pytest.raises(LocalProtocolError):
        busy_response_headers([("10.0.0.1", 1)], limit=-1)
    assert Acceptor().next_event() is NEED_DATA


@settings(max_examples=100, deadline=None)
@given(st.one_of(wire_soup, st.binary(max_size=100)))
def test_an_acceptor_failure_can_always_be_answered(data: bytes) -> None:
    """The I/O layer answers a HandshakeError with its status and reason."""
    acceptor = Acceptor()
    try:
        push_through(acceptor, [data], eof=True)
    except HandshakeError as exc:
        error = exc
    else:
        return
    refusal = format_refusal(error.status_code, error.reason)
    assert refusal.startswith(f"GNUTELLA/0.6 {error.status_code} ".encode())


def test_reasons_quote_peer_text_in_ascii() -> None:
    error = failure(Acceptor(), "GNUTELLA CONNECT/zéro\r\n\r\n".encode("latin-1"))
    assert error.reason.isascii()
    assert format_refusal(error.status_code, error.reason).endswith(b"\r\n\r\n")


def test_live_since_is_written_as_gtk_gnutella_writes_it() -> None:
    headers = dict(router_headers(user_agent="R/1", listen=None, remote_ip=None, live_since=0.0))
    assert headers["X-Live-Since"] == "Thu, 01 Jan 1970 00:00:00 +0000"
    assert "X-Live-Since" not in dict(router_headers(user_agent="R/1", listen=None, remote_ip=None))
