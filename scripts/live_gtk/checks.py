"""The live check's steps: bring the links up and watch the tables travel, search, keep
the links up for the run's length, then read what both sides counted.

Every step reads the router's admin interface and gtk-gnutella's shell in a thread (they
block), and waits with a deadline; a step that cannot go on raises
:class:`~live_gtk.network.CheckFailed`, a check that fails is recorded and the run goes
on, so that one report says everything that was seen.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import random
import signal
import string
import subprocess
import time
from typing import Any

import trio

from gnutella_router import __version__
from gnutella_router.lab.traffic.load import ClientPeer, open_client_peer
from protocol.codec import encode_message
from protocol.constants import MessageType
from protocol.errors import MalformedPayloadError
from protocol.framing import FrameDecoder
from protocol.messages import Message, Query, QueryHit, random_guid
from scripts.live_gtk.network import (
    EXPECTED_DROPS,
    OTHER_WORDS,
    CheckFailed,
    Network,
    drop_total,
    drops_from_router,
    parse_drop_stats,
    router_flags,
    router_peers,
)

LAST_HOP_DEADLINE = 90.0
"""Seconds an ultrapeer may wait for our leaves' table after the leaf's table came."""


@dataclasses.dataclass
class Figures:
    """What the run measured, for the report and docs/interop.md."""

    started: str = ""
    gtk_version: str = ""
    checks: list[tuple[str, bool, str]] = dataclasses.field(default_factory=list)
    leaf_table_seconds: float | None = None
    last_hop_seconds: dict[str, float | None] = dataclasses.field(default_factory=dict)
    hit_seconds: float | None = None
    hit_hops: int | None = None
    misses_sent: int = 0
    qrp_miss: int = 0
    held_seconds: float = 0.0
    router_drops: dict[str, Any] = dataclasses.field(default_factory=dict)
    gtk_drops: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    gtk_drops_from_router: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    byes: dict[str, int] = dataclasses.field(default_factory=dict)
    messages: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)

    def check(self, name: str, ok: bool, detail: str) -> None:
        self.checks.append((name, ok, detail))
        print(f"  [{'ok' if ok else 'FAIL'}] {name}: {detail}", flush=True)


# --- our scripted peers at the gtk ultrapeers ------------------------------------------


async def connect_searcher(port: int, leaf: bool) -> ClientPeer:
    """A peer of ours at a gtk ultrapeer: a leaf (whose queries it widens by dynamic
    querying) or an ultrapeer (whose queries it floods)."""
    headers = [
        ("User-Agent", f"gnutella-router-live-check/{__version__}"),
        ("X-Ultrapeer", "False" if leaf else "True"),
        ("X-Query-Routing", "0.1"),
        ("Bye-Packet", "0.1"),
        ("GGEP", "0.5"),
        ("GUID", random_guid().hex()),
    ]
    if not leaf:
        headers += [("X-Degree", "32"), ("X-Dynamic-Querying", "0.1"), ("X-Max-TTL", "4")]
    name = "searcher" if leaf else "relay"
    return await open_client_peer(
        ("127.0.0.1", port), name, legacy=False, user_agent="", headers=headers
    )


async def read_hits(peer: ClientPeer, hits: dict[bytes, list[tuple[float, Message]]]) -> None:
    """Keep every query hit the peer is sent, by GUID, until the stream ends."""
    decoder = FrameDecoder()
    frames = decoder.receive_data(peer.leftover) if peer.leftover else []
    while True:
        for frame in frames:
            if frame.payload_type != MessageType.QUERY_HIT:
                continue
            with contextlib.suppress(MalformedPayloadError):
                hits.setdefault(frame.guid, []).append((trio.current_time(), frame.message()))
        try:
            data = await peer.stream.receive_some(65536)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        if not data:
            return
        frames = decoder.receive_data(data)


def query(text: str, ttl: int) -> tuple[bytes, bytes]:
    guid = random_guid()
    return guid, encode_message(Message(guid, ttl, 0, Query(text.encode())))


def random_word(rng: random.Random, length: int = 9) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(length))


# --- the run -----------------------------------------------------------------------------


async def wait_for(what: str, limit: float, probe: Any, interval: float = 0.5) -> Any:
    """Call ``probe`` (in a thread: it may block on HTTP or the shell) until it returns
    something true; that value. CheckFailed after ``limit`` seconds."""
    deadline = trio.current_time() + limit
    while True:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired, ValueError, KeyError):
            value = await trio.to_thread.run_sync(probe)
            if value:
                return value
        if trio.current_time() >= deadline:
            raise CheckFailed(f"{what}: not within {limit:.0f} s")
        await trio.sleep(interval)


def ready(network: Network) -> bool:
    logs = [network.settings.work / f"{n}.wrapper.log" for n in network.servents]
    servents = all(p.exists() and "ready:" in p.read_text("utf-8", "replace") for p in logs)
    return servents and network.get("/healthz") is not None


def qrp_peers(network: Network) -> dict[int, dict[str, Any]]:
    answer = network.get(f"/qrp?keyword={network.word}")
    return {p["id"]: p for p in answer["peers"]}


async def bring_up(network: Network, figures: Figures) -> dict[str, int]:
    """Start the links and check that the tables travel; each servent's connection id."""
    await wait_for("servents and router ready", 60, lambda: ready(network))
    for name in network.servents:
        await wait_for(f"{name}'s shell", 30, lambda n=name: "100" in network.shell(n, "pid"))
    version = network.shell("up1", "version")
    figures.gtk_version = next((x for x in version.splitlines() if "gtk-gnutella" in x), "?")
    figures.gtk_version = figures.gtk_version.removeprefix("100 ").strip()
    for name in network.servents:
        network.shell(name, "set log_dropped_gnutella TRUE")
    router = f"127.0.0.1:{network.router_port}"
    network.shell("up1", f"node add {router}")
    ups = await wait_for(
        "up1 (dialling in) and up2 (dialled by the router) connected",
        60,
        lambda: (p := router_peers(network)).keys() >= {"up1", "up2"} and p,
    )
    await wait_for(
        "our (empty) leaves' table sent to both gtk ultrapeers",
        30,
        lambda: all(qrp_peers(network)[ups[n]]["last_hop_table_sent"] for n in ("up1", "up2")),
    )
    started = time.monotonic()
    network.shell("leaf", f"node add {router}")
    peers: dict[str, int] = await wait_for(
        "the leaf connected", 60, lambda: "leaf" in router_peers(network) and router_peers(network)
    )
    leaf_id = peers["leaf"]
    table = await wait_for(
        "the leaf's QRP table at the router",
        60,
        lambda: (p := qrp_peers(network)[leaf_id])["tables_received"] and p["would_receive"] and p,
    )
    arrived = time.monotonic()
    figures.leaf_table_seconds = arrived - started
    figures.check(
        "leaf QRP table reached the router",
        True,
        f"{figures.leaf_table_seconds:.1f} s after 'node add'; {table['slots']} slots, "
        f"{table['filled']} filled, '{network.word}' would reach the leaf",
    )
    for name in ("up1", "up2"):

        def current(name: str = name) -> dict[str, Any] | None:
            sent = qrp_peers(network)[peers[name]]["last_hop_table_sent"]
            return sent if sent and sent["current"] else None

        try:
            sent = await wait_for(f"{name} sent our table", LAST_HOP_DEADLINE + 10, current, 1.0)
        except CheckFailed as exc:
            figures.last_hop_seconds[name] = None
            figures.check(f"{name} got our leaves' table", False, str(exc))
            continue
        seconds = max(0.0, time.monotonic() - sent["seconds_ago"] - arrived)
        figures.last_hop_seconds[name] = seconds
        flags = router_flags(network.shell(name, "nodes"))
        has = bool(flags) and flags[0][4] == "Q"
        figures.check(
            f"{name} got our leaves' table",
            seconds <= LAST_HOP_DEADLINE and has,
            f"{seconds:.1f} s after the leaf's table came (limit {LAST_HOP_DEADLINE:.0f} s); "
            f"gtk-gnutella's flags for the router: {' '.join(flags) or 'none'}",
        )
    return peers


