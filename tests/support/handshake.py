"""Drivers for the 0.6 handshake machines in tests: feeding them bytes in any
chunking, draining their events, and reading the failures they end in. Shared by the
handshake tests of ``tests/protocol/`` (``test_handshake*.py``)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence

import pytest

from protocol.errors import HandshakeError
from protocol.handshake import (
    NEED_DATA,
    Acceptor,
    HandshakeComplete,
    HandshakeEvent,
    HandshakeState,
    Initiator,
    router_headers,
)

S = HandshakeState
Machine = Acceptor | Initiator

# -- What the tests send ------------------------------------------------------------------

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
