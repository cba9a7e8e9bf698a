"""Property tests of the handshake machines: any bytes, and real handshakes
mutated, only ever end in a handshake error that can be answered to the peer.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import HandshakeError
from protocol.handshake import (
    Acceptor,
    ConnectRequest,
    HandshakeComplete,
    HandshakeRejected,
    HandshakeResponse,
    Initiator,
    format_refusal,
)
from protocol.headers import HandshakeLimits
from tests.support.gtk_vectors import GTKG_STEP1, GTKG_STEP2
from tests.support.handshake import OUR_HEADERS, Machine, S, assert_stays_failed, drain, split_at

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
