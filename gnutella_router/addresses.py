"""Addresses as operators write them: ``HOST:PORT`` in settings and flags.

This is the strict reader, for what a person types: it refuses with a reason that
says what to write instead. Addresses that peers send (``X-Try-Ultrapeers``,
``Listen-IP``) are read leniently by :mod:`protocol.capabilities`, which skips what it
cannot use instead of complaining.
"""

from __future__ import annotations

import ipaddress
import re

__all__ = ["AddressError", "is_loopback_host", "parse_host_port"]

_PORT = re.compile(r"[0-9]{1,5}")
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_HELP = "expected HOST:PORT, e.g. 127.0.0.1:6346, [::1]:6346 or localhost:6346"


class AddressError(ValueError):
    """Why a ``HOST:PORT`` text is refused, as a clause ending in what is expected."""


def parse_host_port(text: object, *, allow_port_zero: bool = True) -> tuple[str, int]:
    """Split ``"HOST:PORT"`` into a host and a port number.

    HOST is an IPv4 address, a bracketed IPv6 address (``[::1]:6346``) or a DNS name
    (``localhost``). IP addresses come back in canonical form, IPv6 without brackets.
    ``allow_port_zero`` admits port 0, which means "pick a free port" when listening.

    Raises:
        AddressError: for anything but a string, or a missing or bad host or port.
    """
    if not isinstance(text, str):
        raise AddressError(_HELP)
    if text.startswith("["):
        address, sep, port_text = text[1:].partition("]:")
        try:
            if not sep:
                raise ValueError
            host = str(ipaddress.IPv6Address(address))
        except ValueError:
            raise AddressError(f"bad bracketed IPv6 address; {_HELP}") from None
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise AddressError(f"missing :PORT; {_HELP}")
        if ":" in host:
            raise AddressError(f"write IPv6 addresses in brackets; {_HELP}")
        host = _checked_host(host)
    low = 0 if allow_port_zero else 1
    if not _PORT.fullmatch(port_text) or not low <= int(port_text) <= 65535:
        raise AddressError(f"the port must be a number from {low} to 65535")
    return host, int(port_text)


def _checked_host(host: str) -> str:
    if not host:
        raise AddressError(f"missing HOST; {_HELP}")
    labels = host.split(".")
    if labels[-1].isdigit():  # looks numeric, so it must be a real IPv4 address
        try:
            return str(ipaddress.IPv4Address(host))
        except ValueError:
            raise AddressError(f"bad IPv4 address; {_HELP}") from None
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise AddressError(f"bad host name; {_HELP}")
    return host


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (an address as :func:`parse_host_port` returns it, or a name)
    is this machine's loopback: 127.0.0.0/8, ::1, an IPv4-mapped loopback, localhost."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback
