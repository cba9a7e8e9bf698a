"""One scenario from start to end: a router of its own, three honest ultrapeers beside the
attacker, the attack, and what the honest peers and the router's counters make of it.

The order, for every scenario:

1. the router starts (its configuration: the common one of :mod:`.target` plus the
   scenario's own settings);
2. three honest ultrapeers connect from the trusted address: U1 pings without a break
   (the stall), U2 and U3 read everything and ping every half second;
3. U2 leaves :data:`PENDING_QUERIES` queries pending, which reach U3;
4. the router's counters and memory are read, U1's pings are timed for a second with
   no attack (the machine's own figure);
5. the attack runs, in a nursery of its own, while the attacker's slots in the router
   are counted every half second; then one more second (the settle);
6. U3 answers every pending query it got with a hit, which must reach U2: a hit that
   does not is a route the attack made the router forget;
7. the counters and memory are read again; the scenario judges its attacker from the
   counters' growth; the router is stopped.
"""

from __future__ import annotations

import collections
import dataclasses
import random
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import trio

from gnutella_router.observe.profiler import read_peak_rss_bytes, read_rss_bytes
from protocol.errors import HandshakeError, RemoteProtocolError
from scripts.router_attack.peers import HonestPeer, PendingQueries, Pinger, Refused, handshake
from scripts.router_attack.settings import (
    BASELINE_SECONDS,
    PENDING_QUERIES,
    SAMPLE_SECONDS,
    SETTLE_SECONDS,
    AttackError,
    Result,
    Settings,
)
from scripts.router_attack.target import Router, connections_from, delta, started, stats
from scripts.router_bench.peers import BenchError
from scripts.router_fuzz.wire import Drain, close_quietly
from scripts.runner import leaf_exceptions


@dataclasses.dataclass(frozen=True, slots=True)
class Scenario:
    """One attack: its settings, what it does, and how its attacker is judged."""

    key: str
    title: str
    attack: Callable[[Arena], Awaitable[None]]
    judge: Callable[[Result], None]
    config: Mapping[str, Mapping[str, object]] = dataclasses.field(default_factory=dict)
    """Router settings the scenario changes from the defaults."""
    attackers: tuple[str, ...] = ()
    """Untrusted addresses the attack connects from as a peer, whose slots are counted;
    none for attacks on the admin interface."""


class Arena:
    """What an attack works with: the router, the honest peers, its clock and figures."""

    def __init__(
        self,
        router: Router,
        settings: Settings,
        result: Result,
        pinger: Pinger,
        honest: list[HonestPeer],
        nursery: trio.Nursery,
    ) -> None:
        self.router = router
        self.settings = settings
        self.result = result
        self.pinger = pinger
        self.honest = honest
        """Every honest peer; an attack that adds one adds it here, to be watched."""
        self.nursery = nursery
        """The attack's own nursery, cancelled when the attack returns."""
        self.rng = random.Random(f"{settings.seed}/{result.key}")
        self.window_start = trio.current_time()
        self.streams: list[trio.SocketStream] = []
        self.open: collections.Counter[str] = collections.Counter()
        """The attacker's handshaken connections not yet closed, by source address."""

    def begin(self) -> None:
        """The attack proper begins now (after a setup that is not the attack, such as
        filling the route tables for the dumps)."""
        self.window_start = trio.current_time()

    @property
    def deadline(self) -> float:
        """When a timed attack stops: ``--seconds`` after it began."""
        return self.window_start + self.settings.seconds

    def guid(self) -> bytes:
        return self.rng.randbytes(16)

    async def connect(
        self, source: str, headers: list[tuple[str, str]], *, deflate: bool = False
    ) -> tuple[trio.SocketStream, Drain, bool]:
        """An attacking peer handshaken from ``source``, read by a :class:`Drain` until it
        ends; whether we are to deflate what we send (the router accepted it).

        Raises:
            AttackError: the router would not have it: the attack cannot begin.
        """
        try:
            stream, complete = await handshake(self.router.target, source, headers, deflate=deflate)
        except (Refused, HandshakeError, RemoteProtocolError, trio.TooSlowError, OSError) as exc:
            raise AttackError(f"the attacker from {source} could not connect: {exc!r}") from exc
        self.streams.append(stream)
        drain = Drain(stream, complete.decompress_incoming, complete.trailing_data)
        self.nursery.start_soon(self.held, source, drain)
        return stream, drain, complete.compress_outgoing

    async def held(self, source: str, drain: Drain) -> None:
        """Read an attacking connection to its end, counting it among the slots its
        address holds meanwhile (beside the router's own count)."""
        self.open[source] += 1
        note_slots(self.result, self.open[source])
        try:
            await drain.run()
        finally:
            self.open[source] -= 1

    def keep(self, stream: trio.SocketStream) -> trio.SocketStream:
        """Close ``stream`` when the attack ends."""
        self.streams.append(stream)
        return stream


