"""The router's one way out: offers to the peers' outgoing queues, and the end of a batch.

Theory of operation
-------------------
The router never writes to a peer. It offers encoded messages to the :class:`Outbox`,
naming the peer by its link id (routes hold ids, never connections), and gets the
outgoing queue's verdict back at once: queued, or not. A verdict that ends the peer
(its queue says it is too slow) is acted on here, by the peer's writer
(:meth:`Writer.act_on`), which closes it with the right Bye; the router only counts
what was not queued. Offering never waits and never writes.

Writes happen when the router ends a batch (:meth:`Outbox.end_batch`): every peer's
writer is asked to start writing (:meth:`Writer.flush`), which joins its queue into one
write and offers it to the non-blocking socket
(:class:`gnutella_router.net.socket_writer.SocketWriter`). The outbox drives each peer's
writer directly, never the connection around it: what the router queued goes from here
to the socket writer and the socket. Two policies of the write side live here and
nowhere else:

* **Deferral.** When the router's queue already holds its next batch, a peer whose
  queue takes a whole batch more without any decision of its policy (room for it, less
  than half a write pending) waits for the next batch's write instead: under a flood
  that halves the number of writes, each a syscall that on loopback also runs the
  receiving side. A peer waits for one batch at most, so an honest peer's pong is never
  held behind batch after batch of copies, and the slow-peer policy's verdicts stay what
  they would be with a write per batch. A deflated link is the exception: each of its
  writes costs zlib a fixed share, so it may wait up to :data:`DEFLATED_WAITS` batches
  in a row while it holds less than :data:`DEFLATED_WRITE` (a few milliseconds at most,
  and only while the router has its next batch queued, that is, while it is busy).
* **Deflate batching.** With a :class:`~gnutella_router.net.deflate_pool.DeflatePool`,
  the deflates of one batch's writes are collected and run side by side on several
  cores before the writes are made.

Messages the router makes outside a batch (its vendor introductions, its own pings and
queries, QRP tables, the steps of dynamic queries) are offered the same way and written
at once with :meth:`Outbox.write`.

The outbox is generic in what it writes to (:class:`Writable`): the daemon's are TCP
connections and their socket writers, the router's unit tests use fake links over the
same sans-IO queues, so the deferral policy they see is this one.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

from gnutella_router.net.deflate_pool import DeflatePool
from gnutella_router.net.outqueue import OutgoingQueue, Verdict
from protocol.header import HOPS_OFFSET, TYPE_OFFSET

WRITE_SIZE = 64 * 1024
"""Most bytes a peer's writer joins into one write."""
DEFLATED_WRITE = 16 * 1024
"""Bytes a deflated link's write is worth waiting for (see :data:`DEFLATED_WAITS`)."""
DEFLATED_WAITS = 4
"""Batches in a row a deflated link's write may wait while it holds less than
:data:`DEFLATED_WRITE`. Each deflated write ends with a sync flush, which costs zlib a
fixed share (at level 1 with random GUIDs, about as much as deflating 4 KiB), so a flood
cut into writes of 4 KiB costs zlib about 1.7 times as much per message as one cut into
writes of 16 KiB (``scripts/bench_deflate.py --levels``)."""


class Writer(Protocol):
    """One peer's writer, as the outbox drives it
    (:class:`gnutella_router.net.socket_writer.SocketWriter`)."""

    @property
    def busy(self) -> bool:
        """Whether it holds work the socket has not taken yet (the rest of a write, or a
        deflate under way)."""
        ...

    @property
    def closing(self) -> bool:
        """Whether its peer's link is ending."""
        ...

    @property
    def deflates(self) -> bool:
        """Whether its writes are deflated (then fewer, larger ones cost less)."""
        ...

    def flush(self) -> None:
        """Start writing what is queued (never waits)."""
        ...

    def act_on(self, verdict: Verdict) -> None:
        """Act on a verdict of its queue that did not queue an offer: a verdict that
        ends the peer closes it (a plain drop does nothing)."""
        ...


class Writable(Protocol):
    """One peer as the outbox sees it: its id, the queue offers go to, and its writer."""

    @property
    def id(self) -> int: ...

    @property
    def outgoing(self) -> OutgoingQueue: ...

    @property
    def writer(self) -> Writer: ...


W = TypeVar("W", bound=Writable)
W_co = TypeVar("W_co", bound=Writable, covariant=True)


class Registry(Protocol[W_co]):
    """The live peers, by id (the server's connection table, a test's list)."""

    def snapshot(self) -> tuple[W_co, ...]: ...

    def get(self, link_id: int) -> W_co | None: ...


