"""One route-table entry as dumps show it.

Apart from :mod:`.route_table` because that module is compiled with mypyc where a
compiler is at hand (``hatch_build.py``), and an entry is made only for a dump, so it
loses nothing by staying interpreted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class RouteEntry:
    """One entry, as shown in dumps."""

    guid: bytes
    value: int
    """The connection id (or marker) replies are routed to."""
    recorded_at: float
    #: ``now - recorded_at`` for the ``now`` given to ``entries``.
    age: float
    generation: Literal["current", "previous"]
    #: TTL and hops of the message as it arrived, each capped at 15 (0 when not given).
    ttl: int = 0
    hops: int = 0
    #: Replies routed back through this entry so far (see ``note_hit``).
    hits: int = 0
