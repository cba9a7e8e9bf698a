"""Argument types shared by the commands: each refuses a nonsensical value in one line.

argparse turns an :class:`argparse.ArgumentTypeError` into ``PROG: error: argument
--FLAG: MESSAGE`` and exit status 2, which is what every command wants for a bad value.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
from collections.abc import Callable


def positive(text: str) -> float:
    """A finite number above zero."""
    value = _number(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive number")
    return value


def non_negative(text: str) -> float:
    """A finite number, zero or more."""
    value = _number(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number, 0 or more")
    return value


def count(low: int, high: int) -> Callable[[str], int]:
    """A whole number from ``low`` to ``high``."""

    def parse(text: str) -> int:
        if not text.isdigit() or not low <= int(text) <= high:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number {low} to {high}")
        return int(text)

    return parse


def loopback_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` on this machine: traffic tools never aim anywhere else."""
    host, colon, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not colon or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r}: expected HOST:PORT")
    if host != "localhost":
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise argparse.ArgumentTypeError(f"{text!r}: only loopback addresses are allowed")
    return host, int(port)


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number")
    return value
