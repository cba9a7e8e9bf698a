"""The GnutellaRouter stage: duplicates, TTL, broadcast and reverse-path routing.

Rules, per message type (Gnutella 0.6 draft section 2.2 and what gtk-gnutella and
LimeWire do):

* Every routed message: TTL 0 on arrival is dropped; hops + TTL over the hard limit
  (15) is dropped; forwarding decrements TTL and increments hops, and a message whose
  TTL would reach 0 is not forwarded. Broadcasts are clamped so that hops + TTL never
  exceeds ``max_ttl`` (7 by default).
* Ping: duplicates (same GUID within the ping table's life) are dropped. We always
  answer with our own pong. A peer that announced ``Pong-Caching`` gets cached pongs
  (at most one answered ping per second) and its ping goes no further; any other peer's
  ping is broadcast to every other connection, as in the paper's router.
* Query: duplicates dropped; queries from a peer we are flow-controlling are dropped
  (it is the one clogging us); the reverse route is recorded *before* any blocking work
  (the injected per-query delay) so replies find their way even while it runs; then
  broadcast.
* Pong and query hit: routed back to the connection the ping or query came from, and
  only there; no route (or a closed one) means dropped and counted. Query hits teach the
  push table which connection leads to their servent GUID.
* Push: routed by servent GUID through the push table; duplicates dropped by message
  GUID.
* Leaves (peers that announced ``X-Ultrapeer: False``) are sent only the queries their
  QRP table matches, every word of them (:mod:`protocol.qrp`); a leaf without a table
  gets none, and no pings. A leaf's RESET and PATCH messages build its table, which is
  installed only when complete; a bad sequence ends the leaf's connection with Bye 413
  and drops its table. A leaf's pings are answered from the pong cache, never
  broadcast. A leaf's query goes at once to the other leaves it matches, and to the
  ultrapeer neighbours by dynamic querying (:mod:`.dynamic_query`): a few at TTL 1,
  then one more at a time with a growing TTL, until enough results came back.
* Bye closes the connection it arrived on; QRP and vendor messages are hop-by-hop:
  accepted, never forwarded; unknown types are dropped. Of the vendor messages, a
  peer's Messages Supported and Features Supported are kept on its link (dumps show
  them) and its Hops Flow is obeyed: a query whose hop count is at least the peer's
  value is not sent to it (dropped as ``peer-hops-flow``). Every other vendor message
  is accepted quietly. :meth:`GnutellaRouter.introduce` sends our own Messages
  Supported, built from the vendor messages handled here and nothing else.

Every drop has a named reason; every counter is per message type. The hot path works on
raw frames: a forwarded message is the payload bytes behind a freshly packed header, and
one encoded copy is shared by every connection it is broadcast to.
"""

from __future__ import annotations

import collections
import dataclasses
import operator
import time
from collections.abc import Callable, Iterator

import structlog
import trio

from gnutella_router import __version__
from gnutella_router.config import RouterConfig, SheddingConfig
from gnutella_router.control.abuse import Offence
from gnutella_router.control.shedding import Shedder
from gnutella_router.discovery.host_cache import classify_address
from gnutella_router.net.route_table import RouteTable, RouteTableStatistics, SeenTable
from gnutella_router.runtime.stage import Stage
from gnutella_router.stages.dynamic_query import TICK_SECONDS, DynamicQuery, Outcome
from gnutella_router.stages.link import Link
from protocol.codec import build_payload, encode_message, parse_payload
from protocol.constants import (
    GUID_SIZE,
    MessageType,
    counts_by_type_name,
    message_type_name,
)
from protocol.errors import LocalProtocolError, MalformedPayloadError
from protocol.framing import Frame
from protocol.ggep import GGEPBlock, daily_uptime_extension, vendor_code_extension
from protocol.header import HEADER_STRUCT
from protocol.ipv4 import pack_ipv4
from protocol.messages import (
    Bye,
    Message,
    Ping,
    Pong,
    QrpPatch,
    QrpReset,
    VendorMessage,
    random_guid,
)
from protocol.qrp import (
    QrpError,
    QrpReceiver,
    QrpTable,
    qrp_hashcode,
    query_words,
    table_messages,
)
from protocol.vendor import (
    FEATURES_SUPPORTED,
    HOPS_FLOW,
    MESSAGES_SUPPORTED,
    NO_HOPS_FLOW,
    VendorMessageId,
    features_supported,
    messages_supported,
    parse_features_supported,
    parse_hops_flow,
    parse_messages_supported,
)

PING = MessageType.PING
PONG = MessageType.PONG
BYE = MessageType.BYE
PUSH = MessageType.PUSH
QUERY = MessageType.QUERY
QUERY_HIT = MessageType.QUERY_HIT
VENDOR = MessageType.VENDOR
QRP = MessageType.QRP
HOP_BY_HOP = frozenset({MessageType.STANDARD_VENDOR})

_pack_header = HEADER_STRUCT.pack
_TYPE_BYTE = operator.itemgetter(16)
"""The payload type's offset in an encoded message."""
_TTL_BYTE = operator.itemgetter(17)
"""The TTL's offset in an encoded message."""


LOCAL = 0
"""The route of a message this router originated (connection ids start at 1)."""

OWN_PONG_REFRESH = 10.0
"""Seconds between rebuilds of our own pong (its uptime grows)."""
VENDOR_CODE = "GRTR"
"""Our four-letter vendor code, in pongs' "VC" (and GWebCache requests)."""
VENDOR_VERSION = int(__version__.split(".")[0]) << 4 | int(__version__.split(".")[1])
"""Major version in the high nibble, minor in the low one, as "VC" readers expect."""

