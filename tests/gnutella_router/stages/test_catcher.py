"""The catcher joins the network, stays joined, and remembers what it learned."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import trio

from gnutella_router.daemon import Daemon
from tests.support.peers import running_daemons
from tests.support.processes import free_port
from tests.support.waiting import wait_until

JOIN_TIMEOUT = 8.0


def outgoing(daemon: Daemon) -> int:
    return daemon.server.connections.count("outgoing")


def seed_of(daemon: Daemon) -> str:
    host, port = daemon.address
    return f"{host}:{port}"


async def start(nursery: trio.Nursery, state: Path, overrides: dict[str, object]) -> Daemon:
    from tests.support.peers import daemon_config

    daemon = Daemon(daemon_config(state, overrides))
    await nursery.start(daemon.run)
    return daemon


async def stop(daemon: Daemon) -> None:
    daemon.request_stop()
    with trio.fail_after(10):
        await daemon.stopped.wait()


@pytest.mark.e2e
async def test_joins_from_a_seed_and_learns_more_hosts_from_pongs(tmp_path: Path) -> None:
    async with running_daemons(tmp_path / "net", 2) as (hub, other), trio.open_nursery() as nursery:
        await other.server.dial(*hub.address, timeout=5)
        newcomer = await start(
            nursery,
            tmp_path / "newcomer",
            {"catcher.seeds": [seed_of(hub)], "catcher.min_connections": 2},
        )
        # First the seed; then, from the pongs its discovery ping drew, the other node.
        await wait_until(lambda: outgoing(newcomer) >= 1, JOIN_TIMEOUT)
        await wait_until(lambda: outgoing(newcomer) >= 2, JOIN_TIMEOUT)
        peers = {c.capabilities.listen_address for c in newcomer.server.connections.snapshot()}
        assert {hub.address, other.address} <= peers
        assert other.address in newcomer.catcher.hosts
        await stop(newcomer)


@pytest.mark.e2e
async def test_never_dials_itself(tmp_path: Path) -> None:
    port = free_port()
    overrides: dict[str, object] = {
        "node.listen": f"127.0.0.1:{port}",
        "catcher.seeds": [f"127.0.0.1:{port}", f"localhost:{port}"],
        "catcher.min_connections": 1,
    }
    async with trio.open_nursery() as nursery:
        lonely = await start(nursery, tmp_path, overrides)
        await trio.sleep(2.5)
        assert lonely.catcher.dials == 0
        assert len(lonely.server.connections) == 0
        await stop(lonely)


@pytest.mark.e2e
async def test_host_cache_survives_a_restart(tmp_path: Path) -> None:
    async with running_daemons(tmp_path / "net") as (hub,), trio.open_nursery() as nursery:
        state = tmp_path / "node"
        first = await start(
            nursery, state, {"catcher.seeds": [seed_of(hub)], "catcher.min_connections": 1}
        )
        await wait_until(lambda: outgoing(first) == 1, JOIN_TIMEOUT)
        await stop(first)
        saved = (state / "hosts.txt").read_text()
        assert f"{hub.address[0]} {hub.address[1]}" in saved

        second = await start(nursery, state, {"catcher.min_connections": 1})
        await wait_until(lambda: outgoing(second) == 1, JOIN_TIMEOUT)
        (connection,) = second.server.connections.snapshot()
        assert connection.capabilities.listen_address == hub.address
        await stop(second)


async def serve_gwebcache(body: bytes, *, task_status: trio.TaskStatus[int]) -> None:
    """A one-page GWebCache on loopback: answers every request with ``body``."""

    async def answer(stream: trio.SocketStream) -> None:
        request = b""
        while b"\r\n\r\n" not in request:
            chunk = await stream.receive_some(4096)
            if not chunk:
                return
            request += chunk
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
        await stream.send_all(head + body)
        await stream.aclose()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(answer, listeners)


@pytest.mark.e2e
async def test_bootstraps_from_a_gwebcache(tmp_path: Path) -> None:
    async with running_daemons(tmp_path / "net") as (hub,), trio.open_nursery() as nursery:
        host, port = hub.address
        cache_port = await nursery.start(
            serve_gwebcache, f"I|pong|test cache\nH|{host}:{port}|10\nbroken line\n".encode()
        )
        newcomer = await start(
            nursery,
            tmp_path / "newcomer",
            {
                "catcher.gwebcache": f"http://127.0.0.1:{cache_port}/gwc",
                "catcher.min_connections": 1,
            },
        )
        await wait_until(lambda: outgoing(newcomer) == 1, JOIN_TIMEOUT)
        assert newcomer.catcher.gwebcache_requests == 1
        await stop(newcomer)
        nursery.cancel_scope.cancel()


@pytest.mark.e2e
async def test_a_slow_gwebcache_is_not_asked_again_before_it_answers(tmp_path: Path) -> None:
    asked = 0

    async def answer_slowly(stream: trio.SocketStream) -> None:
        nonlocal asked
        asked += 1
        await trio.sleep(3.0)  # a long poll: longer than the interval between requests
        body = b"I|pong|slow cache\n"
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)
        await stream.send_all(head + body)
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, answer_slowly, listeners)
        daemon = await start(
            nursery,
            tmp_path,
            {
                "catcher.gwebcache": f"http://127.0.0.1:{port}/gwc",
                "catcher.gwebcache_interval": 1.0,
                "catcher.dial_timeout": 5.0,
                "catcher.min_connections": 1,
            },
        )
        await wait_until(lambda: asked >= 1, JOIN_TIMEOUT)
        await trio.sleep(2.5)  # the maintenance loop came round twice meanwhile
        assert asked == 1
        assert daemon.catcher.gwebcache_requests == 1
        await wait_until(lambda: asked >= 2, JOIN_TIMEOUT)  # asked again once answered
        await stop(daemon)
        nursery.cancel_scope.cancel()


@pytest.mark.e2e
async def test_the_routers_own_address_never_enters_its_host_cache(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        host, port = daemon.address
        daemon.catcher.learn(host, port, "pong")
        daemon.catcher.learn(*daemon.server.advertised_address(), "x-try")
        daemon.catcher.learn("81.2.69.7", 6346, "pong")
        await wait_until(lambda: daemon.catcher.own_addresses_skipped == 2)
        await wait_until(lambda: ("81.2.69.7", 6346) in daemon.catcher.hosts)
        assert (host, port) not in daemon.catcher.hosts
        assert daemon.catcher.statistics().own_addresses_skipped == 2


@pytest.mark.e2e
async def test_without_learning_from_peers_only_the_operators_hosts_are_cached(
    tmp_path: Path,
) -> None:
    from gnutella_router.discovery.host_cache import OPERATOR

    async with running_daemons(tmp_path, overrides={"catcher.learn_from_peers": False}) as (
        daemon,
    ):
        daemon.catcher.learn("81.2.69.7", 6346, "pong")
        daemon.catcher.learn("81.2.69.8", 6346, "x-try")
        daemon.catcher.learn("81.2.69.9", 6346, "listen-ip")
        daemon.catcher.learn("81.2.69.10", 6346, OPERATOR)
        await wait_until(lambda: ("81.2.69.10", 6346) in daemon.catcher.hosts)
        for named in ("81.2.69.7", "81.2.69.8", "81.2.69.9"):
            assert (named, 6346) not in daemon.catcher.hosts
        assert daemon.catcher.statistics().ignored_hosts == 3


@pytest.mark.e2e
async def test_a_seed_that_is_not_up_yet_is_dialled_again_until_it_is(tmp_path: Path) -> None:
    # The planned peer of a test network: refused at first (nothing listens there),
    # then retried after its backoff, and joined once it listens.
    port = free_port()
    overrides: dict[str, object] = {
        "catcher.seeds": [f"127.0.0.1:{port}"],
        "catcher.min_connections": 1,
        "catcher.learn_from_peers": False,
        "catcher.backoff_initial": 0.2,
        "catcher.backoff_max": 0.5,
    }
    async with trio.open_nursery() as nursery:
        dialler = await start(nursery, tmp_path / "dialler", overrides)
        await wait_until(lambda: dialler.catcher.dial_failures >= 2, JOIN_TIMEOUT)
        assert outgoing(dialler) == 0
        late = await start(nursery, tmp_path / "late", {"node.listen": f"127.0.0.1:{port}"})
        await wait_until(lambda: outgoing(dialler) == 1, JOIN_TIMEOUT)
        (connection,) = dialler.server.connections.snapshot()
        assert connection.capabilities.listen_address == late.address
        await stop(dialler)
        await stop(late)


def test_a_wildcard_listener_is_named_by_loopback_too() -> None:
    from gnutella_router.stages.catcher import own_addresses

    own = own_addresses(("192.0.2.1", 6346), [("0.0.0.0", 6346), ("::", 6350)])
    assert own == {
        ("192.0.2.1", 6346),
        ("0.0.0.0", 6346),
        ("::", 6350),
        ("127.0.0.1", 6346),
        ("::1", 6346),
        ("127.0.0.1", 6350),
        ("::1", 6350),
    }


async def test_an_incoming_peers_announced_address_enters_the_host_cache(tmp_path: Path) -> None:
    from tests.support.peers import Peer

    async with running_daemons(tmp_path) as (daemon,):
        announced = ("127.0.0.1", free_port())
        await Peer.connect(
            daemon.address, extra_headers=[("Listen-IP", f"{announced[0]}:{announced[1]}")]
        )
        await wait_until(lambda: announced in daemon.catcher.hosts)
        assert daemon.catcher.hosts.source_of(*announced) == "listen-ip"


class PingLog:
    """Stands in for the router: records the pings the catcher asks it to send."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, int, float]] = []

    def originate_ping(self, connection: FakeNeighbour, ttl: int, now: float) -> bytes:
        self.sent.append((connection.id, ttl, now))
        return bytes(16)


