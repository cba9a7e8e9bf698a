"""Reading one HTTP request head with h11, bounded: shared by the admin interface and the
GWebCache service, which both answer one request per connection."""

from __future__ import annotations

import math

import h11
import trio

READ_SIZE = 4096


async def read_request_head(
    stream: trio.SocketStream, conn: h11.Connection, limit: int, *, idle: float = math.inf
) -> h11.Request | None:
    """The request's head, or None when the client closed without sending one.

    Raises:
        h11.RemoteProtocolError: a malformed head, or one still incomplete after
            ``limit`` bytes (h11's own bound lets a head that completes within one
            read through, whatever its size).
        trio.TooSlowError: ``idle`` seconds passed without a byte from the client (a
            connection held open to take a slot sends nothing).
    """
    received = 0
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            if received >= limit:
                raise h11.RemoteProtocolError("request head too large", error_status_hint=431)
            with trio.fail_after(idle):
                data = bytes(await stream.receive_some(READ_SIZE))
            received += len(data)
            conn.receive_data(data)
            continue
        if isinstance(event, h11.Request):
            return event
        return None