async def search(
    network: Network, figures: Figures, nursery: trio.Nursery
) -> tuple[ClientPeer, ClientPeer, dict[bytes, list[tuple[float, Message]]]]:
    """The searcher's query for the leaf's file at up1, and unmatched queries at up2."""
    hits: dict[bytes, list[tuple[float, Message]]] = {}
    searcher = await connect_searcher(network.servents["up1"].port, leaf=True)
    relay = await connect_searcher(network.servents["up2"].port, leaf=False)
    nursery.start_soon(read_hits, searcher, hits)
    nursery.start_soon(read_hits, relay, hits)
    await trio.sleep(2)
    guid, data = query(network.word, 4)
    sent = trio.current_time()
    await searcher.send(data)

    def found() -> list[tuple[float, Message]]:
        return [
            (at, m)
            for at, m in hits.get(guid, [])
            if isinstance(m.payload, QueryHit)
            and any(
                r.name.decode("utf-8", "replace") == network.file_name for r in m.payload.results
            )
        ]

    with trio.move_on_after(60):
        while not found():  # noqa: ASYNC110 (the reader task fills hits; polled, not signalled)
            await trio.sleep(0.2)
    good = found()
    if good:
        at, message = good[0]
        figures.hit_seconds, figures.hit_hops = at - sent, message.hops
    figures.check(
        "search at up1 found the leaf's file",
        bool(good),
        f"hit after {figures.hit_seconds:.2f} s, {figures.hit_hops} hops ('{network.file_name}')"
        if good
        else "no hit within 60 s",
    )
    before = await trio.to_thread.run_sync(network.get, "/stats")
    rng = random.Random()
    unmatched = []
    for _ in range(10):
        guid, data = query(f"{random_word(rng)} {random_word(rng)}", 3)
        unmatched.append(guid)
        await relay.send(data)
        await trio.sleep(2)
    await trio.sleep(5)
    after = await trio.to_thread.run_sync(network.get, "/stats")
    received = after["router"]["received"].get("query", 0) - before["router"]["received"].get(
        "query", 0
    )
    misses = drop_total(after, "qrp-miss") - drop_total(before, "qrp-miss")
    figures.misses_sent, figures.qrp_miss = len(unmatched), misses
    answered = sum(len(hits.get(g, [])) for g in unmatched)
    figures.check(
        "unmatched queries kept from the leaf",
        misses >= 1 and misses >= received and answered == 0,
        f"{len(unmatched)} sent at up2, {received} reached the router, qrp-miss rose by "
        f"{misses}, {answered} hits came back",
    )
    return searcher, relay, hits


