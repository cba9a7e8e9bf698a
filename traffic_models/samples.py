"""Realistic sample messages, drawn reproducibly from a seeded random source.

The shapes follow what real servents send (see the interop notes): gtk-gnutella-like
pongs carrying VC/UP/DU GGEP, empty keep-alive pings and SCP pings, modern-flag queries
with a few words and sometimes a SHA-1 URN, query hits with one to five results and an
EQHD trailer, and 26-byte pushes. They feed the protocol benchmark and the sample
capture, and :mod:`traffic_models.generator` encodes pools of them for its injected
replies.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping

from protocol.constants import MessageType
from protocol.ggep import (
    GGEPBlock,
    GGEPExtension,
    daily_uptime_extension,
    ultrapeer_slots_extension,
    vendor_code_extension,
)
from protocol.messages import (
    HugeExtension,
    Message,
    Payload,
    Ping,
    Pong,
    Push,
    Query,
    QueryFlags,
    QueryHit,
    QueryHitDescriptor,
    QueryHitResult,
    make_guid,
)

from .mix import TRACE_LIKE_MIX as _TRACE_MIX

TRACE_LIKE_MIX: Mapping[int, float] = _TRACE_MIX.weights
"""The weights of :data:`traffic_models.mix.TRACE_LIKE_MIX`, kept here as a plain mapping
for the scripts that read it: pongs are more than half of real traffic (the SEDA
proposal's 37-hour trace), then pings, queries, query hits and a few pushes."""

_WORDS = (
    "live",
    "concert",
    "remix",
    "album",
    "2001",
    "linux",
    "iso",
    "manual",
    "jazz",
    "piano",
    "lecture",
    "notes",
    "mp3",
    "ogg",
    "flac",
    "video",
    "demo",
    "gnutella",
    "router",
    "seda",
    "trio",
    "overlay",
    "paper",
    "draft",
    "holiday",
    "photos",
)


class SampleFactory:
    """Draws sample payloads and messages; the same seed gives the same sequence."""

    def __init__(self, seed: int = 0) -> None:
        self.random = random.Random(seed)

    def guid(self) -> bytes:
        return make_guid(self.random.randbytes(16))

    def ip(self) -> str:
        r = self.random
        return f"{r.randint(1, 223)}.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(1, 254)}"

    def ping(self) -> Ping:
        if self.random.random() < 0.2:
            return Ping(GGEPBlock((GGEPExtension("SCP", b"\x01"),)))
        return Ping()

    def pong(self) -> Pong:
        r = self.random
        ggep = GGEPBlock(
            (
                vendor_code_extension("GTKG", 0x12),
                ultrapeer_slots_extension(1, r.randint(0, 30), r.randint(0, 10)),
                daily_uptime_extension(r.randint(0, 86_400)),
            )
        )
        return Pong(
            port=r.choice((6346, 6347, r.randint(1024, 65535))),
            ip=self.ip(),
            files=r.randint(0, 5000),
            kbytes=r.randint(0, 20_000_000),
            ggep=ggep if r.random() < 0.7 else None,
        )

    def words(self, low: int = 1, high: int = 4) -> bytes:
        return " ".join(self.random.choices(_WORDS, k=self.random.randint(low, high))).encode()

    def urn(self) -> HugeExtension:
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
        digest = "".join(self.random.choices(alphabet, k=32))
        return HugeExtension(f"urn:sha1:{digest}".encode())

    def query(self) -> Query:
        extensions = (self.urn(),) if self.random.random() < 0.1 else ()
        return Query(self.words(), int(QueryFlags.MARKER | QueryFlags.GGEP_H), extensions)

    def query_hit(self) -> QueryHit:
        r = self.random
        results = tuple(
            QueryHitResult(
                file_index=r.randint(0, 10_000),
                file_size=r.randint(1_000, 50_000_000),
                name=self.words(2, 5).replace(b" ", b"_") + b".mp3",
                extensions=(self.urn(),),
            )
            for _ in range(r.randint(1, 5))
        )
        return QueryHit(
            port=6346,
            ip=self.ip(),
            speed=r.choice((16, 56, 1000, 10_000)),
            results=results,
            servent_guid=self.guid(),
            descriptor=QueryHitDescriptor(b"GTKG", b"\x0c\x01"),
        )

    def push(self) -> Push:
        return Push(self.guid(), self.random.randint(0, 10_000), self.ip(), 6346)

    def payload(self, message_type: int) -> Payload:
        makers: dict[int, Callable[[], Payload]] = {
            MessageType.PING: self.ping,
            MessageType.PONG: self.pong,
            MessageType.QUERY: self.query,
            MessageType.QUERY_HIT: self.query_hit,
            MessageType.PUSH: self.push,
        }
        return makers[message_type]()

    def messages(self, count: int, mix: Mapping[int, float] = TRACE_LIKE_MIX) -> list[Message]:
        """``count`` messages whose types follow ``mix`` (weights need not sum to 1)."""
        types = self.random.choices(list(mix), weights=list(mix.values()), k=count)
        out = []
        for message_type in types:
            ttl = self.random.randint(1, 7)
            hops = self.random.randint(0, 7 - ttl)
            out.append(Message(self.guid(), ttl, hops, self.payload(message_type)))
        return out
