"""The catcher joins the network, stays joined, and remembers what it learned."""

from __future__ import annotations

from pathlib import Path

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
async def test_the_routers_own_address_never_enters_its_host_cache(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        host, port = daemon.address
        daemon.catcher.learn(host, port, "pong")
        daemon.catcher.learn(*daemon.server.advertised_address(), "x-try")
        daemon.catcher.learn("192.0.2.7", 6346, "pong")
        await wait_until(lambda: daemon.catcher.own_addresses_skipped == 2)
        await wait_until(lambda: ("192.0.2.7", 6346) in daemon.catcher.hosts)
        assert (host, port) not in daemon.catcher.hosts
        assert daemon.catcher.statistics().own_addresses_skipped == 2


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
