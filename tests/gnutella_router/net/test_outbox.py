"""The outbox: offers and their verdicts, the end of a batch (deferral, deflate batching).

Fake links carry the real sans-IO queues, so the verdicts are the queue policy's own;
the last test writes through real connections and a deflate pool.
"""

from __future__ import annotations

import socket
import zlib

import trio
import trio.testing

from gnutella_router.net.connection_table import ConnectionTable
from gnutella_router.net.deflate_pool import DeflatePool
from gnutella_router.net.outbox import DEFLATED_WAITS, DEFLATED_WRITE, WRITE_SIZE, Outbox
from gnutella_router.net.threshold_queue import ThresholdQueue
from protocol.codec import encode_message
from protocol.messages import Message, Query, random_guid
from tests.gnutella_router.net.test_connection import _ignore, _received
from tests.gnutella_router.net.test_socket_writer import deflating
from tests.support.links import FakeLink, outbox_over


def queries(count: int, text: bytes = b"q") -> list[bytes]:
    return [encode_message(Message(random_guid(), 3, 0, Query(text))) for _ in range(count)]


def holding(*batches: list[bytes], limit: int = 500) -> tuple[Outbox[FakeLink], FakeLink]:
    """An outbox over one link whose queue holds ``batches`` (its bound ``limit``)."""
    link = FakeLink(1)
    link.outgoing = ThresholdQueue(max_messages=limit)
    outbox = outbox_over(lambda: [link])
    for batch in batches:
        assert outbox.offer_whole(1, batch, sum(map(len, batch)))
    return outbox, link


def test_a_write_waits_for_the_next_batch_only_while_no_verdict_can_change() -> None:
    """Only when the queue takes a whole batch more under its bound and holds less than
    half a write; and never without a next batch already queued."""
    cases = [
        ((), 250, True),  # empty
        ((queries(250),), 250, True),  # 250 + 250 fits in 500
        ((queries(250),), 251, False),
        ((queries(251),), 250, False),  # 501 would pass it
        ((queries(40, b"x" * 1000),), 1, False),  # over half a write
        ((queries(1),), 0, False),  # no next batch: written now
    ]
    assert len(b"".join(queries(40, b"x" * 1000))) > WRITE_SIZE // 2
    for batches, upcoming, waits in cases:
        outbox, link = holding(*batches)
        outbox.end_batch(upcoming)
        assert link.flushes == (0 if waits else 1), (len(batches), upcoming)
    outbox, link = holding()
    link.close("test")
    outbox.end_batch(1)
    assert link.flushes == 1  # a closing link is never held


def test_a_write_waits_for_one_batch_at_most() -> None:
    """Under a flood the router's queue never empties: a link that waited for one batch
    is written after the next, or an honest peer's pong would wait behind the flood."""
    outbox, link = holding()
    outbox.end_batch(250)
    assert link.flushes == 0
    outbox.end_batch(250)
    assert link.flushes == 1  # it waited once: written now
    outbox.end_batch(250)
    assert link.flushes == 1  # and may wait again
    outbox.write(1)  # a message of our own written outside a batch ends the wait
    outbox.end_batch(250)
    assert link.flushes == 2


def test_a_deflated_write_waits_for_a_few_batches_until_it_is_worth_deflating() -> None:
    """A deflated link waits batch after batch, up to DEFLATED_WAITS, while it holds
    less than DEFLATED_WRITE and the next batch is already queued; then it is written.
    A plain link beside it waits once."""
    plain = FakeLink(1)
    deflated = FakeLink(2)
    deflated.deflates = True
    outbox = outbox_over(lambda: [plain, deflated])
    for _ in range(DEFLATED_WAITS):
        outbox.end_batch(250)
    assert plain.flushes == DEFLATED_WAITS // 2  # every other batch
    assert deflated.flushes == 0  # waited every time
    outbox.end_batch(250)
    assert deflated.flushes == 1  # DEFLATED_WAITS in a row: written now
    outbox.end_batch(0)  # no next batch queued: everyone is written
    assert deflated.flushes == 2
    outbox.end_batch(250)  # a wait ended by a write starts the count again
    assert deflated.flushes == 2
    big = queries(20, b"x" * 1000)
    assert sum(map(len, big)) >= DEFLATED_WRITE
    assert outbox.offer_whole(2, big, sum(map(len, big)))
    outbox.end_batch(250)
    assert deflated.flushes == 3  # holding a write worth deflating: written now


def test_an_offer_returns_the_queue_verdict_and_a_closing_verdict_closes_the_link() -> None:
    outbox, link = holding(limit=3)
    assert outbox.offer(1, queries(1)[0], 0.0)
    refused = outbox.offer_many(1, queries(5), sum(map(len, queries(5))), 0.0)
    assert len(refused) == 3  # two fit under the bound; the third closes the link
    assert link.closing
    assert link.close_reason == "slow peer"
    assert not outbox.offer(2, queries(1)[0], 0.0)  # no such link
    assert outbox.offer_many(2, queries(2), 2 * len(queries(1)[0]), 0.0) != []


def test_offer_whole_queues_all_or_nothing() -> None:
    outbox, link = holding(limit=4)
    three = queries(3)
    assert outbox.offer_whole(1, three, sum(map(len, three)))
    assert not outbox.offer_whole(1, three, sum(map(len, three)))  # 6 > 4: none queued
    assert len(link.sent()) == 3
    assert not link.closing


def test_the_outbox_is_idle_only_when_no_writer_has_work() -> None:
    outbox, link = holding()
    assert outbox.idle
    link.writer.busy = True
    assert not outbox.idle


async def test_a_batch_of_deflating_connections_is_deflated_together_and_then_written() -> None:
    """At the end of a batch each deflating connection's peer inflates exactly what was
    offered, in order: the pool ran the deflates, then the writes were made."""
    pool = DeflatePool(1)
    pairs = [socket.socketpair() for _ in range(2)]
    for _, theirs in pairs:
        theirs.setblocking(False)
    table = ConnectionTable()
    outbox = Outbox(table, pool)
    links = [
        deflating(trio.SocketStream(trio.socket.from_stdlib_socket(ours)), pool)
        for ours, _ in pairs
    ]
    try:
        async with trio.open_nursery() as nursery:
            for link in links:
                table.add(link)
                nursery.start_soon(link.run, _ignore)
            await trio.testing.wait_all_tasks_blocked()
            batches = [queries(1000, f"link {n} search".encode()) for n in range(len(links))]
            for link, batch in zip(links, batches, strict=True):
                assert outbox.offer_many(link.id, batch, sum(map(len, batch)), 0.0) == []
            assert all(_received(theirs) == b"" for _, theirs in pairs)  # offers never write
            outbox.end_batch()
            assert pool.jobs_parallel == 2  # both deflated in the pool, side by side
            for (_, theirs), batch in zip(pairs, batches, strict=True):
                assert zlib.decompressobj().decompress(_received(theirs)) == b"".join(batch)
            nursery.cancel_scope.cancel()
    finally:
        pool.close()
        for ours, theirs in pairs:
            ours.close()
            theirs.close()
