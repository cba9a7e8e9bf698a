"""The admin interface's probes and holds: inject a ping or query as the router's own,
hold a link down, take a router offline and back (the console's reach, link and node)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from gnutella_router.daemon import Daemon
from gnutella_router.net.connection import format_address
from tests.support.http import http_get
from tests.support.peers import Peer, PeerRefused, running_daemons
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

TOKEN = "probe-token"
CONTROLLED = {"admin.token": TOKEN}
AUTH = [("Authorization", f"Bearer {TOKEN}")]


async def post(daemon: Daemon, path: str, body: object, status: int = 200) -> Any:
    assert daemon.admin_address is not None
    reply = await http_get(
        daemon.admin_address, path, method="POST", body=json.dumps(body).encode(), headers=AUTH
    )
    assert reply.status == status, (path, body, reply.body)
    return reply.json()


async def get(daemon: Daemon, target: str) -> Any:
    assert daemon.admin_address is not None
    reply = await http_get(daemon.admin_address, target, headers=AUTH)
    assert reply.status == 200, (target, reply.body)
    return reply.json()


def where(daemon: Daemon) -> str:
    return format_address(*daemon.address)


async def link(dialer: Daemon, listener: Daemon) -> None:
    await post(dialer, "/peers/add", {"address": where(listener)})
    await wait_until(lambda: len(listener.server.connections) >= 1)


async def test_a_held_link_stays_down_both_ways_until_released(tmp_path: Any) -> None:
    async with running_daemons(tmp_path, 2, overrides=CONTROLLED) as (a, b):
        await link(a, b)
        answer = await post(a, "/peers/hold", {"address": where(b)})
        assert answer == {"held": where(b), "closed": 1, "seconds": None}
        await wait_until(lambda: not a.server.connections and not b.server.connections)
        # Neither this side dials it, nor does it get in from the other side.
        refused = await post(a, "/peers/add", {"address": where(b)}, status=502)
        assert "held by the operator" in refused["error"]
        refused = await post(b, "/peers/add", {"address": where(a)}, status=502)
        assert "403 Held by the operator" in refused["error"]
        assert a.server.refused["held-by-the-operator"] == 1
        holds = await get(a, "/holds")
        assert holds["offline"] is False
        assert holds["holds"] == [{"address": where(b), "seconds_left": None}]
        assert b.address in a.catcher._excluded(), "the catcher leaves it out of its dials"
        assert await post(a, "/peers/release", {"address": where(b)}) == {"released": True}
        assert await post(a, "/peers/release", {"address": where(b)}) == {"released": False}
        await link(b, a)


async def test_a_timed_hold_says_how_long_is_left(tmp_path: Any) -> None:
    async with running_daemons(tmp_path, overrides=CONTROLLED) as (a,):
        answer = await post(a, "/peers/hold", {"address": "192.0.2.9:6346", "seconds": 30})
        assert answer == {"held": "192.0.2.9:6346", "closed": 0, "seconds": 30.0}
        (hold,) = (await get(a, "/holds"))["holds"]
        assert 0 < hold["seconds_left"] <= 30
        for body in ({"address": "192.0.2.9:6346", "seconds": 0}, {"address": "x"}, {}):
            await post(a, "/peers/hold", body, status=400)


async def test_an_offline_router_closes_refuses_and_dials_nothing_until_back(
    tmp_path: Any,
) -> None:
    async with running_daemons(tmp_path, 2, overrides=CONTROLLED) as (a, b):
        await link(a, b)
        assert await post(b, "/offline", {"offline": True}) == {"offline": True, "closed": 1}
        await wait_until(lambda: not a.server.connections and not b.server.connections)
        with pytest.raises(PeerRefused, match="403 Offline"):
            await Peer.connect(b.address)
        refused = await post(b, "/peers/add", {"address": where(a)}, status=502)
        assert "offline" in refused["error"]
        assert (await get(b, "/holds"))["offline"] is True
        assert await post(b, "/offline", {"offline": False}) == {"offline": False, "closed": 0}
        await link(a, b)
        await post(b, "/offline", {"offline": "yes"}, status=400)


async def test_an_injected_query_is_routed_as_the_routers_own(tmp_path: Any) -> None:
    async with running_daemons(tmp_path, 3, overrides=CONTROLLED) as (a, b, c):
        await link(b, a)
        await link(b, c)
        answer = await post(a, "/inject", {"type": "query", "ttl": 2, "text": "free jazz"})
        assert answer["type"] == "query"
        assert answer["ttl"] == 2
        assert answer["sent_to"] == 1
        guid = bytes.fromhex(answer["guid"])
        await wait_until(lambda: guid in c.router.query_routes)
        seen = {}
        for name, daemon in (("a", a), ("b", b), ("c", c)):
            (entry,) = (await get(daemon, f"/routes?table=query&guid={guid.hex()}"))["tables"][
                "query"
            ]["entries"]
            seen[name] = (entry["next_hop"], entry["ttl"], entry["hops"])
        assert seen == {"a": ("local", 2, 0), "b": (where(a), 2, 0), "c": (where(b), 1, 1)}


async def test_an_injected_query_goes_no_further_than_its_ttl(tmp_path: Any) -> None:
    async with running_daemons(tmp_path, 3, overrides=CONTROLLED) as (a, b, c):
        await link(b, a)
        await link(b, c)
        answer = await post(a, "/inject", {"text": "one hop", "ttl": 1})
        guid = bytes.fromhex(answer["guid"])
        await wait_until(lambda: guid in b.router.query_routes)
        await trio.sleep(0.3)
        assert guid not in c.router.query_routes


async def test_an_injected_ping_is_answered_back_to_the_router(tmp_path: Any) -> None:
    async with running_daemons(tmp_path, 2, overrides=CONTROLLED) as (a, b):
        await link(a, b)
        answer = await post(a, "/inject", {"type": "ping", "ttl": 1})
        assert answer["sent_to"] == 1
        guid = answer["guid"]

        async def pong_came_back() -> bool:
            (entry,) = (await get(a, f"/routes?table=ping&guid={guid}"))["tables"]["ping"][
                "entries"
            ]
            return bool(entry["hits"])

        with trio.fail_after(3):
            while not await pong_came_back():
                await trio.sleep(0.05)
        # The routers announce Pong-Caching to each other: b answered the ping and
        # forwarded nothing, so it kept no route for it.
        assert bytes.fromhex(guid) not in b.router.ping_routes


@pytest.mark.parametrize(
    "body",
    [
        {"type": "ping", "ttl": 0},
        {"type": "ping", "ttl": 8},  # over network.max_ttl (7)
        {"type": "ping", "text": "x"},
        {"type": "query"},
        {"type": "query", "text": ""},
        {"type": "query", "text": "x" * 201},
        {"type": "push", "ttl": 1},
        {"type": "query", "text": "x", "ttl": True},
    ],
)
async def test_bad_injections_are_refused(tmp_path: Any, body: dict[str, object]) -> None:
    async with running_daemons(tmp_path, overrides=CONTROLLED) as (a,):
        answer = await post(a, "/inject", body, status=400)
        assert answer["error"]
