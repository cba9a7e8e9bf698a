"""Attacks by volume from one untrusted peer: QRP tables, queries, unique GUIDs, and a
leaf's queries that each would become a dynamic query.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable

import trio

from protocol.codec import encode_message
from protocol.messages import Message, Ping, Query
from protocol.qrp import MAX_TABLE_SLOTS, QrpTable, table_messages
from scripts.router_attack.arena import Arena, Scenario, judge_offender
from scripts.router_attack.peers import HonestPeer, leaf_headers, try_handshake
from scripts.router_attack.settings import ATTACKER_SOURCE, Result
from scripts.router_bench.dumps import messages
from scripts.router_bench.peers import Blast, Wire, peer_headers
from scripts.router_fuzz.wire import STREAM_ERRORS, Drain

SEND_SLICE = 64 * 1024
CATCH_UP_SECONDS = 30.0


def fresh(arena: Arena, encoded: list[bytes]) -> bytes:
    """Encoded messages again, each with a GUID of its own."""
    return b"".join(arena.guid() + data[16:] for data in encoded)


async def send_counted(stream: trio.SocketStream, data: bytes | memoryview) -> int:
    """Send ``data`` a slice at a time; the bytes sent before the router cut us off.

    Attacks stop at their deadline between two of these, never by cancelling one: a
    write cut in the middle leaves half a message on the wire, and whatever follows it
    (the ping that tells when the router caught up) would desync the stream."""
    sent = 0
    view = memoryview(data)
    try:
        while sent < len(view):
            await stream.send_all(view[sent : sent + SEND_SLICE])
            sent += min(SEND_SLICE, len(view) - sent)
    except STREAM_ERRORS:
        pass
    return sent


def closed_text(drain: Drain, after: float) -> str:
    code = drain.bye_code()
    return f"after {after:.1f} s, " + (f"Bye {code}" if code else f"no Bye ({drain.how})")


async def caught_up(
    arena: Arena,
    stream: trio.SocketStream,
    drain: Drain,
    framed: Callable[[bytes], bytes] = bytes,
) -> None:
    """Wait until the router has worked through everything the attacker sent (its pong
    to a ping sent last; a router reads a connection in order), up to
    :data:`CATCH_UP_SECONDS`, and say how long that took or how the link ended. The
    attack window lasts until then: a router still reading the attack is under it.
    ``framed`` makes the ping's bytes what the link carries (deflated, on a link that
    deflates)."""
    result = arena.result
    stopped = trio.current_time()
    if not drain.ended.is_set():
        guid = arena.guid()
        with contextlib.suppress(*STREAM_ERRORS):
            await stream.send_all(framed(encode_message(Message(guid, 1, 0, Ping()))))
        with trio.move_on_after(CATCH_UP_SECONDS):
            # The drain keeps the last bytes read and signals nothing but the end.
            while guid not in bytes(drain.tail) and not drain.ended.is_set():  # noqa: ASYNC110
                await trio.sleep(0.01)
        if guid in bytes(drain.tail):
            waited = trio.current_time() - stopped
            result.figure("router caught up with the attacker's stream after", f"{waited:.2f} s")
            return
    if drain.ended.is_set():
        after = trio.current_time() - arena.window_start
        result.figure("attacker closed by the router", closed_text(drain, after))
    else:
        result.figure(
            "router caught up with the attacker's stream", f"not within {CATCH_UP_SECONDS:g} s"
        )


# --- 1. QRP CPU bomb -----------------------------------------------------------------


async def qrp_bomb(arena: Arena) -> None:
    """A leaf sends a full 2**21-slot table with 8-bit entries (2 MiB of entries to
    inflate and count) once a second; when closed, it comes back once a second."""
    result = arena.result
    full = QrpTable(MAX_TABLE_SLOTS, bytearray(b"\xff" * (MAX_TABLE_SLOTS // 8)))
    table = [
        encode_message(Message(bytes(16), 1, 0, m)) for m in table_messages(full, entry_bits=8)
    ]
    result.figure(
        "table: slots, entry bits, bytes on the wire", f"2^21, 8, {sum(map(len, table)):,}"
    )
    sent, answers = 0, collections.Counter[str]()
    stream, drain, _ = await arena.connect(ATTACKER_SOURCE, leaf_headers())
    closed: str | None = None
    tick = trio.current_time()
    while tick < arena.deadline:
        if not drain.ended.is_set():
            await send_counted(stream, fresh(arena, table))
            sent += 1
        else:
            if closed is None:
                closed = closed_text(drain, trio.current_time() - arena.window_start)
            again, answer = await try_handshake(
                arena.router.target, ATTACKER_SOURCE, leaf_headers()
            )
            answers[answer] += 1
            if again is not None:
                arena.keep(again)
                stream, drain = again, Drain(again, False, b"")
                arena.nursery.start_soon(arena.held, ATTACKER_SOURCE, drain)
        tick += 1.0
        await trio.sleep_until(tick)
    result.figure("full tables sent", sent)
    result.figure("attacker closed by the router", closed or "no")
    result.figure("its reconnections answered", dict(answers) or "none tried")


def judge_qrp_bomb(result: Result) -> None:
    refused = sum(result.counts("router.dropped.qrp-too-soon.").values())
    judge_offender(
        result,
        {"QRP messages refused or skipped (qrp-too-soon drops)": refused},
        kick="qrp-too-soon",
    )


QRP_BOMB = Scenario(
    "qrp-bomb",
    "QRP CPU bomb: a leaf sends a full 2^21-slot table with 8-bit entries once a second",
    qrp_bomb,
    judge_qrp_bomb,
    attackers=(ATTACKER_SOURCE,),
)


# --- 2. query flood ------------------------------------------------------------------


async def query_flood(arena: Arena) -> None:
    """An ultrapeer sends unique queries (TTL 2, so each is forwarded to every honest
    ultrapeer) as fast as the router takes them."""
    result = arena.result
    wire = Wire.build()
    blast = Blast(wire, [True] * 8192)
    stream, drain, _ = await arena.connect(ATTACKER_SOURCE, peer_headers())
    sent = 0
    while trio.current_time() < arena.deadline and not drain.ended.is_set():
        sent += await send_counted(stream, blast.next_pass())
    seconds = trio.current_time() - arena.window_start
    queries = sent // wire.size
    result.figure("queries sent", queries)
    result.figure("queries sent a second", f"{queries / seconds:,.0f}")
    readers = [peer for peer in arena.honest if peer.name in ("U2", "U3")]
    result.figure(
        "queries forwarded to each honest reader", ", ".join(f"{len(p.queries):,}" for p in readers)
    )
    await caught_up(arena, stream, drain)


def judge_query_flood(result: Result) -> None:
    judge_offender(result, {"queries over its rate (source-over-rate)": over_rate(result)})


def over_rate(result: Result) -> int:
    return sum(result.counts("router.dropped.source-over-rate.").values())


QUERY_FLOOD = Scenario(
    "query-flood",
    "Query flood: one untrusted ultrapeer sends unique TTL-2 queries as fast as it can",
    query_flood,
    judge_query_flood,
    attackers=(ATTACKER_SOURCE,),
)


# --- 3. GUID spray -------------------------------------------------------------------

SPRAY = 110_000
SPRAY_SECONDS = 2.0
SPRAY_SLICES = 20


async def guid_spray(arena: Arena) -> None:
    """An ultrapeer sends 110,000 unique TTL-1 queries, paced to take 2 s; each one the
    router takes is a route it records (TTL 1: forwarded to no one)."""
    result = arena.result
    data = messages(SPRAY, Message(bytes(16), 1, 0, Query(b"spray")))
    stream, drain, _ = await arena.connect(ATTACKER_SOURCE, peer_headers())
    step = len(data) // SPRAY_SLICES
    sent = 0
    for n in range(SPRAY_SLICES):
        await trio.sleep_until(arena.window_start + n * SPRAY_SECONDS / SPRAY_SLICES)
        piece = data[n * step : len(data) if n == SPRAY_SLICES - 1 else (n + 1) * step]
        sent += await send_counted(stream, piece)
    seconds = trio.current_time() - arena.window_start
    result.figure("unique TTL-1 queries sent", sent * SPRAY // len(data))
    result.figure("seconds to send them", f"{seconds:.2f}")
    await caught_up(arena, stream, drain)


def query_table(result: Result) -> int:
    """The query table's figures over the spray; the routes it evicted for room."""
    table = "router.tables.query."
    evicted = result.count(f"{table}evicted")
    result.figure("query routes recorded", result.count(f"{table}recorded"))
    result.figure("query routes evicted for room (the sprayer's own)", evicted)
    result.figure(
        "query table rotated for capacity", result.count(f"{table}rotations_for_capacity")
    )
    return evicted


