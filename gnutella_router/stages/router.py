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
* Query: duplicates dropped, unless a copy comes with a higher TTL than the first
  one had (relayed again to ultrapeers, as gtk-gnutella does); queries from a peer we
  are flow-controlling are dropped (it is the one clogging us); the reverse route is
  recorded *before* any blocking work (the injected per-query delay) so replies find
  their way even while it runs; then broadcast.
* Pong and query hit: routed back to the connection the ping or query came from, and
  only there; no route (or a closed one) means dropped and counted. Query hits teach the
  push table which connection leads to their servent GUID.
* Push: routed by servent GUID through the push table; duplicates dropped by message
  GUID.
* Leaves (``X-Ultrapeer: False``) get only the queries their QRP tables match, even at
  a query's last hop, and no pings; their pings are answered from the pong cache; their
  queries go out by dynamic querying. Ultrapeers' last-hop tables filter the TTL 1
  copies they get (:mod:`gnutella_router.routing.query_routing`,
  :mod:`gnutella_router.routing.dynamic_query`).
* Each destination's own limits: its ``X-Max-TTL`` trims the TTL of what it is sent, its
  Hops Flow keeps queries of as many hops or more from it, and queries in the pre-0.6
  form are kept from peers that drop them as ancient.
* Bye closes the connection it arrived on; QRP and vendor messages are hop-by-hop
  (:mod:`gnutella_router.routing.vendor_messages` says which vendor messages are acted
  on); unknown types are dropped. A peer's own offences (its repeats, TTL abuse,
  malformed payloads) are reported to its link, which may kick it
  (:mod:`gnutella_router.control.abuse`).

Every drop has a named reason; every counter is per message type. The hot path works on
raw frames: a forwarded message is the payload bytes behind a freshly packed header, and
one encoded copy is shared by every connection it is broadcast to.
"""

from __future__ import annotations

import collections
import operator
import time
from collections.abc import Callable, Iterator, Sequence

import structlog
import trio

from gnutella_router.config.sections import RouterConfig, SheddingConfig
from gnutella_router.control.abuse import Offence
from gnutella_router.control.query_rate import QueryRate
from gnutella_router.control.response_time import admission_class
from gnutella_router.control.shedding import Shedder
from gnutella_router.routing import vendor_messages
from gnutella_router.routing.broadcasts import Broadcasts
from gnutella_router.routing.destinations import DestinationFilter
from gnutella_router.routing.dynamic_query import TICK_SECONDS, DynamicQuerying
from gnutella_router.routing.flood import Copies, RunRouter, runs_of
from gnutella_router.routing.link import Link, Outbox
from gnutella_router.routing.network_settings import Network, NetworkSettings
from gnutella_router.routing.pongs import CachedAnswers, OwnPong, PongCache
from gnutella_router.routing.query_routing import QueryRouting
from gnutella_router.routing.replies import LOCAL, QRP, VENDOR, HostLearned, ReplyRouting
from gnutella_router.routing.route_table import RouteTable
from gnutella_router.routing.router_statistics import RouterStatistics
from gnutella_router.routing.rules import SOURCE_OVER_RATE, ping_verdict, query_verdict
from gnutella_router.routing.seen_table import SeenTable
from gnutella_router.runtime.stage import Stage
from gnutella_router.stages.admission import Door
from protocol.codec import encode_message
from protocol.constants import (
    MessageType,
    counts_by_type_name,
    message_type_name,
)
from protocol.framing import Frame
from protocol.header import TYPE_OFFSET
from protocol.messages import (
    Message,
    Ping,
    random_guid,
)
from protocol.qrp import QrpReceiver

PING = MessageType.PING
QUERY = MessageType.QUERY
OVER_RATE_LOG_SECONDS = 10.0
"""A peer's queries dropped for its query rate are logged at most this often."""

_TYPE_BYTE = operator.itemgetter(TYPE_OFFSET)
"""The payload type's offset in an encoded message."""
"""The TTL's offset in an encoded message."""


