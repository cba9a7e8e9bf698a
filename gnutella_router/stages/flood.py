"""The router's batch path: a run of pings and queries from one link, routed at once.

Theory of operation
-------------------
Under a flood almost every frame the router takes is a new ping or query from an
ultrapeer, and the per-message rules (:mod:`.router`) then do the same few things for
each: check TTL and hops, check the payload's shape, record the reverse route (which is
also the duplicate check), answer a ping with our pong, and queue a copy with TTL - 1
and hops + 1 for the broadcast. Done one message at a time, a good half of that is the
interpreter calling methods. Here the frames of one link's run in a batch are checked
in one pass that also builds their copies (from kept header tails, :class:`Copies`),
their routes are recorded in bulk (:meth:`.RouteTable.record_new`: a membership pass
over the previous generation, then one probe-and-insert per GUID), and our pongs go to
the source in one call when its queue takes them without a decision.

The batch path takes a run only when the per-message rules would give it exactly the
same outcome with no special case: every frame a ping or a query, TTL and hops within
the limits, payloads of the right shape (and no pre-0.6 query where those are
dropped), every GUID new to its table and to the run, the link an ultrapeer that does
not cache pongs and is not flow-controlled. Otherwise it changes nothing and answers 0,
and the router routes the run message by message. So drop reasons, offences, relays of
higher-TTL copies, leaves' dynamic querying and the query delay hook all stay on the
per-message path, which is the reference behaviour. The admission controller's TTL cut
(degradation) is one rule both paths apply (:meth:`Limits.degraded_ttl`), so a router
shedding load keeps its batch path, when it needs it most.

Our pongs are offered one by one, in order, as the per-message path does, because each
offer may change what follows: the link's queue may close it (a peer that does not read
its pongs) or put it in flow control (its queries are then dropped). When that happens
the batch path stops right after that ping, takes back the routes recorded for the rest
of the run, and says how far it got; the router routes the rest message by message,
which drops it as the per-message rules would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

from mypy_extensions import i64

from gnutella_router.config.sections import RouterConfig
from gnutella_router.net.route_table import RouteTable
from gnutella_router.stages.link import Link
from gnutella_router.stages.pongs import OwnPong
from protocol.constants import HEADER_SIZE
from protocol.framing import Frame
from protocol.header import HEADER_STRUCT

# Plain int literals, not the enum's members: compiled, a Final literal is a constant in
# the machine code, where a module-level name is a dict lookup per use and an enum
# member a generic comparison (a test holds them to MessageType).
PING: Final = 0x00
PONG: Final = 0x01
QUERY: Final = 0x80

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
        return guid + self._last_tail + payload


class RunCopies:
    """What the fan-out needs to know of a run's copies, found while building them:
    their bytes in all, and of the queries among them how many, which are in the pre-0.6
    form (flags 0, for peers that refuse it) and which are at their last hop (TTL 0, for
    leaves only)."""

    __slots__ = ("ancient", "count", "last_hop", "size")

    def __init__(self) -> None:
        self.size = 0
        self.count = 0
        self.ancient: list[bytes] = []
        self.last_hop: list[bytes] = []

    def add(self, data: bytes, ancient: bool, last_hop: bool) -> None:
        """Count one query copy (only for the rare one that is ancient or at its last
        hop does it keep the copy)."""
        self.count += 1
        if ancient:
            self.ancient.append(data)
        if last_hop:
            self.last_hop.append(data)


Broadcast = Callable[[Link, list[bytes], RunCopies], None]
"""Takes the copies to broadcast from one link, in order, and what is known of them."""


class Limits(Protocol):
    """The router's limits, read on every run (they may be changed while it runs)."""

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


