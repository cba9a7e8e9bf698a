"""Opening listeners with errors that say which address failed, and what it was for.

A router opens two kinds of listener (its node port, its admin interface); "Address
already in use" alone does not tell an operator which one to change.
"""

from __future__ import annotations

import trio

from gnutella_router.net.connection import format_address


class ListenError(OSError):
    """A listener could not be opened; the message names the address and its role."""

    def __str__(self) -> str:
        return str(self.strerror)


async def open_listeners(host: str | None, port: int, *, role: str) -> list[trio.SocketListener]:
    """``trio.open_tcp_listeners``, with a :class:`ListenError` that names the address
    and ``role`` (e.g. "the node's listener, node.listen") when it fails."""
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        where = format_address(host or "*", port)
        raise ListenError(
            exc.errno, f"cannot listen on {where} ({role}): {exc.strerror or exc}"
        ) from exc
