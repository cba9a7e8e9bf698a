"""The GWebCache service against one greedy or hostile client: shares per address and
network, update intervals, URL validation, diverse answers, connection caps and
deadlines."""

from __future__ import annotations

import collections

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from gnutella_router.discovery.gwebcache_server import GWebCacheServer
from gnutella_router.discovery.gwebcache_service import (
    MAX_CACHE_URL_LENGTH,
    GWebCacheService,
    ServiceSettings,
    cache_url_problem,
    client_key,
)
from gnutella_router.discovery.ranges import address_group


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def public_service(**overrides: object) -> tuple[GWebCacheService, Clock]:
    """A cache as on the internet: nobody trusted."""
    clock = Clock()
    settings = ServiceSettings(**{"trusted": (), **overrides})  # type: ignore[arg-type]
    return GWebCacheService(settings, clock=clock), clock


def hosts_in(body: bytes) -> list[tuple[str, int]]:
    found = []
    for line in body.decode().splitlines():
        if line.startswith("H|"):
            address, _, port = line.split("|")[1].rpartition(":")
            found.append((address.strip("[]"), int(port)))
    return found


def test_one_address_registering_400_hosts_keeps_two_and_one_answer_slot() -> None:
    cache, clock = public_service()
    for n in range(20):  # honest clients, one host each, in networks of their own
        client = f"81.{n}.0.1"
        assert cache.answer(f"/?update=1&ip={client}:6346", client) == b"OK\n"
    attacker = "93.184.216.34"
    answers = []
    for port in range(10_000, 10_400):
        clock.now += 0.003  # 400 updates in 1.2 s
        answers.append(cache.answer(f"/?update=1&ip={attacker}:{port}", attacker))
    assert answers.count(b"OK\n") == 1
    assert cache.statistics.updates_too_early == 399
    clock.now += 300  # later, patient: its second host
    assert cache.answer(f"/?update=1&ip={attacker}:20000", attacker) == b"OK\n"
    clock.now += 300  # a third replaces its first
    assert cache.answer(f"/?update=1&ip={attacker}:20001", attacker) == b"OK\n"
    assert sorted(p for (h, p) in cache.hosts if h == attacker) == [20000, 20001]
    assert cache.statistics.hosts_replaced == 1
    listed = hosts_in(cache.answer("/?get=1&net=gnutella", "5.6.7.8"))
    assert len(listed) == 20
    assert sum(host == attacker for host, _ in listed) == 1


def test_trusted_clients_are_not_limited() -> None:
    cache, _ = public_service(trusted=("10.0.0.0/8",))
    for port in range(100):
        assert cache.answer(f"/?update=1&ip=10.0.0.1:{port + 1}", "10.0.0.1") == b"OK\n"
    assert len(cache.hosts) == 100


def test_an_ipv6_client_is_its_64() -> None:
    assert client_key("2a00:1450:1:2::1") == client_key("2a00:1450:1:2:ffff::9")
    assert client_key("2a00:1450:1:3::1") != client_key("2a00:1450:1:2::1")
    assert client_key("::ffff:81.2.69.7") == "81.2.69.7"
    cache, _ = public_service(update_interval=0)
    for n in range(10):
        client = f"2a00:1450:1:2::{n + 1:x}"
        cache.answer(f"/?update=1&ip=[{client}]:6346", client)
    assert len(cache.hosts) == 2  # one /64: one client's share


def test_one_network_holds_at_most_hosts_per_group() -> None:
    cache, clock = public_service(hosts_per_group=5)
    for n in range(30):
        clock.now += 1
        client = f"81.2.{n}.1"
        assert cache.answer(f"/?update=1&ip={client}:6346", client) == b"OK\n"
    assert len(cache.hosts) == 5
    assert {h for h, _ in cache.hosts} == {f"81.2.{n}.1" for n in range(25, 30)}  # freshest


def test_one_address_registers_only_so_many_caches() -> None:
    cache, clock = public_service()
    for n in range(5):
        clock.now += 301
        url = f"http://gwc{n}.example.org/gwc.php"
        assert cache.answer(f"/?update=1&url={url}", "81.2.69.7") == b"OK\n"
    assert list(cache.urls) == [
        "http://gwc3.example.org/gwc.php",
        "http://gwc4.example.org/gwc.php",
    ]


@pytest.mark.parametrize(
    "url",
    [
        "http://gwc.example.org/gwc.php",
        "https://cache.example.net:8443/",
        "http://[2a00:1450::1]/gwc",
        "http://81.2.69.7:8080/c.php?x=1",
        "HTTP://GWC.EXAMPLE.ORG/",
    ],
)
def test_cache_urls_that_name_a_public_host_are_kept(url: str) -> None:
    assert cache_url_problem(url) is None


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://169.254.169.254/latest/meta-data/", "link-local address"),
        ("http://127.0.0.1:8080/", "loopback address"),
        ("http://[::1]/", "loopback address"),
        ("http://10.0.0.1/", "private address"),
        ("http://[fe80::1]/", "link-local address"),
        ("http://100.64.0.1/", "shared address"),
        ("http://0.0.0.0/", "never a host"),
        ("http://224.0.0.1/", "never a host"),
        ("http://localhost/", "local host"),
        ("http://gwc.local/", "local host"),
        ("http://metadata.google.internal/", "local host"),
        ("http://router.home.arpa/", "local host"),
        ("http://intranet/", "public host"),
        ("http://2852039166/", "public host"),  # 169.254.169.254 as one number
        ("http://0xa9.0xfe.0xa9.0xfe/", "public host"),
        ("http://user:secret@gwc.example.org/", "user name"),
        ("http://under_score.example.org/", "valid host"),
        ("ftp://gwc.example.org/", "http:// or https://"),
        ("http://gwc.example.org/" + "a" * MAX_CACHE_URL_LENGTH, "longer than"),
    ],
)
def test_cache_urls_that_lead_clients_astray_are_refused(url: str, reason: str) -> None:
    problem = cache_url_problem(url)
    assert problem is not None
    assert reason in problem
    cache, _ = public_service()
    assert b"WARNING" in cache.answer(f"/?update=1&url={url}", "81.2.69.7")
    assert not cache.urls