@dataclasses.dataclass
class FakeNeighbour:
    id: int
    closing: bool = False


class FakeConnections:
    def __init__(self, *neighbours: FakeNeighbour) -> None:
        self.neighbours = list(neighbours)

    def snapshot(self) -> list[FakeNeighbour]:
        return list(self.neighbours)


def pinging_catcher(tmp_path: Path, *neighbours: FakeNeighbour) -> tuple[Any, PingLog]:
    from gnutella_router.stages.catcher import GnutellaCatcher
    from tests.support.peers import daemon_config

    server = SimpleNamespace(connections=FakeConnections(*neighbours))
    pings = PingLog()
    catcher = GnutellaCatcher(
        daemon_config(tmp_path), server=cast(Any, server), router=cast(Any, pings)
    )
    return catcher, pings


def test_each_neighbour_is_pinged_with_ttl_1_when_it_connects(tmp_path: Path) -> None:
    catcher, pings = pinging_catcher(tmp_path, FakeNeighbour(1), FakeNeighbour(2))
    catcher._ping_neighbours(True, 100.0)
    assert pings.sent == [(1, 1, 100.0), (2, 1, 100.0)]
    catcher._ping_neighbours(True, 101.0)
    assert len(pings.sent) == 2, "a neighbour is not pinged again before its time"