LAST_HOP_TABLE_SLOTS = 65536
"""The size of the table of our leaves' keywords sent to ultrapeers (gtk-gnutella's)."""
LAST_HOP_TABLE_INTERVAL = 60.0
"""Seconds between two tables sent to one ultrapeer, however often leaves change."""
MAX_DYNAMIC_QUERIES = 2000
"""Leaf queries widened at once; beyond, a leaf's query is dropped and counted."""

HostLearned = Callable[[str, int, str], None]


@dataclasses.dataclass(frozen=True, slots=True)
class RouterStatistics:
    """What the router did, per message type (names), and why it dropped what it dropped."""

    received: dict[str, int]
    forwarded: dict[str, int]
    generated: dict[str, int]
    consumed: dict[str, int]
    dropped: dict[str, dict[str, int]]
    """reason -> message type -> count."""
    tables: dict[str, RouteTableStatistics]
    pong_cache_size: int
    pongs_not_cached: dict[str, int]
    """Pongs routed but not cached, by reason: private addresses on a public network,
    unspecified, multicast or reserved ones anywhere."""
    ttl_trimmed: dict[str, int]
    """Broadcast copies sent with a lower TTL because the peer's X-Max-TTL asked for it."""
    dynamic_queries: dict[str, int]
    """Leaf queries being widened (``active``), the copies sent for them (``copies``) and
    how the finished ones ended (``satisfied``, ``exhausted``, ``expired``, ``leaf-gone``)."""


DROP_REASONS = (
    "duplicate",
    "ttl-zero",
    "ttl-expired",
    "hard-ttl-limit",
    "no-route",
    "route-closed",
    "malformed",
    "unknown-type",
    "outgoing-queue",
    "source-flow-controlled",
    "connection-closing",
    "bye-relayed",
    "ancient-format",
    "peer-refuses-format",
    "peer-hops-flow",
    "qrp-miss",
    "dynamic-query-limit",
)
"""Every reason the router drops a message for (shed reasons come from the shedder)."""


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


