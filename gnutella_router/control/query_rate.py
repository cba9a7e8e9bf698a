"""How many queries one peer may send a second: a token bucket per untrusted peer.

A router forwards every query it takes to every other peer, so a single peer that sends
queries as fast as its link allows sets the pace for everyone: its copies fill the
other peers' outgoing queues, and under the threshold policy a neighbour that reads at
a normal pace is closed for being slower than the flood. gtk-gnutella throttles what
one node may make it forward; here each untrusted peer has a bucket of
``router.peer_query_burst`` queries, refilled at ``router.peer_query_rate`` a second,
and a query that finds it empty is dropped and counted (``source-over-rate``): the peer
whose traffic would congest the router loses, not its neighbours. Peers in the trusted
networks (``network.trusted``, loopback by default, as in a test network or a
benchmark) are not limited, nor is anyone with a rate of 0.

The run router asks once per stretch how many queries a peer may send now
(:meth:`QueryRate.allowance`) and says afterwards how many it routed
(:meth:`QueryRate.spend`): no call per query. Time is passed in, so tests drive it.
"""

from __future__ import annotations

from collections.abc import Callable

UNLIMITED = 1 << 62
"""The allowance of a peer with no limit."""


class _Bucket:
    __slots__ = ("at", "exempt", "tokens")

    def __init__(self, tokens: float, at: float, exempt: bool) -> None:
        self.tokens = tokens
        self.at = at
        self.exempt = exempt


class QueryRate:
    """A token bucket of queries per peer (see the module)."""

    def __init__(
        self, rate: float, burst: int, *, exempt: Callable[[int], bool] | None = None
    ) -> None:
        self.rate = rate
        self.burst = burst
        self._exempt = exempt
        self._buckets: dict[int, _Bucket] = {}

    def allowance(self, link_id: int, now: float) -> int:
        """How many queries the peer may still send at ``now``."""
        if not self.rate:
            return UNLIMITED
        bucket = self._buckets.get(link_id)
        if bucket is None:
            exempt = self._exempt is not None and self._exempt(link_id)
            bucket = self._buckets[link_id] = _Bucket(float(self.burst), now, exempt)
        if bucket.exempt:
            return UNLIMITED
        if now > bucket.at:
            bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at) * self.rate)
            bucket.at = now
        return int(bucket.tokens)

    def spend(self, link_id: int, queries: int) -> None:
        """The peer sent ``queries`` more that were routed."""
        bucket = self._buckets.get(link_id)
        if bucket is not None and not bucket.exempt:
            bucket.tokens -= queries

    def forget(self, alive: set[int]) -> None:
        """Drop the buckets of peers no longer connected."""
        self._buckets = {k: b for k, b in self._buckets.items() if k in alive}

    def __len__(self) -> int:
        return len(self._buckets)