def test_a_test_network_may_list_local_caches() -> None:
    assert cache_url_problem("http://127.0.0.1:8080/", allow_private=True) is None
    assert cache_url_problem("http://localhost:8080/", allow_private=True) is None
    assert cache_url_problem("http://0.0.0.0/", allow_private=True) is not None


updates = st.lists(
    st.tuples(
        st.integers(0, 12),  # which client
        st.integers(1, 6),  # which port it registers
        st.floats(0, 400, allow_nan=False),  # seconds since the last request
    ),
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(
    events=updates,
    per_address=st.integers(1, 3),
    per_group=st.integers(1, 6),
    interval=st.sampled_from([0.0, 60.0, 300.0]),
    answer=st.integers(1, 25),
)
def test_whatever_clients_send_none_exceeds_its_share_and_answers_stay_diverse(
    events: list[tuple[int, int, float]],
    per_address: int,
    per_group: int,
    interval: float,
    answer: int,
) -> None:
    cache, clock = public_service(
        hosts_per_address=per_address,
        hosts_per_group=per_group,
        update_interval=interval,
        answer_hosts=answer,
        max_hosts=40,
    )
    accepted: dict[str, float] = {}
    for who, port, wait in events:
        clock.now += wait
        client = f"81.{who % 3}.{who}.1"  # 13 clients in 3 networks
        body = cache.answer(f"/?update=1&ip={client}:{port}", client)
        if body == b"OK\n":
            assert interval == 0 or clock.now - accepted.get(client, -1e9) >= interval
            accepted[client] = clock.now
        assert len(cache.hosts) <= 40
        per_client = collections.Counter(h for h, _ in cache.hosts)
        assert max(per_client.values(), default=0) <= per_address
        per_network = collections.Counter(address_group(h) for h, _ in cache.hosts)
        assert max(per_network.values(), default=0) <= per_group
    listed = hosts_in(cache.answer("/?get=1", "5.6.7.8"))
    clients = {h for h, _ in cache.hosts}
    assert len({h for h, _ in listed}) == min(len(listed), len(clients))
    assert len(listed) == min(answer, len(cache.hosts))


# --- over HTTP -------------------------------------------------------------------------


async def connect_from(source: str, where: tuple[str, int]) -> trio.SocketStream:
    """A TCP connection from ``source``, one of loopback's many addresses."""
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
    await sock.bind((source, 0))
    await sock.connect(where)
    return trio.SocketStream(sock)


async def get(source: str, where: tuple[str, int], target: str) -> bytes:
    stream = await connect_from(source, where)
    await stream.send_all(f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    answer = b""
    with trio.fail_after(10):
        while chunk := await stream.receive_some(4096):
            answer += chunk
    await stream.aclose()
    return answer


@pytest.mark.e2e
async def test_idle_connections_from_one_address_leave_room_for_everyone_else() -> None:
    cache = GWebCacheService(ServiceSettings(trusted=()), clock=trio.current_time)
    server = GWebCacheServer(cache, max_connections=16, connections_per_address=4)
    async with trio.open_nursery() as nursery:
        (where, *_) = await nursery.start(server.serve, "127.0.0.1", 0)
        idle = [await connect_from("127.66.0.1", where) for _ in range(30)]
        await trio.testing.wait_all_tasks_blocked()
        refused = 0
        for stream in idle:
            with trio.move_on_after(0.2):
                refused += (await stream.receive_some(4096)).startswith(b"HTTP/1.1 503")
        assert refused == 26
        assert server.dropped["address-busy"] == 26
        for n in range(12):  # honest clients, each from an address of its own
            assert (await get(f"127.2.0.{n + 1}", where, "/?get=1")).startswith(b"HTTP/1.1 200")
        for stream in idle:
            await stream.aclose()
        nursery.cancel_scope.cancel()


@pytest.mark.e2e
async def test_a_client_that_sends_nothing_is_let_go() -> None:
    cache = GWebCacheService(ServiceSettings(), clock=trio.current_time)
    server = GWebCacheServer(cache, idle_seconds=0.2, request_seconds=30)
    async with trio.open_nursery() as nursery:
        (where, *_) = await nursery.start(server.serve, "127.0.0.1", 0)
        stream = await connect_from("127.0.0.1", where)
        await stream.send_all(b"GET /?get=1 HTTP/1.1\r\n")  # and then nothing more
        with trio.fail_after(10):
            while await stream.receive_some(4096):
                pass  # closed by the server, well before the request deadline
        assert server.dropped["idle"] == 1
        await stream.aclose()
        nursery.cancel_scope.cancel()


def test_the_command_takes_trusted_networks_or_none() -> None:
    import argparse

    from gnutella_router.cli.gwebcache import network_list

    assert network_list("10.0.0.1/8") == ["10.0.0.0/8"]
    assert network_list("::1") == ["::1/128"]
    assert network_list("none") == []
    with pytest.raises(argparse.ArgumentTypeError, match="network"):
        network_list("somewhere")
