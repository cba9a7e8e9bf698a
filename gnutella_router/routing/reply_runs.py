"""Replies routed back in bulk: a run of pongs and query hits, each to the connection its
ping or query came from.

Theory of operation
-------------------
Replies come in runs: a peer answering a flood sends its pongs and hits back to back,
and a read holds hundreds of them. The run router (:mod:`.flood`) hands each run of
them to :meth:`ReplyRun.route`, which judges them one by one in order, as the rules
say (the TTL rules of :mod:`.rules`; a hit's payload long enough to name its servent;
a pong's address read, cached and learned by its owner, :meth:`ReplyOwner.pong_seen`),
looks up their routes and notes what the tables must (a hit teaches the push table
where its servent is; a route used is counted), but does not send them one by one: it
collects the copies, TTL - 1 and hops + 1, per destination, and offers each
destination its copies in one offer at the end of the run.

One offer is the same as one offer per reply only when the destination's queue takes
them all without a decision of its policy (:meth:`.link.Outbox.offer_whole`): nothing
dropped, nobody closed part-way. Otherwise the replies for that destination are sent
one at a time after all (:meth:`ReplyOwner.forward_reply`), each judged as it is sent,
so a destination closed by its own queue part-way counts the rest as the route closed,
exactly as sending them one by one would. Destinations are independent, so their order
does not matter; a reply routed back to the very peer that sent the run is sent at
once, in place, since its offer may close the peer the run comes from.

What is rare goes to the run's owner (the router's :class:`.replies.ReplyRouting`)
alone: a reply with no route (an offence, and a hit parsed whole first), a malformed
one, a TTL past the rules. A peer whose offence gets it closed ends the run there, with
the replies collected before it sent.
"""

from __future__ import annotations

from typing import Final, Protocol

from mypy_extensions import i64

from gnutella_router.routing.flood import Copies
from gnutella_router.routing.link import Link, Outbox
from gnutella_router.routing.route_table import OWN, RouteTable
from gnutella_router.routing.rules import MALFORMED, OK, ttl_verdict
from protocol.constants import GUID_SIZE, MessageType
from protocol.framing import Frame

PONG_RELEARN_SECONDS: Final = 1.0
"""A pong the same as one learned from within this long teaches nothing new: a servent
sends its own pong, unchanged, in answer to every ping, and learning from each copy
(its address read, its verdict looked up, the pong cache and the catcher told) cost a
quarter of the router's time under a flood of pings from peers that do not cache pongs.
The pong cache keeps the first copy's hops for that long at most."""
PONG: i64 = MessageType.PONG
QUERY_HIT: i64 = MessageType.QUERY_HIT
SMALLEST_HIT: i64 = 11 + GUID_SIZE
"""A hit's payload has at least its header (11 bytes) and its servent's GUID."""


class ReplyOwner(Protocol):
    """What a reply run needs of its owner (:class:`.replies.ReplyRouting`): the hard TTL
    limit, read at each run (it may change while the router runs), and the rare acts."""

    @property
    def hard_ttl_limit(self) -> int: ...

    def refuse(self, link: Link, frame: Frame, verdict: int, now: float) -> None:
        """Drop a frame for a rule's verdict, with the sender's offence where it is one."""
        ...

    def pongs_learned(self) -> dict[bytes, float]:
        """When each pong (its payload) was last learned from: for the run to skip
        :meth:`pong_seen` for one learned from a moment ago."""
        ...

    def pong_seen(self, link: Link, frame: Frame, now: float) -> bool:
        """Cache and learn a pong's host; False when its payload is malformed."""
        ...

    def pong_without_route(self, link: Link, frame: Frame, now: float) -> None: ...

    def hit_without_route(self, link: Link, frame: Frame, now: float) -> None: ...

    def dynamic_hit(self, guid: bytes, route: int, results: int) -> None: ...

    def forward_reply(self, route_id: int, frame: Frame, now: float) -> None:
        """Send one reply on, judged alone (its route closed, its TTL run out, its
        destination's queue)."""
        ...