class GnutellaRouter:
    """Routing tables and forwarding decisions; the handler of the router stage."""

    def __init__(
        self,
        config: RouterConfig,
        *,
        connections: Callable[[], tuple[Link, ...]],
        connection_by_id: Callable[[int], Link | None],
        own_address: Callable[[], tuple[str, int]],
        own_guid: bytes,
        max_ttl: int,
        hard_ttl_limit: int,
        allow_private: bool = True,
        on_host_learned: HostLearned | None = None,
        shedding: SheddingConfig | None = None,
        log: structlog.typing.FilteringBoundLogger | None = None,
        now: float = 0.0,
    ) -> None:
        self.config = config
        self._connections = connections
        self._connection_by_id = connection_by_id
        self._own_address = own_address
        self.own_guid = own_guid
        self.max_ttl = max_ttl
        self.hard_ttl_limit = hard_ttl_limit
        self.allow_private = allow_private
        self.pongs_not_cached: collections.Counter[str] = collections.Counter()
        """Pongs routed but kept out of the pong cache, by reason (e.g. "private")."""
        self.on_host_learned = on_host_learned
        self.shedder = (
            None
            if shedding is None or (shedding.policy == "backpressure" and not shedding.rate_limit)
            else Shedder(shedding, count=self._count_shed)
        )
        """None when nothing can be shed: the admission path is then the plain one."""
        self.log = log or structlog.get_logger("router")
        capacity = config.route_table_capacity
        # Routes hold connection ids, not connections: ints and floats are invisible to
        # the cyclic garbage collector, so hundreds of thousands of routes cost its full
        # collections nothing (holding the connection objects made each one take 100 ms
        # and more). A closed connection's id simply no longer resolves.
        self.ping_routes: RouteTable[int] = RouteTable(
            "ping", config.ping_route_seconds, capacity, now
        )
        self.query_routes: RouteTable[int] = RouteTable(
            "query", config.query_route_seconds, capacity, now
        )
        self.push_routes: RouteTable[int] = RouteTable(
            "push", config.push_route_seconds, capacity, now
        )
        self.push_seen = SeenTable("push-seen", config.push_route_seconds, capacity, now)
        self.pong_cache = PongCache(capacity=200, lifetime=config.pong_cache_seconds)
        self.query_delay = config.query_delay_ms / 1000.0
        self._started_at = now
        self._own_pong = b""
        self._own_pong_ggep = b""
        self._own_pong_at = -OWN_PONG_REFRESH
        self._fan_datas: list[bytes] = []
        self._fan_sources: list[Link] = []
        self._cache_answered: dict[int, float] = {}
        """When we last answered a Pong-Caching link's ping from the cache, by link id
        (at most one such answer a second); pruned to the links alive."""
        self._fan_queries = 0
        self._fan_ancient: set[bytes] = set()
        self._fan_last_hop: set[bytes] = set()
        """The batch's queries at their last hop: for leaves only."""
        """The batch's broadcast queries in the pre-0.6 form, kept from peers that drop them."""
        self.received = [0] * 256
        self.forwarded = [0] * 256
        self.generated = [0] * 256
        self.consumed = [0] * 256
        self.dropped: collections.Counter[tuple[str, int]] = collections.Counter()
        self.ttl_trimmed: collections.Counter[int] = collections.Counter()
        """Broadcast copies sent with a lower TTL to respect a peer's ``X-Max-TTL``, by type."""
        self.stage: Stage[Frame] = Stage(
            "router",
            self.handle,
            threshold=config.queue_threshold,
            pool_size=config.threads,
            max_pool_size=config.max_threads,
            batch_size=config.batch_size,
        )
        self._handlers: list[Callable[[Link, Frame, float], None]] = [self._on_unknown] * 256
        self._handlers[PING] = self._on_ping
        self._handlers[PONG] = self._on_pong
        self._handlers[BYE] = self._on_bye
        self._handlers[PUSH] = self._on_push
        self._handlers[QUERY_HIT] = self._on_query_hit
        for message_type in HOP_BY_HOP:
            self._handlers[message_type] = self._on_hop_by_hop
        self._handlers[VENDOR] = self._on_vendor
        self._handlers[QRP] = self._on_qrp
        self._qrp: dict[int, QrpReceiver] = {}
        """Each leaf's QRP tables, by link id; pruned to the links alive."""
        self._last_hop_qrp: dict[int, QrpReceiver] = {}
        """Ultrapeer neighbours' last-hop tables, by link id; pruned the same way."""
        self._leaf_tables_version = 0
        """Rises whenever a leaf's table comes or goes."""
        self._merged = QrpTable(LAST_HOP_TABLE_SLOTS)
        self._merged_version = 0
        self._qrp_sent: dict[int, tuple[int, float]] = {}
        """Per ultrapeer link: which version of our leaves' table it has, and when."""
        self._words: dict[bytes, list[int]] = {}
        """A batch's queries' QRP words, hashed once for all the tables asked."""
        self._dynamic: dict[bytes, DynamicQuery] = {}
        """Leaf queries being widened, by GUID; at most :data:`MAX_DYNAMIC_QUERIES`."""
        self.dynamic_counts: collections.Counter[str] = collections.Counter(
            {"copies": 0, **{outcome.value: 0 for outcome in Outcome}}
        )
        self._vendor_handlers: dict[VendorMessageId, Callable[[Link, bytes], None]] = {
            MESSAGES_SUPPORTED: lambda link, body: link.received_messages_supported(
                parse_messages_supported(body)
            ),
            FEATURES_SUPPORTED: lambda link, body: link.received_features_supported(
                parse_features_supported(body)
            ),
            HOPS_FLOW: lambda link, body: link.received_hops_flow(parse_hops_flow(body)),
        }
        """The vendor messages this router understands; our Messages Supported lists
        exactly these."""

    # ------------------------------------------------------------------ admission

    async def deliver(self, connection: Link, frames: list[Frame]) -> None:
        """Admit one read's frames into the router queue, waiting while it is full.

        Waiting here stops the connection's reader, so the peer's TCP window closes:
        backpressure instead of loss or unbounded memory.
        """
        queue = self.stage.queue
        shedder = self.shedder
        if shedder is not None:
            offered = len(frames)
            frames = shedder.admit(connection.id, frames, queue, trio.current_time())
            if len(frames) < offered:
                connection.frames_done(offered - len(frames))
        admitted = queue.admit(frames)
        while admitted < len(frames):
            if shedder is not None and not shedder.waits_at_bound:
                shedder.shed_rest(frames[admitted:])
                connection.frames_done(len(frames) - admitted)
                return
            await queue.wait_for_space()
            if connection.closing:
                self._drop_many("connection-closing", frames[admitted:])
                connection.frames_done(len(frames) - admitted)
                return
            frames = frames[admitted:]
            admitted = queue.admit(frames)

    # ------------------------------------------------------------------ the handler

    async def handle(self, batch: list[Frame]) -> int | None:
        """Route a batch; returns how many frames were handled when some were handed
        back to the queue (see :meth:`_delayed_broadcast`), else None for all."""
        now = trio.current_time()
        received = self.received
        handlers = self._handlers
        by_id = self._connection_by_id
        source = -1
        connection: Link | None = None
        run = 0  # frames of the current run, told to their link when it ends
        for index, frame in enumerate(batch):
            if frame.source != source:  # a batch holds runs of frames from one link
                if connection is not None:
                    connection.frames_done(run)
                source = frame.source
                connection = by_id(source)
                run = 0
            run += 1
            message_type = frame.payload_type
            received[message_type] += 1
            if connection is None or connection.closing:
                self.dropped["connection-closing", message_type] += 1
                continue
            if message_type == QUERY:
                data = self._accept_query(connection, frame, now)
                if data is not None:
                    if self.query_delay:
                        await self._delayed_broadcast(batch, index, connection, data, now)
                        connection.frames_done(run)
                        return index + 1
                    if connection.capabilities.ultrapeer is False:
                        self._start_dynamic_query(connection, data, now)
                    else:
                        self._broadcast(connection, data)
            else:
                handlers[message_type](connection, frame, now)
        self._flush_broadcasts(now)
        if connection is not None:
            connection.frames_done(run)
        return None

    async def _delayed_broadcast(
        self, batch: list[Frame], index: int, source: Link, data: bytes, now: float
    ) -> None:
        """Run the injected query delay as blocking work, then broadcast the query.

        The query's route is already recorded, so replies racing the delay find their
        way. The rest of the batch goes back to the queue first: another worker routes
        it while this one is blocked, and with a single worker it waits, exactly like the
        paper's single-threaded router. Nothing may stay in the shared broadcast buffer
        while this worker is away either.
        """
        self.stage.queue.requeue(batch[index + 1 :])
        self._flush_broadcasts(now)
        await self.stage.run_blocking(time.sleep, self.query_delay)
        if source.capabilities.ultrapeer is False:
            self._start_dynamic_query(source, data, trio.current_time())
        else:
            self._broadcast(source, data)
        self._flush_broadcasts(trio.current_time())

    def _count_shed(self, reason: str, frame: Frame) -> None:
        self.dropped[reason, frame.payload_type] += 1

    def _drop_many(self, reason: str, frames: list[Frame]) -> None:
        for frame in frames:
            self.dropped[reason, frame.payload_type] += 1

    def _ttl_ok(self, connection: Link, frame: Frame, now: float) -> bool:
        ttl = frame.ttl
        if ttl == 0:
            self.dropped["ttl-zero", frame.payload_type] += 1
            connection.offended(Offence.TTL_ZERO, now)
            return False
        if ttl + frame.hops > self.hard_ttl_limit:
            self.dropped["hard-ttl-limit", frame.payload_type] += 1
            connection.offended(Offence.HIGH_TTL, now)
            return False
        return True

    def _duplicate(
        self, table: RouteTable[int], connection: Link, frame: Frame, now: float
    ) -> None:
        """Count a duplicate; the same GUID again from the same peer, with no higher
        TTL than the first time, is an offence (a relay via another path is not)."""
        self.dropped["duplicate", frame.payload_type] += 1
        first = table.first(frame.guid)
        if first is not None and first[0] == connection.id and frame.ttl <= first[1]:
            connection.offended(Offence.DUPLICATE, now)

    def _broadcast(self, source: Link, data: bytes) -> None:
        """Queue one encoded message for every connection but its source.

        Broadcasts are collected for the whole batch and handed out by
        :meth:`_flush_broadcasts`: one call per destination instead of one per message
        and destination, which is where a flooding router spends most of its time. The
        message type and hop count stay readable in the header bytes themselves.
        """
        self._fan_datas.append(data)
        self._fan_sources.append(source)
        self._fan_queries += 1  # only queries come through here; pings are inlined
        if data[23] == 0 and data[24] == 0:  # flags 0: the pre-0.6 form
            self._fan_ancient.add(data)
        if data[17] == 0:  # for leaves only
            self._fan_last_hop.add(data)

    def _flush_broadcasts(self, now: float) -> None:
        """Hand the batch's broadcasts to every connection, then wake the writers."""
        datas = self._fan_datas
        connections = self._connections()
        if datas:
            sources = self._fan_sources
            queries = self._fan_queries
            ancient = self._fan_ancient
            last_hop = self._fan_last_hop
            self._fan_datas = []
            self._fan_sources = []
            self._fan_queries = 0
            self._fan_ancient = set()
            if last_hop:
                self._fan_last_hop = set()
            senders = set(sources)
            total_bytes = sum(map(len, datas))
            pings = len(datas) - queries
            highest_ttl = max(map(_TTL_BYTE, datas))
            forwarded = self.forwarded
            for connection in connections:
                if connection.closing:
                    continue
                out = datas
                if connection in senders:
                    out = [d for d, s in zip(out, sources, strict=True) if s is not connection]
                capabilities = connection.capabilities
                if ancient and capabilities.refuses_ancient_queries:
                    kept = [d for d in out if d not in ancient]
                    self.dropped["peer-refuses-format", QUERY] += len(out) - len(kept)
                    out = kept
                if capabilities.ultrapeer is False:  # a leaf: what its QRP table matches
                    out = self._for_leaf(connection.id, out)
                else:
                    if last_hop:
                        out = [d for d in out if d not in last_hop]
                    if self._last_hop_qrp and queries:
                        out = self._for_last_hop(connection.id, out)
                if connection.hops_flow != NO_HOPS_FLOW and queries:
                    out = self._hops_flowed(out, connection.hops_flow)
                if capabilities.max_ttl < highest_ttl:  # the peer's X-Max-TTL
                    out = self._ttl_clamped(out, capabilities.max_ttl)
                if out is not datas:
                    if out:
                        refused = connection.send_batch(out, sum(map(len, out)), now)
                        self._count_fanned_out(out, refused)
                elif refused := connection.send_batch(datas, total_bytes, now):
                    self._count_fanned_out(datas, refused)
                else:
                    forwarded[PING] += pings
                    forwarded[QUERY] += queries
        if self._words:
            self._words = {}
        for connection in connections:
            connection.flush()

    def _for_leaf(self, link_id: int, datas: list[bytes]) -> list[bytes]:
        """The queries of ``datas`` a leaf's QRP table matches; no pings, which leaves
        do not take from their ultrapeer."""
        receiver = self._qrp.get(link_id)
        table = receiver.table if receiver is not None else None
        kept = []
        missed = 0
        words = self._words
        for data in datas:
            if data[16] != QUERY:
                continue
            if table is not None:
                its_words = words.get(data)
                if its_words is None:
                    its_words = words[data] = _qrp_words(data)
                if table.matches_hashcodes(its_words):
                    kept.append(data if data[17] else data[:17] + b"\x01" + data[18:])
                    continue
            missed += 1
        if missed:
            self.dropped["qrp-miss", QUERY] += missed
        return kept

    # ------------------------------------------------------------------ dynamic querying

    def _start_dynamic_query(self, leaf: Link, data: bytes, now: float) -> None:
        """A leaf's query: to the other leaves it matches now, to ultrapeers step by step."""
        if len(self._dynamic) >= MAX_DYNAMIC_QUERIES:
            self.dropped["dynamic-query-limit", QUERY] += 1
            return
        for link in self._connections():
            if link.capabilities.ultrapeer is False and link is not leaf and not link.closing:
                for copy in self._for_leaf(link.id, [data]):
                    if link.send(copy, QUERY, copy[18], now):
                        self.forwarded[QUERY] += 1
        query = DynamicQuery(data[:GUID_SIZE], data, leaf.id, data[17], now)
        self._dynamic[query.guid] = query
        self._widen(query, now)

    def _widen(self, query: DynamicQuery, now: float) -> None:
        """Take the query's next step if it is due; forget it once it is over."""
        ultrapeers = [
            link.id
            for link in self._connections()
            if link.capabilities.ultrapeer is not False and not link.closing
        ]
        step = query.next_step(now, ultrapeers)
        if step is None:
            return
        if isinstance(step, Outcome):
            del self._dynamic[query.guid]
            self.dynamic_counts[step.value] += 1
            return
        chosen, ttl = step
        for link_id in chosen:
            link = self._connection_by_id(link_id)
            if link is None:
                continue
            copy = query.copy_with_ttl(min(ttl, link.capabilities.max_ttl))
            if copy[17] == 1 and not self._for_last_hop(link_id, [copy]):
                continue  # its last-hop table says its leaves have nothing for it
            if link.send(copy, QUERY, copy[18], now):
                self.forwarded[QUERY] += 1
                self.dynamic_counts["copies"] += 1
            link.flush()

    def widen_dynamic_queries(self, now: float) -> None:
        """Every leaf query's next step, if due (called every :data:`TICK_SECONDS`)."""
        for query in list(self._dynamic.values()):
            leaf = self._connection_by_id(query.leaf)
            if leaf is None or leaf.closing:
                del self._dynamic[query.guid]
                self.dynamic_counts[Outcome.LEAF_GONE.value] += 1
                continue
            self._widen(query, now)

    async def run_timers(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """What the router does by the clock, for the daemon's life: the next steps of
        dynamic queries, and last-hop tables for ultrapeers that are due one."""
        task_status.started()
        tables_at = trio.current_time()
        while True:
            await trio.sleep(TICK_SECONDS)
            now = trio.current_time()
            if self._dynamic:
                self.widen_dynamic_queries(now)
            if now - tables_at >= 1.0:
                tables_at = now
                self.send_last_hop_tables(now)

    def _for_last_hop(self, link_id: int, datas: list[bytes]) -> list[bytes]:
        """``datas`` less the queries at their last hop (TTL 1) that an ultrapeer's
        last-hop table says none of its leaves could answer."""
        receiver = self._last_hop_qrp.get(link_id)
        table = receiver.table if receiver is not None else None
        if table is None:
            return datas
        kept = []
        words = self._words
        for data in datas:
            if data[16] == QUERY and data[17] == 1:
                its_words = words.get(data)
                if its_words is None:
                    its_words = words[data] = _qrp_words(data)
                if not table.matches_hashcodes(its_words):
                    self.dropped["qrp-miss", QUERY] += 1
                    continue
            kept.append(data)
        return kept

    def _hops_flowed(self, datas: list[bytes], limit: int) -> list[bytes]:
        """``datas`` without the queries of ``limit`` hops or more: the peer's Hops
        Flow asked for none of those."""
        kept = [d for d in datas if d[16] != QUERY or d[18] < limit]
        self.dropped["peer-hops-flow", QUERY] += len(datas) - len(kept)
        return kept

    def _ttl_clamped(self, datas: list[bytes], limit: int) -> list[bytes]:
        """Copies of ``datas`` whose TTL is at most ``limit``: a peer that announced
        ``X-Max-TTL`` would trim (and complain about) anything above it."""
        out = []
        for data in datas:
            if data[17] > limit:
                self.ttl_trimmed[data[16]] += 1
                data = data[:17] + bytes((limit,)) + data[18:]
            out.append(data)
        return out

    def _count_fanned_out(self, datas: list[bytes], refused: list[bytes]) -> None:
        """Count a broadcast to one link: forwarded, except what its queue refused."""
        forwarded = self.forwarded
        for message_type, count in collections.Counter(map(_TYPE_BYTE, datas)).items():
            forwarded[message_type] += count
        for message_type, count in collections.Counter(map(_TYPE_BYTE, refused)).items():
            forwarded[message_type] -= count
            self.dropped["outgoing-queue", message_type] += count

    def _forward_reply(self, route_id: int, frame: Frame, now: float) -> None:
        """Send a pong, query hit or push one hop further along its recorded path."""
        message_type = frame.payload_type
        if route_id == LOCAL:
            self.consumed[message_type] += 1
            return
        route = self._connection_by_id(route_id)
        if route is None or route.closing:
            self.dropped["route-closed", message_type] += 1
            return
        ttl = frame.ttl - 1
        if ttl <= 0:
            self.dropped["ttl-expired", message_type] += 1
            return
        payload = frame.payload
        data = _pack_header(frame.guid, message_type, ttl, frame.hops + 1, len(payload)) + payload
        if route.send(data, message_type, frame.hops + 1, now):
            self.forwarded[message_type] += 1
        else:
            self.dropped["outgoing-queue", message_type] += 1

    # ------------------------------------------------------------------ per type

    def _on_ping(self, connection: Link, frame: Frame, now: float) -> None:
        # The busiest path of all: checks, dedup, our pong, the broadcast, inlined.
        ttl = frame.ttl
        hops = frame.hops
        if not ttl or ttl + hops > self.hard_ttl_limit:
            self._ttl_ok(connection, frame, now)  # counts the reason
            return
        payload = frame.payload
        if payload and payload[0] != 0xC3:
            self.dropped["malformed", PING] += 1
            connection.offended(Offence.MALFORMED, now)
            return
        guid = frame.guid
        if not self.ping_routes.record(guid, connection.id, now, ttl, hops):
            self._duplicate(self.ping_routes, connection, frame, now)
            return
        if now - self._own_pong_at >= OWN_PONG_REFRESH:
            self._build_own_pongs(now)
        pong = self._own_pong_ggep if connection.capabilities.ggep else self._own_pong
        if connection.send(_pack_header(guid, PONG, hops + 1, 0, len(pong)) + pong, PONG, 0, now):
            self.generated[PONG] += 1
        if connection.capabilities.pong_caching or connection.capabilities.ultrapeer is False:
            if ttl > 1 and now - self._cache_answered.get(connection.id, -1e9) >= 1.0:
                self._note_cache_answer(connection.id, now)
                self._answer_from_cache(connection, frame, now)
            return
        room = self.max_ttl - hops
        if ttl > room:
            ttl = room
        if ttl > 1:
            self._fan_datas.append(
                _pack_header(guid, PING, ttl - 1, hops + 1, len(payload)) + payload
            )
            self._fan_sources.append(connection)

    def _note_cache_answer(self, link_id: int, now: float) -> None:
        answered = self._cache_answered
        answered[link_id] = now
        if len(answered) > 64 + 2 * len(self._connections()):
            alive = {link.id for link in self._connections()}
            self._cache_answered = {k: t for k, t in answered.items() if k in alive}

    def _build_own_pongs(self, now: float) -> None:
        """Our pong's payloads: plain, and with GGEP for peers that announced GGEP.

        Built when first needed (the advertised address is fixed once the server
        listens, and pings only arrive after that) and again every
        :data:`OWN_PONG_REFRESH` seconds, as the uptime in "DU" grows. "VC" names us;
        "DU" is the uptime so far, up to a day, as gtk-gnutella caps it. Files and
        kilobytes are 0: a router shares nothing. "UP" (free slots) is left out: its
        first byte announces the QRP version of an ultrapeer that routes by QRP.
        """
        host, port = self._own_address()
        try:
            pack_ipv4(host)
        except LocalProtocolError:
            host = "0.0.0.0"  # an IPv6 or named address has no place in a pong
        uptime = min(int(now - self._started_at), 86_400)
        ggep = GGEPBlock(
            (vendor_code_extension(VENDOR_CODE, VENDOR_VERSION), daily_uptime_extension(uptime))
        )
        self._own_pong = build_payload(Pong(port=port, ip=host))
        self._own_pong_ggep = build_payload(Pong(port=port, ip=host, ggep=ggep))
        self._own_pong_at = now

    def _answer_from_cache(self, connection: Link, ping: Frame, now: float) -> None:
        """Up to ``pongs_per_ping`` pongs: cached ones first, then our neighbours.

        The cache only holds pongs that crossed this router, which is nothing at all
        on a young network; what we know first-hand (where our neighbours listen) is
        always worth telling, as gtk-gnutella does for a TTL 2 ping.
        """
        asker = connection.listen_address
        limit = self.config.pongs_per_ping
        answers = self.pong_cache.recent(limit, now, asker)
        if len(answers) < limit:
            answers.extend(self._neighbour_pongs(connection, asker, limit - len(answers)))
        for payload, hops in answers:
            data = _pack_header(ping.guid, PONG, ping.hops + 1, hops + 1, len(payload)) + payload
            if connection.send(data, PONG, hops + 1, now):
                self.generated[PONG] += 1

    def _neighbour_pongs(
        self, asker: Link, asker_address: tuple[str, int] | None, limit: int
    ) -> list[tuple[bytes, int]]:
        pongs: list[tuple[bytes, int]] = []
        for neighbour in self._connections():
            address = neighbour.listen_address
            if neighbour is asker or address is None or address == asker_address:
                continue
            try:
                pongs.append((build_payload(Pong(port=address[1], ip=address[0])), 0))
            except LocalProtocolError:
                continue  # an IPv6 neighbour cannot be described in a pong
            if len(pongs) >= limit:
                break
        return pongs

    def _accept_query(self, connection: Link, frame: Frame, now: float) -> bytes | None:
        """Checks and route recording for a query; the bytes to broadcast, if any."""
        ttl = frame.ttl
        if not ttl or ttl + frame.hops > self.hard_ttl_limit:
            self._ttl_ok(connection, frame, now)  # counts the reason
            return None
        if connection.flow_controlled:
            self.dropped["source-flow-controlled", QUERY] += 1
            return None
        payload = frame.payload
        if len(payload) < 3 or payload.find(b"\x00", 2) < 0:
            self.dropped["malformed", QUERY] += 1
            connection.offended(Offence.MALFORMED, now)
            return None
        if payload[0] == 0 and payload[1] == 0 and self.config.drop_ancient_queries:
            self.dropped["ancient-format", QUERY] += 1  # flags 0: the pre-0.6 form
            return None
        if not self.query_routes.record(frame.guid, connection.id, now, ttl, frame.hops):
            self._duplicate(self.query_routes, connection, frame, now)
            return None
        hops = frame.hops
        room = self.max_ttl - hops
        if ttl > room:
            ttl = room
        if ttl <= 1:
            if not self._qrp:
                return None
            # Its last hop: it still goes to the leaves that match (as gtk-gnutella
            # does), marked by TTL 0 here and sent with TTL 1, and to no ultrapeer.
            return _pack_header(frame.guid, QUERY, 0, hops + 1, len(payload)) + payload
        return _pack_header(frame.guid, QUERY, ttl - 1, hops + 1, len(payload)) + payload

    def _on_pong(self, connection: Link, frame: Frame, now: float) -> None:
        if not self._ttl_ok(connection, frame, now):
            return
        try:
            pong = parse_payload(PONG, frame.payload)
        except MalformedPayloadError:
            self.dropped["malformed", PONG] += 1
            connection.offended(Offence.MALFORMED, now)
            return
        assert isinstance(pong, Pong)
        if pong.port:
            _, problem = classify_address(pong.ip)
            if problem is None or (problem == "private" and self.allow_private):
                self.pong_cache.add(pong.ip, pong.port, frame.payload, frame.hops, now)
            else:
                # Still routed back to whoever pinged; just not handed out again.
                self.pongs_not_cached[problem] += 1
            if self.on_host_learned is not None:
                self.on_host_learned(pong.ip, pong.port, "pong")
        route = self.ping_routes.lookup(frame.guid, now)
        if route is None:
            self.dropped["no-route", PONG] += 1
            connection.offended(Offence.UNROUTABLE, now)
            return
        self.ping_routes.note_hit(frame.guid)
        self._forward_reply(route, frame, now)

    def _on_query_hit(self, connection: Link, frame: Frame, now: float) -> None:
        if not self._ttl_ok(connection, frame, now):
            return
        payload = frame.payload
        if len(payload) < 11 + GUID_SIZE:
            self.dropped["malformed", QUERY_HIT] += 1
            connection.offended(Offence.MALFORMED, now)
            return
        self.push_routes.refresh(payload[-GUID_SIZE:], connection.id, now)
        route = self.query_routes.lookup(frame.guid, now)
        if route is not None and self._dynamic:
            query = self._dynamic.get(frame.guid)
            if query is not None and query.leaf == route:
                query.note_hits(payload[0])  # the hit's result count
        if route is None:
            # Only a hit we drop is parsed whole (routed ones are passed on untouched):
            # garbage sent as hits is then the offence it is, not a lost route.
            try:
                parse_payload(QUERY_HIT, payload)
            except MalformedPayloadError:
                self.dropped["malformed", QUERY_HIT] += 1
                connection.offended(Offence.MALFORMED, now)
                return
            self.dropped["no-route", QUERY_HIT] += 1
            connection.offended(Offence.UNROUTABLE, now)
            return
        self.query_routes.note_hit(frame.guid)
        self._forward_reply(route, frame, now)

    def _on_push(self, connection: Link, frame: Frame, now: float) -> None:
        if not self._ttl_ok(connection, frame, now):
            return
        payload = frame.payload
        if len(payload) < 26:
            self.dropped["malformed", PUSH] += 1
            connection.offended(Offence.MALFORMED, now)
            return
        if not self.push_seen.add(frame.guid, now):
            self.dropped["duplicate", PUSH] += 1
            return
        servent = payload[:GUID_SIZE]
        if servent == self.own_guid:
            self.consumed[PUSH] += 1
            return
        route = self.push_routes.lookup(servent, now)
        if route is None:
            self.dropped["no-route", PUSH] += 1
            connection.offended(Offence.UNROUTABLE, now)
            return
        self.push_routes.note_hit(servent)
        self._forward_reply(route, frame, now)

    def _on_bye(self, connection: Link, frame: Frame, now: float) -> None:
        try:
            bye = parse_payload(BYE, frame.payload)
        except MalformedPayloadError:
            bye = None
        if not isinstance(bye, Bye):
            connection.close("peer sent a malformed Bye")
            return
        if frame.hops != 0 or frame.ttl > 1:
            # The spec asks receivers to ignore a Bye that was relayed.
            self.dropped["bye-relayed", BYE] += 1
            return
        self.consumed[BYE] += 1
        connection.received_bye(bye.code, bye.reason)

    def _on_hop_by_hop(self, connection: Link, frame: Frame, now: float) -> None:
        self.consumed[frame.payload_type] += 1

    def _on_qrp(self, connection: Link, frame: Frame, now: float) -> None:
        """A leaf's table, or an ultrapeer's last-hop table, message by message."""
        try:
            message = parse_payload(QRP, frame.payload)
        except MalformedPayloadError:
            self.dropped["malformed", QRP] += 1
            connection.offended(Offence.MALFORMED, now)
            return
        self.consumed[QRP] += 1
        leaf = connection.capabilities.ultrapeer is False
        receivers = self._qrp if leaf else self._last_hop_qrp
        receiver = receivers.get(connection.id)
        if receiver is None:
            if len(receivers) >= len(self._connections()):
                self._prune_qrp()
                receivers = self._qrp if leaf else self._last_hop_qrp
            receiver = receivers[connection.id] = QrpReceiver()
        assert isinstance(message, QrpReset | QrpPatch)
        try:
            if receiver.receive(message):
                table = receiver.table
                assert table is not None
                if leaf:
                    self._leaf_tables_version += 1
                self.log.debug(
                    "qrp table",
                    conn=connection.id,
                    leaf=leaf,
                    slots=table.slots,
                    filled=table.filled,
                )
        except QrpError as exc:
            del receivers[connection.id]
            if leaf:
                self._leaf_tables_version += 1
            connection.close(exc.reason, bye_code=int(exc.bye_code))

    def _prune_qrp(self) -> None:
        """Forget the tables of links that are gone."""
        alive = self._connection_by_id
        kept = {i: r for i, r in self._qrp.items() if alive(i)}
        if len(kept) < len(self._qrp):
            self._leaf_tables_version += 1
        self._qrp = kept
        self._last_hop_qrp = {i: r for i, r in self._last_hop_qrp.items() if alive(i)}
        self._qrp_sent = {i: sent for i, sent in self._qrp_sent.items() if alive(i)}

    def qrp_receiver(self, link_id: int) -> QrpReceiver | None:
        """A leaf's QRP receiver (its table, how many it sent), or an ultrapeer's
        last-hop one, for dumps."""
        return self._qrp.get(link_id) or self._last_hop_qrp.get(link_id)

    def leaves_table(self) -> QrpTable:
        """What our leaves share, as one table of :data:`LAST_HOP_TABLE_SLOTS` slots."""
        if self._merged_version != self._leaf_tables_version:
            merged = QrpTable(LAST_HOP_TABLE_SLOTS)
            for receiver in self._qrp.values():
                if receiver.table is not None:
                    merged.merge(receiver.table.resized(LAST_HOP_TABLE_SLOTS))
            self._merged = merged
            self._merged_version = self._leaf_tables_version
        return self._merged

    def send_last_hop_tables(self, now: float) -> None:
        """Our leaves' table to every ultrapeer that takes last-hop QRP tables: when it
        connects, and again when the table changed, at most every
        :data:`LAST_HOP_TABLE_INTERVAL` seconds."""
        self._prune_qrp()
        messages: list[bytes] | None = None
        for link in self._connections():
            capabilities = link.capabilities
            if link.closing or capabilities.ultrapeer is False:
                continue
            if not capabilities.ultrapeer_query_routing:
                continue
            version, sent_at = self._qrp_sent.get(link.id, (-1, -1e9))
            if version == self._leaf_tables_version or now - sent_at < LAST_HOP_TABLE_INTERVAL:
                continue
            if messages is None:
                messages = [
                    encode_message(Message(random_guid(), 1, 0, m))
                    for m in table_messages(self.leaves_table())
                ]
            for data in messages:
                if link.send(data, QRP, 0, now):
                    self.generated[QRP] += 1
            link.flush()
            self._qrp_sent[link.id] = (self._leaf_tables_version, now)

    def _on_vendor(self, connection: Link, frame: Frame, now: float) -> None:
        try:
            message = parse_payload(VENDOR, frame.payload)
            assert isinstance(message, VendorMessage)
            handler = self._vendor_handlers.get(VendorMessageId.of(message))
            if handler is not None:
                handler(connection, message.body)
        except MalformedPayloadError:
            self.dropped["malformed", VENDOR] += 1
            connection.offended(Offence.MALFORMED, now)
            return
        self.consumed[VENDOR] += 1

    def _on_unknown(self, connection: Link, frame: Frame, now: float) -> None:
        self.dropped["unknown-type", frame.payload_type] += 1
        connection.offended(Offence.UNKNOWN_TYPE, now)

    # ------------------------------------------------------------------ originating

    def introduce(self, connection: Link, now: float) -> None:
        """Tell a new neighbour which vendor messages we understand (Messages Supported)
        and which extra features we have (Features Supported: none), if it announced
        ``Vendor-Message``. gtk-gnutella expects both right after the handshake."""
        if not connection.capabilities.vendor_messages:
            return
        for message in (messages_supported(self._vendor_handlers), features_supported(())):
            if connection.send(encode_message(message), VENDOR, 0, now):
                self.generated[VENDOR] += 1
        connection.flush()

    def originate_ping(self, connection: Link, ttl: int, now: float) -> bytes:
        """Send our own ping (to learn hosts); its pongs are consumed here."""
        guid = random_guid()
        self.ping_routes.record(guid, LOCAL, now)
        if connection.send(encode_message(Message(guid, ttl, 0, Ping())), PING, 0, now):
            self.generated[PING] += 1
        connection.flush()
        return guid

    def originate_query(self, connection: Link | None, message: Message, now: float) -> None:
        """Send a query of our own (tests, tools); its hits are consumed here."""
        self.query_routes.record(message.guid, LOCAL, now)
        data = encode_message(message)
        for target in (connection,) if connection is not None else self._connections():
            if not target.closing and target.send(data, QUERY, 0, now):
                self.generated[QUERY] += 1
            target.flush()

    # ------------------------------------------------------------------ observation

    def statistics(self) -> RouterStatistics:
        now = _current_time()
        dropped: dict[str, dict[str, int]] = {}
        for (reason, message_type), count in sorted(self.dropped.items()):
            dropped.setdefault(reason, {})[message_type_name(message_type)] = count
        return RouterStatistics(
            received=counts_by_type_name(self.received),
            forwarded=counts_by_type_name(self.forwarded),
            generated=counts_by_type_name(self.generated),
            consumed=counts_by_type_name(self.consumed),
            dropped=dropped,
            tables={
                table.name: table.statistics(now)
                for table in (self.ping_routes, self.query_routes, self.push_routes)
            },
            pong_cache_size=len(self.pong_cache),
            pongs_not_cached=dict(self.pongs_not_cached),
            ttl_trimmed={message_type_name(t): n for t, n in sorted(self.ttl_trimmed.items())},
            dynamic_queries={"active": len(self._dynamic), **self.dynamic_counts},
        )

    def total_dropped(self) -> int:
        return sum(self.dropped.values())

    def route_tables(self) -> Iterator[RouteTable[int]]:
        yield self.ping_routes
        yield self.query_routes
        yield self.push_routes


def _qrp_words(data: bytes) -> list[int]:
    """The QRP hash codes of an encoded query's words: the words of its search text,
    or, for a query by hash alone, its ``urn:sha1:`` URN whole."""
    end = data.find(b"\x00", 25)
    if end < 0:
        return []
    words = query_words(data[25:end].decode("utf-8", "replace"))
    if not words:
        at = data.find(b"urn:sha1:", end)
        if at >= 0:
            words = [data[at : at + 41].decode("ascii", "replace").lower()]
    return [qrp_hashcode(word) for word in words]


def _current_time() -> float:
    try:
        return trio.current_time()
    except RuntimeError:
        return 0.0
