"""Links the operator holds down: peers a router neither dials nor accepts for a while.

Dropping a connection is not enough to take a link down: the catcher's job is to keep
``min_connections`` outgoing connections, so it dials the peer again within seconds, and
the peer may dial back. A hold is the operator saying "not this peer, until I say so"
(the console's ``link A B down``): while an address is held, the catcher leaves it out
of its dials and the server answers its handshakes ``403``. Going *offline* holds every
peer at once (``node N down``): every connection is closed, no handshake is accepted and
nothing is dialled, while the process and its admin interface keep running, so the node
can be brought back (``node N up``).

A hold names a peer by the address it listens on (from its ``Listen-IP``, ``X-My-Address``
or ``Node`` header for an incoming peer, the address dialled for an outgoing one), which
is how routes, ``/connections`` and the console name peers; a peer that announces no
listening address is only held when it is dialled. Holds end at a deadline (``seconds``)
or when released, and the table is bounded: at most :data:`MAX_HOLDS` addresses, the
hold nearest its end giving way to a new one. Times are passed in, so this is plain,
clock-free code.
"""

from __future__ import annotations

import dataclasses
import math

__all__ = ["MAX_HOLDS", "MAX_HOLD_SECONDS", "Hold", "PeerHolds"]

MAX_HOLDS = 256
"""Addresses held at once; a new hold beyond it replaces the one that ends first."""
MAX_HOLD_SECONDS = 7 * 24 * 3600.0
"""Longest hold accepted (a week); an endless one is ``math.inf``."""


@dataclasses.dataclass(frozen=True, slots=True)
class Hold:
    """One held address and when its hold ends (``math.inf``: when released)."""

    address: tuple[str, int]
    until: float


class PeerHolds:
    """The held addresses and the offline switch of one router; see the module notes."""

    def __init__(self, capacity: int = MAX_HOLDS) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._until: dict[tuple[str, int], float] = {}
        self.offline = False
        """Every peer is held: nothing dialled, every handshake refused."""
        self.replaced = 0
        """Holds given up early because the table was full."""

    def hold(self, address: tuple[str, int], now: float, seconds: float = math.inf) -> None:
        """Hold ``address`` for ``seconds`` from ``now`` (until released by default).

        Raises:
            ValueError: ``seconds`` is not a positive number of at most
                :data:`MAX_HOLD_SECONDS` (or ``math.inf``).
        """
        if not (seconds > 0 and (seconds <= MAX_HOLD_SECONDS or seconds == math.inf)):
            raise ValueError(
                f"a hold lasts from 0 to {MAX_HOLD_SECONDS:g} seconds, or until released"
            )
        self._forget_ended(now)
        if address not in self._until and len(self._until) >= self.capacity:
            first_to_end = min(self._until, key=self._until.__getitem__)
            del self._until[first_to_end]
            self.replaced += 1
        self._until[address] = now + seconds

    def release(self, address: tuple[str, int]) -> bool:
        """End the hold on ``address``; whether there was one."""
        return self._until.pop(address, None) is not None

    def held(self, address: tuple[str, int] | None, now: float) -> bool:
        """Whether a peer listening at ``address`` is held at ``now`` (offline: every peer)."""
        if self.offline:
            return True
        if address is None:
            return False
        until = self._until.get(address)
        if until is None:
            return False
        if now >= until:
            del self._until[address]
            return False
        return True

    def addresses(self, now: float) -> set[tuple[str, int]]:
        """The addresses held at ``now`` (for the catcher to leave out of its dials)."""
        self._forget_ended(now)
        return set(self._until)

    def holds(self, now: float) -> list[Hold]:
        """The holds in force at ``now``, the first to end first."""
        self._forget_ended(now)
        return sorted(
            (Hold(address, until) for address, until in self._until.items()),
            key=lambda h: (h.until, h.address),
        )

    def __len__(self) -> int:
        return len(self._until)

    def _forget_ended(self, now: float) -> None:
        ended = [address for address, until in self._until.items() if now >= until]
        for address in ended:
            del self._until[address]
