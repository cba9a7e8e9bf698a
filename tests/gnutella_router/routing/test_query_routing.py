"""QRP tables at the router: the union of the leaves' tables kept incrementally, the
last-hop table sent without being rebuilt, and peers that send tables too often or
break the protocol, counted as offences."""

from __future__ import annotations

import random

import pytest
import structlog
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from gnutella_router.control.abuse import Offence
from gnutella_router.routing import query_routing
from gnutella_router.routing.query_routing import LAST_HOP_TABLE_SLOTS, QueryRouting
from protocol.constants import MessageType
from protocol.messages import Message, QrpPatch, QrpReset, random_guid
from protocol.qrp import QrpReceiver, QrpTable, table_messages
from tests.support.links import FakeLink, Network, outbox_over

LEAVES = 4

steps = st.lists(
    st.tuples(
        st.sampled_from(["table", "patch", "bad", "leave"]),
        st.integers(1, LEAVES),  # which leaf
        st.sampled_from([1 << 10, 1 << 14, LAST_HOP_TABLE_SLOTS, 1 << 17]),
        st.integers(0, 2**32 - 1),  # seed of its slots
    ),
    max_size=20,
)


def random_table(slots: int, seed: int) -> QrpTable:
    rng = random.Random(seed)
    size = slots // 8
    sparse = int.from_bytes(rng.randbytes(size), "big") & int.from_bytes(rng.randbytes(size), "big")
    return QrpTable(slots, bytearray(sparse.to_bytes(size, "big")))


def union_from_scratch(routing: QueryRouting) -> QrpTable:
    union = QrpTable(LAST_HOP_TABLE_SLOTS)
    for receiver in routing.leaves.values():
        if receiver.table is not None:
            union.merge(receiver.table.resized(LAST_HOP_TABLE_SLOTS))
    return union


@settings(max_examples=40, deadline=None)
@given(steps=steps)
def test_our_leaves_table_is_the_union_of_their_tables_after_any_changes(
    steps: list[tuple[str, int, int, int]],
) -> None:
    """Leaves send whole tables (RESET and patches), patch their tables in force, break
    their sequences, and leave; after each step our leaves' table is the union of the
    tables they hold, as worked out from scratch."""
    links = {i: FakeLink(i, ultrapeer=False) for i in range(1, LEAVES + 1)}
    alive = set(links)
    routing = QueryRouting(lambda i: i in alive, structlog.get_logger())
    now = 0.0
    for action, leaf_id, slots, seed in steps:
        now += 1.0
        leaf = links[leaf_id]
        receiver = routing.leaves.get(leaf_id)
        if action == "leave":
            alive.discard(leaf_id)
            routing.prune()
            alive.add(leaf_id)  # and a new leaf comes with its id, to keep it short
            leaf.closing = False
            continue
        if action == "patch" and receiver is not None and receiver.table is not None:
            # Any patch of its table in force: raw 8-bit entries, random.
            rng = random.Random(seed)
            entries = rng.randbytes(receiver.table.slots)
            messages: list[QrpReset | QrpPatch] = [QrpPatch(1, 1, 0, 8, entries)]
        elif action == "bad":
            messages = [QrpReset(1000, 7)]  # not a power of two
        else:
            messages = table_messages(
                random_table(slots, seed), entry_bits=(1, 2, 4, 8)[seed % 4], compressed=False
            )
        for message in messages:
            routing.receive(leaf, message, LEAVES, now)
        leaf.closing = False  # a broken sequence closed it; here it may come back
        assert routing.leaves_table() == union_from_scratch(routing)


