"""Attacks that break the rules rather than flood: one address after every slot, idle and
half-sent connections, large hits nobody asked for, relayed Byes, a deflate bomb.
"""

from __future__ import annotations

import collections
import contextlib
import zlib

import trio

from protocol.codec import encode_message
from protocol.constants import MessageType
from protocol.header import encode_header
from protocol.messages import Message, Ping, QueryHit, QueryHitResult, VendorMessage
from scripts.router_attack.arena import Arena, Scenario, judge_offender, note_slots
from scripts.router_attack.floods import caught_up, send_counted
from scripts.router_attack.peers import knock, try_handshake
from scripts.router_attack.settings import ATTACKER_SOURCE, CROWD_SOURCE, DRIPPER_SOURCE, Result
from scripts.router_bench.peers import peer_headers
from scripts.router_fuzz.wire import STREAM_ERRORS, Drain

# --- 4. one address after every slot; idle and half-sent connections -----------------

CROWD = 40
"""Connections the crowd opens at once from one address: more than the router's 32
ultrapeer slots."""
DEADLINE = 2.0
"""``network.idle_timeout`` and ``network.partial_message_timeout`` for the scenario."""
DEADLINE_SLACK = 1.0
"""How late a deadline may fire and still count as kept: the router checks its
deadlines a quarter of the shortest apart (0.5 s here), and a loaded machine is late."""
DRIP_SECONDS = 0.5


async def slot_hog(arena: Arena) -> None:
    """From one untrusted address, 40 handshakes at once; the one let in stays silent
    (the idle deadline). From another, a peer sends half a query and then a byte every
    half second (never idle, never a whole message: the partial-message deadline). Each
    comes back once closed: the silent one did nothing wrong, the dripper did."""
    result = arena.result
    answers = collections.Counter[str]()
    admitted: list[tuple[trio.SocketStream, float]] = []

    async def attempt() -> None:
        stream, answer = await try_handshake(arena.router.target, CROWD_SOURCE, peer_headers())
        answers[answer] += 1
        if stream is not None:
            admitted.append((arena.keep(stream), trio.current_time()))

    async with trio.open_nursery() as crowd:
        for _ in range(CROWD):
            crowd.start_soon(attempt)
    result.figure(f"answers to {CROWD} handshakes at once from one address", dict(answers))
    note_slots(result, len(admitted))
    dripper = trio.Event()
    arena.nursery.start_soon(drip, arena, dripper)
    if admitted:
        stream, since = admitted[0]
        drain = Drain(stream, False, b"")
        with trio.move_on_after(DEADLINE + 10):
            await drain.run()
        held = trio.current_time() - since
        code = drain.bye_code()
        kept = drain.ended.is_set() and held <= DEADLINE + DEADLINE_SLACK
        result.floor(
            "idle connection closed within its deadline",
            kept,
            f"closed {held:.2f} s after its handshake"
            + (f" with Bye {code}" if code else f" ({drain.how})")
            + f"; deadline {DEADLINE:g} s",
        )
        again = await knock(arena.router.target, CROWD_SOURCE, peer_headers())
        result.figure("the silent address connecting again", again)
    await dripper.wait()


async def drip(arena: Arena, done: trio.Event) -> None:
    result = arena.result
    try:
        stream, drain, _ = await arena.connect(DRIPPER_SOURCE, peer_headers())
        header = encode_header(arena.guid(), MessageType.QUERY, 3, 0, 100)
        await stream.send_all(header + b"\x80\x00")
        since = trio.current_time()
        with trio.move_on_after(DEADLINE + 10), contextlib.suppress(*STREAM_ERRORS):
            while not drain.ended.is_set():
                await stream.send_all(b"x")
                with trio.move_on_after(DRIP_SECONDS):
                    await drain.ended.wait()
        held = trio.current_time() - since
        code = drain.bye_code()
        result.floor(
            "half-sent message closed within its deadline",
            drain.ended.is_set() and held <= DEADLINE + DEADLINE_SLACK,
            f"closed {held:.2f} s after its first partial bytes"
            + (f" with Bye {code}" if code else f" ({drain.how})")
            + f"; deadline {DEADLINE:g} s",
        )
        again = await knock(arena.router.target, DRIPPER_SOURCE, peer_headers())
        result.figure("the dripping address connecting again", again)
    finally:
        done.set()


