"""Ending a stream politely: a refusal that reaches the peer, a close that never hangs.

Also the two small address helpers the server needs of a socket and of a host name.
"""

from __future__ import annotations

import contextlib
import ipaddress

import trio


async def send_and_close(stream: trio.SocketStream, data: bytes) -> None:
    """Send a refusal and close without losing it.

    Closing a socket that still has unread input makes the kernel send a reset, which
    can destroy the refusal before the peer reads it. So: send, shut our side down,
    drain briefly (bounded in time and bytes), then close.
    """
    with trio.move_on_after(1.0):
        try:
            await stream.send_all(data)
            await stream.send_eof()
            drained = 0
            while drained < 65536 and (chunk := await stream.receive_some(4096)):
                drained += len(chunk)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
    await close_quietly(stream)


async def close_quietly(stream: trio.SocketStream) -> None:
    """Close ``stream``, shielded, within half a second, whatever state it is in."""
    with (
        trio.CancelScope(shield=True),
        trio.move_on_after(0.5),
        contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError),
    ):
        await stream.aclose()


def sockname(address: object) -> tuple[str, int]:
    """A socket address as (host, port), whatever the family added to it."""
    assert isinstance(address, tuple)
    return str(address[0]), int(address[1])


def literal_ip(host: str) -> str | None:
    """``host`` as a canonical IP address, or None when it is a name."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None
