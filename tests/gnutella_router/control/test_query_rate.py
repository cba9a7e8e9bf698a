"""Each untrusted peer's query rate: a bucket that refills, and a flood that is cut at it
while its neighbours get what the rate lets through and stay connected."""

from __future__ import annotations

import trio
import trio.testing

from gnutella_router.control.query_rate import UNLIMITED, QueryRate
from protocol.constants import MessageType
from protocol.messages import Message, Query
from tests.support.links import Network


def test_a_bucket_starts_full_and_refills_at_its_rate() -> None:
    rate = QueryRate(100.0, 20)
    assert rate.allowance(1, 0.0) == 20
    rate.spend(1, 20)
    assert rate.allowance(1, 0.0) == 0
    assert rate.allowance(1, 0.05) == 5  # 100 a second: five in 50 ms
    rate.spend(1, 5)
    assert rate.allowance(1, 10.0) == 20  # never more than the burst
    assert rate.allowance(2, 10.0) == 20  # every peer its own bucket


def test_trusted_peers_and_a_rate_of_0_are_not_limited() -> None:
    rate = QueryRate(100.0, 20, exempt=lambda link_id: link_id == 7)
    rate.spend(7, 1000)
    assert rate.allowance(7, 0.0) == UNLIMITED
    assert QueryRate(0.0, 20).allowance(1, 0.0) == UNLIMITED


def test_buckets_of_peers_gone_are_forgotten() -> None:
    rate = QueryRate(100.0, 20)
    for link_id in range(10):
        rate.allowance(link_id, 0.0)
    rate.forget({3, 4})
    assert len(rate) == 2


async def test_a_flooding_peer_is_cut_at_its_rate_and_its_neighbours_stay(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = Network(query_rate=(100.0, 10))
    flooder, a, b = net.links
    flood = [Message(bytes([1, i]) + bytes(14), 3, 0, Query(b"spam")) for i in range(50)]
    await net.send(flooder, *flood)
    assert net.dropped("source-over-rate", MessageType.QUERY) == 40
    assert len(a.sent()) == len(b.sent()) == 10
    assert [link.closing for link in net.links] == [False, False, False]
    assert not flooder.offences  # a bound, not an offence
    await trio.sleep(0.1)  # ten more a tenth of a second later
    more = [Message(bytes([2, i]) + bytes(14), 3, 0, Query(b"spam")) for i in range(50)]
    await net.send(flooder, *more)
    assert len(a.sent()) == 10
    # Another peer's queries are its own business: its bucket is full.
    await net.send(a, Message(bytes([3]) + bytes(15), 3, 0, Query(b"honest")))
    assert len(b.sent()) == 10 + 1
