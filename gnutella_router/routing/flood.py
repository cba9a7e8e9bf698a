"""The router's one routing path: a run of one link's frames, routed as a run.

Theory of operation
-------------------
A batch the router stage takes holds runs of consecutive frames from one link
(:func:`runs_of`). Every run is routed here, whatever the link: an ultrapeer or a leaf,
caching pongs or not, flow-controlled or not, every message type. The rules each frame
is judged by are :mod:`.rules`, written once; what differs between peers is handled
inside the loop, never by leaving it.

Under any load almost every frame is a ping or query that passes its rules, and doing
the same few things for each one message at a time is mostly the interpreter calling
methods. So the run router cuts a run into *stretches*: as many consecutive pings and
queries as pass their rules (:func:`.rules.ping_verdict`, :func:`.rules.query_verdict`),
read in one pass that also builds their broadcast copies from kept header tails
(:class:`Copies`). A stretch is routed at once:

1. its GUIDs are recorded in bulk (:meth:`.RouteTable.record_many`, which also finds
   the duplicates, exactly as recording one by one would), but for the pings of a peer
   that caches pongs (or a leaf): those are answered here and never forwarded, so no
   reply can come back along their route, and recording them would only let a flood of
   them rotate the routes that can be used (our own pings', those of the pings we
   forward) out of the table; a repeat is simply answered again, as gtk-gnutella does;
2. our pongs answer its new pings, in one offer to the source's queue when the queue
   takes them without a decision; a peer that caches pongs (or a leaf) also gets
   cached pongs, at most once a second, after the ping that earned them;
3. each duplicate is dealt with where it stands (a query seen before with a higher TTL
   from an ultrapeer is relayed again; any other is dropped, and the same peer's own
   repeat is an offence);
4. the copies are put, in one call, into the batch's broadcasts the router gave
   :meth:`RunRouter.route` (:class:`.broadcasts.Broadcasts`), which the router fans out
   to every other connection once the whole batch is routed (from a leaf, each query
   instead starts its dynamic query, so a leaf's query ends its stretch: dynamic
   querying sends at once).

The first frame that does not pass ends the stretch and is handled alone by the
router (:meth:`RunOwner.route_single`): it acts on the very verdict that ended the
stretch (the drop reason, the offence), or routes a reply, Bye, QRP or vendor message.
Then the next stretch begins.

Order is kept as one message at a time would keep it. An offer of our pong may change
the link (its queue may close a peer that does not read, or put it in flow control,
after which its queries are dropped), and so may a duplicate's offence (a kick): when
either happens part-way, the stretch stops right after that frame, the routes recorded
for the rest are taken back, and the loop goes on from there under the link's new
state. The copies built in the first pass stand only when nothing of the kind happened
and the stretch held no duplicate; otherwise they are built again for what was routed.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Final, Protocol

from mypy_extensions import i64

from gnutella_router.config.sections import RouterConfig
from gnutella_router.control.query_rate import QueryRate
from gnutella_router.routing.link import Link, Outbox
from gnutella_router.routing.pongs import CachedAnswers, OwnPong
from gnutella_router.routing.route_table import RouteTable
from gnutella_router.routing.rules import (
    NO_COPY,
    OK,
    clamped_ttl,
    is_ancient,
    ping_copy_ttl,
    ping_verdict,
    query_copy_ttl,
    query_verdict,
    relay_copy_ttl,
)
from protocol.constants import HEADER_SIZE
from protocol.framing import Frame
from protocol.header import HEADER_STRUCT, TTL_OFFSET, TYPE_OFFSET

# Plain int literals, not the enum's members: compiled, a Final literal is a constant in
# the machine code, where a module-level name is a dict lookup per use and an enum
# member a generic comparison (a test holds them to MessageType).
PING: Final = 0x00
PONG: Final = 0x01
QUERY: Final = 0x80
QUERY_HIT: Final = 0x81

_pack_header: Final = HEADER_STRUCT.pack
_NO_GUID: Final = bytes(16)
TAILS_KEPT: Final = 1024
"""Distinct header tails a :class:`Copies` keeps; past that it starts again."""


def header_tail(message_type: int, ttl: int, hops: int, length: int) -> bytes:
    """The seven header bytes after the GUID, as packed: type, TTL, hops, length."""
    return _pack_header(_NO_GUID, message_type, ttl, hops, length)[16:]


class Copies:
    """Builds the copies the router forwards: a message with a new TTL and hops.

    A copy is its GUID, the seven header bytes after it (type, TTL, hops, payload
    length) and its payload. Packing those seven bytes per copy with ``struct`` was a
    tenth of the batch path's instructions (boxing five arguments, parsing them back);
    under any load they take few distinct values (two types, a few TTLs and hops, the
    lengths queries have), so each distinct one is packed once and kept, and a run of
    copies alike (a flood) does not even look it up.
    """

    __slots__ = ("_last_key", "_last_tail", "_tails")

    def __init__(self) -> None:
        self._tails: dict[int, bytes] = {}
        self._last_key: i64 = -1
        self._last_tail = b""

    def copy(self, guid: bytes, message_type: i64, ttl: i64, hops: i64, payload: bytes) -> bytes:
        """``guid``'s message of ``message_type`` with ``ttl`` and ``hops`` and ``payload``,
        encoded (each header field within its byte; lengths within four)."""
        length: i64 = len(payload)
        key: i64 = length << 24 | message_type << 16 | ttl << 8 | hops
        if key != self._last_key:
            tails = self._tails
            tail = tails.get(key)
            if tail is None:
                if len(tails) >= TAILS_KEPT:
                    tails.clear()
                tail = header_tail(message_type, ttl, hops, length)
                tails[key] = tail
            self._last_key = key
            self._last_tail = tail
        # One allocation (mypyc builds a ``%b`` format in one piece), where two
        # concatenations would make and free an intermediate copy.
        return b"%b%b%b" % (guid, self._last_tail, payload)


class RunCopies:
    """What the fan-out needs to know of a run's copies, found while building them:
    their bytes in all, the highest TTL of any, and of the queries among them how many,
    which are in the pre-0.6 form (flags 0, for peers that refuse it), which are at their
    last hop (TTL 0, for leaves only) and which are relayed again (for ultrapeers only)."""

    __slots__ = ("ancient", "count", "highest_ttl", "last_hop", "not_leaves", "size")

    def __init__(self) -> None:
        self.size = 0
        self.highest_ttl = 0
        self.count = 0
        self.ancient: list[bytes] = []
        self.last_hop: list[bytes] = []
        self.not_leaves: list[bytes] = []

    def add(self, data: bytes, ancient: bool, last_hop: bool) -> None:
        """Count one query copy (only for the rare one that is ancient or at its last
        hop does it keep the copy)."""
        self.count += 1
        if ancient:
            self.ancient.append(data)
        if last_hop:
            self.last_hop.append(data)


class BroadcastCopies(Protocol):
    """Where a stretch's copies go until the batch's fan-out
    (:class:`.broadcasts.Broadcasts`; a protocol here, since that module builds on
    this one's :class:`RunCopies`)."""

    def add(self, source: Link, datas: list[bytes], copies: RunCopies) -> None:
        """The copies to broadcast from ``source``, in order, and what is known of them."""
        ...


class RunOwner(Protocol):
    """What the run router needs of the router: its limits, read on every stretch (they
    may change while it runs), and the acts that belong to the router."""

    @property
    def config(self) -> RouterConfig: ...

    @property
    def max_ttl(self) -> int: ...

    @property
    def hard_ttl_limit(self) -> int: ...

    @property
    def degrading(self) -> bool:
        """Whether forwarded queries lose TTL to the admission controller now."""
        ...

    def degraded_ttl(self, keeps: int) -> int:
        """The TTL a query that may keep ``keeps`` forwards under the controller's cut."""
        ...

    def count_degraded(self, queries: int, hops: int) -> None:
        """Count ``queries`` forwarded with ``hops`` less TTL in all."""
        ...

    def has_leaves(self) -> bool:
        """Whether any leaf is connected (queries at their last hop are kept for them)."""
        ...

    def route_single(self, link: Link, frame: Frame, now: float) -> None:
        """Handle a frame that ends a stretch (see the module)."""
        ...

    def duplicate(self, table: RouteTable, link: Link, frame: Frame, now: float) -> None:
        """Count a duplicate, and a peer's own repeat as its offence."""
        ...

    def relays_higher_ttl(self, link: Link, frame: Frame) -> bool:
        """Whether a query seen before is relayed again (noting its higher TTL)."""
        ...

    def start_dynamic_query(self, leaf: Link, data: bytes, now: float) -> None:
        """A leaf's query (its copy as it would be forwarded) to dynamic querying."""
        ...

    def drop_closing(self, frames: list[Frame]) -> None:
        """Count frames whose link closed before they were routed."""
        ...


class RepliesRouter(Protocol):
    """Routes a run of pongs and query hits back (:class:`.reply_runs.ReplyRun`).

    It holds what the run router shares with it, and the run router takes those from
    it, so that the two cannot differ: replies follow the very tables their requests
    were recorded in, leave by the same outbox and encoder, and arrive in the same
    counts.
    """

    outbox: Outbox
    ping_routes: RouteTable
    query_routes: RouteTable
    copies: Copies
    received: list[int]

    def route(self, link: Link, frames: list[Frame], start: int, now: float) -> int:
        """Route the replies from ``start``; where their run ends."""
        ...


def runs_of(batch: list[Frame]) -> list[list[Frame]]:
    """``batch`` cut into its runs of consecutive frames from one link, in order; a
    batch of one link's frames is its own single run, not copied."""
    runs: list[list[Frame]] = []
    count = len(batch)
    if not count:
        return runs
    source = batch[0].source
    start = 0
    for index in range(1, count):
        frame_source = batch[index].source
        if frame_source != source:
            runs.append(batch[start:index])
            start = index
            source = frame_source
    runs.append(batch[start:] if start else batch)
    return runs


class Stretch:
    """What the first pass over a stretch found: its pings' and queries' GUIDs, their
    packed TTL/hops and where they stand in the run, and the copies built on the
    assumption that all are new."""

    __slots__ = (
        "copies",
        "degraded",
        "degraded_hops",
        "out",
        "ping_at",
        "ping_details",
        "ping_guids",
        "pings_recorded",
        "query_at",
        "query_details",
        "query_guids",
    )

    def __init__(self) -> None:
        self.ping_guids: list[bytes] = []
        self.ping_details: list[int] = []
        self.ping_at: list[int] = []
        self.pings_recorded = True
        """False when the pings are answered and not forwarded (a peer that caches
        pongs, a leaf): nothing is recorded for them (see the module)."""
        self.query_guids: list[bytes] = []
        self.query_details: list[int] = []
        self.query_at: list[int] = []
        self.out: list[bytes] = []
        self.copies = RunCopies()
        self.degraded = 0
        self.degraded_hops = 0


class RunRouter:
    """Routes every run of one link's frames (see the module)."""

    def __init__(
        self,
        *,
        owner: RunOwner,
        replies: RepliesRouter,
        own_pong: OwnPong,
        cached_answers: CachedAnswers,
        generated: list[int],
        query_rate: QueryRate,
    ) -> None:
        self.owner = owner
        self.outbox = replies.outbox
        self.replies = replies
        """Routes the runs of pongs and query hits."""
        self.query_rate = query_rate
        self.ping_routes = replies.ping_routes
        self.query_routes = replies.query_routes
        self.own_pong = own_pong
        self.cached_answers = cached_answers
        self.received = replies.received
        self.generated = generated
        self.copies = replies.copies
        self.stretches = 0
        """Stretches routed in bulk (for tests and profiles)."""
        self.accepted_queries = 0
        """Queries routed on (broadcast, relayed or to dynamic querying), for the query
        delay hook, which must know whether a frame was one."""

    def route(
        self, link: Link, frames: list[Frame], now: float, broadcasts: BroadcastCopies
    ) -> None:
        """Route ``frames``, one link's run, in order; the copies to broadcast go into
        ``broadcasts``, for the router's fan-out after the batch."""
        owner = self.owner
        received = self.received
        count = len(frames)
        start = 0
        while start < count:
            if link.closing:
                owner.drop_closing(frames[start:] if start else frames)
                return
            end = self._stretch(link, frames, start, now, broadcasts)
            if end == start:
                frame = frames[start]
                if frame.payload_type == PONG or frame.payload_type == QUERY_HIT:
                    end = self.replies.route(link, frames, start, now)
                else:
                    received[frame.payload_type] += 1
                    owner.route_single(link, frame, now)
                    end = start + 1
            start = end

    def _stretch(
        self,
        link: Link,
        frames: list[Frame],
        start: int,
        now: float,
        broadcasts: BroadcastCopies,
    ) -> int:
        """Route the stretch of pings and queries that passes its rules from ``start``;
        where the next one begins (``start`` when the frame there does not pass)."""
        owner = self.owner
        capabilities = link.capabilities
        leaf = capabilities.ultrapeer is False
        from_cache = leaf or capabilities.pong_caching
        source_flow_controlled = link.flow_controlled
        hard: i64 = owner.hard_ttl_limit
        max_ttl: i64 = owner.max_ttl
        drop_ancient = owner.config.drop_ancient_queries
        degrade = owner.degrading
        last_hop = owner.has_leaves()
        allowance: i64 = self.query_rate.allowance(link.id, now)
        found = Stretch()
        found.pings_recorded = not from_cache
        ping_guids = found.ping_guids
        ping_details = found.ping_details
        ping_at = found.ping_at
        query_guids = found.query_guids
        query_details = found.query_details
        query_at = found.query_at
        out = found.out
        copies = found.copies
        size = 0
        highest: i64 = 0
        copy_ttl: i64
        count = len(frames)
        end = start
        # The copies are built in the same pass, before it is known whether every frame
        # is new: reading each frame once is worth more than the copies built again on
        # the rarer stretch that holds a duplicate.
        while end < count:
            frame = frames[end]
            # Machine integers once compiled: header fields are bytes, no check needed.
            ttl: i64 = frame.ttl
            hops: i64 = frame.hops
            payload = frame.payload
            message_type = frame.payload_type
            if message_type == PING:
                if ping_verdict(ttl, hops, payload, hard) != OK:
                    break
                ping_guids.append(frame.guid)
                ping_details.append(ttl << 4 | hops)  # both below 16: ttl + hops <= 15
                ping_at.append(end)
                if not from_cache:
                    data = self._ping_copy(frame, max_ttl)
                    if data is not None:
                        out.append(data)
                        size += HEADER_SIZE + len(payload)
                        copy_ttl = data[TTL_OFFSET]
                        if copy_ttl > highest:
                            highest = copy_ttl
            elif message_type == QUERY:
                verdict = query_verdict(
                    ttl, hops, payload, hard, source_flow_controlled, allowance <= 0, drop_ancient
                )
                if verdict != OK:
                    break
                allowance -= 1
                query_guids.append(frame.guid)
                query_details.append(ttl << 4 | hops)
                query_at.append(end)
                data = self._query_copy(frame, max_ttl, degrade, last_hop, False, found)
                if data is not None:
                    copy_ttl = data[TTL_OFFSET]
                    if copy_ttl > highest:
                        highest = copy_ttl
                    copies.add(data, is_ancient(payload), copy_ttl == 0)
                    out.append(data)
                    size += len(data)
                if leaf:
                    end += 1  # dynamic querying sends at once: see the module
                    break
            else:
                break
            end += 1
        if end == start:
            return start
        self.stretches += 1
        link_id = link.id
        repeats: list[int] = []
        if ping_guids and found.pings_recorded:
            held = self.ping_routes.record_many(ping_guids, link_id, now, ping_details)
            repeats.extend([ping_at[index] for index in held])
        if query_guids:
            held = self.query_routes.record_many(query_guids, link_id, now, query_details)
            repeats.extend([query_at[index] for index in held])
        if repeats:
            repeats.sort()
        routed, relays = self._answer(link, frames, start, end, found, repeats, now)
        if query_guids:
            self.query_rate.spend(link_id, bisect_left(query_at, routed))
        received = self.received
        if routed == end and not repeats:
            received[PING] += len(ping_guids)
            received[QUERY] += len(query_guids)
            copies.size = size
            copies.highest_ttl = highest
        else:
            if routed < end:
                self._take_back(found, repeats, frames, routed)
            for index in range(start, routed):
                received[frames[index].payload_type] += 1
            out = self._copies_again(link, frames, start, routed, repeats, relays, found)
            copies = found.copies
        if found.degraded:
            owner.count_degraded(found.degraded, found.degraded_hops)
        if leaf:
            for data in out:
                if data[TYPE_OFFSET] == QUERY:
                    self.accepted_queries += 1
                    owner.start_dynamic_query(link, data, now)
        elif out:
            self.accepted_queries += copies.count
            broadcasts.add(link, out, copies)
        return routed

    def _answer(
        self,
        link: Link,
        frames: list[Frame],
        start: int,
        end: int,
        found: Stretch,
        repeats: list[int],
        now: float,
    ) -> tuple[int, list[int]]:
        """Our pongs for the stretch's new pings and each duplicate dealt with, in
        order; how far the stretch was routed (``end`` unless the link closed or went
        into flow control part-way) and which duplicates are relayed."""
        relays: list[int] = []
        position = start
        owner = self.owner
        for repeat in repeats:
            reached = self._pongs(link, frames, position, repeat, found, now)
            if reached >= 0:
                return reached, relays
            frame = frames[repeat]
            if frame.payload_type == QUERY:
                if owner.relays_higher_ttl(link, frame):
                    relays.append(repeat)
                else:
                    owner.duplicate(self.query_routes, link, frame, now)
            else:
                owner.duplicate(self.ping_routes, link, frame, now)
            position = repeat + 1
            if link.closing:  # its offence got it kicked
                return position, relays
        reached = self._pongs(link, frames, position, end, found, now)
        return (end if reached < 0 else reached), relays

    def _pongs(
        self, link: Link, frames: list[Frame], start: int, end: int, found: Stretch, now: float
    ) -> int:
        """Our pong for every ping in ``frames[start:end]`` (none of them a duplicate);
        -1 when all went, else where the stretch must stop: just past the ping whose
        offer closed the link or changed its flow control.

        All in one offer when the link's queue takes them without a decision and no
        cached answer falls among them; otherwise one by one, as one message at a time
        would (a cached answer follows the pong of the ping that earned it).
        """
        ping_at = found.ping_at
        first = bisect_left(ping_at, start)
        last = bisect_left(ping_at, end, first)
        if first == last:
            return -1
        capabilities = link.capabilities
        from_cache = capabilities.ultrapeer is False or capabilities.pong_caching
        pong = self.own_pong.payload(capabilities.ggep, now)
        copies_of = self.copies
        guids = found.ping_guids
        details = found.ping_details
        pongs = [
            copies_of.copy(guids[k], PONG, (details[k] & 0x0F) + 1, 0, pong)
            for k in range(first, last)
        ]
        generated = self.generated
        answers_due = from_cache and self.cached_answers.would_be_due(link.id, now)
        outbox = self.outbox
        link_id = link.id
        if not answers_due and outbox.offer_whole(link_id, pongs, len(pongs) * len(pongs[0])):
            generated[PONG] += len(pongs)
            return -1
        flow_controlled = link.flow_controlled
        offer = outbox.offer
        for k in range(first, last):
            if offer(link_id, pongs[k - first], now):
                generated[PONG] += 1
            if answers_due and details[k] >> 4 > 1:
                answers_due = not self._cached_answers(link, guids[k], details[k] & 0x0F, now)
            if link.closing or link.flow_controlled != flow_controlled:
                return ping_at[k] + 1
        return -1

    def _cached_answers(self, link: Link, guid: bytes, hops: int, now: float) -> bool:
        """Cached pongs for a caching peer's ping, if due (then True)."""
        links = self.outbox.links()
        cached = self.cached_answers
        if not cached.due(link.id, now, links):
            return False
        generated = self.generated
        copies_of = self.copies
        for payload, cached_hops in cached.answers(link, now, links):
            answer = copies_of.copy(guid, PONG, hops + 1, cached_hops + 1, payload)
            if self.outbox.offer(link.id, answer, now):
                generated[PONG] += 1
        return True

    def _take_back(
        self, found: Stretch, repeats: list[int], frames: list[Frame], routed: int
    ) -> None:
        """Forget the routes recorded for frames from ``routed`` on: their link closed
        or went into flow control before they were routed."""
        held = set(repeats)
        if found.pings_recorded:
            self.ping_routes.unrecord(
                [frames[i].guid for i in found.ping_at if i >= routed and i not in held]
            )
        self.query_routes.unrecord(
            [frames[i].guid for i in found.query_at if i >= routed and i not in held]
        )

    def _copies_again(
        self,
        link: Link,
        frames: list[Frame],
        start: int,
        routed: int,
        repeats: list[int],
        relays: list[int],
        found: Stretch,
    ) -> list[bytes]:
        """The copies of ``frames[start:routed]`` as routed: none for a duplicate, a
        copy for ultrapeers only for a relay (the rules again, for the stretches the
        first pass could not settle)."""
        owner = self.owner
        capabilities = link.capabilities
        from_cache = capabilities.ultrapeer is False or capabilities.pong_caching
        max_ttl: i64 = owner.max_ttl
        degrade = owner.degrading
        last_hop = owner.has_leaves()
        held = set(repeats)
        relayed = set(relays)
        copies = RunCopies()
        out: list[bytes] = []
        found.degraded = found.degraded_hops = 0
        for index in range(start, routed):
            if index in held and index not in relayed:
                continue
            frame = frames[index]
            if frame.payload_type == PING:
                if not from_cache:
                    data = self._ping_copy(frame, max_ttl)
                    if data is not None:
                        out.append(data)
                continue
            relay = index in relayed
            data = self._query_copy(frame, max_ttl, degrade, last_hop, relay, found)
            if data is not None:
                copies.add(data, is_ancient(frame.payload), data[TTL_OFFSET] == 0)
                if relay:
                    copies.not_leaves.append(data)
                out.append(data)
        copies.size = sum(map(len, out))
        copies.highest_ttl = max([data[TTL_OFFSET] for data in out], default=0)
        found.copies = copies
        return out

    def _ping_copy(self, frame: Frame, max_ttl: i64) -> bytes | None:
        """A broadcast ping's copy (TTL clamped, less one; hops + 1), if it goes on."""
        hops: i64 = frame.hops
        copy_ttl = ping_copy_ttl(clamped_ttl(frame.ttl, hops, max_ttl))
        if copy_ttl == NO_COPY:
            return None
        return self.copies.copy(frame.guid, PING, copy_ttl, hops + 1, frame.payload)

    def _query_copy(
        self, frame: Frame, max_ttl: i64, degrade: bool, last_hop: bool, relay: bool, found: Stretch
    ) -> bytes | None:
        """A query's copy, if it goes on: its TTL clamped, less the admission
        controller's cut (counted in ``found``), then less one, or kept for the leaves
        at its last hop (TTL 0 here); a relay's for ultrapeers only."""
        hops: i64 = frame.hops
        keeps = clamped_ttl(frame.ttl, hops, max_ttl)
        if degrade:
            kept: i64 = self.owner.degraded_ttl(keeps)
            if kept < keeps:
                found.degraded += 1
                found.degraded_hops += keeps - kept
            keeps = kept
        copy_ttl = relay_copy_ttl(keeps) if relay else query_copy_ttl(keeps, last_hop)
        if copy_ttl == NO_COPY:
            return None
        return self.copies.copy(frame.guid, QUERY, copy_ttl, hops + 1, frame.payload)
