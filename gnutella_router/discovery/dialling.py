"""Whom to dial next: spread over tellers and networks, never in the cache's own order.

Theory of operation. The order a cache keeps its hosts in is the order its tellers
chose: a peer that sends fresh pongs all the time would have every "freshest first" dial
go to its hosts, however small its share of the cache. So :func:`choose` takes the
operator's hosts (seeds, ``ctl peers add``), the local ones and hosts that once accepted
a connection first, the most promising first, as a cache ordered by promise would; then
it takes the rest one teller at a time, the tellers in a random order drawn anew on each
call, each teller's most promising host first. In the first round a host is taken only
from a network (/16, IPv6 /32) no host chosen so far is in; if that leaves dials
unfilled, a second round takes any network. A teller with ten thousand hosts gets the
same turn as one with ten.

Whatever the round, two ports of one address are never dialled at once, and an address
the router is connected to or dialling (``busy``) is not dialled again: a cache holding
a victim's address on many ports must not make the router knock on them one after the
other. The operator's and local hosts are exempt, as they are from the cache's shares
(a test network on loopback has a hundred routers on one address).

Pure: the caller passes the eligible records (not in backoff, not excluded), the busy
addresses and a random source.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from gnutella_router.discovery.ranges import address_group

__all__ = ["Dialable", "choose"]


class Dialable(Protocol):
    """What the choice reads of a cached host: attributes, as the host cache's
    ``HostRecord`` (a plain dataclass, its only kind) holds them."""

    host: str
    port: int
    teller: str
    limited: bool
    last_connected: float | None


Record = TypeVar("Record", bound=Dialable)


def choose(
    records: Iterable[Record],
    busy: set[str],
    limit: int,
    rng: random.Random,
    promise: Callable[[Record], Any],
) -> list[tuple[str, int]]:
    """Up to ``limit`` of ``records`` to dial now; see the module docstring.

    ``promise`` sorts the most promising first (the host cache's ranking).
    """
    first: list[Record] = []
    by_teller: dict[str, list[Record]] = {}
    for record in records:
        if not record.limited or record.last_connected is not None:
            first.append(record)
        elif record.host not in busy:
            by_teller.setdefault(record.teller, []).append(record)
    chosen: list[tuple[str, int]] = []
    hosts_chosen = set(busy)
    groups_chosen: set[str] = set()

    def take(record: Record, *, diverse: bool) -> bool:
        if record.limited:
            group = address_group(record.host)
            if record.host in hosts_chosen or (diverse and group in groups_chosen):
                return False
            hosts_chosen.add(record.host)
            groups_chosen.add(group)
        chosen.append((record.host, record.port))
        return True

    for record in heapq.nsmallest(2 * limit + 8, first, key=promise):
        if len(chosen) >= limit:
            return chosen
        take(record, diverse=False)
    # Each teller can give at most `limit`, skipping at most one host per address
    # already chosen: its best 2 * limit + 8 are enough.
    queues = [
        heapq.nsmallest(2 * limit + 8, tellers_records, key=promise)
        for _, tellers_records in sorted(by_teller.items())
    ]
    rng.shuffle(queues)
    taken: set[tuple[str, int]] = set()
    for diverse in (True, False):
        cursors = [0] * len(queues)
        progress = True
        while progress and len(chosen) < limit:
            progress = False
            for index, queue in enumerate(queues):
                position = cursors[index]
                while position < len(queue):
                    record = queue[position]
                    position += 1
                    key = (record.host, record.port)
                    if key not in taken and take(record, diverse=diverse):
                        taken.add(key)
                        progress = True
                        break
                cursors[index] = position
                if len(chosen) >= limit:
                    return chosen
    return chosen