async def hold(
    network: Network,
    figures: Figures,
    peers: dict[str, int],
    searcher: ClientPeer,
    relay: ClientPeer,
    hits: dict[bytes, list[tuple[float, Message]]],
    duration: float,
) -> None:
    """Keep the links up for ``duration`` seconds with a search and an unmatched query a
    minute; watch them."""
    before = await trio.to_thread.run_sync(network.get, "/stats")
    start = time.monotonic()
    others = ("gtkcheck", *OTHER_WORDS)
    extra: list[tuple[str, ...]] = [(w,) for w in others]
    extra += list(itertools.combinations(others, 2))
    texts = [" ".join((*words, network.word)) for words in extra]
    sent: list[bytes] = []
    rng = random.Random()
    round_ = 0
    broken = ""
    while (elapsed := time.monotonic() - start) < duration:
        gone = network.alive()
        now_peers = await trio.to_thread.run_sync(router_peers, network)
        if gone or now_peers != peers:
            broken = f"after {elapsed:.0f} s: gone {gone}, connections {now_peers} (were {peers})"
            break
        if round_ % 2 == 0:
            guid, data = query(texts[(round_ // 2) % len(texts)], 4)
            sent.append(guid)
            await searcher.send(data)
            await relay.send(query(f"{random_word(rng)} {random_word(rng)}", 3)[1])
        found = sum(1 for g in sent if hits.get(g))
        answered = f"{found}/{len(sent)} searches answered"
        print(f"  ... {elapsed:4.0f} s of {duration:.0f}: links up, {answered}", flush=True)
        round_ += 1
        await trio.sleep(min(30.0, max(0.0, duration - (time.monotonic() - start))))
    figures.held_seconds = time.monotonic() - start
    after = await trio.to_thread.run_sync(network.get, "/stats")
    received = after["router"]["received"].get("query", 0)
    received -= before["router"]["received"].get("query", 0)
    misses = drop_total(after, "qrp-miss") - drop_total(before, "qrp-miss")
    found = sum(1 for g in sent if hits.get(g))
    ids = sorted(peers.values())
    figures.check(
        f"links stayed up for {duration:.0f} s",
        not broken,
        broken
        or f"same connection ids {ids}; {found}/{len(sent)} later searches answered; of "
        f"{len(sent)} searches and {len(sent)} unmatched queries sent meanwhile, "
        f"{received} reached the router, qrp-miss rose by {misses}",
    )


def gather_end(network: Network, figures: Figures) -> None:
    """Byes, drops on both sides, message counts: read before anything is stopped."""
    stats = network.get("/stats")
    router = stats["router"]
    figures.byes = {
        "received": router["received"].get("bye", 0),
        "sent": router["generated"].get("bye", 0),
    }
    figures.router_drops = router["dropped"]
    figures.messages = {k: router[k] for k in ("received", "forwarded", "generated")}
    bad: dict[str, dict[str, int]] = {}
    for name, servent in network.servents.items():
        figures.gtk_drops[name] = parse_drop_stats(network.shell(name, "stats drop"))
        from_router = drops_from_router(servent.dir / "stderr.log")
        figures.gtk_drops_from_router[name] = from_router
        unexpected = {r: n for r, n in from_router.items() if r not in EXPECTED_DROPS}
        if unexpected:
            bad[name] = unexpected
    figures.check(
        "no Bye either way",
        figures.byes == {"received": 0, "sent": 0},
        f"router received {figures.byes['received']}, sent {figures.byes['sent']}",
    )
    figures.check(
        "gtk-gnutella dropped nothing of ours (but loopback pongs)",
        not bad,
        "; ".join(f"{n}: {d}" for n, d in figures.gtk_drops_from_router.items()),
    )


class Interrupted(Exception):
    """SIGTERM or SIGHUP came during the checks."""


async def run_checks(network: Network, figures: Figures) -> None:
    """Every check in turn, within the run's time bound; SIGTERM and SIGHUP cancel them
    (and raise :class:`Interrupted`) as Ctrl-C does, so the caller cleans up."""
    signalled: list[int] = []
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as signals:
        async with trio.open_nursery() as outer:

            async def watch() -> None:
                async for signum in signals:
                    signalled.append(signum)
                    outer.cancel_scope.cancel()

            outer.start_soon(watch)
            await _checks(network, figures)
            outer.cancel_scope.cancel()
    if signalled:
        raise Interrupted(signal.Signals(signalled[0]).name)


async def _checks(network: Network, figures: Figures) -> None:
    settings = network.settings
    with trio.fail_after(settings.duration + 600):
        peers = await bring_up(network, figures)
        async with trio.open_nursery() as nursery:
            searcher, relay, hits = await search(network, figures, nursery)
            await hold(network, figures, peers, searcher, relay, hits, settings.duration)
            await trio.to_thread.run_sync(gather_end, network, figures)
            for peer in (searcher, relay):
                await peer.stream.aclose()
            nursery.cancel_scope.cancel()