def judge_guid_spray(result: Result) -> None:
    query_table(result)
    judge_offender(result, {"queries over its rate (source-over-rate)": over_rate(result)})


def judge_guid_spray_unlimited(result: Result) -> None:
    evicted = query_table(result)
    judge_offender(result, {"its routes evicted as the table's largest holder": evicted})


GUID_SPRAY = Scenario(
    "guid-spray",
    "GUID spray: 110,000 unique TTL-1 queries in 2 s from one untrusted ultrapeer",
    guid_spray,
    judge_guid_spray,
    attackers=(ATTACKER_SOURCE,),
)
GUID_SPRAY_UNLIMITED = Scenario(
    "guid-spray-unlimited",
    "GUID spray with the query rate off (router.peer_query_rate = 0): the route table's "
    "shares alone",
    guid_spray,
    judge_guid_spray_unlimited,
    config={"router": {"peer_query_rate": 0.0}},
    attackers=(ATTACKER_SOURCE,),
)


# --- 6. dynamic-query amplification --------------------------------------------------

LEAF_BURST = 1_500
LEAF_RATE = 500.0
HONEST_LEAF_AFTER = 1.0


async def dynamic_queries(arena: Arena) -> None:
    """A leaf sends 1,500 queries at once, then 500 a second (within its query rate, so
    each one would become a dynamic query); a second in, an honest leaf sends one query,
    whose first copies must reach the honest ultrapeers."""
    result = arena.result
    query = encode_message(Message(bytes(16), 3, 0, Query(b"amplify me")))
    stream, drain, _ = await arena.connect(ATTACKER_SOURCE, leaf_headers())
    sent = await send_counted(stream, fresh(arena, [query] * LEAF_BURST)) // len(query)
    honest_leaf = HonestPeer("L1", leaf=True)
    arena.honest.append(honest_leaf)
    checked = trio.Event()
    arena.nursery.start_soon(honest_query, arena, honest_leaf, checked)
    tick = trio.current_time()
    while (tick < arena.deadline or not checked.is_set()) and not drain.ended.is_set():
        tick += 0.1
        await trio.sleep_until(tick)
        batch = fresh(arena, [query] * int(LEAF_RATE * 0.1))
        sent += await send_counted(stream, batch) // len(query)
    await caught_up(arena, stream, drain)
    await checked.wait()
    result.figure("queries sent by the attacking leaf", sent)
    ultrapeers = [peer for peer in arena.honest if not peer.leaf]
    copies = sum(
        1
        for peer in ultrapeers
        for frame in peer.queries.values()
        if frame.payload.endswith(b"amplify me\x00")
    )
    result.figure("copies of them that reached the 3 honest ultrapeers", copies)


