"""A synthetic leaf servent: it shares files, publishes their QRP table, and searches.

Theory of operation
-------------------
An ultrapeer's duties (QRP, last-hop tables, dynamic querying) only show with leaves
behind it: leaves whose tables decide which queries reach them, whose queries are
widened step by step, and whose files are what the searches find. :class:`LeafServent`
is such a leaf with no I/O (sans-IO, like :class:`~traffic_models.responder.Responder`):
the test network's leaf clients own the sockets and hand it what arrives.

* **Its library.** A few files named by words drawn from the traffic model's Zipf
  vocabulary (:func:`draw_library`), so that popular words are shared by many leaves
  and rare ones by few, as on a real network. Its QRP table holds every keyword of
  every name, split and hashed as servents do (:func:`protocol.qrp.query_words`).
* **Its queries.** One or two Zipf-drawn words, sent with a fresh GUID; hits that come
  back for one of its own GUIDs are counted per query (hits, results, whether a leaf
  sent them: only a hit carrying another leaf's servent GUID is a file found, since the
  load client's sinks answer queries with made-up results).
* **What it answers.** A query every keyword of which is in one of its file names gets
  one hit listing the matching files (at most :data:`MAX_RESULTS`). A query that reaches
  it and matches none of its names is counted: QRP tables are hashed, so a few such
  false positives are expected, but many mean the ultrapeer is not filtering. Its
  ultrapeer's own pings get a pong (:func:`~traffic_models.responder.keep_alive_pong`):
  an ultrapeer closes a leaf that says nothing for minutes.

Nothing here reads a clock or a socket; times are passed in.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Iterable, Sequence

from protocol.codec import encode_message
from protocol.constants import GUID_SIZE, HARD_TTL_LIMIT, MessageType
from protocol.errors import MalformedPayloadError
from protocol.framing import Frame
from protocol.messages import (
    Message,
    Query,
    QueryHit,
    QueryHitDescriptor,
    QueryHitResult,
    make_guid,
)
from protocol.qrp import QrpTable, query_words, table_messages
from traffic_models.content import Vocabulary
from traffic_models.responder import keep_alive_pong

__all__ = [
    "LEAF_VENDOR",
    "LeafQuery",
    "LeafServent",
    "SharedFile",
    "draw_library",
    "query_matches",
]

LEAF_VENDOR = b"SYNL"
"""The vendor code in our leaves' hits: a synthetic leaf, told apart from real clients
and from the load client's responders (``SYNT``)."""
MAX_RESULTS = 10
"""Files listed in one hit at most."""
MAX_OUTSTANDING = 1000
"""Own queries remembered (the oldest are forgotten first): bounded however long a
leaf runs (a leaf searching every 5 s keeps the last 83 minutes; 2,000 leaves at most
keep two million)."""
QUERY_TTL = 4
"""The TTL a leaf gives its queries. The ultrapeer widens them itself (dynamic
querying), never beyond this TTL."""
_QUERY = int(MessageType.QUERY)
_HIT = int(MessageType.QUERY_HIT)
_FILE_TYPES = (b"mp3", b"ogg", b"avi", b"pdf", b"txt")
_OPEN_DATA = bytes((0x1C, 0x01))
"""EQHD flags: not busy, has not uploaded, speed not measured, not firewalled."""


@dataclasses.dataclass(frozen=True, slots=True)
class SharedFile:
    index: int
    name: bytes
    keywords: frozenset[str]
    """The name's words as a router hashes them (lowercased, the short ones left out)."""
    size: int


def draw_library(vocabulary: Vocabulary, rng: random.Random, files: int) -> tuple[SharedFile, ...]:
    """``files`` file names of two or three Zipf-drawn words each."""
    library = []
    for index in range(1, files + 1):
        stem = vocabulary.query_text(rng, 2, 3).replace(b" ", b"_")
        name = b"%s.%s" % (stem, rng.choice(_FILE_TYPES))
        keywords = frozenset(query_words(name.decode("ascii")))
        library.append(SharedFile(index, name, keywords, rng.randint(100_000, 50_000_000)))
    return tuple(library)


def query_matches(words: Sequence[str], library: Iterable[SharedFile]) -> list[SharedFile]:
    """The files every one of ``words`` names (none for a query without keywords)."""
    if not words:
        return []
    wanted = set(words)
    return [shared for shared in library if wanted <= shared.keywords]