class FloodPath:
    """Routes runs of new pings and queries from ultrapeers in bulk (see the module)."""

    def __init__(
        self,
        *,
        ping_routes: RouteTable,
        query_routes: RouteTable,
        own_pong: OwnPong,
        received: list[int],
        generated: list[int],
        limits: Limits,
        has_leaves: Callable[[], bool],
        broadcast: Broadcast,
    ) -> None:
        self.ping_routes = ping_routes
        self.query_routes = query_routes
        self.own_pong = own_pong
        self.received = received
        self.generated = generated
        self.limits = limits
        self.has_leaves = has_leaves
        self.broadcast = broadcast
        self.copies = Copies()
        self.runs = 0
        """Runs routed here (for tests and profiles)."""

    def route(self, link: Link, frames: list[Frame], now: float) -> int:
        """Route ``frames`` (one link's run, the link not closing) if the batch path can;
        return how many it routed, from the front: 0 when it changed nothing."""
        capabilities = link.capabilities
        if capabilities.ultrapeer is False or capabilities.pong_caching or link.flow_controlled:
            return 0
        limits = self.limits
        degrade = limits.degraded_ttl if limits.degrading else None
        degraded = degraded_hops = 0
        hard: i64 = limits.hard_ttl_limit
        drop_ancient = limits.config.drop_ancient_queries
        max_ttl: i64 = limits.max_ttl
        last_hop = self.has_leaves()
        ping_guids: list[bytes] = []
        ping_details: list[int] = []
        query_guids: list[bytes] = []
        query_details: list[int] = []
        # The copies are built in the same pass, before it is known whether the run
        # qualifies: reading each frame once is worth more than the copies thrown away
        # on the rare run that does not.
        out: list[bytes] = []
        copies = RunCopies()
        copies_of = self.copies
        size = 0
        for frame in frames:
            # Machine integers once compiled: header fields are bytes, no check needed.
            ttl: i64 = frame.ttl
            hops: i64 = frame.hops
            if not ttl or ttl + hops > hard:
                return 0
            guid = frame.guid
            payload = frame.payload
            detail = ttl << 4 | hops  # both below 16: ttl + hops <= 15
            room = max_ttl - hops
            if ttl > room:
                ttl = room
            message_type = frame.payload_type
            if message_type == PING:
                if payload and payload[0] != 0xC3:
                    return 0
                ping_guids.append(guid)
                ping_details.append(detail)
                if ttl > 1:
                    out.append(copies_of.copy(guid, PING, ttl - 1, hops + 1, payload))
                    size += HEADER_SIZE + len(payload)
            elif message_type == QUERY:
                # Its search text must end in a NUL. Most queries end in that NUL (no
                # extensions after it), which settles it without a search; compiled,
                # the search is a method call by name.
                if len(payload) < 3 or (payload[-1] != 0 and payload.find(b"\x00", 2) < 0):
                    return 0
                ancient = payload[0] == 0 and payload[1] == 0  # flags 0: pre-0.6
                if drop_ancient and ancient:
                    return 0
                query_guids.append(guid)
                query_details.append(detail)
                if degrade is not None:
                    keeps = ttl
                    ttl = degrade(keeps)
                    if ttl < keeps:
                        degraded += 1
                        degraded_hops += keeps - ttl
                if ttl > 1:
                    data = copies_of.copy(guid, QUERY, ttl - 1, hops + 1, payload)
                    copies.add(data, ancient, False)
                elif last_hop:
                    # Its last hop: for the leaves that match only, marked by TTL 0 here.
                    data = copies_of.copy(guid, QUERY, 0, hops + 1, payload)
                    copies.add(data, ancient, True)
                else:
                    continue
                out.append(data)
                size += len(data)
            else:
                return 0
        link_id = link.id
        if ping_guids and not self.ping_routes.record_new(ping_guids, link_id, now, ping_details):
            return 0
        if query_guids and not self.query_routes.record_new(
            query_guids, link_id, now, query_details
        ):
            if ping_guids:
                self.ping_routes.unrecord(ping_guids)
            return 0
        self.runs += 1
        routed = self._answer(link, frames, ping_guids, ping_details, now)
        received = self.received
        if routed == len(frames):
            received[PING] += len(ping_guids)
            received[QUERY] += len(query_guids)
            if degraded:
                limits.count_degraded(degraded, degraded_hops)
            if out:
                copies.size = size
                self.broadcast(link, out, copies)
            return routed
        self._take_back(frames[routed:])
        for frame in frames[:routed]:
            received[frame.payload_type] += 1
        self._forward(link, frames[:routed])
        return routed

    def _answer(
        self,
        link: Link,
        frames: list[Frame],
        guids: list[bytes],
        details: list[int],
        now: float,
    ) -> int:
        """Our pong for every ping; how many frames may be routed after that.

        All at once when the link's queue takes them without a decision; otherwise one
        by one, as the per-message path does, stopping after a ping whose pong closed
        the link or put it in flow control (see the module).
        """
        if not guids:
            return len(frames)
        pong = self.own_pong.payload(link.capabilities.ggep, now)
        tails: dict[int, bytes] = {}
        for detail in set(details):
            hops = detail & 0x0F
            if hops not in tails:
                tails[hops] = header_tail(PONG, hops + 1, 0, len(pong)) + pong
        if len(tails) == 1:
            tail = tails.popitem()[1]
            pongs = [guid + tail for guid in guids]
        else:
            pairs = zip(guids, details, strict=True)
            pongs = [guid + tails[detail & 0x0F] for guid, detail in pairs]
        generated = self.generated
        if link.send_all(pongs, len(pongs) * len(pongs[0]), now):
            generated[PONG] += len(pongs)
            return len(frames)
        send = link.send
        answered = iter(pongs)
        for index, frame in enumerate(frames):
            if frame.payload_type != PING:
                continue
            if send(next(answered), PONG, 0, now):
                generated[PONG] += 1
            if link.closing or link.flow_controlled:
                return index + 1
        return len(frames)

    def _forward(self, link: Link, frames: list[Frame]) -> None:
        """The broadcast copies of routed frames, TTL - 1 and hops + 1 (clamped to
        ``max_ttl``), queries at their last hop marked TTL 0 for the leaves."""
        limits = self.limits
        max_ttl = limits.max_ttl
        degrade = limits.degraded_ttl if limits.degrading else None
        last_hop = self.has_leaves()
        out: list[bytes] = []
        copies = RunCopies()
        copies_of = self.copies
        for frame in frames:
            ttl = frame.ttl
            hops = frame.hops
            room = max_ttl - hops
            if ttl > room:
                ttl = room
            payload = frame.payload
            if frame.payload_type == PING:
                if ttl > 1:
                    out.append(copies_of.copy(frame.guid, PING, ttl - 1, hops + 1, payload))
                continue
            if degrade is not None:
                keeps = ttl
                ttl = degrade(keeps)
                if ttl < keeps:
                    limits.count_degraded(1, keeps - ttl)
            ancient = payload[0] == 0 and payload[1] == 0  # flags 0: pre-0.6
            if ttl > 1:
                data = copies_of.copy(frame.guid, QUERY, ttl - 1, hops + 1, payload)
                out.append(data)
                copies.add(data, ancient, False)
            elif last_hop:
                # Its last hop: for the leaves that match only, marked by TTL 0 here.
                data = copies_of.copy(frame.guid, QUERY, 0, hops + 1, payload)
                out.append(data)
                copies.add(data, ancient, True)
        if out:
            copies.size = sum(map(len, out))  # the rare fall-back: no need to count inline
            self.broadcast(link, out, copies)

    def _take_back(self, frames: list[Frame]) -> None:
        """Forget the routes of frames the batch path will not route after all."""
        self.ping_routes.unrecord([f.guid for f in frames if f.payload_type == PING])
        self.query_routes.unrecord([f.guid for f in frames if f.payload_type == QUERY])
