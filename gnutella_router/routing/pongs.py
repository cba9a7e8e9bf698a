"""Pongs the router sends of its own: about itself, from its cache, about its neighbours.

Every ping is answered with our own pong (:class:`OwnPong`): plain to a peer that did
not announce GGEP, with GGEP "VC" (who we are) and "DU" (uptime, up to a day, as
gtk-gnutella caps it) to one that did. Files and kilobytes are 0: a router shares
nothing. "UP" (free slots) is left out: its first byte announces the QRP version of
the ultrapeer, which a peer would then expect in our pongs' other fields.

A peer that announced ``Pong-Caching`` (and every leaf) is answered from the cache
(:class:`PongCache`: recent pongs that crossed the router, by host) instead of a
broadcast, at most once a second per peer; when the cache is short, pongs for our
neighbours whose listening address we know fill the answer up, as gtk-gnutella answers
a TTL 2 ping.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence

from gnutella_router import __version__
from gnutella_router.routing.link import Link
from protocol.codec import build_payload
from protocol.errors import LocalProtocolError
from protocol.ggep import GGEPBlock, daily_uptime_extension, vendor_code_extension
from protocol.ipv4 import pack_ipv4
from protocol.messages import Pong

OWN_PONG_REFRESH = 10.0
"""Seconds between rebuilds of our own pong (its uptime grows)."""
VENDOR_CODE = "GRTR"
"""Our four-letter vendor code, in pongs' "VC"."""
VENDOR_VERSION = int(__version__.split(".")[0]) << 4 | int(__version__.split(".")[1])
"""Major version in the high nibble, minor in the low one, as "VC" readers expect."""
CACHE_ANSWER_INTERVAL = 1.0
"""A peer's pings are answered from the cache at most this often."""


class PongCache:
    """Recent pongs by host, for answering pings from peers that asked for caching.

    Bounded (oldest host out first) and short-lived: gtk-gnutella keeps pongs 20 s.
    """

    def __init__(self, capacity: int, lifetime: float) -> None:
        self.capacity = capacity
        self.lifetime = lifetime
        self._pongs: collections.OrderedDict[tuple[str, int], tuple[bytes, int, float]] = (
            collections.OrderedDict()
        )

    def __len__(self) -> int:
        return len(self._pongs)

    def add(self, host: str, port: int, payload: bytes, hops: int, now: float) -> None:
        key = (host, port)
        self._pongs.pop(key, None)
        self._pongs[key] = (payload, hops, now)
        while len(self._pongs) > self.capacity:
            self._pongs.popitem(last=False)

    def recent(
        self, limit: int, now: float, exclude: tuple[str, int] | None
    ) -> list[tuple[bytes, int]]:
        """Up to ``limit`` unexpired pongs, newest first, skipping the asker's own."""
        out: list[tuple[bytes, int]] = []
        oldest = now - self.lifetime
        for key in reversed(self._pongs):
            payload, hops, seen = self._pongs[key]
            if seen < oldest:
                break
            if key != exclude:
                out.append((payload, hops))
                if len(out) >= limit:
                    break
        return out


class OwnPong:
    """Our pong's payloads, rebuilt every :data:`OWN_PONG_REFRESH` seconds.

    Built when first needed: the advertised address is fixed once the server listens,
    and pings only arrive after that.
    """

    def __init__(self, own_address: Callable[[], tuple[str, int]], started_at: float) -> None:
        self._own_address = own_address
        self._started_at = started_at
        self._plain = b""
        self._ggep = b""
        self._built_at = -OWN_PONG_REFRESH

    def payload(self, ggep: bool, now: float) -> bytes:
        if now - self._built_at >= OWN_PONG_REFRESH:
            self._build(now)
        return self._ggep if ggep else self._plain

    def _build(self, now: float) -> None:
        host, port = self._own_address()
        try:
            pack_ipv4(host)
        except LocalProtocolError:
            host = "0.0.0.0"  # an IPv6 or named address has no place in a pong
        uptime = min(int(now - self._started_at), 86_400)
        block = GGEPBlock(
            (vendor_code_extension(VENDOR_CODE, VENDOR_VERSION), daily_uptime_extension(uptime))
        )
        self._plain = build_payload(Pong(port=port, ip=host))
        self._ggep = build_payload(Pong(port=port, ip=host, ggep=block))
        self._built_at = now


class CachedAnswers:
    """The pongs a caching peer's ping gets instead of a broadcast."""

    def __init__(self, cache: PongCache, per_ping: int) -> None:
        self.cache = cache
        self.per_ping = per_ping
        self._answered: dict[int, float] = {}
        """When each link's ping was last answered from the cache; pruned to the live."""

    def would_be_due(self, link_id: int, now: float) -> bool:
        """Whether :meth:`due` would answer True now, without noting anything: the run
        router answers a run's pings in bulk unless a cached answer falls among them."""
        return now - self._answered.get(link_id, -1e9) >= CACHE_ANSWER_INTERVAL

    def due(self, link_id: int, now: float, links: Sequence[Link]) -> bool:
        """Whether a link's ping may be answered from the cache now (then noted)."""
        if not self.would_be_due(link_id, now):
            return False
        answered = self._answered
        answered[link_id] = now
        if len(answered) > 64 + 2 * len(links):
            alive = {link.id for link in links}
            self._answered = {k: t for k, t in answered.items() if k in alive}
        return True

    def answers(self, asker: Link, now: float, links: Sequence[Link]) -> list[tuple[bytes, int]]:
        """Up to ``per_ping`` (payload, hops) pairs: cached pongs first, then our
        neighbours'. The cache only holds pongs that crossed this router, which is
        nothing on a young network; where our neighbours listen is always worth telling.
        """
        address = asker.listen_address
        answers = self.cache.recent(self.per_ping, now, address)
        for neighbour in links:
            if len(answers) >= self.per_ping:
                break
            listen = neighbour.listen_address
            if neighbour is asker or listen is None or listen == address:
                continue
            try:
                answers.append((build_payload(Pong(port=listen[1], ip=listen[0])), 0))
            except LocalProtocolError:
                continue  # an IPv6 neighbour cannot be described in a pong
        return answers