class Outbox(Generic[W]):
    """Offers to the live peers' queues; writes at the end of each batch."""

    def __init__(self, registry: Registry[W], deflate_pool: DeflatePool | None = None) -> None:
        self._registry = registry
        self.deflate_pool = deflate_pool
        """Deflates a batch's writes side by side; None: each deflates its own."""
        self._held: dict[int, int] = {}
        """Peers whose writes waited for the batch now under way, and for how many
        batches in a row (once at most, or :data:`DEFLATED_WAITS` for a deflated link)."""

    # ------------------------------------------------------------------ the peers

    def links(self) -> tuple[W, ...]:
        """The live peers, as a snapshot the router may iterate while offering."""
        return self._registry.snapshot()

    def link(self, link_id: int) -> W | None:
        """The live peer of ``link_id``, or None once it has gone."""
        return self._registry.get(link_id)

    # ------------------------------------------------------------------ offers

    def offer(self, link_id: int, data: bytes, now: float) -> bool:
        """Offer one encoded message (its type and hops read from its header); False
        when it was not queued (dropped by the queue's policy, or the peer is gone)."""
        link = self._registry.get(link_id)
        if link is None:
            return False
        verdict = link.outgoing.offer(data, data[TYPE_OFFSET], data[HOPS_OFFSET], now)
        if verdict is Verdict.QUEUED:
            return True
        link.writer.act_on(verdict)
        return False

    def offer_many(
        self, link_id: int, datas: list[bytes], total_bytes: int, now: float
    ) -> list[bytes]:
        """Offer several messages (``total_bytes`` their length in all, which the queue
        trusts); returns those that were not queued.

        The queue takes them in one call when it can; otherwise it decides message by
        message, and a verdict that ends the peer refuses the rest.
        """
        link = self._registry.get(link_id)
        if link is None:
            return datas
        outgoing = link.outgoing
        if outgoing.offer_bulk(datas, total_bytes):
            return []
        refused: list[bytes] = []
        for index, data in enumerate(datas):
            verdict = outgoing.offer(data, data[TYPE_OFFSET], data[HOPS_OFFSET], now)
            if verdict is Verdict.QUEUED:
                continue
            refused.append(data)
            if verdict is not Verdict.DROPPED:
                link.writer.act_on(verdict)
                refused.extend(datas[index + 1 :])
                break
        return refused

    def offer_whole(self, link_id: int, datas: list[bytes], total_bytes: int) -> bool:
        """Queue all of ``datas`` if the queue takes them without any decision of its
        policy (room for all, nothing to drop or evict); otherwise queue none and answer
        False, and the caller offers them one by one, as its rules require."""
        link = self._registry.get(link_id)
        return link is not None and link.outgoing.offer_bulk(datas, total_bytes)

    # ------------------------------------------------------------------ writes

    def write(self, link_id: int) -> None:
        """Start writing one peer's queue now: for messages made outside a batch."""
        link = self._registry.get(link_id)
        if link is not None:
            self._held.pop(link_id, None)
            link.writer.flush()

    def end_batch(self, upcoming: int = 0) -> None:
        """The router has finished a batch: start every peer's write.

        ``upcoming``: the most messages the router's next batch may offer one peer, when
        that batch is already queued (0 when it is not). A peer that can take that many
        more without a decision of its policy, and did not wait last time, waits for it;
        a deflated one with less than :data:`DEFLATED_WRITE` queued may wait again, up
        to :data:`DEFLATED_WAITS` batches in a row.
        """
        held = self._held
        waiting: dict[int, int] = {}
        pool = self.deflate_pool
        if pool is not None:
            pool.begin_batch()
        try:
            for link in self._registry.snapshot():
                waited = held.get(link.id, 0)
                if upcoming and _may_wait(link, upcoming, waited):
                    waiting[link.id] = waited + 1
                else:
                    link.writer.flush()
        finally:
            if pool is not None:
                pool.end_batch()
        self._held = waiting

    @property
    def idle(self) -> bool:
        """Whether every write of the last batch went straight to its socket (or waits
        for the next batch): the router may route its next batch before the writers
        run. A writer with work must run first, or its peer's queue could grow by more
        than a batch between two writes, and the slow-peer threshold is set on the
        promise that it does not."""
        return not any(link.writer.busy for link in self._registry.snapshot())


def _may_wait(link: Writable, upcoming: int, waited: int) -> bool:
    """Whether ``link``'s queued messages may wait for the next batch's write, having
    waited for ``waited`` batches in a row: its queue takes ``upcoming`` more without a
    decision of its policy, and holds less than half a write (a full write is better made
    now); after one wait only a deflated link's may, while it holds less than a write
    worth deflating."""
    outgoing = link.outgoing
    writer = link.writer
    if waited == 0:
        small = outgoing.pending_bytes <= WRITE_SIZE // 2
    else:
        small = (
            waited < DEFLATED_WAITS and outgoing.pending_bytes < DEFLATED_WRITE and writer.deflates
        )
    return small and outgoing.has_room_for(upcoming) and not writer.closing