def judge_slot_hog(result: Result) -> None:
    for name in ("already-connected", "rate-limited", "temporarily-banned"):
        result.figure(f"refused by the router: {name}", result.count(f"server.refused.{name}"))
    for name in ("idle", "partial-message"):
        result.figure(f"closed by deadline: {name}", result.count(f"server.timed_out.{name}"))
    judge_offender(
        result,
        {
            "second connections refused (already-connected)": result.count(
                "server.refused.already-connected"
            ),
            "half-sent messages (timed_out partial-message)": result.count(
                "server.timed_out.partial-message"
            ),
        },
        kick="partial-message",
    )


SLOT_HOG = Scenario(
    "slot-hog",
    "One address after every slot (40 handshakes at once), an idle and a half-sent "
    "connection, with 2 s deadlines",
    slot_hog,
    judge_slot_hog,
    config={"network": {"idle_timeout": DEADLINE, "partial_message_timeout": DEADLINE}},
    attackers=(CROWD_SOURCE, DRIPPER_SOURCE),
)


# --- 7. large unroutable hits and malformed relayed Byes -----------------------------

RELAYED_BYES = 100
LARGE_HITS = 60
HIT_PAYLOAD = 65_536


def relayed_bye(arena: Arena, n: int) -> bytes:
    """A Bye that was relayed (hops 1, or a TTL above 1) with a payload that does not
    parse (empty, or shorter than its two-byte code)."""
    ttl, hops = (1, 1) if n % 2 else (5, 0)
    payload = arena.rng.choice((b"\xff", b""))
    return encode_header(arena.guid(), MessageType.BYE, ttl, hops, len(payload)) + payload


def large_hit(arena: Arena) -> bytes:
    """A query hit of 64 KiB for a query nobody sent: a valid hit padded by its last
    result's name."""
    servent = arena.guid()
    bare = encode_message(
        Message(
            bytes(16),
            3,
            0,
            QueryHit(6346, "127.0.0.2", 1000, (QueryHitResult(1, 1, b""),), servent),
        )
    )
    name = b"x" * (HIT_PAYLOAD - (len(bare) - 23))
    hit = QueryHit(6346, "127.0.0.2", 1000, (QueryHitResult(1, 1, name),), servent)
    return encode_message(Message(arena.guid(), 3, 0, hit))


async def large_hits(arena: Arena) -> None:
    """An ultrapeer sends 100 malformed relayed Byes (which must be ignored, not close
    the link), checks it is still served, then 64 KiB query hits with no route, five
    at a time, until the router closes it; then it comes back."""
    result = arena.result
    stream, drain, _ = await arena.connect(ATTACKER_SOURCE, peer_headers())
    await stream.send_all(b"".join(relayed_bye(arena, n) for n in range(RELAYED_BYES)))
    guid = arena.guid()
    await stream.send_all(encode_message(Message(guid, 1, 0, Ping())))
    with trio.move_on_after(5):
        while guid not in bytes(drain.tail) and not drain.ended.is_set():  # noqa: ASYNC110
            await trio.sleep(0.01)
    served = guid in bytes(drain.tail)
    result.floor(
        "relayed Byes ignored (the link still served)",
        served,
        f"{RELAYED_BYES} malformed relayed Byes, then a ping: "
        + ("answered" if served else f"not answered ({drain.how or 'open'})"),
    )
    hit = large_hit(arena)
    result.figure("hit size (payload bytes)", len(hit) - 23)
    sent = 0
    while trio.current_time() < arena.deadline and sent < LARGE_HITS:
        if drain.ended.is_set():
            break
        burst = b"".join(arena.guid() + hit[16:] for _ in range(5))
        if await send_counted(stream, burst) < len(burst):
            break
        sent += 5
        await trio.sleep(0.02)
    result.figure("64 KiB unroutable hits sent", sent)
    await caught_up(arena, stream, drain)
    again = await knock(arena.router.target, ATTACKER_SOURCE, peer_headers())
    result.figure("the attacker connecting again", again)


