"""IPv4 addresses as Gnutella carries them: four bytes in network order.

One implementation for every codec, so the fast path and the construct declaration
accept exactly the same strings (canonical dotted quads: no leading zeros, which
``inet_aton`` would read as octal).
"""

from __future__ import annotations

import functools
import ipaddress

from .errors import LocalProtocolError


@functools.lru_cache(maxsize=4096)
def pack_ipv4(ip: str) -> bytes:
    """``"1.2.3.4"`` -> ``b"\\x01\\x02\\x03\\x04"``; cached, as routers repeat addresses."""
    try:
        return ipaddress.IPv4Address(ip).packed
    except ValueError as exc:
        raise LocalProtocolError(f"not an IPv4 address: {ip!r}") from exc


def unpack_ipv4(raw: bytes) -> str:
    """Four bytes in network order -> dotted quad."""
    return f"{raw[0]}.{raw[1]}.{raw[2]}.{raw[3]}"
