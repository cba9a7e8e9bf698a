"""The host cache's file: one host a line, most promising first, read back forgivingly.

A line is ``host port source teller age_seconds failures`` (the first format had no
teller; such lines are read with :data:`CACHE_FILE` as their teller). The age is
relative to the save: a host read back counts as seen that long before the load.
Parsing is strict about
what a field may be (``int()`` alone would take ``+5``, ``5_0`` and non-ASCII digits) and
raises :class:`ValueError` for anything else, which the cache counts as ``bad-line``.
"""

from __future__ import annotations

import math

CACHE_FILE = "cache-file"
"""Source given to hosts read back from the file, and teller of first-format lines."""
FILE_HEADER = "# gnutella-router host cache v2: host port source teller age_seconds failures"
MAX_TELLER_LENGTH = 300


def ascii_int(text: str) -> int:
    """A plain non-negative decimal of at most 18 ASCII digits (else ValueError)."""
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise ValueError(text)
    return int(text)


def one_word(text: object, limit: int = MAX_TELLER_LENGTH) -> bool:
    """Whether ``text`` is one printable word of at most ``limit`` characters."""
    return (
        isinstance(text, str)
        and 0 < len(text) <= limit
        and text.isprintable()
        and len(text.split()) == 1
        and text == text.strip()
    )


def format_line(host: str, port: int, source: str, teller: str, age: float, failures: int) -> str:
    """One host's line (an age below zero, from a clock that went back, is written 0)."""
    return f"{host} {port} {source} {teller} {max(0.0, age):.3f} {failures}"


def parse_line(line: str) -> tuple[str, int, str, float, int]:
    """A non-comment line's host, port, teller, age and failures (the saved source is
    not kept: a host read back is the file's). Raises ValueError for a bad line."""
    fields = line.split()
    if len(fields) == 5:  # the first format: no teller
        fields.insert(3, CACHE_FILE)
    if len(fields) != 6 or not one_word(fields[3]):
        raise ValueError(line)
    host, port_text, _source, teller, age_text, failures_text = fields
    port = ascii_int(port_text)
    age = float(age_text)
    if not (math.isfinite(age) and age >= 0.0):
        raise ValueError(age_text)
    return host, port, teller, age, ascii_int(failures_text)