def test_while_peers_are_missing_neighbours_get_ttl_2_pings_every_ten_seconds(
    tmp_path: Path,
) -> None:
    from gnutella_router.stages.catcher import DISCOVERY_PING_INTERVAL, FIRST_DISCOVERY_DELAY

    catcher, pings = pinging_catcher(tmp_path, FakeNeighbour(1))
    start = 100.0
    for second in range(31):
        catcher._ping_neighbours(True, start + second)
    times = [when - start for _, ttl, when in pings.sent if ttl == 2]
    assert times[0] == FIRST_DISCOVERY_DELAY
    assert times[1] - times[0] == DISCOVERY_PING_INTERVAL
    assert [ttl for _, ttl, _ in pings.sent].count(1) == 1


def test_with_every_peer_present_neighbours_get_ttl_1_keep_alives(tmp_path: Path) -> None:
    from gnutella_router.stages.catcher import KEEPALIVE_PING_INTERVAL

    catcher, pings = pinging_catcher(tmp_path, FakeNeighbour(1))
    for second in range(100):
        catcher._ping_neighbours(False, float(second))
    assert {ttl for _, ttl, _ in pings.sent} == {1}
    gaps = {b[2] - a[2] for a, b in itertools.pairwise(pings.sent)}
    assert gaps == {KEEPALIVE_PING_INTERVAL}