def run_scenario(scenario: Scenario, settings: Settings, workdir: Path) -> Result:
    """Start the scenario's router, run the scenario, stop the router (on every path)."""
    result = Result(scenario.key, scenario.title, {k: dict(v) for k, v in scenario.config.items()})
    print(f"\n== {scenario.key}: {scenario.title}", flush=True)
    router: Router | None = None
    try:
        with started(workdir, scenario.config) as router:
            result.pid = router.pid
            print(f"  router pid {router.pid} on {router.address[0]}:{router.address[1]}")
            try:
                trio.run(measure, scenario, router, settings, result)
            except BaseExceptionGroup as group:
                leaves = leaf_exceptions(group)
                for leaf in leaves:
                    if isinstance(leaf, KeyboardInterrupt):
                        raise leaf from None
                raise leaves[0] from group
    except (AttackError, BenchError, trio.TooSlowError) as exc:
        text = (
            f"the scenario took longer than {settings.timeout:g} s"
            if isinstance(exc, trio.TooSlowError)
            else str(exc)
        )
        result.error = text
        print(f"  FAILED: {text}", flush=True)
    if router is not None:
        result.exit_status = router.exit_status
        result.log_problems = router.problems()
    return result


async def measure(scenario: Scenario, router: Router, settings: Settings, result: Result) -> None:
    with trio.fail_after(settings.timeout):
        async with trio.open_nursery() as nursery:
            await _measure(scenario, router, settings, result, nursery)
            nursery.cancel_scope.cancel()


async def _measure(
    scenario: Scenario, router: Router, settings: Settings, result: Result, nursery: trio.Nursery
) -> None:
    u1, u2, u3 = HonestPeer("U1"), HonestPeer("U2"), HonestPeer("U3")
    honest = [u1, u2, u3]
    for peer in honest:
        await peer.connect(router.target, nursery)
    # The router registers a peer once it has read its last handshake step: a pong
    # back says it has.
    with trio.fail_after(10):
        for peer in honest:
            await peer.ping()
    for peer in (u2, u3):
        nursery.start_soon(peer.heartbeat)
    pending = PendingQueries(u2, u3, PENDING_QUERIES)
    delivered = await pending.send()
    result.pending_sent, result.pending_delivered = PENDING_QUERIES, len(delivered)
    before = await stats(router.admin)
    result.rss_before = read_rss_bytes(router.pid)
    pinger = Pinger(u1)
    nursery.start_soon(pinger.run)
    lag = LoopLag()
    nursery.start_soon(lag.run)
    baseline = trio.current_time()
    await trio.sleep(BASELINE_SECONDS)
    async with trio.open_nursery() as attack_nursery:
        arena = Arena(router, settings, result, pinger, honest, attack_nursery)
        result.idle_trips = pinger.overlapping(baseline, arena.window_start)
        for source in scenario.attackers:
            attack_nursery.start_soon(count_slots, router, source, result)
        try:
            await scenario.attack(arena)
        finally:
            attack_ended = trio.current_time()
            attack_nursery.cancel_scope.cancel()
    for stream in arena.streams:  # its readers gone first: closing is no error to them
        await close_quietly(stream)
    result.attack_seconds = attack_ended - arena.window_start
    await trio.sleep(SETTLE_SECONDS)
    result.trips = pinger.overlapping(arena.window_start, trio.current_time())
    result.client_lag = lag.worst(arena.window_start, trio.current_time())
    result.pending_lost = await pending.answer(delivered)
    after = await stats(router.admin)
    result.rss_after = read_rss_bytes(router.pid)
    result.rss_peak = read_peak_rss_bytes(router.pid)
    result.delta = delta(before, after)
    result.honest_closed = [
        f"{peer.name} {peer.closed_by_router}" for peer in arena.honest if peer.closed_by_router
    ]
    for peer in arena.honest:
        await peer.leave()
    scenario.judge(result)


class LoopLag:
    """How late this script's own event loop wakes a 1 ms sleep: a stall of the honest
    pings no longer than this may be the script's, not the router's (the attackers and
    the honest peers share one loop, on a machine the router shares too)."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []

    async def run(self) -> None:
        while True:
            asked = trio.current_time()
            await trio.sleep(0.001)
            woke = trio.current_time()
            self.samples.append((woke, woke - asked - 0.001))

    def worst(self, start: float, end: float) -> float:
        return max((late for at, late in self.samples if start <= at <= end), default=0.0)


async def count_slots(router: Router, source: str, result: Result) -> None:
    """Count the router's connections from ``source`` every :data:`SAMPLE_SECONDS`
    (an answer missed while the admin interface is busy is skipped)."""
    while True:
        try:
            held = await connections_from(router.admin, source)
        except AttackError:
            held = 0
        result.attacker_slots = max(result.attacker_slots or 0, held)
        await trio.sleep(SAMPLE_SECONDS)


def note_slots(result: Result, held: int) -> None:
    """Slots the attacker saw itself holding at once (its handshakes answered 200 and not
    yet closed), beside the router's own count."""
    result.attacker_slots = max(result.attacker_slots or 0, held)


def judge_offender(result: Result, counted: Mapping[str, int], kick: str | None = None) -> None:
    """The floor every attacking peer is held to: counted as an offender (``counted``:
    the router's counters that name it, and their growth), and, when its attack breaks
    the protocol, kicked for offence ``kick``."""
    shown = ", ".join(f"{name} {n:,}" for name, n in counted.items()) or "nothing counted"
    result.floor("attacker counted as an offender", any(counted.values()), shown)
    if kick is not None:
        kicked = result.count(f"server.kicked.{kick}")
        others = result.counts("server.kicked.")
        result.floor(
            "attacker kicked",
            kicked > 0,
            f"kicked for {kick}: {kicked}" + (f" (all kicks: {others})" if others else ""),
        )
