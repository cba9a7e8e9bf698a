"""Query routing by QRP tables: which leaves, and which ultrapeers at the last hop, get a
query; and the table of our leaves' keywords that we send to ultrapeers.

Theory of operation
-------------------
Two kinds of peers send us QRP tables (:mod:`protocol.qrp`). A **leaf** sends the table
of what it shares; it is then sent only the queries every word of which its table holds,
and nothing before its table is complete. An **ultrapeer** that announced
``X-Ultrapeer-Query-Routing`` sends the union of its own leaves' tables; a query whose
copy reaches it with TTL 1 (its last hop: it would pass it only to its leaves) is sent
only if that table holds its words. Copies with more TTL left go regardless.

In return, every ultrapeer that announced ``X-Ultrapeer-Query-Routing`` is sent the union
of our leaves' tables, resized to :data:`LAST_HOP_TABLE_SLOTS` slots: when it connects,
then whenever the union changed, at most every :data:`LAST_HOP_TABLE_INTERVAL` seconds.
The union is kept incrementally (:class:`protocol.qrp_leaves.TableUnion`): a leaf's new table
costs one update of per-slot counts, and the union itself is worked out once per change,
when first asked for, then shared by the once-a-second send, ``/metrics`` and ``/qrp``;
its encoded messages are kept too, so a send finds them made unless it changed.

A peer may begin a table (a RESET, or a patch of its table in force) at most once every
``router.qrp_table_interval`` seconds (a full table costs milliseconds to decode and to
count into the union; a flood of them must not cost more). A table begun sooner is
refused undecoded, and the peer is counted an offence (:attr:`Offence.QRP_TOO_SOON`), so
one that keeps at it is kicked. Its patches, and any patch after it, are dropped until a
RESET comes in time (``qrp-too-soon``): they are deltas against a table we did not take;
the table in force until then stays in force. A sequence that
breaks the protocol (a patch larger than its table, a zlib bomb, a malformed or
out-of-order patch) ends the link with Bye 413 and counts
:attr:`Offence.QRP_INVALID`, which kicks (and bans) at once by default.

A query's words are hashed once per router batch (:meth:`QueryRouting.end_batch`
forgets them), whatever the number of tables asked. Tables live as long as their links:
they are looked up by link id and pruned when the link is gone. Nothing here reads a
clock or a socket; the router hands in links, times and the messages to apply.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from gnutella_router.control.abuse import Offence
from gnutella_router.routing.link import Link, Outbox
from protocol.codec import encode_message
from protocol.constants import MessageType
from protocol.header import TTL_OFFSET, TYPE_OFFSET, with_ttl
from protocol.messages import Message, QrpPatch, QrpReset, random_guid
from protocol.qrp import (
    Intake,
    QrpError,
    QrpReceiver,
    QrpTable,
    qrp_hashcode,
    query_words,
    table_messages,
)
from protocol.qrp_leaves import TableIndex, TableUnion

QUERY = MessageType.QUERY
LAST_HOP_TABLE_SLOTS = 65536
"""The size of the table of our leaves' keywords sent to ultrapeers (gtk-gnutella's)."""
LAST_HOP_TABLE_INTERVAL = 60.0
"""Seconds between two tables sent to one ultrapeer, however often leaves change."""


class QueryRouting:
    """Every peer's QRP table, and the decisions they make."""

    def __init__(
        self,
        link_alive: Callable[[int], object | None],
        log: structlog.typing.FilteringBoundLogger,
        *,
        table_interval: float = 0.0,
    ) -> None:
        self._alive = link_alive
        self.log = log
        self.table_interval = table_interval
        """Seconds a peer must leave between the beginnings of two tables; 0: any."""
        self.leaves: dict[int, QrpReceiver] = {}
        """Each leaf's tables, by link id."""
        self.ultrapeers: dict[int, QrpReceiver] = {}
        """Ultrapeer neighbours' last-hop tables, by link id."""
        self._union = TableUnion(LAST_HOP_TABLE_SLOTS)
        """Our leaves' complete tables, by link id, and their union."""
        self._encoded: tuple[int, list[bytes]] | None = None
        """The union's generation, and its RESET and PATCH messages, encoded."""
        self._sent: dict[int, tuple[int, float]] = {}
        """Per ultrapeer link: which generation of our leaves' table it has, and when."""
        self._hashcodes: dict[bytes, list[int]] = {}
        """The batch's queries' words, hashed."""
        self._leaf_index = TableIndex()
        """The leaves' tables, asked all at once per query (:class:`TableIndex`)."""
        self._for_leaves: tuple[list[bytes], dict[int, list[bytes]], int] | None = None
        """For the batch's broadcast list (compared by identity): what each leaf's bit
        gets of it, and how many queries it holds."""

    def receiver(self, link_id: int) -> QrpReceiver | None:
        """A link's QRP receiver (its table, how many it sent), for dumps."""
        return self.leaves.get(link_id) or self.ultrapeers.get(link_id)

    # ------------------------------------------------------------------ intake

    def receive(self, link: Link, message: QrpReset | QrpPatch, links: int, now: float) -> bool:
        """Apply one of a link's QRP messages, received at ``now``; False when it was
        dropped unapplied: it began a table too soon after the last (an offence), or is a
        patch after such a table. A bad sequence drops the link's table, counts an
        offence and closes the link (Bye 413). ``links`` is how many links are alive, for
        pruning."""
        leaf = link.capabilities.ultrapeer is False
        receivers = self.leaves if leaf else self.ultrapeers
        receiver = receivers.get(link.id)
        if receiver is None:
            if len(receivers) >= links:
                self.prune()
                receivers = self.leaves if leaf else self.ultrapeers
            receiver = receivers[link.id] = QrpReceiver(min_interval=self.table_interval)
        try:
            intake = receiver.receive(message, now)
        except QrpError as exc:
            del receivers[link.id]
            self._union.discard(link.id)  # its table is gone from our leaves' union
            self._leaf_index.discard(link.id)
            self.log.info("bad qrp sequence", conn=link.id, leaf=leaf, reason=exc.reason)
            link.offended(Offence.QRP_INVALID, now)  # kicks, by default
            if not link.closing:
                link.close(exc.reason, bye_code=int(exc.bye_code))
            return True
        if intake is Intake.TOO_SOON:
            self.log.debug("qrp table too soon", conn=link.id, leaf=leaf)
            link.offended(Offence.QRP_TOO_SOON, now)
            return False
        if intake is Intake.SKIPPED:
            return False
        if intake is Intake.COMPLETED:
            table = receiver.table
            assert table is not None
            if leaf:
                self._union.put(link.id, table)
                self._leaf_index.put(link.id, table)
            self.log.debug(
                "qrp table", conn=link.id, leaf=leaf, slots=table.slots, filled=table.filled
            )
        return True

    def prune(self) -> None:
        """Forget the tables of links that are gone."""
        alive = self._alive
        kept = {i: r for i, r in self.leaves.items() if alive(i)}
        if len(kept) < len(self.leaves):
            for gone in self.leaves.keys() - kept.keys():
                self._union.discard(gone)
                self._leaf_index.discard(gone)
            self.leaves = kept
        self.ultrapeers = {i: r for i, r in self.ultrapeers.items() if alive(i)}
        self._sent = {i: sent for i, sent in self._sent.items() if alive(i)}

    # ------------------------------------------------------------------ routing

    def _codes(self, data: bytes) -> list[int]:
        codes = self._hashcodes.get(data)
        if codes is None:
            codes = self._hashcodes[data] = qrp_hashcodes(data)
        return codes

    def for_leaf(self, link_id: int, datas: list[bytes]) -> tuple[list[bytes], int]:
        """The queries of ``datas`` a leaf's table matches (a copy at its last hop, TTL
        0 here, goes with TTL 1), and how many it did not; never pings, which leaves do
        not take from their ultrapeer.

        The router asks this for every leaf, most often with the same list (a batch's
        broadcasts): the first asking sorts that list's queries out to every leaf at
        once, each query asked of all the tables in one pass
        (:meth:`TableIndex.matching`), and the other leaves find their share made.
        """
        bit = self._leaf_index.bit(link_id)
        made = self._for_leaves
        if made is None or made[0] is not datas:
            made = self._for_leaves = (datas, *self._sorted_out(datas))
        _, shares, queries = made
        kept = shares.get(bit, []) if bit else []
        return kept, queries - len(kept)

    def _sorted_out(self, datas: list[bytes]) -> tuple[dict[int, list[bytes]], int]:
        """Each leaf's share of ``datas`` (by its bit), and how many queries it holds."""
        shares: dict[int, list[bytes]] = {}
        queries = 0
        matching = self._leaf_index.matching
        codes = self._codes
        for data in datas:
            if data[TYPE_OFFSET] != QUERY:
                continue
            queries += 1
            members = matching(codes(data))
            if not members:
                continue
            copy = data if data[TTL_OFFSET] else with_ttl(data, 1)
            while members:
                lowest = members & -members
                members ^= lowest
                share = shares.get(lowest)
                if share is None:
                    shares[lowest] = [copy]
                else:
                    share.append(copy)
        return shares, queries

    def for_last_hop(self, link_id: int, datas: list[bytes]) -> tuple[list[bytes], int]:
        """``datas`` less the queries at an ultrapeer's last hop (TTL 1) that its table
        says none of its leaves could answer, and how many those were."""
        receiver = self.ultrapeers.get(link_id)
        table = receiver.table if receiver is not None else None
        if table is None:
            return datas, 0
        kept = [
            data
            for data in datas
            if data[TYPE_OFFSET] != QUERY
            or data[TTL_OFFSET] != 1
            or table.matches_hashcodes(self._codes(data))
        ]
        return kept, len(datas) - len(kept)

    def end_batch(self) -> None:
        if self._hashcodes:
            self._hashcodes = {}
        self._for_leaves = None

    def last_hop_sent(self, link_id: int) -> tuple[bool, float] | None:
        """Whether an ultrapeer has our leaves' table as it is now, and when it was last
        sent one (on the clock :meth:`send_tables` was given); None if never sent one."""
        sent = self._sent.get(link_id)
        if sent is None:
            return None
        generation, sent_at = sent
        return generation == self._union.generation, sent_at

    # ------------------------------------------------------------------ our table

    def leaves_table(self) -> QrpTable:
        """What our leaves share, as one table of :data:`LAST_HOP_TABLE_SLOTS` slots
        (kept between changes: do not change it)."""
        return self._union.table

    def _leaves_table_messages(self) -> tuple[int, list[bytes]]:
        """The union's generation and the messages that send it, made once per change."""
        generation = self._union.generation
        if self._encoded is None or self._encoded[0] != generation:
            messages = [
                encode_message(Message(random_guid(), 1, 0, m))
                for m in table_messages(self._union.table)
            ]
            self._encoded = (generation, messages)
        return self._encoded

    def send_tables(self, outbox: Outbox, now: float) -> int:
        """Our leaves' table to every ultrapeer that takes last-hop tables and is due
        one; how many messages were queued."""
        self.prune()
        generation = self._union.generation
        queued = 0
        for link in outbox.links():
            capabilities = link.capabilities
            if link.closing or capabilities.ultrapeer is False:
                continue
            if not capabilities.ultrapeer_query_routing:
                continue
            had, sent_at = self._sent.get(link.id, (-1, -1e9))
            if had == generation or now - sent_at < LAST_HOP_TABLE_INTERVAL:
                continue
            for data in self._leaves_table_messages()[1]:
                queued += outbox.offer(link.id, data, now)
            outbox.write(link.id)
            self._sent[link.id] = (generation, now)
        return queued


def qrp_hashcodes(data: bytes) -> list[int]:
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
