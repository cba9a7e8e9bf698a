"""Driving the sans-IO handshake machines over a trio stream.

:mod:`protocol.handshake` never touches a socket: its machines take bytes and hand out
events, and :data:`~protocol.handshake.NEED_DATA` when they must hear more. This is the
one loop that feeds a machine from a stream until it has something to say; the server,
the load client, the echo stand-in, the benchmarks and the tests' scripted peers all
use it, so a peer that closes mid-handshake is handled the same way everywhere: the
machine is told (an empty read) and answers with an error of its own.

Deadlines are the caller's (``trio.fail_after`` or ``move_on_after`` around the call),
because what a deadline means differs: a refused peer, a failed dial, a test failure.
"""

from __future__ import annotations

import trio

from protocol.handshake import NEED_DATA, Acceptor, HandshakeEvent, Initiator

HANDSHAKE_READ_SIZE = 4096
"""Bytes per read while handshaking: a head is a few hundred bytes, and the machines
bound it anyway (see :class:`protocol.headers.HandshakeLimits`)."""


async def next_handshake_event(
    stream: trio.abc.ReceiveStream, machine: Acceptor | Initiator
) -> HandshakeEvent:
    """Feed ``machine`` from ``stream`` until it has an event; return that event.

    Raises:
        protocol.errors.HandshakeError: the peer sent a bad or oversized head, or closed
            the stream before the handshake ended.
        trio.BrokenResourceError, OSError: the stream broke.
    """
    while True:
        event = machine.next_event()
        if event is not NEED_DATA:
            assert not isinstance(event, type(NEED_DATA))
            return event
        machine.receive_data(bytes(await stream.receive_some(HANDSHAKE_READ_SIZE)))