@dataclasses.dataclass(slots=True)
class LeafQuery:
    """One of the leaf's own searches and what came back for it."""

    guid: bytes
    text: bytes
    words: tuple[str, ...]
    sent_at: float
    hits: int = 0
    results: int = 0
    leaf_hits: int = 0
    """Hits sent by a leaf (this network's shared files), not by a load client sink."""
    first_leaf_hit_at: float | None = None


class LeafServent:
    """One leaf's library, table, searches and answers (see the module docstring)."""

    def __init__(self, name: str, library: Sequence[SharedFile], *, seed: int) -> None:
        self.name = name
        self.library = tuple(library)
        self.keywords = frozenset(word for shared in self.library for word in shared.keywords)
        self.table = QrpTable.of_words(self.keywords)
        self.rng = random.Random(f"leaf:{seed}:{name}")
        self.servent_guid = make_guid(
            hashlib.blake2b(f"leaf-guid:{seed}:{name}".encode(), digest_size=GUID_SIZE).digest()
        )
        self.queries: dict[bytes, LeafQuery] = {}
        self.queries_sent = 0
        self.queries_received = 0
        """Other servents' queries the ultrapeer passed to us."""
        self.queries_unmatched = 0
        """Of those, the ones none of our names matches (QRP's false positives)."""
        self.hits_sent = 0
        self.hits_for_others = 0
        """Hits that came for a GUID we do not know (not ours, or forgotten)."""

    def table_messages(self) -> list[bytes]:
        """The RESET and PATCH messages that publish our table, encoded, TTL 1."""
        return [
            encode_message(Message(make_guid(self.rng.randbytes(GUID_SIZE)), 1, 0, part))
            for part in table_messages(self.table)
        ]

    def query(self, vocabulary: Vocabulary, now: float) -> bytes:
        """A new search of one or two Zipf-drawn words, encoded; remembered by its GUID."""
        text = vocabulary.query_text(self.rng, 1, 2)
        guid = make_guid(self.rng.randbytes(GUID_SIZE))
        words = tuple(query_words(text.decode("ascii")))
        self.queries[guid] = LeafQuery(guid, text, words, now)
        if len(self.queries) > MAX_OUTSTANDING:
            del self.queries[next(iter(self.queries))]
        self.queries_sent += 1
        return encode_message(Message(guid, QUERY_TTL, 0, Query(text)))

    def receive(self, frame: Frame, leaf_guids: frozenset[bytes], now: float) -> list[bytes]:
        """What to send back for one arriving message (encoded); counts what came.

        ``leaf_guids``: the servent GUIDs of the network's leaves, to tell a file found
        from a made-up result.
        """
        if frame.payload_type == _QUERY:
            return self._answer(frame)
        if frame.payload_type == _HIT:
            self._account_hit(frame, leaf_guids, now)
        pong = keep_alive_pong(frame)  # its ultrapeer's own ping
        return [] if pong is None else [pong]

    def _answer(self, frame: Frame) -> list[bytes]:
        self.queries_received += 1
        try:
            query = frame.payload_record()
        except MalformedPayloadError:
            return []
        assert isinstance(query, Query)
        found = query_matches(query_words(query.text), self.library)
        if not found:
            self.queries_unmatched += 1
            return []
        hit = QueryHit(
            port=6346,
            ip="127.0.0.1",
            speed=1000,
            results=tuple(
                QueryHitResult(shared.index, shared.size, shared.name)
                for shared in found[:MAX_RESULTS]
            ),
            servent_guid=self.servent_guid,
            descriptor=QueryHitDescriptor(LEAF_VENDOR, _OPEN_DATA),
        )
        self.hits_sent += 1
        ttl = min(frame.hops + 2, HARD_TTL_LIMIT)
        return [encode_message(Message(frame.guid, ttl, 0, hit))]

    def _account_hit(self, frame: Frame, leaf_guids: frozenset[bytes], now: float) -> None:
        query = self.queries.get(frame.guid)
        if query is None:
            self.hits_for_others += 1
            return
        try:
            hit = frame.payload_record()
        except MalformedPayloadError:
            return
        assert isinstance(hit, QueryHit)
        query.hits += 1
        query.results += len(hit.results)
        if hit.servent_guid in leaf_guids and hit.servent_guid != self.servent_guid:
            query.leaf_hits += 1
            if query.first_leaf_hit_at is None:
                query.first_leaf_hit_at = now
