"""The far side of a load test: a servent that answers what the router forwards to it.

Theory of operation
-------------------
In the SEDA experiments the router sits between Gnutella peers, and the replies it
carries back (pongs, query hits) are produced by peers answering the pings and queries
it broadcast. A load test needs those peers too: without them, the reverse path, with
its route-table lookups, is never exercised. :class:`Responder` is such a peer with no
I/O (sans-IO): hand it a :class:`~protocol.framing.Frame` that arrived, get back the
messages to send in reply. The load client owns the sockets; the same object can serve
a unit test, a replay or a simulation.

How it answers, following what a real servent does:

* a ping gets one pong with the ping's GUID, so routers route it back along the ping's
  path; TTL = the ping's hops + 1, which is exactly enough to reach the originator and no
  further, and hops 0. The pong advertises this responder's address and a fixed
  library size (a servent's library does not change from one pong to the next).
* a query gets one query hit with probability ``p_hit`` (most queries match nothing on
  most servents), with the query's GUID, TTL = hops + 2 (the usual margin in case the
  route back is a little longer, capped at the hard limit 15) and hops 0. Results are
  named after the query's words, so they look like matches; each has a size, an index
  and a SHA-1 URN, and the hit ends with an extended descriptor (EQHD) and this
  responder's servent GUID, the GUID pushes are routed by.
* everything else (pongs, hits and pushes addressed elsewhere, Byes, vendor messages)
  gets nothing.

Whether a query hits, and what the hit contains, is a function of the seed and the
query's GUID alone, not of a random stream consumed in arrival order. Arrival order
depends on the router under test (its scheduling, its drops), so a shared stream would
make the replies of two runs differ for reasons unrelated to the traffic;
keyed on the GUID, the same query always gets the same answer, and a load client can
ask :meth:`Responder.would_hit` to know which replies to expect.
"""

from __future__ import annotations

import base64
import hashlib
import random

from protocol.codec import encode_message
from protocol.constants import GUID_SIZE, HARD_TTL_LIMIT, MessageType
from protocol.errors import LocalProtocolError, MalformedPayloadError
from protocol.framing import Frame
from protocol.ggep import (
    GGEPBlock,
    daily_uptime_extension,
    ultrapeer_slots_extension,
    vendor_code_extension,
)
from protocol.ipv4 import pack_ipv4
from protocol.messages import (
    HugeExtension,
    Message,
    Pong,
    Query,
    QueryHit,
    QueryHitDescriptor,
    QueryHitResult,
    make_guid,
)

__all__ = ["RESPONDER_VENDOR", "Responder", "keep_alive_pong"]

RESPONDER_VENDOR = b"SYNT"
"""The vendor code in our pongs' VC and our hits' EQHD: a synthetic servent, so that
anyone reading a capture can tell these replies from a real client's."""

_PING = int(MessageType.PING)
_QUERY = int(MessageType.QUERY)
_NAME_LIMIT = 120
"""Longest file-name stem built from a query; real names are rarely longer."""
_FILE_TYPES = (b"mp3", b"ogg", b"flac", b"avi", b"pdf", b"zip", b"iso", b"txt")
_SPEEDS = (56, 1000, 10_000)
_EQHD_OPEN_DATA = bytes((0x1C, 0x01))
"""Flags that say "not busy, has not uploaded, speed not measured, not firewalled".

The first byte enables BUSY, UPLOADED and SPEED_MEASURED and holds the (clear) PUSH
value; the second enables PUSH and holds the other three values, all clear. See
:class:`protocol.messages.QueryHitFlag` for the byte order quirk.
"""