class GnutellaRouter:
    """Routing tables and forwarding decisions; the handler of the router stage."""

    def __init__(
        self,
        config: RouterConfig,
        *,
        outbox: Outbox,
        own_address: Callable[[], tuple[str, int]],
        own_guid: bytes,
        max_ttl: int,
        hard_ttl_limit: int,
        allow_private: bool = True,
        local_networks: tuple[Network, ...] = (),
        on_host_learned: HostLearned | None = None,
        shedding: SheddingConfig | None = None,
        trusted: Callable[[int], bool] | None = None,
        log: structlog.typing.FilteringBoundLogger | None = None,
        now: float = 0.0,
    ) -> None:
        self.config = config
        self.outbox = outbox
        """The one way out: every message the router sends is offered here
        (:class:`gnutella_router.routing.link.Outbox`)."""
        self._own_address = own_address
        self.settings = NetworkSettings(max_ttl, hard_ttl_limit, allow_private, local_networks)
        """The limits and address rules every part of the router reads, in one place
        (:mod:`gnutella_router.routing.network_settings`); the properties below read and
        change them."""
        self.shedder = (
            None
            if shedding is None or (shedding.policy == "backpressure" and not shedding.rate_limit)
            else Shedder(shedding, count=self._count_shed, now=now)
        )
        """None when nothing can be shed: the admission path is then the plain one."""
        self.log = log or structlog.get_logger("router")
        capacity = config.route_table_capacity

        # Routes hold connection ids, not connections: ints and floats are invisible to
        # the cyclic garbage collector, so hundreds of thousands of routes cost its full
        # collections nothing (holding the connection objects made each one take 100 ms
        # and more). A closed connection's id simply no longer resolves, and its routes
        # are nobody's share of a table (RouteTable._make_room).
        def route_table(name: str, generation_seconds: float) -> RouteTable:
            return RouteTable(
                name,
                generation_seconds,
                capacity,
                now,
                holder_alive=lambda link_id: outbox.link(link_id) is not None,
            )

        self.ping_routes = route_table("ping", config.ping_route_seconds)
        self.query_routes = route_table("query", config.query_route_seconds)
        self.push_routes = route_table("push", config.push_route_seconds)
        self.pong_cache = PongCache(capacity=200, lifetime=config.pong_cache_seconds)
        self.own_pong = OwnPong(own_address, now)
        self.cached_answers = CachedAnswers(self.pong_cache, config.pongs_per_ping)
        self.query_delay = config.query_delay_ms / 1000.0
        self.relayed_higher_ttl = 0
        self.degraded = 0
        """Queries forwarded with less TTL because the admission controller degrades."""
        self.degraded_hops = 0
        """The TTL degradation took from those queries, in all."""
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
            threshold=config.queue_bound,
            pool_size=config.threads,
            max_pool_size=config.max_threads,
            batch_size=config.batch_size,
            may_continue=self._links_written,
        )
        self.door = Door(self.stage.queue, self.shedder, self.dropped)
        """The stage queue's door, which every connection's reader hands its frames to
        (:mod:`gnutella_router.stages.admission`)."""
        self.admission = None if self.shedder is None else self.shedder.controller
        """The response-time controller (under that shedding policy): it is told the
        stage's response times, and its TTL cut degrades forwarded queries."""
        if self.admission is not None:
            self.stage.response_observer = self._observe_response
        self.query_routing = QueryRouting(
            outbox.link, self.log, table_interval=config.qrp_table_interval
        )
        self._destinations = DestinationFilter(self.query_routing, self.dropped, self.ttl_trimmed)
        self.dynamic = DynamicQuerying(outbox, self.query_routing, self.forwarded)
        self.query_rate = QueryRate(config.peer_query_rate, config.peer_query_burst, exempt=trusted)
        """Each untrusted peer's query rate (``trusted``: whether a link's peer is in
        the trusted networks, which are not limited)."""
        self._over_rate_said: dict[int, float] = {}
        self._over_rate_held: dict[int, int] = {}
        copies = Copies()
        """The one encoder of what the router sends (copies, our pongs, replies passed
        on): kept header tails, see :class:`gnutella_router.routing.flood.Copies`."""
        self.replies = ReplyRouting(
            settings=self.settings,
            own_guid=own_guid,
            outbox=outbox,
            ping_routes=self.ping_routes,
            query_routes=self.query_routes,
            push_routes=self.push_routes,
            push_seen=SeenTable("push-seen", config.push_route_seconds, capacity, now),
            pong_cache=self.pong_cache,
            query_routing=self.query_routing,
            dynamic=self.dynamic,
            copies=copies,
            received=self.received,
            forwarded=self.forwarded,
            consumed=self.consumed,
            dropped=self.dropped,
            on_host_learned=on_host_learned,
        )
        """The reverse side: replies routed back, pushes, Bye, QRP, vendor messages
        (:mod:`gnutella_router.routing.replies`)."""
        self._runs = RunRouter(
            owner=self,
            replies=self.replies.runs,
            own_pong=self.own_pong,
            cached_answers=self.cached_answers,
            generated=self.generated,
            query_rate=self.query_rate,
        )

    # ------------------------------------------------------------------ settings

    @property
    def max_ttl(self) -> int:
        """Broadcasts are clamped to hops + TTL <= this (:attr:`settings`)."""
        return self.settings.max_ttl

    @max_ttl.setter
    def max_ttl(self, value: int) -> None:
        self.settings.max_ttl = value

    @property
    def hard_ttl_limit(self) -> int:
        """Messages over hops + TTL > this are dropped (:attr:`settings`)."""
        return self.settings.hard_ttl_limit

    @hard_ttl_limit.setter
    def hard_ttl_limit(self, value: int) -> None:
        self.settings.hard_ttl_limit = value

    @property
    def allow_private(self) -> bool:
        """Whether pongs naming private addresses are cached (:attr:`settings`)."""
        return self.settings.allow_private

    @allow_private.setter
    def allow_private(self, value: bool) -> None:
        self.settings.allow_private = value

    @property
    def local_networks(self) -> tuple[Network, ...]:
        """Networks whose pongs are cached even when private addresses are not allowed
        (:attr:`settings`)."""
        return self.settings.local_networks

    @local_networks.setter
    def local_networks(self, value: tuple[Network, ...]) -> None:
        self.settings.local_networks = value

    # ------------------------------------------------------------------ the handler

    async def handle(self, batch: list[Frame]) -> int | None:
        """Route a batch; returns how many frames were handled when some were handed
        back to the queue (see :meth:`_delayed_broadcast`), else None for all.

        A batch holds runs of frames from one link; each run is routed by the one
        routing path (:mod:`gnutella_router.routing.flood`), which puts the copies to
        broadcast into the batch's :class:`~gnutella_router.routing.broadcasts.Broadcasts`;
        once every run is routed they are fanned out from here, and the batch's writes
        started (:meth:`_flush_broadcasts`). With the query delay hook on, frames go one
        at a time (:meth:`_handle_delayed`).
        """
        now = trio.current_time()
        if self.query_delay:
            return await self._handle_delayed(batch, now)
        by_id = self.outbox.link
        route = self._runs.route
        broadcasts = Broadcasts()
        for run in runs_of(batch):
            connection = by_id(run[0].source)
            if connection is None:
                self.drop_closing(run)
                continue
            route(connection, run, now, broadcasts)
            connection.frames_done(len(run))
        self._flush_broadcasts(broadcasts, now, next_batch_due=bool(self.stage.queue))
        return None

    async def _handle_delayed(self, batch: list[Frame], now: float) -> int | None:
        """Route a batch a frame at a time, running the injected query delay after each
        query routed on (the paper's blocking work per query)."""
        by_id = self.outbox.link
        runs = self._runs
        broadcasts = Broadcasts()
        for index, frame in enumerate(batch):
            connection = by_id(frame.source)
            if connection is None:
                self.drop_closing([frame])
                continue
            accepted = runs.accepted_queries
            if frame.payload_type == QUERY:
                # The query's copy alone waits for the delay.
                self._flush_broadcasts(broadcasts, now)
                broadcasts = Broadcasts()
            runs.route(connection, [frame], now, broadcasts)
            connection.frames_done(1)
            if runs.accepted_queries != accepted:
                await self._delayed_broadcast(batch, index, broadcasts)
                return index + 1
        self._flush_broadcasts(broadcasts, now)
        return None

    async def _delayed_broadcast(self, batch: list[Frame], index: int, held: Broadcasts) -> None:
        """Run the injected query delay as blocking work, then broadcast the query.

        The query's route is already recorded, so replies racing the delay find their
        way. The rest of the batch goes back to the queue first: another worker routes
        it while this one is blocked, and with a single worker it waits, exactly like the
        paper's single-threaded router. Its copy waits in ``held``, alone: no other
        worker's fan-out can send it early.
        """
        self.stage.queue.requeue(batch[index + 1 :])
        await self.stage.run_blocking(time.sleep, self.query_delay)
        self._flush_broadcasts(held, trio.current_time())

    def _count_shed(self, reason: str, frame: Frame) -> None:
        self.dropped[reason, frame.payload_type] += 1

    # ------------------------------------------------------------------ the run router's

    def has_leaves(self) -> bool:
        return bool(self.query_routing.leaves)

    def drop_closing(self, frames: list[Frame]) -> None:
        """Frames whose link is gone or closing: received, and dropped for it."""
        received = self.received
        dropped = self.dropped
        for frame in frames:
            received[frame.payload_type] += 1
            dropped["connection-closing", frame.payload_type] += 1

    def route_single(self, link: Link, frame: Frame, now: float) -> None:
        """A frame that ends a stretch of the run router: a ping or query it refused
        (its verdict is found again by the same rule and acted on), or any other type,
        to its handler."""
        message_type = frame.payload_type
        if message_type == PING:
            verdict = ping_verdict(frame.ttl, frame.hops, frame.payload, self.hard_ttl_limit)
        elif message_type == QUERY:
            verdict = query_verdict(
                frame.ttl,
                frame.hops,
                frame.payload,
                self.hard_ttl_limit,
                link.flow_controlled,
                self.query_rate.allowance(link.id, now) <= 0,
                self.config.drop_ancient_queries,
            )
            if verdict == SOURCE_OVER_RATE:
                self._note_over_rate(link, now)
        else:
            self.replies.handle(link, frame, now)
            return
        self.replies.refuse(link, frame, verdict, now)

    def _note_over_rate(self, link: Link, now: float) -> None:
        """Say that a peer's queries are dropped for its query rate: once per peer every
        :data:`OVER_RATE_LOG_SECONDS`, with how many were dropped since."""
        held = self._over_rate_held
        count = held.get(link.id, 0) + 1
        said = self._over_rate_said.get(link.id)
        if said is not None and now - said < OVER_RATE_LOG_SECONDS:
            held[link.id] = count
            return
        held.pop(link.id, None)
        self._over_rate_said[link.id] = now
        links = self.outbox.links()
        if len(self._over_rate_said) > 64 + 2 * len(links):
            alive = {c.id for c in links}
            self._over_rate_said = {k: t for k, t in self._over_rate_said.items() if k in alive}
            self._over_rate_held = {k: n for k, n in held.items() if k in alive}
        self.log.warning(
            "peer over its query rate: its queries are dropped",
            conn=link.id,
            dropped=count,
            rate=self.query_rate.rate,
            burst=self.query_rate.burst,
        )

    def duplicate(self, table: RouteTable, link: Link, frame: Frame, now: float) -> None:
        """Count a duplicate; the same GUID again from the same peer, with no higher
        TTL than the first time, is an offence (a relay via another path is not)."""
        self.dropped["duplicate", frame.payload_type] += 1
        first = table.first(frame.guid)
        if first is not None and first[0] == link.id and frame.ttl <= first[1]:
            link.offended(Offence.DUPLICATE, now)

    def relays_higher_ttl(self, link: Link, frame: Frame) -> bool:
        """A copy of a query seen before that comes with a higher TTL is relayed again
        (to ultrapeers, not leaves: they had it), as gtk-gnutella does: the first copy
        may have come the long way round with too little TTL left to reach as far."""
        first = self.query_routes.first(frame.guid)
        if first is None or frame.ttl <= first[1] or link.capabilities.ultrapeer is False:
            return False
        self.query_routes.raise_ttl(frame.guid, frame.ttl)
        self.relayed_higher_ttl += 1
        return True

    def start_dynamic_query(self, leaf: Link, data: bytes, now: float) -> None:
        refused = self.dynamic.start(leaf, data, now)
        if refused is not None:
            self.dropped[refused, QUERY] += 1

    # ------------------------------------------------------------------ the fan-out

    def _flush_broadcasts(
        self, broadcasts: Broadcasts, now: float, *, next_batch_due: bool = False
    ) -> None:
        """Hand the batch's ``broadcasts`` to every connection, then start the writes.

        With ``next_batch_due`` (more events are queued, and the worker takes them as
        soon as this batch is done), a link whose queue can take a whole batch more
        without a policy decision is left unwritten: the next batch's write carries
        both (:meth:`gnutella_router.routing.link.Outbox.end_batch`). Under a flood that
        halves the writes; with an empty queue, as at any load the router keeps up with,
        nothing waits.
        """
        if broadcasts:
            self._fan_out(broadcasts, self.outbox.links(), now)
        self.query_routing.end_batch()
        # The largest batch the stage takes, when the next one is already queued.
        self.outbox.end_batch(self.config.batch_size if next_batch_due else 0)

    def _fan_out(self, broadcasts: Broadcasts, connections: Sequence[Link], now: float) -> None:
        """Every connection's share of ``broadcasts``, queued in one call each."""
        datas = broadcasts.datas
        senders = {source for source, _ in broadcasts.runs}
        queries = broadcasts.queries
        pings = len(datas) - queries
        # Known from when the copies were made: a peer announcing a lower X-Max-TTL than
        # this gets copies trimmed to it (every real servent announces one).
        highest_ttl = broadcasts.highest_ttl
        forwarded = self.forwarded
        for_destination = self._destinations.apply
        offer_many = self.outbox.offer_many
        for connection in connections:
            if connection.closing:
                continue
            out = datas
            if connection in senders:
                out = broadcasts.not_from(connection)
            out = for_destination(
                connection,
                out,
                ancient=broadcasts.ancient,
                last_hop=broadcasts.last_hop,
                not_leaves=broadcasts.not_leaves,
                queries=queries,
                highest_ttl=highest_ttl,
            )
            if out is not datas:
                if out:
                    refused = offer_many(connection.id, out, sum(map(len, out)), now)
                    self._count_fanned_out(out, refused)
            elif refused := offer_many(connection.id, datas, broadcasts.size, now):
                self._count_fanned_out(datas, refused)
            else:
                forwarded[PING] += pings
                forwarded[QUERY] += queries

    def _links_written(self) -> bool:
        """Whether the stage may route its next batch before the other tasks run: no
        writer has work left from this one (:attr:`gnutella_router.routing.link.Outbox.idle`)."""
        return self.outbox.idle

    # ------------------------------------------------------------------ dynamic querying

    def widen_dynamic_queries(self, now: float) -> None:
        """Every leaf query's next step, if due (called every :data:`TICK_SECONDS`)."""
        self.dynamic.widen(now)

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
            if self.dynamic.queries:
                self.widen_dynamic_queries(now)
            if now - tables_at >= 1.0:
                tables_at = now
                self.send_last_hop_tables(now)
                links = self.outbox.links()
                if len(self.query_rate) > 64 + 2 * len(links):
                    self.query_rate.forget({link.id for link in links})

    def _count_fanned_out(self, datas: list[bytes], refused: list[bytes]) -> None:
        """Count a broadcast to one link: forwarded, except what its queue refused."""
        forwarded = self.forwarded
        for message_type, count in collections.Counter(map(_TYPE_BYTE, datas)).items():
            forwarded[message_type] += count
        for message_type, count in collections.Counter(map(_TYPE_BYTE, refused)).items():
            forwarded[message_type] -= count
            self.dropped["outgoing-queue", message_type] += count

    # ------------------------------------------------------------------ per type

    def _observe_response(self, seconds: float, now: float, oldest: Frame) -> None:
        assert self.admission is not None
        link = self.outbox.link(oldest.source)
        from_leaf = link is not None and link.capabilities.ultrapeer is False
        self.admission.observe(seconds, now, admission_class(oldest.payload_type, from_leaf))

    @property
    def degrading(self) -> bool:
        """Whether the admission controller cuts forwarded queries' TTL now."""
        return self.admission is not None and bool(self.admission.cut)

    def degraded_ttl(self, keeps: int) -> int:
        """Degradation: the TTL a query that may keep ``keeps`` forwards, less the
        controller's cut (never under one: its last hop still reaches the leaves that
        match). The per-message rules and the batch path both cut this way."""
        cut = 0 if self.admission is None else self.admission.cut
        return max(1, keeps - cut) if cut else keeps

    def count_degraded(self, queries: int, hops: int) -> None:
        """``queries`` forwarded with ``hops`` less TTL in all, by degradation."""
        self.degraded += queries
        self.degraded_hops += hops

    def send_last_hop_tables(self, now: float) -> None:
        """Our leaves' keywords to the ultrapeers that take last-hop tables and are due
        them (see :mod:`gnutella_router.routing.query_routing`)."""
        self.generated[QRP] += self.query_routing.send_tables(self.outbox, now)

    def qrp_receiver(self, link_id: int) -> QrpReceiver | None:
        """A link's QRP receiver (its table, how many it sent), for dumps."""
        return self.query_routing.receiver(link_id)

    # ------------------------------------------------------------------ originating

    def introduce(self, connection: Link, now: float) -> None:
        """Tell a new neighbour which vendor messages we understand (Messages Supported)
        and which extra features we have (Features Supported: none), if it announced
        ``Vendor-Message``. gtk-gnutella expects both right after the handshake."""
        if not connection.capabilities.vendor_messages:
            return
        for data in vendor_messages.INTRODUCTIONS:
            if self.outbox.offer(connection.id, data, now):
                self.generated[VENDOR] += 1
        self.outbox.write(connection.id)

    def originate_ping(self, connection: Link, ttl: int, now: float) -> bytes:
        """Send our own ping (to learn hosts); its pongs are consumed here."""
        guid = random_guid()
        self.ping_routes.record(guid, LOCAL, now)
        if self.outbox.offer(connection.id, encode_message(Message(guid, ttl, 0, Ping())), now):
            self.generated[PING] += 1
        self.outbox.write(connection.id)
        return guid

    def originate_query(self, connection: Link | None, message: Message, now: float) -> None:
        """Send a query of our own (tests, tools); its hits are consumed here."""
        self.query_routes.record(message.guid, LOCAL, now)
        data = encode_message(message)
        outbox = self.outbox
        for target in (connection,) if connection is not None else outbox.links():
            if not target.closing and outbox.offer(target.id, data, now):
                self.generated[QUERY] += 1
            outbox.write(target.id)

    def inject(self, message: Message, now: float) -> int:
        """Originate the operator's ping or query (the console's probe) as our own: its
        route is recorded as ours (with its TTL, so the route dumps show where it
        started), and it goes to every ultrapeer neighbour, and to the leaves whose QRP
        table a query matches (leaves take no pings from us). Its replies are consumed
        here, counted on its route. How many neighbours it was sent to."""
        is_ping = isinstance(message.payload, Ping)
        message_type, table = (PING, self.ping_routes) if is_ping else (QUERY, self.query_routes)
        table.record(message.guid, LOCAL, now, message.ttl, 0)
        data = encode_message(message)
        one = [data]  # one list for every leaf: their shares are sorted out once
        outbox = self.outbox
        sent = 0
        for link in outbox.links():
            if link.closing:
                continue
            leaf = link.capabilities.ultrapeer is False
            if leaf and (is_ping or not self.query_routing.for_leaf(link.id, one)[0]):
                continue
            if outbox.offer(link.id, data, now):
                self.generated[message_type] += 1
                sent += 1
            outbox.write(link.id)
        return sent

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
            pongs_not_cached=dict(self.replies.pongs_not_cached),
            ttl_trimmed={message_type_name(t): n for t, n in sorted(self.ttl_trimmed.items())},
            dynamic_queries=self.dynamic.statistics(),
            relayed_higher_ttl=self.relayed_higher_ttl,
            degraded_queries=self.degraded,
            degraded_hops=self.degraded_hops,
        )

    def total_dropped(self) -> int:
        return sum(self.dropped.values())

    def route_tables(self) -> Iterator[RouteTable]:
        yield self.ping_routes
        yield self.query_routes
        yield self.push_routes


def _current_time() -> float:
    try:
        return trio.current_time()
    except RuntimeError:
        return 0.0