def test_the_last_hop_table_is_made_once_per_change_not_per_send(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = []

    def counted(table: QrpTable) -> list[QrpReset | QrpPatch]:
        made.append(table)
        return table_messages(table)

    monkeypatch.setattr(query_routing, "table_messages", counted)
    leaf = FakeLink(1, ultrapeer=False)
    ultrapeers = [FakeLink(i, ultrapeer_query_routing="0.1") for i in (2, 3)]
    routing = QueryRouting(lambda i: True, structlog.get_logger())
    for message in table_messages(QrpTable.of_words(["abbey"])):
        routing.receive(leaf, message, 3, 0.0)
    union = routing.leaves_table()
    assert routing.send_tables(outbox_over(lambda: ultrapeers[:1]), 0.0) > 0
    for second in range(1, 120):  # the once-a-second send, with nothing new
        routing.send_tables(outbox_over(lambda: ultrapeers[:1]), float(second))
        assert routing.leaves_table() is union
    # A newcomer gets the same bytes.
    assert routing.send_tables(outbox_over(lambda: ultrapeers), 120.0) > 0
    assert made == [union]
    assert ultrapeers[0].sent() == ultrapeers[1].sent()
    assert routing.last_hop_sent(2) == (True, 0.0)

    for message in table_messages(QrpTable.of_words(["road"])):  # a second leaf's
        routing.receive(FakeLink(4, ultrapeer=False), message, 4, 121.0)
    assert routing.last_hop_sent(2) == (False, 0.0)
    assert routing.send_tables(outbox_over(lambda: ultrapeers), 121.0) > 0
    assert len(made) == 2
    assert made[-1].matches(["abbey", "road"])


async def send_table(net: Network, link: FakeLink, table: QrpTable) -> int:
    """Send ``table`` whole; how many messages that took."""
    messages = table_messages(table, compressed=False, patch_bytes=4096)
    await net.send(link, *(Message(random_guid(), 1, 0, m) for m in messages))
    return len(messages)


async def test_a_leaf_that_sends_tables_too_often_is_refused_and_counted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = Network()
    net.links[2] = leaf = FakeLink(3, ultrapeer=False)
    interval = net.router.query_routing.table_interval
    assert interval == 10.0  # router.qrp_table_interval's default
    first = QrpTable.of_words(["first"])
    await send_table(net, leaf, first)
    sent = await send_table(net, leaf, QrpTable.of_words(["second"]))  # at once
    receiver = net.router.qrp_receiver(3)
    assert receiver is not None
    assert receiver.table == first
    assert leaf.offences == {Offence.QRP_TOO_SOON: 1}
    assert net.dropped("qrp-too-soon", MessageType.QRP) == sent == 9  # RESET, 8 patches
    assert not leaf.closing

    await trio.sleep(interval)
    await send_table(net, leaf, QrpTable.of_words(["third"]))
    assert receiver.table == QrpTable.of_words(["third"])
    assert net.router.query_routing.leaves_table().matches(["third"])
    assert not net.router.query_routing.leaves_table().matches(["first"])


@pytest.mark.parametrize(
    ("messages", "reason"),
    [
        ([QrpReset(64, 7), QrpPatch(1, 1, 0, 8, bytes(65))], "overflows"),
        (
            [QrpReset(64, 7), QrpPatch(1, 1, 1, 8, __import__("zlib").compress(bytes(1 << 20)))],
            "overflows",
        ),
        ([QrpReset(64, 7), QrpPatch(1, 1, 7, 8, bytes(64))], "compressor"),
        ([QrpReset(64, 7), QrpPatch(2, 2, 0, 8, bytes(32))], "out of sequence"),
    ],
    ids=["patch-past-its-table", "zlib-bomb", "unknown-compressor", "out-of-order"],
)
async def test_a_broken_qrp_sequence_is_an_offence_and_ends_the_link_with_bye_413(
    autojump_clock: trio.testing.MockClock, messages: list[QrpReset | QrpPatch], reason: str
) -> None:
    net = Network()
    ultrapeer = net.links[0]  # ultrapeers' last-hop tables are held to the same rules
    await net.send(ultrapeer, *(Message(random_guid(), 1, 0, m) for m in messages))
    assert ultrapeer.offences == {Offence.QRP_INVALID: 1}
    assert ultrapeer.closing
    assert ultrapeer.bye_code_sent == 413
    assert ultrapeer.close_reason is not None
    assert reason in ultrapeer.close_reason
    assert net.router.qrp_receiver(1) is None


def test_tables_of_gtk_gnutellas_largest_sizes_are_taken_from_leaves_and_ultrapeers() -> None:
    routing = QueryRouting(lambda i: True, structlog.get_logger())
    leaf, ultrapeer = FakeLink(1, ultrapeer=False), FakeLink(2)
    for link, slots in ((leaf, 1 << 21), (ultrapeer, 1 << 17)):
        full = QrpTable(slots, bytearray(b"\xff" * (slots // 8)))
        for message in table_messages(full, entry_bits=8, patch_bytes=65536):
            routing.receive(link, message, 2, 0.0)
        receiver = routing.receiver(link.id)
        assert isinstance(receiver, QrpReceiver)
        assert receiver.table == full
        assert not link.closing
    assert routing.leaves_table().filled == LAST_HOP_TABLE_SLOTS