class Responder:
    """Answers pings with pongs, and queries with query hits with probability p_hit."""

    __slots__ = (
        "_key",
        "_pong",
        "_speed",
        "address",
        "answer_pings",
        "hits_sent",
        "max_results",
        "p_hit",
        "pings_answered",
        "queries_seen",
        "servent_guid",
    )

    def __init__(
        self,
        *,
        address: tuple[str, int],
        p_hit: float = 0.1,
        seed: int = 0,
        servent_guid: bytes | None = None,
        max_results: int = 3,
        answer_pings: bool = True,
    ) -> None:
        ip, port = address
        try:
            pack_ipv4(ip)  # fail now, not at the first reply
        except LocalProtocolError as exc:
            raise ValueError(f"responder address {ip!r} is not a dotted IPv4 address") from exc
        if not 0 <= port <= 0xFFFF:
            raise ValueError(f"port {port} is out of range")
        if not 0.0 <= p_hit <= 1.0:
            raise ValueError(f"p_hit must be a probability in [0, 1], got {p_hit!r}")
        if not 1 <= max_results <= 255:
            raise ValueError(f"max_results must be 1..255 (a one-byte count), got {max_results}")
        rng = random.Random(f"responder:{seed}")
        if servent_guid is None:
            servent_guid = make_guid(rng.randbytes(GUID_SIZE))
        elif len(servent_guid) != GUID_SIZE:
            raise ValueError(f"a servent GUID is {GUID_SIZE} bytes, got {len(servent_guid)}")
        self.address = (ip, port)
        self.answer_pings = answer_pings
        """False: pings go unanswered, so that no pong advertises this made-up address
        into the host caches of a network whose hosts are all real."""
        self.p_hit = float(p_hit)
        self.max_results = max_results
        self.servent_guid = bytes(servent_guid)
        self._key = hashlib.sha256(f"responder-key:{seed}".encode()).digest()[:16]
        self._speed = rng.choice(_SPEEDS)
        # The library, and so the pong, stays the same for the responder's lifetime.
        self._pong = Pong(
            port=port,
            ip=ip,
            files=rng.randint(10, 5000),
            kbytes=rng.randint(10_000, 20_000_000),
            ggep=GGEPBlock(
                (
                    vendor_code_extension(RESPONDER_VENDOR.decode("ascii"), 0x01),
                    ultrapeer_slots_extension(1, rng.randint(0, 30), rng.randint(0, 10)),
                    daily_uptime_extension(rng.randint(3_600, 86_400)),
                )
            ),
        )
        self.pings_answered = 0
        self.queries_seen = 0
        self.hits_sent = 0

    @property
    def pong(self) -> Pong:
        """The pong payload this responder sends for every ping."""
        return self._pong

    def _fate(self, guid: bytes) -> int:
        """64 bits that depend only on this responder's seed and the GUID."""
        digest = hashlib.blake2b(guid, digest_size=8, key=self._key).digest()
        return int.from_bytes(digest, "big")

    def would_hit(self, guid: bytes) -> bool:
        """Whether a query with this GUID gets a hit from this responder."""
        return self._fate(guid) < self.p_hit * 2.0**64

    def respond(self, frame: Frame) -> list[Message]:
        """The replies to one arriving message, possibly none.

        A query whose payload does not parse is ignored, as a servent would drop it; a
        ping is answered without looking at its payload (any GGEP it carries asks for
        extras a pong may omit).
        """
        message_type = frame.payload_type
        if message_type == _PING:
            if not self.answer_pings:
                return []
            self.pings_answered += 1
            ttl = min(frame.hops + 1, HARD_TTL_LIMIT)
            return [Message(frame.guid, ttl, 0, self._pong)]
        if message_type != _QUERY:
            return []
        self.queries_seen += 1
        fate = self._fate(frame.guid)
        if fate >= self.p_hit * 2.0**64:
            return []
        try:
            query = frame.payload_record()
        except MalformedPayloadError:
            return []
        assert isinstance(query, Query)
        hit = self._hit(query.search, random.Random(fate))
        self.hits_sent += 1
        ttl = min(frame.hops + 2, HARD_TTL_LIMIT)
        return [Message(frame.guid, ttl, 0, hit)]

    def _hit(self, search: bytes, rng: random.Random) -> QueryHit:
        stem = b"_".join(search.split())[:_NAME_LIMIT] or b"file"
        results = []
        for number in range(1, rng.randint(1, self.max_results) + 1):
            digest = base64.b32encode(rng.randbytes(20))
            name = b"%s_%02d.%s" % (stem, number, rng.choice(_FILE_TYPES))
            results.append(
                QueryHitResult(
                    file_index=rng.randrange(1 << 16),
                    file_size=rng.randint(100_000, 50_000_000),
                    name=name,
                    extensions=(HugeExtension(b"urn:sha1:" + digest),),
                )
            )
        ip, port = self.address
        return QueryHit(
            port=port,
            ip=ip,
            speed=self._speed,
            results=tuple(results),
            servent_guid=self.servent_guid,
            descriptor=QueryHitDescriptor(RESPONDER_VENDOR, _EQHD_OPEN_DATA),
        )

    def __repr__(self) -> str:
        ip, port = self.address
        return f"Responder({ip}:{port}, p_hit={self.p_hit:g}, guid={self.servent_guid.hex()})"


_NO_ADDRESS = Pong(port=0, ip="0.0.0.0")


def keep_alive_pong(frame: Frame) -> bytes | None:
    """The pong (encoded) that answers a neighbour's own ping, or None for anything else.

    A ping with hops 0 was sent by the neighbour itself: a router's keep-alive or
    discovery ping. Every servent answers it, and routers close a neighbour that never
    says anything (gtk-gnutella, and gnutella-router after ``network.idle_timeout``),
    so the load client's sinks, its leaves and a replay's peers answer it too, even
    those that answer nothing else. They have no address of their own to offer: the
    pong names port 0, which a router neither caches nor hands on.
    """
    if frame.payload_type != _PING or frame.hops != 0:
        return None
    return encode_message(Message(frame.guid, 1, 0, _NO_ADDRESS))
