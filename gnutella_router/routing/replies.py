"""The router's replies and hop-by-hop messages: pongs, hits and pushes back along their
recorded paths; Bye, QRP and vendor messages acted on where they arrive; the checks
every routed message passes.

Theory of operation
-------------------
:class:`ReplyRouting` is the reverse side of the router: an object the router
(:class:`~gnutella_router.stages.router.GnutellaRouter`) holds and builds with
everything it needs handed in by name (the route tables, the counters, the one
:class:`~.link.Outbox`, the pong cache, query routing, dynamic querying, the one encoder
of copies). So the flooding side (pings, queries and their broadcasts, :mod:`.flood`)
and the reverse side can each be read whole, and what the reverse side touches is
written in its constructor.

It owns what only it uses: the push duplicates table, what pongs taught (the verdict on
each address named, the hosts told to the catcher lately) and the reply run
(:class:`~.reply_runs.ReplyRun`, whose owner it is: the run calls back here for its rare
cases). The settings it judges by (the hard TTL limit, which addresses may be cached)
are read from the router's one :class:`~.network_settings.NetworkSettings` at each use,
so a change made while the router runs takes effect here at once; the verdicts it
remembers per address are forgotten when those settings change.

The run router hands it every frame that is neither a ping nor a query nor part of a
run of replies (:meth:`ReplyRouting.handle`: pushes, Bye, QRP, vendor messages, unknown
types), and every refused ping or query (:meth:`ReplyRouting.refuse`).
"""

from __future__ import annotations

import collections
from collections.abc import Callable

from gnutella_router.control.abuse import LARGE_HIT, Offence, in_networks
from gnutella_router.discovery.ranges import NON_PUBLIC_REASONS, classify_address
from gnutella_router.routing import vendor_messages
from gnutella_router.routing.dynamic_query import DynamicQuerying
from gnutella_router.routing.flood import Copies
from gnutella_router.routing.link import Link, Outbox
from gnutella_router.routing.network_settings import Network, NetworkSettings
from gnutella_router.routing.pongs import PongCache
from gnutella_router.routing.query_routing import QueryRouting
from gnutella_router.routing.reply_runs import ReplyRun
from gnutella_router.routing.route_table import OWN, RouteTable
from gnutella_router.routing.rules import DROP_REASONS, MALFORMED, OFFENCES, OK, ttl_verdict
from gnutella_router.routing.seen_table import SeenTable
from protocol.codec import parse_payload
from protocol.constants import GUID_SIZE, MessageType
from protocol.errors import MalformedPayloadError
from protocol.framing import Frame
from protocol.messages import Bye, Payload, QrpPatch, QrpReset, VendorMessage
from protocol.pong_address import PongAddresses

PONG = MessageType.PONG
BYE = MessageType.BYE
PUSH = MessageType.PUSH
QUERY_HIT = MessageType.QUERY_HIT
VENDOR = MessageType.VENDOR
QRP = MessageType.QRP
HOP_BY_HOP = frozenset({MessageType.STANDARD_VENDOR})
"""Types consumed where they arrive, with nothing to act on."""
LOCAL = OWN
"""The route of a message this router originated (connection ids start at 1)."""

HostLearned = Callable[[str, int, str, int], None]
"""Told of a host: its address, port, how it was learned (``"pong"``) and the id of the
connection that told us (the host cache keeps a share per teller)."""
_NON_PUBLIC = frozenset(NON_PUBLIC_REASONS)
HOSTS_REMEMBERED = 4096
"""Addresses (and hosts) whose verdict, or news, the router remembers for pongs."""
LEARN_AGAIN_SECONDS = 60.0
"""A host named in pongs is told to the catcher at most this often."""
PONGS_REMEMBERED = 4096
"""Pongs whose learning time the router remembers (see
:data:`~.reply_runs.PONG_RELEARN_SECONDS`)."""


