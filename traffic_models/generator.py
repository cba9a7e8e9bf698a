"""The open-loop traffic source: encoded messages, each with the moment it is due.

Theory of operation
-------------------
A :class:`TrafficGenerator` joins three independent models: an arrival process says
*when* (:mod:`traffic_models.arrivals`), a mix says *which type*
(:mod:`traffic_models.mix`), and the content models say *what* (query words, TTL and
hops: :mod:`traffic_models.content`; reply shapes: :mod:`traffic_models.samples`).
:meth:`TrafficGenerator.schedule` yields :class:`Scheduled` messages in time order,
each already encoded, header and payload, so the sender's only job is to write the
bytes when they are due. The schedule is fixed by the parameters and the seed and is
computed without looking at the system under test (open loop: see
:mod:`traffic_models.arrivals` for why that matters). The arrival process has its own
random source, so the same generator seed gives the same messages in the same order
whatever the arrival process; only the times differ.

What each type carries:

* ping: empty (keep-alive style) or, one time in five, a GGEP "SCP" block asking for
  packed hosts, as modern servents send.
* query: modern flags (bit 15 set, GGEP "H" allowed; some firewalled, out-of-band or
  XML-wanting), one to four Zipf-drawn words, and now and then a SHA-1 URN extension.
* pong, query hit, push: drawn from a pool of payloads shaped like
  :class:`~traffic_models.samples.SampleFactory`'s (gtk-gnutella-like pongs with VC/UP/DU
  GGEP, hits of one to five results with an EQHD, 26-byte pushes). Injected replies only
  make sense in trace-like mixes; they answer nothing the router has routed, so a
  router drops most of them as unroutable, which is also the fate of a good part of
  real reply traffic.

GUIDs are fresh and unique within a schedule: ``guid_prefix`` (up to 8 bytes, so a load
client can recognise its own traffic), random bytes up to byte 7, the 0xFF mark of a
modern servent at byte 8, a 48-bit field at bytes 9-14 that is a bijection of the
message's sequence number (unique for 2**48 messages, yet random-looking), and the
reserved zero at byte 15.

Speed: the load client drives 30,000 messages/s from one core, so a message must cost
well under the 33 us it has. Everything that can be is built once: the encoded ping
payloads, the query flag words, the byte strings of the vocabulary and pools of encoded
pongs, hits and pushes (a hit is ~50 us to build with the declarative codec; with
a pool it costs what a pong costs). Per message remain one type draw, one TTL/hops
draw, a GUID, at most a few word draws, one ``struct`` pack and a concatenation.
Measured on one core of an AMD EPYC server (Python 3.11), consuming ``schedule(20)`` at
30,000 messages/s in a plain loop, arrival times included: 215,000-260,000 messages/s
with the paper mix and 195,000-220,000 with the trace mix (4-5 us a message), against a
target of 50,000. Building a generator takes 30-80 ms (the vocabulary and the reply
pools), once per run.
"""

from __future__ import annotations

import base64
import bisect
import dataclasses
import itertools
import random
import struct
from collections.abc import Callable, Iterator

from protocol.codec import build_payload
from protocol.constants import MessageType
from protocol.ggep import GGEPBlock, GGEPExtension
from protocol.header import HEADER_STRUCT
from protocol.messages import Payload, Ping, QueryFlags

from .arrivals import ArrivalProcess
from .content import HopsTtl, Vocabulary
from .mix import MessageMix, type_label
from .samples import SampleFactory

__all__ = ["Scheduled", "TrafficGenerator"]

MAX_GUID_PREFIX = 8
"""Bytes 0-7 are free; byte 8 carries the modern-servent mark."""

POOL_SIZES = {
    int(MessageType.PONG): 512,
    int(MessageType.PUSH): 256,
    int(MessageType.QUERY_HIT): 32,
}
"""Distinct encoded payloads per reply type: enough variety in sizes and contents for
the router's parsers, cheap to build once."""

SCP_PING_SHARE = 0.2
URN_QUERY_SHARE = 0.05

_QUERY_FLAGS = (
    (QueryFlags.MARKER | QueryFlags.GGEP_H, 0.55),
    (QueryFlags.MARKER | QueryFlags.GGEP_H | QueryFlags.FIREWALLED, 0.20),
    (QueryFlags.MARKER | QueryFlags.GGEP_H | QueryFlags.OUT_OF_BAND, 0.15),
    (QueryFlags.MARKER | QueryFlags.GGEP_H | QueryFlags.WANT_XML, 0.10),
)
"""Modern query flag words and how often each is sent (gtk-gnutella and LimeWire
always set the marker and GGEP-H; a share of peers are firewalled or ask for
out-of-band replies)."""

_GUID_FIELD_MASK = (1 << 48) - 1
_GUID_MIXER = 0x9E3779B97F4B & _GUID_FIELD_MASK | 1
"""An odd multiplier: multiplication by it is a bijection modulo 2**48."""

_pack_header = HEADER_STRUCT.pack


@dataclasses.dataclass(frozen=True, slots=True)
class Scheduled:
    """One message, encoded, and when it is due."""

    at: float
    """Offset from the start of the run, in seconds."""
    message_type: int
    guid: bytes
    data: bytes
    """The whole message (header and payload), ready to write."""


