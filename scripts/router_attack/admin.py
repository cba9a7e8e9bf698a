"""Attacks through the admin interface: its largest dumps while the router routes, and
connections that send half a request and hold on.
"""

from __future__ import annotations

import collections
import statistics
from collections.abc import Awaitable, Callable

import trio

from protocol.messages import Message, Ping, Query
from scripts.router_attack.arena import Arena, Scenario
from scripts.router_attack.settings import ATTACKER_SOURCE, Result
from scripts.router_bench.dumps import (
    LIMIT,
    Flooder,
    handshaken,
    http_get,
    messages,
    sigusr1,
    table_sizes,
)
from scripts.router_bench.peers import BenchError
from scripts.router_fuzz.wire import STREAM_ERRORS, RouterTarget, close_quietly, open_from

# --- 5. admin dumps during routing ---------------------------------------------------

FLOODERS = 4
FILL_QUERIES = 24_000
FILL_PINGS = 12_000
"""Per flooding peer: 96,000 queries and 48,000 pings in all, each GUID new, TTL 1 (so
nothing is forwarded). Four peers, because the route tables give a connection that
holds far more than an equal share of a full generation's entries its own oldest to
evict (``RouteTable._make_room``): beside the honest peers, one peer alone could not fill
them. 96,000 queries fill the query table's two generations of 50,000 but for the room
the honest pending queries take, and go no further: a rotation would drop the honest
routes for volume, which is capacity, not the dumps' doing. 48,000 pings, with U1's,
fill one generation of the ping table."""
PING_BURST = 200
QUERY_SHARE = 1_000
FILL_SECONDS = 30.0
MIB = 1 << 20


async def fill_tables(arena: Arena) -> dict[str, int]:
    """Fill the route tables from :data:`FLOODERS` trusted peers (they stay connected:
    a router forgets a closed connection's routes); the entries held once every flood
    is recorded."""
    router = arena.router
    flooders = []
    for _ in range(FLOODERS):
        flooder = Flooder(*await handshaken(router.address))
        arena.keep(flooder.stream)
        arena.nursery.start_soon(flooder.read)
        flooders.append(flooder)
    query = Message(bytes(16), 1, 0, Query(b"dump"))
    ping = Message(bytes(16), 1, 0, Ping())
    # A share at a time from each, so that none of them holds far more than the others
    # when a generation fills.
    for _ in range(0, FILL_QUERIES, QUERY_SHARE):
        for flooder in flooders:
            await flooder.stream.send_all(messages(QUERY_SHARE, query))
    for sent in range(0, FILL_PINGS, PING_BURST):
        for flooder in flooders:
            await flooder.stream.send_all(messages(PING_BURST, ping))
        for flooder in flooders:
            await flooder.pongs_reach(sent + PING_BURST)
    # Every ping is answered, so recorded; the queries may still be on their way in.
    sizes = await table_sizes(router.admin)
    with trio.move_on_after(FILL_SECONDS):
        while sizes["query"] < FLOODERS * FILL_QUERIES:
            await trio.sleep(0.25)
            sizes = await table_sizes(router.admin)
    return sizes


async def admin_dumps(arena: Arena) -> None:
    """Trusted peers fill the route tables; then, one after the other, the largest
    ``/dump`` and ``/routes`` pages are read to the end and SIGUSR1 writes the full dump
    to a file; each is timed against the honest pings."""
    result, router = arena.result, arena.router
    filling = trio.current_time()
    sizes = await fill_tables(arena)
    result.figure(
        "route tables filled (entries)", f"{sizes} in {trio.current_time() - filling:.1f} s"
    )
    arena.begin()

    async def get(target: str) -> int:
        status, size, _ = await http_get(router.admin, target)
        if status != 200:
            raise BenchError(f"{target} answered {status}")
        return size

    steps: list[tuple[str, Callable[[], Awaitable[int]]]] = [
        (f"GET /dump?limit={LIMIT}", lambda: get(f"/dump?limit={LIMIT}")),
        (f"GET /routes?limit={LIMIT}", lambda: get(f"/routes?limit={LIMIT}")),
        ("SIGUSR1", lambda: sigusr1(router.pid, router.state)),
    ]
    for name, step in steps:
        begun = trio.current_time()
        size = await step()
        ended = trio.current_time()
        await trio.sleep(0.2)
        worst = max(arena.pinger.overlapping(begun, ended), default=0.0) * 1000
        result.figure(
            name, f"{ended - begun:.2f} s, {size / MIB:.1f} MiB, worst round trip {worst:.1f} ms"
        )


