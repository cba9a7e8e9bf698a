"""A deliberately naive router: the reference the real one is held to.

One message at a time, every rule spelled out where it applies, no batching, no kept
header tails, no bulk recording: written to be read, not to be fast. It routes pings,
queries, pongs, query hits and QRP tables as the router's documentation says it does
(:mod:`gnutella_router.stages.router`), over the same fake links; the differential test
(``tests/gnutella_router/stages/test_one_path.py``) drives it and the real router with
the same frames and asks for the same bytes on every link, the same counters and the
same route tables.

What is not a routing rule is borrowed from the daemon rather than written again: the
route tables' memory (:class:`RouteTable`, recorded one GUID at a time here), QRP tables
and their matching (:class:`QueryRouting`), the pong cache, our own pong's payload and
dynamic querying's schedule.
"""

from __future__ import annotations

import collections
import struct

import structlog
import trio

from gnutella_router.config import Config
from gnutella_router.control.abuse import Offence
from gnutella_router.discovery.ranges import NON_PUBLIC_REASONS, classify_address
from gnutella_router.routing.dynamic_query import DynamicQuerying
from gnutella_router.routing.pongs import CachedAnswers, OwnPong, PongCache
from gnutella_router.routing.query_routing import QueryRouting
from gnutella_router.routing.replies import PONGS_REMEMBERED
from gnutella_router.routing.reply_runs import PONG_RELEARN_SECONDS
from gnutella_router.routing.route_table import RouteTable
from protocol.codec import parse_payload
from protocol.constants import MessageType
from protocol.errors import MalformedPayloadError
from protocol.framing import Frame
from protocol.messages import Pong, QrpPatch, QrpReset
from tests.support.links import FakeLink, outbox_over

PING, PONG, QUERY, QUERY_HIT, QRP = 0x00, 0x01, 0x80, 0x81, 0x30
HARD_TTL_LIMIT = 15


def encode(guid: bytes, message_type: int, ttl: int, hops: int, payload: bytes) -> bytes:
    return guid + struct.pack("<BBBI", message_type, ttl, hops, len(payload)) + payload


class Copy:
    """A message waiting for the batch's broadcast, and what limits where it may go."""

    def __init__(self, source: FakeLink, data: bytes, *, relayed: bool = False) -> None:
        self.source = source
        self.data = data
        self.relayed = relayed  # a query seen before, sent again with more TTL