class TrafficGenerator:
    """Seeded, open-loop source of encoded Gnutella messages.

    The generator holds no per-run state: every call to :meth:`schedule` starts over
    from the seed and produces the same messages.
    """

    def __init__(
        self,
        *,
        mix: MessageMix,
        arrivals: ArrivalProcess,
        seed: int = 0,
        vocabulary: Vocabulary | None = None,
        hops_ttl: HopsTtl | None = None,
        guid_prefix: bytes = b"",
    ) -> None:
        if len(guid_prefix) > MAX_GUID_PREFIX:
            raise ValueError(
                f"guid_prefix is {len(guid_prefix)} bytes; at most {MAX_GUID_PREFIX} fit "
                "before the modern-servent mark at byte 8"
            )
        for code in mix.types:
            if code not in _PAYLOAD_TYPES:
                raise ValueError(f"the generator cannot make {type_label(code)} messages")
        self.mix = mix
        self.arrivals = arrivals
        self.seed = seed
        self.vocabulary = vocabulary if vocabulary is not None else Vocabulary()
        self.hops_ttl = hops_ttl if hops_ttl is not None else HopsTtl()
        self.guid_prefix = bytes(guid_prefix)
        self._pools = self._build_pools()
        scp_ping = Ping(GGEPBlock((GGEPExtension("SCP", b"\x01"),)))
        self._ping_payloads = (b"", build_payload(scp_ping))
        flag_words = tuple(struct.pack(">H", int(flags)) for flags, _ in _QUERY_FLAGS)
        self._query_flags = flag_words
        self._query_flag_cumulative = tuple(itertools.accumulate(w for _, w in _QUERY_FLAGS))

    def _build_pools(self) -> dict[int, tuple[bytes, ...]]:
        """Encoded reply payloads for the types the mix can draw."""
        factory = SampleFactory(self.seed)
        makers: dict[int, Callable[[], Payload]] = {
            int(MessageType.PONG): factory.pong,
            int(MessageType.PUSH): factory.push,
            int(MessageType.QUERY_HIT): factory.query_hit,
        }
        pools: dict[int, tuple[bytes, ...]] = {}
        for code, make in makers.items():
            if self.mix.share(code) > 0:
                pools[code] = tuple(build_payload(make()) for _ in range(POOL_SIZES[code]))
        return pools

    def schedule(self, duration: float) -> Iterator[Scheduled]:
        """Every message due in ``[0, duration)``, in time order.

        Lazy: messages are made as they are consumed, so memory stays constant however
        long the run.
        """
        rng = random.Random(self.seed)
        getrandbits = rng.getrandbits
        choose_type = self.mix.choose
        draw_header = self.hops_ttl.draw
        makers = self._payload_makers(rng)
        prefix = self.guid_prefix
        filler_bits = 8 * (MAX_GUID_PREFIX - len(prefix))
        filler_bytes = filler_bits // 8
        base = getrandbits(48)
        pack_header = _pack_header
        for sequence, at in enumerate(self.arrivals.times(duration)):
            message_type = choose_type(rng)
            ttl, hops = draw_header(rng)
            field = (sequence * _GUID_MIXER + base) & _GUID_FIELD_MASK
            if filler_bytes:
                head = prefix + getrandbits(filler_bits).to_bytes(filler_bytes, "big")
            else:
                head = prefix
            guid = head + b"\xff" + field.to_bytes(6, "big") + b"\x00"
            payload = makers[message_type]()
            data = pack_header(guid, message_type, ttl, hops, len(payload)) + payload
            yield Scheduled(at, message_type, guid, data)

    def _payload_makers(self, rng: random.Random) -> dict[int, Callable[[], bytes]]:
        """One closure per type, bound to this run's random source."""
        rand = rng.random
        randbelow = rng.randrange
        pings = self._ping_payloads
        flag_words = self._query_flags
        flag_cumulative = self._query_flag_cumulative
        flag_total = flag_cumulative[-1]
        query_text = self.vocabulary.query_text

        def ping() -> bytes:
            return pings[1] if rand() < SCP_PING_SHARE else pings[0]

        def query() -> bytes:
            flags = flag_words[bisect.bisect_right(flag_cumulative, rand() * flag_total)]
            payload = flags + query_text(rng) + b"\x00"
            if rand() < URN_QUERY_SHARE:
                payload += b"urn:sha1:" + base64.b32encode(rng.randbytes(20))
            return payload

        makers: dict[int, Callable[[], bytes]] = {
            int(MessageType.PING): ping,
            int(MessageType.QUERY): query,
        }
        for code, pool in self._pools.items():
            makers[code] = _pool_picker(pool, randbelow)
        return makers

    def __repr__(self) -> str:
        return (
            f"TrafficGenerator(mix={self.mix.name!r}, arrivals={self.arrivals!r}, "
            f"seed={self.seed}, guid_prefix={self.guid_prefix.hex() or None})"
        )


def _pool_picker(pool: tuple[bytes, ...], randbelow: Callable[[int], int]) -> Callable[[], bytes]:
    size = len(pool)

    def pick() -> bytes:
        return pool[randbelow(size)]

    return pick


_PAYLOAD_TYPES = frozenset(
    int(t)
    for t in (
        MessageType.PING,
        MessageType.PONG,
        MessageType.QUERY,
        MessageType.QUERY_HIT,
        MessageType.PUSH,
    )
)