def judge_admin_dumps(result: Result) -> None:
    result.floor("attacker counted as an offender", None, "no attacking peer: the admin's user")


ADMIN_DUMPS = Scenario(
    "admin-dumps",
    "Admin dumps during routing: /dump and /routes (limit=100000) and SIGUSR1 with full "
    "route tables",
    admin_dumps,
    judge_admin_dumps,
)


# --- 8. slow admin connections -------------------------------------------------------

SLOW_CONNECTIONS = 16
"""The admin interface's own limit on connections served at once."""
HALF_REQUEST = b"GET /stats HTTP/1.1\r\nHost: admin\r\n"
"""A request head without its blank line: the admin waits for the rest."""
ASK_EVERY = 0.5
ASK_TIMEOUT = 2.0
SLOW_ADMIN_SECONDS = 12.0
"""At least this long: past the admin's 10 s request timeout, so its closes (and the
attacker's returns) are seen."""


async def slow_admin(arena: Arena) -> None:
    """16 connections send half a request each and hold on; each one the admin closes
    comes straight back. Meanwhile an honest client asks ``/healthz`` every half second,
    waiting at most 2 s for each answer."""
    result, admin = arena.result, arena.router.admin
    held: list[float] = []
    reopened = [0]

    admin_target = RouterTarget(admin, spread_sources=True)

    async def hold() -> None:
        while True:
            try:
                stream = arena.keep(await open_from(admin_target, ATTACKER_SOURCE))
            except OSError:
                await trio.sleep(0.05)
                continue
            since = trio.current_time()
            try:
                await stream.send_all(HALF_REQUEST)
                while await stream.receive_some(4096):
                    pass
            except STREAM_ERRORS:
                pass
            held.append(trio.current_time() - since)
            reopened[0] += 1
            await close_quietly(stream)

    answers = collections.Counter[str]()
    waits: list[float] = []
    until = max(arena.deadline, arena.window_start + SLOW_ADMIN_SECONDS)
    async with trio.open_nursery() as attack:
        for _ in range(SLOW_CONNECTIONS):
            attack.start_soon(hold)
        await trio.sleep(0.5)  # all of them in
        while trio.current_time() < until:
            asked = trio.current_time()
            with trio.move_on_after(ASK_TIMEOUT):
                try:
                    status, _, _ = await http_get(admin, "/healthz")
                    answers[str(status)] += 1
                except (OSError, BenchError) as exc:
                    answers[f"error {type(exc).__name__}"] += 1
                waits.append(trio.current_time() - asked)
            if trio.current_time() - asked >= ASK_TIMEOUT:
                answers[f"no answer within {ASK_TIMEOUT:g} s"] += 1
            await trio.sleep_until(asked + ASK_EVERY)
        attack.cancel_scope.cancel()
    asked_total = sum(answers.values())
    result.figure("honest /healthz requests, by answer", dict(answers))
    if waits:
        result.figure(
            "their answers took (median, max)",
            f"{statistics.median(waits) * 1000:.0f} ms, {max(waits) * 1000:.0f} ms",
        )
    result.figure("half requests the admin closed (and the attacker reopened)", reopened[0])
    if held:
        result.figure("how long the admin held each (median)", f"{statistics.median(held):.1f} s")
    ok = answers.get("200", 0)
    result.floor(
        "the admin still answers",
        ok == asked_total,
        f"{ok} of {asked_total} honest requests answered 200",
    )


def judge_slow_admin(result: Result) -> None:
    result.floor("attacker counted as an offender", None, "the admin counts no offences")


SLOW_ADMIN = Scenario(
    "slow-admin",
    "Slow admin connections: 16 send half a request and hold on (and come back)",
    slow_admin,
    judge_slow_admin,
)