class ReplyRun:
    """Routes runs of pongs and query hits (see the module)."""

    def __init__(
        self,
        *,
        owner: ReplyOwner,
        outbox: Outbox,
        ping_routes: RouteTable,
        query_routes: RouteTable,
        push_routes: RouteTable,
        copies: Copies,
        received: list[int],
        forwarded: list[int],
        consumed: list[int],
        dropped: dict[tuple[str, int], int],
    ) -> None:
        self.owner = owner
        self.outbox = outbox
        self.ping_routes = ping_routes
        self.query_routes = query_routes
        self.push_routes = push_routes
        self.copies = copies
        self.received = received
        self.forwarded = forwarded
        self.consumed = consumed
        self.dropped = dropped
        self.runs = 0
        """Runs of replies routed (for tests and profiles)."""

    def route(self, link: Link, frames: list[Frame], start: int, now: float) -> int:
        """Route the pongs and query hits of ``frames`` from ``start`` (which must be
        one); where the run ends: at the first frame of another type, or just past the
        frame whose offence closed ``link``."""
        owner = self.owner
        received = self.received
        consumed = self.consumed
        hard: i64 = owner.hard_ttl_limit
        source = link.id
        waiting: dict[int, list[Frame]] = {}
        learned: dict[bytes, float] | None = None
        count = len(frames)
        index = start
        self.runs += 1
        while index < count:
            frame = frames[index]
            message_type: i64 = frame.payload_type
            if message_type != PONG and message_type != QUERY_HIT:
                break
            index += 1
            received[message_type] += 1
            verdict = ttl_verdict(frame.ttl, frame.hops, hard)
            route: int | None
            if verdict != OK:
                owner.refuse(link, frame, verdict, now)
                route = None
            elif message_type == QUERY_HIT:
                route = self._hit_route(link, frame, now)
            else:
                if learned is None:
                    learned = owner.pongs_learned()
                when = learned.get(frame.payload)
                if (when is not None and now - when < PONG_RELEARN_SECONDS) or owner.pong_seen(
                    link, frame, now
                ):
                    route = self._pong_route(link, frame, now)
                else:
                    route = None  # malformed, and dealt with
            if route is None:
                if link.closing:  # its offence got it kicked
                    break
                continue
            if route == OWN:
                consumed[message_type] += 1
            elif route == source:
                # Its offer may close the very peer this run comes from: at once.
                self._send(waiting, now)
                waiting = {}
                owner.forward_reply(route, frame, now)
                if link.closing:
                    break
            else:
                held = waiting.get(route)
                if held is None:
                    waiting[route] = [frame]
                else:
                    held.append(frame)
        self._send(waiting, now)
        return index

    def _hit_route(self, link: Link, frame: Frame, now: float) -> int | None:
        """A hit's route back (noted as used), or None once it is dealt with here."""
        payload = frame.payload
        if len(payload) < SMALLEST_HIT:
            self.owner.refuse(link, frame, MALFORMED, now)
            return None
        guid = frame.guid
        self.push_routes.refresh(payload[-GUID_SIZE:], link.id, now)
        route = self.query_routes.lookup(guid, now)
        if route is None:
            self.owner.hit_without_route(link, frame, now)
            return None
        self.owner.dynamic_hit(guid, route, payload[0])  # its result count
        self.query_routes.note_hit(guid)
        return route

    def _pong_route(self, link: Link, frame: Frame, now: float) -> int | None:
        """A seen pong's route back (noted as used), or None once it is dealt with here."""
        route = self.ping_routes.lookup(frame.guid, now)
        if route is None:
            self.owner.pong_without_route(link, frame, now)
            return None
        self.ping_routes.note_hit(frame.guid)
        return route

    def _send(self, waiting: dict[int, list[Frame]], now: float) -> None:
        """Each destination's replies, in one offer where its queue takes them all
        without a decision; otherwise one at a time, each judged as it goes."""
        if not waiting:
            return
        outbox = self.outbox
        copy = self.copies.copy
        forwarded = self.forwarded
        dropped = self.dropped
        for route, frames in waiting.items():
            destination = outbox.link(route)
            if destination is None or destination.closing:
                for frame in frames:
                    key = ("route-closed", frame.payload_type)
                    dropped[key] = dropped.get(key, 0) + 1
                continue
            datas: list[bytes] = []
            total = 0
            expired = 0
            for frame in frames:
                ttl: i64 = frame.ttl - 1
                if ttl <= 0:
                    expired += 1
                    continue
                data = copy(frame.guid, frame.payload_type, ttl, frame.hops + 1, frame.payload)
                datas.append(data)
                total += len(data)
            if datas and not outbox.offer_whole(route, datas, total):
                # The queue must decide one by one: as sending them one at a time would.
                forward = self.owner.forward_reply
                for frame in frames:
                    forward(route, frame, now)
                continue
            if expired:
                for frame in frames:
                    if frame.ttl <= 1:
                        key = ("ttl-expired", frame.payload_type)
                        dropped[key] = dropped.get(key, 0) + 1
            for frame in frames:
                if frame.ttl > 1:
                    forwarded[frame.payload_type] += 1