def test_closed_and_closing_neighbours_are_neither_pinged_nor_remembered(tmp_path: Path) -> None:
    leaving = FakeNeighbour(2)
    catcher, pings = pinging_catcher(tmp_path, FakeNeighbour(1), leaving)
    catcher._ping_neighbours(True, 0.0)
    leaving.closing = True
    catcher._ping_neighbours(True, 6.0)
    assert [link for link, _, _ in pings.sent] == [1, 2, 1]
    assert set(catcher._pings_due) == {1}


@pytest.mark.e2e
async def test_a_node_seeded_with_one_peer_reaches_min_connections_from_what_it_learns(
    tmp_path: Path,
) -> None:
    """Four routers hang off a hub; a newcomer that knows only the hub finds all four
    through its discovery pings and the hub's answers, well within a minute."""
    async with running_daemons(tmp_path / "net", 5) as (hub, *others), trio.open_nursery() as n:
        for other in others:
            await other.server.dial(*hub.address, timeout=5)
        newcomer = await start(
            n,
            tmp_path / "newcomer",
            {"catcher.seeds": [seed_of(hub)], "catcher.min_connections": 4},
        )
        started = trio.current_time()
        await wait_until(lambda: outgoing(newcomer) >= 4, 60)
        assert trio.current_time() - started < 60
        peers = {c.listen_address for c in newcomer.server.connections.snapshot()}
        assert len(peers & {hub.address, *(d.address for d in others)}) >= 4
        await stop(newcomer)


@pytest.mark.e2e
async def test_one_peers_pongs_hold_at_most_its_share_and_never_a_private_dial(
    tmp_path: Path,
) -> None:
    """An eclipse attempt from one peer: 600 pongs of public, private and one victim's
    addresses. The cache keeps its share of them, no private one, two of the victim's
    ports; the router dials only public addresses (the dials are only recorded here)."""
    from gnutella_router.discovery.ranges import classify_address
    from gnutella_router.stages.server import DialError
    from protocol.messages import Pong
    from tests.support.peers import Peer, message

    overrides = {
        "catcher.host_cache_size": 200,  # 10 hosts per teller, 2 per /16
        "catcher.min_connections": 4,
        "network.local_networks": [],  # the loopback peer is a stranger here
    }
    dialled: list[tuple[str, int]] = []

    async def record(host: str, port: int, *, timeout: float) -> None:
        dialled.append((host, port))
        raise DialError("recorded, not dialled")

    async with running_daemons(tmp_path, 1, overrides) as (daemon,):
        daemon.server.dial = record  # type: ignore[method-assign,assignment]
        attacker = await Peer.connect(daemon.address)
        pongs = [Pong(6346, f"{11 + n % 80}.{n}.0.1") for n in range(200)]
        pongs += [Pong(6346, f"10.{n}.0.1") for n in range(200)]
        pongs += [Pong(port, "81.2.69.7") for port in range(1000, 1200)]
        await attacker.send(*(message(pong, ttl=1) for pong in pongs))
        hosts = daemon.catcher.hosts
        await wait_until(lambda: sum(hosts.statistics().rejected.values()) >= 398)
        await wait_until(lambda: len(dialled) >= 8)
        stats = hosts.statistics()
        assert (stats.largest_teller, stats.per_teller, stats.tellers) == (10, 10, 1)
        assert stats.rejected["private"] == 200
        assert stats.rejected["ports-per-address"] == 198
        assert {r.teller for r in hosts.hosts()} == {"peer/127.0.0.0/16"}
        assert all(classify_address(host)[1] is None for host, _ in dialled)
        assert len({port for host, port in dialled if host == "81.2.69.7"}) <= 2
        assert set(daemon.catcher.statistics().dials_by_range) == {"public"}
        # ... and an operator sees it all in /metrics.
        from prometheus_client.parser import text_string_to_metric_families

        from tests.support.http import http_get

        assert daemon.admin_address is not None
        text = (await http_get(daemon.admin_address, "/metrics")).body.decode()
        samples = {
            (sample.name, tuple(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }
        assert samples[("gnutella_host_cache_refused_total", (("reason", "private"),))] == 200
        assert samples[("gnutella_host_cache_largest_teller", ())] == 10
        assert samples[("gnutella_host_cache_replaced_total", ())] == stats.replaced > 0
        assert samples[("gnutella_dials_by_range_total", (("range", "public"),))] >= 8