def judge_large_hits(result: Result) -> None:
    relayed = sum(result.counts("router.dropped.bye-relayed.").values())
    result.figure("relayed Byes dropped (bye-relayed)", relayed)
    judge_offender(
        result,
        {
            "relayed Byes dropped (bye-relayed)": relayed,
            "large hits with no route (kicked unroutable-large)": result.count(
                "server.kicked.unroutable-large"
            ),
        },
        kick="unroutable-large",
    )


LARGE_HITS_BYES = Scenario(
    "large-hits",
    "Large unroutable query hits (64 KiB) after malformed relayed Byes",
    large_hits,
    judge_large_hits,
    attackers=(ATTACKER_SOURCE,),
)


# --- 9. deflate bomb -----------------------------------------------------------------

BOMB_BODY = 4000
"""Bytes of zeros in each vendor message of the bomb: 4,031-byte messages, 256 of them
per deflate block, inflate about 700:1."""
BOMB_MESSAGES = 256
ZLIB_HEADER = b"\x78\xda"
BLOCKS_PER_WRITE = 16


def raw_block(data: bytes) -> bytes:
    """``data`` as a raw deflate block that refers to nothing before it, flushed to a
    byte boundary: it can follow any other such block in a stream."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    return compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)


def bomb_block(arena: Arena) -> tuple[bytes, int]:
    """A raw deflate block that stands on its own (it refers to nothing before it), so
    one block can be sent again and again after a zlib header: the stream inflates to
    the same vendor messages each time; and the bytes it inflates to.

    The messages are vendor messages the router does not act on (vendor "ATCK"): it
    takes them quietly, so nothing in them but their volume is an offence."""
    message = encode_message(
        Message(arena.guid(), 1, 0, VendorMessage(b"ATCK", 1, 1, bytes(BOMB_BODY)))
    )
    data = message * BOMB_MESSAGES
    return raw_block(data), len(data)


async def deflate_bomb(arena: Arena) -> None:
    """An ultrapeer negotiates deflate and sends deflate blocks that inflate about
    700:1, as fast as the router takes them, for ``--seconds``."""
    result = arena.result
    stream, drain, deflating = await arena.connect(ATTACKER_SOURCE, peer_headers(), deflate=True)
    if not deflating:
        result.floor("deflate negotiated", False, "the router did not accept deflate")
        return
    block, inflated = bomb_block(arena)
    result.figure(
        "one block: deflated, inflated, ratio",
        f"{len(block):,} B, {inflated:,} B, {inflated / len(block):.0f}:1",
    )
    await stream.send_all(ZLIB_HEADER)
    write = block * BLOCKS_PER_WRITE
    blocks = 0
    while trio.current_time() < arena.deadline and not drain.ended.is_set():
        done = await send_counted(stream, write)
        blocks += done // len(block)
        if done < len(write):
            break
    seconds = trio.current_time() - arena.window_start
    result.figure("deflated bytes sent", blocks * len(block))
    result.figure("inflated, that is", f"{blocks * inflated / 2**20:,.0f} MiB")
    result.figure("vendor messages inflated from it", blocks * BOMB_MESSAGES)
    result.figure("sending took", f"{seconds:.2f} s")
    await caught_up(arena, stream, drain, raw_block)
    result.floor(
        "deflate bomb cut off (the link closed or its ratio capped)",
        drain.ended.is_set(),
        "the router closed the link" + (f" with Bye {drain.bye_code()}" if drain.bye_code() else "")
        if drain.ended.is_set()
        else f"the link was still open after {blocks * inflated / 2**20:,.0f} MiB inflated",
    )


def judge_deflate_bomb(result: Result) -> None:
    result.figure("vendor messages the router consumed", result.count("router.consumed.vendor"))
    result.figure(
        "bytes the router read, all peers (server.bytes_in)", result.count("server.bytes_in")
    )
    kicks = result.counts("server.kicked.")
    judge_offender(result, {f"kicked for {k}": n for k, n in kicks.items()})


DEFLATE_BOMB = Scenario(
    "deflate-bomb",
    "Deflate bomb: a peer negotiates deflate and sends a stream that inflates ~700:1",
    deflate_bomb,
    judge_deflate_bomb,
    attackers=(ATTACKER_SOURCE,),
)