class NaiveRouter:
    """The router's rules, one message at a time (see the module)."""

    def __init__(
        self,
        links: list[FakeLink],
        *,
        cut: int = 0,
        drop_ancient_queries: bool | None = None,
        query_rate: tuple[float, int] | None = None,
    ) -> None:
        config = Config()
        self.links = links
        self.max_ttl = config.network.max_ttl
        self.drop_ancient = (
            config.router.drop_ancient_queries
            if drop_ancient_queries is None
            else drop_ancient_queries
        )
        self.cut = cut
        self.query_rate, self.query_burst = (
            (config.router.peer_query_rate, config.router.peer_query_burst)
            if query_rate is None
            else query_rate
        )
        self.tokens: dict[int, tuple[float, float]] = {}
        """Each peer's query tokens and when they were counted."""
        """The admission controller's TTL cut (degradation), fixed for a test."""
        now = trio.current_time()
        capacity = config.router.route_table_capacity
        self.ping_routes = RouteTable("ping", config.router.ping_route_seconds, capacity, now)
        self.query_routes = RouteTable("query", config.router.query_route_seconds, capacity, now)
        self.push_routes = RouteTable("push", config.router.push_route_seconds, capacity, now)
        self.pong_cache = PongCache(capacity=200, lifetime=config.router.pong_cache_seconds)
        self.pongs_learned: dict[bytes, float] = {}
        self.own_pong = OwnPong(lambda: ("192.0.2.1", 6346), now)
        self.cached_answers = CachedAnswers(self.pong_cache, config.router.pongs_per_ping)
        self.received = [0] * 256
        self.forwarded = [0] * 256
        self.generated = [0] * 256
        self.consumed = [0] * 256
        self.dropped: collections.Counter[tuple[str, int]] = collections.Counter()
        self.ttl_trimmed: collections.Counter[int] = collections.Counter()
        self.degraded = 0
        self.degraded_hops = 0
        self.relayed_higher_ttl = 0
        self.routing = QueryRouting(self.link, structlog.get_logger("naive-router"))
        self.dynamic = DynamicQuerying(
            outbox_over(lambda: self.links), self.routing, self.forwarded
        )
        self.pending: list[Copy] = []

    def link(self, link_id: int) -> FakeLink | None:
        return next((link for link in self.links if link.id == link_id), None)

    # ------------------------------------------------------------------ a batch

    def handle(self, frames: list[Frame]) -> None:
        now = trio.current_time()
        for frame in frames:
            link = self.link(frame.source)
            self.received[frame.payload_type] += 1
            if link is None or link.closing:
                self.dropped["connection-closing", frame.payload_type] += 1
            elif frame.payload_type == PING:
                self.ping(link, frame, now)
            elif frame.payload_type == QUERY:
                self.query(link, frame, now)
            elif frame.payload_type == PONG:
                self.pong(link, frame, now)
            elif frame.payload_type == QUERY_HIT:
                self.query_hit(link, frame, now)
            elif frame.payload_type == QRP:
                self.qrp(link, frame, now)
            else:
                raise AssertionError(f"the reference does not route type {frame.payload_type}")
        self.broadcast(now)

    # ------------------------------------------------------------------ rules

    def ttl_ok(self, link: FakeLink, frame: Frame, now: float) -> bool:
        if frame.ttl == 0:
            self.dropped["ttl-zero", frame.payload_type] += 1
            link.offended(Offence.TTL_ZERO, now)
            return False
        if frame.ttl + frame.hops > HARD_TTL_LIMIT:
            self.dropped["hard-ttl-limit", frame.payload_type] += 1
            link.offended(Offence.HIGH_TTL, now)
            return False
        return True

    def malformed(self, link: FakeLink, frame: Frame, now: float) -> None:
        self.dropped["malformed", frame.payload_type] += 1
        link.offended(Offence.MALFORMED, now)

    def duplicate(self, table: RouteTable, link: FakeLink, frame: Frame, now: float) -> None:
        self.dropped["duplicate", frame.payload_type] += 1
        first = table.first(frame.guid)
        if first is not None and first[0] == link.id and frame.ttl <= first[1]:
            link.offended(Offence.DUPLICATE, now)

    def ping(self, link: FakeLink, frame: Frame, now: float) -> None:
        if not self.ttl_ok(link, frame, now):
            return
        if frame.payload and frame.payload[0] != 0xC3:
            self.malformed(link, frame, now)
            return
        caches = link.capabilities.pong_caching or link.capabilities.ultrapeer is False
        # Answered and never forwarded, a caching peer's ping has no route to keep: it
        # is not recorded, and a repeat is answered again.
        if not caches and not self.ping_routes.record(
            frame.guid, link.id, now, frame.ttl, frame.hops
        ):
            self.duplicate(self.ping_routes, link, frame, now)
            return
        pong = self.own_pong.payload(link.capabilities.ggep, now)
        if link.send(encode(frame.guid, PONG, frame.hops + 1, 0, pong), now):
            self.generated[PONG] += 1
        if caches:
            links = tuple(self.links)
            if frame.ttl > 1 and self.cached_answers.due(link.id, now, links):
                for payload, hops in self.cached_answers.answers(link, now, links):
                    answer = encode(frame.guid, PONG, frame.hops + 1, hops + 1, payload)
                    if link.send(answer, now):
                        self.generated[PONG] += 1
            return
        ttl = min(frame.ttl, self.max_ttl - frame.hops)
        if ttl > 1:
            copy = encode(frame.guid, PING, ttl - 1, frame.hops + 1, frame.payload)
            self.pending.append(Copy(link, copy))

    def query(self, link: FakeLink, frame: Frame, now: float) -> None:
        if not self.ttl_ok(link, frame, now):
            return
        if link.flow_controlled:
            self.dropped["source-flow-controlled", QUERY] += 1
            return
        if not self.has_token(link, now):
            self.dropped["source-over-rate", QUERY] += 1
            return
        payload = frame.payload
        if len(payload) < 3 or b"\x00" not in payload[2:]:
            self.malformed(link, frame, now)
            return
        ancient = payload[0] == 0 and payload[1] == 0
        if ancient and self.drop_ancient:
            self.dropped["ancient-format", QUERY] += 1
            return
        self.spend_token(link)  # every query that passes its rules, duplicates too
        relayed = False
        if not self.query_routes.record(frame.guid, link.id, now, frame.ttl, frame.hops):
            first = self.query_routes.first(frame.guid)
            from_ultrapeer = link.capabilities.ultrapeer is not False
            if first is not None and frame.ttl > first[1] and from_ultrapeer:
                self.query_routes.raise_ttl(frame.guid, frame.ttl)
                self.relayed_higher_ttl += 1
                relayed = True
            else:
                self.duplicate(self.query_routes, link, frame, now)
                return
        ttl = min(frame.ttl, self.max_ttl - frame.hops)
        cut = self.cut
        if cut:
            kept = max(1, ttl - cut)
            if kept < ttl:
                self.degraded += 1
                self.degraded_hops += ttl - kept
            ttl = kept
        if relayed:
            if ttl <= 1:
                return
            copy_ttl = ttl - 1
        elif ttl <= 1:
            if not self.routing.leaves:
                return
            copy_ttl = 0  # the last hop: for the leaves that match, sent with TTL 1
        else:
            copy_ttl = ttl - 1
        copy = encode(frame.guid, QUERY, copy_ttl, frame.hops + 1, payload)
        if link.capabilities.ultrapeer is False:
            refused = self.dynamic.start(link, copy, now)
            if refused is not None:
                self.dropped[refused, QUERY] += 1
        else:
            self.pending.append(Copy(link, copy, relayed=relayed))

    def has_token(self, link: FakeLink, now: float) -> bool:
        """Whether the peer has a query token left (a bucket of ``query_burst``,
        refilled at ``query_rate`` a second)."""
        if not self.query_rate:
            return True
        tokens, counted = self.tokens.get(link.id, (float(self.query_burst), now))
        tokens = min(float(self.query_burst), tokens + (now - counted) * self.query_rate)
        self.tokens[link.id] = (tokens, now)
        return tokens >= 1

    def spend_token(self, link: FakeLink) -> None:
        if self.query_rate:
            tokens, counted = self.tokens[link.id]
            self.tokens[link.id] = (tokens - 1, counted)

    def pong(self, link: FakeLink, frame: Frame, now: float) -> None:
        if not self.ttl_ok(link, frame, now):
            return
        try:
            pong = parse_payload(PONG, frame.payload)
        except MalformedPayloadError:
            self.malformed(link, frame, now)
            return
        assert isinstance(pong, Pong)
        learned = self.pongs_learned.get(frame.payload)
        if learned is None or now - learned >= PONG_RELEARN_SECONDS:
            if len(self.pongs_learned) >= PONGS_REMEMBERED:
                self.pongs_learned.clear()
            self.pongs_learned[frame.payload] = now
            if pong.port:
                _, problem = classify_address(pong.ip)
                if problem is None or problem in NON_PUBLIC_REASONS:
                    self.pong_cache.add(pong.ip, pong.port, frame.payload, frame.hops, now)
        route = self.ping_routes.lookup(frame.guid, now)
        if route is None:
            self.dropped["no-route", PONG] += 1
            link.offended(Offence.UNROUTABLE, now)
            return
        self.ping_routes.note_hit(frame.guid)
        self.reply(route, frame, now)

    def query_hit(self, link: FakeLink, frame: Frame, now: float) -> None:
        if not self.ttl_ok(link, frame, now):
            return
        payload = frame.payload
        if len(payload) < 11 + 16:
            self.malformed(link, frame, now)
            return
        self.push_routes.refresh(payload[-16:], link.id, now)
        route = self.query_routes.lookup(frame.guid, now)
        if route is not None and self.dynamic.queries:
            self.dynamic.note_hit(frame.guid, route, payload[0])
        if route is None:
            if len(payload) > 4096:
                self.dropped["no-route", QUERY_HIT] += 1
                link.offended(Offence.UNROUTABLE_LARGE, now)
                return
            try:
                parse_payload(QUERY_HIT, payload)
            except MalformedPayloadError:
                self.malformed(link, frame, now)
                return
            self.dropped["no-route", QUERY_HIT] += 1
            link.offended(Offence.UNROUTABLE, now)
            return
        self.query_routes.note_hit(frame.guid)
        self.reply(route, frame, now)

    def reply(self, route_id: int, frame: Frame, now: float) -> None:
        if route_id == 0:
            self.consumed[frame.payload_type] += 1
            return
        route = self.link(route_id)
        if route is None or route.closing:
            self.dropped["route-closed", frame.payload_type] += 1
            return
        if frame.ttl - 1 <= 0:
            self.dropped["ttl-expired", frame.payload_type] += 1
            return
        data = encode(frame.guid, frame.payload_type, frame.ttl - 1, frame.hops + 1, frame.payload)
        if route.send(data, now):
            self.forwarded[frame.payload_type] += 1
        else:
            self.dropped["outgoing-queue", frame.payload_type] += 1

    def qrp(self, link: FakeLink, frame: Frame, now: float) -> None:
        try:
            message = parse_payload(QRP, frame.payload)
        except MalformedPayloadError:
            self.malformed(link, frame, now)
            return
        assert isinstance(message, QrpReset | QrpPatch)
        if self.routing.receive(link, message, len(self.links), now):
            self.consumed[QRP] += 1
        else:
            self.dropped["qrp-too-soon", QRP] += 1

    # ------------------------------------------------------------------ the broadcast

    def broadcast(self, now: float) -> None:
        """Every waiting copy to every link but its source, one at a time, each kept
        from where it must not go."""
        pending, self.pending = self.pending, []
        for destination in self.links:
            if destination.closing:
                continue
            for copy in pending:
                if copy.source is destination:
                    continue
                data = self.for_destination(destination, copy)
                if data is None:
                    continue
                if destination.send(data, now):
                    self.forwarded[data[16]] += 1
                else:
                    self.dropped["outgoing-queue", data[16]] += 1

    def for_destination(self, destination: FakeLink, copy: Copy) -> bytes | None:
        data = copy.data
        is_query = data[16] == QUERY
        capabilities = destination.capabilities
        if is_query and data[23] == 0 and data[24] == 0 and capabilities.refuses_ancient_queries:
            self.dropped["peer-refuses-format", QUERY] += 1
            return None
        if capabilities.ultrapeer is False:
            if copy.relayed or not is_query:
                return None
            kept, missed = self.routing.for_leaf(destination.id, [data])
            if missed:
                self.dropped["qrp-miss", QUERY] += 1
                return None
            data = kept[0]
        else:
            if is_query and data[17] == 0:
                return None  # its last hop, for leaves only
            if is_query and data[17] == 1 and self.routing.ultrapeers:
                kept, missed = self.routing.for_last_hop(destination.id, [data])
                if missed:
                    self.dropped["qrp-miss", QUERY] += 1
                    return None
        if is_query and data[18] >= destination.hops_flow:
            self.dropped["peer-hops-flow", QUERY] += 1
            return None
        if data[17] > capabilities.max_ttl:
            self.ttl_trimmed[data[16]] += 1
            data = data[:17] + bytes([capabilities.max_ttl]) + data[18:]
        return data


__all__ = ["MessageType", "NaiveRouter"]
