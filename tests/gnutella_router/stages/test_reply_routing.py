"""The router's reply routing is an object it holds, reading the router's one settings.

The limits and address rules may be changed on the router while it runs (the daemon
sets the local networks; an operator or a test may change any of them): every part that
judges by them (the run router, the reply run, the push handler, the pong cache's
address verdicts) must see the change at once, never a copy taken at construction.
"""

from __future__ import annotations

import ipaddress

import trio
import trio.testing

from protocol.constants import MessageType
from protocol.messages import Ping, Pong, Push, Query
from tests.support.links import Network, message

PONG = MessageType.PONG
PUSH = MessageType.PUSH
QUERY = MessageType.QUERY


async def test_the_reply_routing_reads_the_routers_settings(
    autojump_clock: trio.testing.MockClock,
) -> None:
    router = Network().router
    assert router.replies.settings is router.settings
    assert router.replies.runs.owner is router.replies
    router.hard_ttl_limit = 9
    assert router.replies.hard_ttl_limit == router.settings.hard_ttl_limit == 9


async def test_a_hard_limit_changed_while_running_holds_for_every_message(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = Network()
    a, b, _ = net.links

    async def send_all_at(ttl: int, hops: int) -> None:
        await net.send(a, message(Query(b"far"), ttl=ttl, hops=hops))
        await net.send(b, message(Pong(6346, "198.51.100.7"), ttl=ttl, hops=hops))
        await net.send(a, message(Push(b"S" * 16, 1, "198.51.100.9", 6346), ttl=ttl, hops=hops))

    await send_all_at(5, 5)  # 10: within the default hard limit (15)
    for message_type in (QUERY, PONG, PUSH):
        assert net.dropped("hard-ttl-limit", message_type) == 0
    net.router.hard_ttl_limit = 9
    await send_all_at(5, 5)  # the query by the run router, the pong by the reply run,
    for message_type in (QUERY, PONG, PUSH):  # the push by its handler
        assert net.dropped("hard-ttl-limit", message_type) == 1


async def test_which_pongs_are_cached_follows_the_settings_as_they_change(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = Network()
    router = net.router
    a, b, _ = net.links
    ping = message(Ping(), ttl=3)
    await net.send(a, ping)

    async def pong_naming(ip: str) -> None:
        await net.send(b, message(Pong(6346, ip), ttl=3, guid=ping.guid))

    await pong_naming("10.1.2.3")  # private addresses allowed (the default here)
    assert len(router.pong_cache) == 1
    assert router.statistics().pongs_not_cached == {}
    # The verdict on 10.1.2.3 was remembered: it must be worked out again.
    router.allow_private = False
    await pong_naming("10.1.2.3")
    assert router.statistics().pongs_not_cached == {"private": 1}
    router.local_networks = (ipaddress.ip_network("10.0.0.0/8"),)
    await pong_naming("10.1.2.3")  # inside a local network: cached again
    assert router.statistics().pongs_not_cached == {"private": 1}
    assert router.settings.local_networks == (ipaddress.ip_network("10.0.0.0/8"),)
    # Every pong was still routed back to whoever pinged.
    assert [f.payload_type for f in a.sent()].count(PONG) == 1 + 3