class ReplyRouting:
    """Reverse-path routing and the messages that stop here (see the module docstring)."""

    def __init__(
        self,
        *,
        settings: NetworkSettings,
        own_guid: bytes,
        outbox: Outbox,
        ping_routes: RouteTable,
        query_routes: RouteTable,
        push_routes: RouteTable,
        push_seen: SeenTable,
        pong_cache: PongCache,
        query_routing: QueryRouting,
        dynamic: DynamicQuerying,
        copies: Copies,
        received: list[int],
        forwarded: list[int],
        consumed: list[int],
        dropped: collections.Counter[tuple[str, int]],
        on_host_learned: HostLearned | None = None,
    ) -> None:
        self.runs = ReplyRun(
            owner=self,
            outbox=outbox,
            ping_routes=ping_routes,
            query_routes=query_routes,
            push_routes=push_routes,
            copies=copies,
            received=received,
            forwarded=forwarded,
            consumed=consumed,
            dropped=dropped,
        )
        """Routes the runs of pongs and query hits, calling back here for what is rare.
        It holds the outbox, the route tables and the counts for both: this side reads
        them from it, so the two cannot route by different tables or count apart."""
        self.settings = settings
        """The router's settings, read at each use (:mod:`.network_settings`)."""
        self.own_guid = own_guid
        self.push_seen = push_seen
        """Pushes seen, by message GUID: a push is routed once."""
        self.pong_cache = pong_cache
        self.query_routing = query_routing
        self.dynamic = dynamic
        self.on_host_learned = on_host_learned
        """Told of each host a pong names, when it is news (the catcher's; the profiler
        may wrap it while it runs)."""
        self.pongs_not_cached: collections.Counter[str] = collections.Counter()
        """Pongs routed but kept out of the pong cache, by reason (e.g. "private"); a
        pong repeated within :data:`~.reply_runs.PONG_RELEARN_SECONDS` is counted once."""
        self._copy = copies.copy
        """The one encoder of what the router sends (:class:`.flood.Copies`)."""
        self._pong_addresses = PongAddresses()
        self._pong_verdicts: dict[str, str | None] = {}
        self._verdicts_under: tuple[bool, tuple[Network, ...]] = (
            settings.allow_private,
            settings.local_networks,
        )
        """The settings :attr:`_pong_verdicts` and :attr:`_pongs_learned` were worked out
        under."""
        self._hosts_told: dict[tuple[str, int], float] = {}
        self._pongs_learned: dict[bytes, float] = {}
        """When each pong (its payload) was last learned from (see
        :data:`~.reply_runs.PONG_RELEARN_SECONDS`)."""
        self._handlers: list[Callable[[Link, Frame, float], None]] = [self._on_unknown] * 256
        self._handlers[BYE] = self._on_bye
        self._handlers[PUSH] = self._on_push
        for message_type in HOP_BY_HOP:
            self._handlers[message_type] = self._on_hop_by_hop
        self._handlers[VENDOR] = self._on_vendor
        self._handlers[QRP] = self._on_qrp

    @property
    def hard_ttl_limit(self) -> int:
        """The limit on hops + TTL (the reply run's, :class:`.reply_runs.ReplyOwner`)."""
        return self.settings.hard_ttl_limit

    def handle(self, link: Link, frame: Frame, now: float) -> None:
        """A frame that is neither a ping, a query nor a reply, to its handler: a push,
        Bye, QRP, a vendor message or a type we do not know."""
        self._handlers[frame.payload_type](link, frame, now)

    def refuse(self, link: Link, frame: Frame, verdict: int, now: float) -> None:
        """Drop a frame for a rule's ``verdict`` (:mod:`.rules`): counted under its
        reason, and the sender's offence where it is one."""
        self.runs.dropped[DROP_REASONS[verdict], frame.payload_type] += 1
        offence = OFFENCES.get(verdict)
        if offence is not None:
            link.offended(offence, now)

    def _ttl_ok(self, connection: Link, frame: Frame, now: float) -> bool:
        verdict = ttl_verdict(frame.ttl, frame.hops, self.settings.hard_ttl_limit)
        if verdict != OK:
            self.refuse(connection, frame, verdict, now)
            return False
        return True

    def forward_reply(self, route_id: int, frame: Frame, now: float) -> None:
        """Send a pong, query hit or push one hop further along its recorded path, alone
        (the reply run's way when a destination's queue must decide message by message,
        see :mod:`.reply_runs`)."""
        message_type = frame.payload_type
        if route_id == LOCAL:
            self.runs.consumed[message_type] += 1
            return
        route = self.runs.outbox.link(route_id)
        if route is None or route.closing:
            self.runs.dropped["route-closed", message_type] += 1
            return
        ttl = frame.ttl - 1
        if ttl <= 0:
            self.runs.dropped["ttl-expired", message_type] += 1
            return
        data = self._copy(frame.guid, message_type, ttl, frame.hops + 1, frame.payload)
        if self.runs.outbox.offer(route_id, data, now):
            self.runs.forwarded[message_type] += 1
        else:
            self.runs.dropped["outgoing-queue", message_type] += 1

    def pongs_learned(self) -> dict[bytes, float]:
        """When each pong (its payload) was last learned from, under the settings as
        they are now: a reply run skips :meth:`pong_seen` for a pong learned from within
        :data:`~.reply_runs.PONG_RELEARN_SECONDS`."""
        settings = self.settings
        under = self._verdicts_under
        if settings.allow_private != under[0] or settings.local_networks is not under[1]:
            # Changed while the router runs: what was worked out before no longer holds.
            self._pong_verdicts = {}
            self._pongs_learned = {}
            self._verdicts_under = (settings.allow_private, settings.local_networks)
        return self._pongs_learned

    def pong_seen(self, connection: Link, frame: Frame, now: float) -> bool:
        """What a pong tells us, before it is routed back: its host goes into the pong
        cache (unless its address may not be handed out) and, if news, to the catcher.
        False when its payload is malformed (counted, and the sender's offence). A pong
        learned from within :data:`~.reply_runs.PONG_RELEARN_SECONDS` is not seen again
        (:meth:`pongs_learned`)."""
        payload = frame.payload
        learned = self.pongs_learned()
        address = self._pong_addresses.read(payload)
        if address is None:
            self.malformed(connection, frame, now)
            return False
        if len(learned) >= PONGS_REMEMBERED:
            learned.clear()
        learned[payload] = now
        ip, port = address
        if port:
            problem = self._uncacheable(ip)
            if problem is None:
                self.pong_cache.add(ip, port, frame.payload, frame.hops, now)
            else:
                # Still routed back to whoever pinged; just not handed out again.
                self.pongs_not_cached[problem] += 1
            if self.on_host_learned is not None and self._news(ip, port, now):
                self.on_host_learned(ip, port, "pong", connection.id)
        return True

    def pong_without_route(self, connection: Link, frame: Frame, now: float) -> None:
        """A pong for no ping we routed: dropped, and the sender's offence."""
        self.runs.dropped["no-route", PONG] += 1
        connection.offended(Offence.UNROUTABLE, now)

    def hit_without_route(self, connection: Link, frame: Frame, now: float) -> None:
        """A query hit for no query we routed: dropped, and the sender's offence: a
        large one at once (too costly to parse for a verdict), any other parsed whole,
        so that garbage sent as hits is the offence it is, not a lost route."""
        payload = frame.payload
        if len(payload) > LARGE_HIT:
            self.runs.dropped["no-route", QUERY_HIT] += 1
            connection.offended(Offence.UNROUTABLE_LARGE, now)
            return
        try:
            parse_payload(QUERY_HIT, payload)
        except MalformedPayloadError:
            self.malformed(connection, frame, now)
            return
        self.runs.dropped["no-route", QUERY_HIT] += 1
        connection.offended(Offence.UNROUTABLE, now)

    def dynamic_hit(self, guid: bytes, route: int, results: int) -> None:
        """A hit for ``guid`` going back on ``route``: dynamic querying counts it if it
        is one of a leaf's queries under way."""
        if self.dynamic.queries:
            self.dynamic.note_hit(guid, route, results)

    def _uncacheable(self, ip: str) -> str | None:
        """Why pongs naming ``ip`` may not be handed out again (None: they may).

        Worked out once per address and remembered (a bounded number): pongs name the
        same hosts again and again, and the look-up parses the address and walks the
        local networks, several times what routing the pong costs.
        """
        settings = self.settings
        allow_private = settings.allow_private
        local_networks = settings.local_networks
        verdicts = self._pong_verdicts
        if ip in verdicts:
            return verdicts[ip]
        canonical, problem = classify_address(ip)
        if problem in _NON_PUBLIC and (allow_private or in_networks(canonical, local_networks)):
            problem = None
        if len(verdicts) >= HOSTS_REMEMBERED:
            verdicts.clear()
        verdicts[ip] = problem
        return problem

    def _news(self, ip: str, port: int, now: float) -> bool:
        """Whether a host named in a pong is worth telling the catcher of: not when it
        was told of it within :data:`LEARN_AGAIN_SECONDS` (a bounded memory)."""
        told = self._hosts_told
        key = (ip, port)
        when = told.get(key)
        if when is not None and now - when < LEARN_AGAIN_SECONDS:
            return False
        if len(told) >= HOSTS_REMEMBERED:
            told.clear()
        told[key] = now
        return True

    def _on_push(self, connection: Link, frame: Frame, now: float) -> None:
        if not self._ttl_ok(connection, frame, now):
            return
        payload = frame.payload
        if len(payload) < 26:
            self.malformed(connection, frame, now)
            return
        if not self.push_seen.add(frame.guid, now):
            self.runs.dropped["duplicate", PUSH] += 1
            return
        servent = payload[:GUID_SIZE]
        if servent == self.own_guid:
            self.runs.consumed[PUSH] += 1
            return
        route = self.runs.push_routes.lookup(servent, now)
        if route is None:
            self.runs.dropped["no-route", PUSH] += 1
            connection.offended(Offence.UNROUTABLE, now)
            return
        self.runs.push_routes.note_hit(servent)
        self.forward_reply(route, frame, now)

    def _on_bye(self, connection: Link, frame: Frame, now: float) -> None:
        if frame.hops != 0 or frame.ttl > 1:
            # The spec asks receivers to ignore a Bye that was relayed: whatever its
            # payload, it is not this peer's goodbye, so it neither parses nor closes.
            self.runs.dropped["bye-relayed", BYE] += 1
            return
        try:
            bye = parse_payload(BYE, frame.payload)
        except MalformedPayloadError:
            bye = None
        if not isinstance(bye, Bye):
            connection.close("peer sent a malformed Bye")
            return
        self.runs.consumed[BYE] += 1
        connection.received_bye(bye.code, bye.reason)

    def _on_hop_by_hop(self, connection: Link, frame: Frame, now: float) -> None:
        self.runs.consumed[frame.payload_type] += 1

    def _on_qrp(self, connection: Link, frame: Frame, now: float) -> None:
        """A leaf's table, or an ultrapeer's last-hop table, message by message."""
        message = self._parsed(connection, frame, now)
        if not isinstance(message, QrpReset | QrpPatch):
            return
        if self.query_routing.receive(connection, message, len(self.runs.outbox.links()), now):
            self.runs.consumed[QRP] += 1
        else:  # begun too soon after the peer's last table, or a patch of such a table
            self.runs.dropped["qrp-too-soon", QRP] += 1

    def _on_vendor(self, connection: Link, frame: Frame, now: float) -> None:
        message = self._parsed(connection, frame, now)
        if not isinstance(message, VendorMessage):
            return
        try:
            kept = vendor_messages.query_status(message)
            if kept is not None:  # a leaf's guidance for one of its queries
                self.dynamic.note_status(frame.guid, connection.id, kept)
            else:
                vendor_messages.handle(connection, message)
        except MalformedPayloadError:  # a body we act on that does not parse
            self.malformed(connection, frame, now)
            return
        self.runs.consumed[VENDOR] += 1

    def _parsed(self, connection: Link, frame: Frame, now: float) -> Payload | None:
        """The frame's payload parsed whole, or None after counting it malformed."""
        try:
            return parse_payload(frame.payload_type, frame.payload)
        except MalformedPayloadError:
            self.malformed(connection, frame, now)
            return None

    def malformed(self, connection: Link, frame: Frame, now: float) -> None:
        self.refuse(connection, frame, MALFORMED, now)

    def _on_unknown(self, connection: Link, frame: Frame, now: float) -> None:
        self.runs.dropped["unknown-type", frame.payload_type] += 1
        connection.offended(Offence.UNKNOWN_TYPE, now)
