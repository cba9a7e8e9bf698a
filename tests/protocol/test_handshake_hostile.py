"""The handshake machines against hostile or careless input: lines and blocks past
their limits, garbage, malformed request and status lines, end of stream at every
point, and calls made in the wrong state.
"""

from __future__ import annotations

import pytest

from protocol.errors import HandshakeError, LocalProtocolError
from protocol.handshake import (
    Acceptor,
    ConnectRequest,
    HandshakeComplete,
    HandshakeRejected,
    HandshakeResponse,
    Initiator,
)
from protocol.headers import HandshakeLimits
from tests.support.handshake import (
    OUR_HEADERS,
    PING,
    Machine,
    S,
    acceptor_after,
    assert_stays_failed,
    bytewise,
    drain,
    failure,
    feed_until_refused,
)


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