async def honest_query(arena: Arena, leaf: HonestPeer, checked: trio.Event) -> None:
    """Another leaf's query: started when its first copy reaches an honest ultrapeer."""
    try:
        await trio.sleep(HONEST_LEAF_AFTER)
        await leaf.connect(arena.router.target, arena.nursery)
        with trio.move_on_after(5):
            await leaf.ping()  # registered
        guid = arena.guid()
        sent = trio.current_time()
        await leaf.send(Message(guid, 3, 0, Query(b"honest leaf query")))
        ultrapeers = [peer for peer in arena.honest if not peer.leaf]
        with trio.move_on_after(5):
            # Any of three peers may get it first: looked at every 5 ms.
            while not any(guid in peer.queries for peer in ultrapeers):  # noqa: ASYNC110
                await trio.sleep(0.005)
        started = any(guid in peer.queries for peer in ultrapeers)
        arena.result.floor(
            "another leaf's query still starts",
            started,
            f"its first copy reached an honest ultrapeer "
            f"{(trio.current_time() - sent) * 1000:.0f} ms after it was sent"
            if started
            else "no copy of it reached an honest ultrapeer within 5 s",
        )
    finally:
        checked.set()


def judge_dynamic_queries(result: Result) -> None:
    dq = "router.dynamic_queries."
    ended = ("satisfied", "exhausted", "expired", "leaf-gone", "cancelled")
    began = result.count(f"{dq}active") + sum(result.count(dq + outcome) for outcome in ended)
    result.figure("dynamic queries the router started (both leaves)", began)
    result.figure("dynamic-query copies the router sent", result.count(f"{dq}copies"))
    limited = sum(result.counts("router.dropped.leaf-query-limit.").values())
    judge_offender(result, {"queries past its own limit (leaf-query-limit)": limited})


DYNAMIC_QUERIES = Scenario(
    "dq-amplification",
    "Dynamic-query amplification: one leaf's many queries, then another leaf's one",
    dynamic_queries,
    judge_dynamic_queries,
    attackers=(ATTACKER_SOURCE,),
)
