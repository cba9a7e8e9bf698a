"""The GWebCache service: its rules without a socket, its HTTP face, and routers using it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from gnutella_router.discovery.gwebcache import (
    build_request_target,
    fetch_hosts,
    parse_gwebcache_body,
)
from gnutella_router.discovery.gwebcache_server import GWebCacheServer
from gnutella_router.discovery.gwebcache_service import (
    MAX_CLIENTS_REMEMBERED,
    GWebCacheService,
    ServiceSettings,
)
from gnutella_router.ready_file import read_ready_file


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def service(**settings: object) -> tuple[GWebCacheService, Clock]:
    clock = Clock()
    return GWebCacheService(ServiceSettings(**settings), clock=clock), clock  # type: ignore[arg-type]


def lines(body: bytes) -> list[str]:
    return body.decode().splitlines()


# --- the rules ------------------------------------------------------------------------


def test_an_update_registers_the_requester_and_get_lists_it_freshest_first() -> None:
    cache, clock = service()
    assert lines(cache.answer("/?update=1&ip=10.0.0.1:6346&net=gnutella", "10.0.0.1")) == [
        "I|update|OK"
    ]
    clock.now += 30
    assert lines(cache.answer("/?update=1&ip=10.0.0.2:6347&net=gnutella", "10.0.0.2")) == [
        "I|update|OK"
    ]
    clock.now += 5
    assert lines(cache.answer("/?get=1&net=gnutella", "10.9.9.9")) == [
        "H|10.0.0.2:6347|5",
        "H|10.0.0.1:6346|35",
    ]
    # v1 asks the same in its own words.
    assert lines(cache.answer("/?hostfile=1", "10.9.9.9")) == ["10.0.0.2:6347", "10.0.0.1:6346"]
    assert cache.statistics.updates_accepted == 2


def test_nobody_registers_someone_else_unless_updates_are_trusted() -> None:
    cache, _ = service()
    answer = lines(cache.answer("/?update=1&ip=192.0.2.7:6346&net=gnutella", "10.0.0.1"))
    assert answer == ["I|update|WARNING|ip '192.0.2.7:6346' is not your own address"]
    assert not cache.hosts
    assert cache.statistics.updates_refused == 1
    trusting, _ = service(trust_updates=True)
    assert lines(trusting.answer("/?update=1&ip=192.0.2.7:6346", "10.0.0.1")) == ["OK"]
    assert list(trusting.hosts) == [("192.0.2.7", 6346)]


def test_ipv6_and_v4_mapped_clients_are_their_own_address() -> None:
    cache, _ = service()
    assert lines(cache.answer("/?update=1&ip=[2001:db8::1]:6346", "2001:db8::1")) == ["OK"]
    assert lines(cache.answer("/?update=1&ip=10.1.1.1:6346", "::ffff:10.1.1.1")) == ["OK"]
    assert lines(cache.answer("/?hostfile=1", "10.0.0.9")) == [
        "10.1.1.1:6346",
        "[2001:db8::1]:6346",
    ]


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/?update=1&ip=nowhere:6346", "is not a literal IP:PORT"),
        ("/?update=1&ip=10.0.0.1:0", "is not a literal IP:PORT"),
        ("/?update=1&ip=10.0.0.1:99999", "is not a literal IP:PORT"),
        ("/?update=1&ip=0.0.0.0:6346", "is not a literal IP:PORT"),
        ("/?update=1&url=ftp://x.example/gwc", "is not an http:// or https:// URL"),
        ("/?update=1&url=http://169.254.169.254/", "names a link-local address"),
        ("/?update=1", "an update needs ip=IP:PORT or url=URL"),
        ("/?get=1&net=gnutella2", "I|ERROR|network 'gnutella2' not supported"),
        ("/?nothing=1", "ERROR: ask hostfile=1"),
        ("/?get=1&" + "x" * 5000, "ERROR: request too long"),
    ],
)
def test_bad_requests_get_a_reason_never_an_exception(target: str, expected: str) -> None:
    cache, _ = service(trust_updates=True)
    assert expected in cache.answer(target, "10.0.0.1").decode()
    assert not cache.hosts


def test_caches_are_kept_and_listed_bounded() -> None:
    cache, _ = service(max_urls=2, trusted=("10.0.0.0/8",))
    for n in range(3):
        assert lines(cache.answer(f"/?update=1&url=http://gwc{n}.example/c.php", "10.0.0.1")) == [
            "OK"
        ]
    assert lines(cache.answer("/?urlfile=1", "10.0.0.1")) == [
        "http://gwc2.example/c.php",
        "http://gwc1.example/c.php",
    ]
    assert "U|http://gwc2.example/c.php|0" in lines(cache.answer("/?get=1", "10.0.0.1"))


def test_hosts_are_bounded_and_expire() -> None:
    cache, clock = service(
        max_hosts=3, host_max_age=60, answer_hosts=2, trust_updates=True, trusted=("10.0.0.1",)
    )
    for n in range(5):
        cache.answer(f"/?update=1&ip=10.0.0.{n + 1}:6346", "10.0.0.1")
        clock.now += 10
    assert [h for h, _ in cache.hosts.items()] == [
        ("10.0.0.3", 6346),
        ("10.0.0.4", 6346),
        ("10.0.0.5", 6346),
    ]
    assert lines(cache.answer("/?hostfile=1", "10.0.0.1")) == ["10.0.0.5:6346", "10.0.0.4:6346"]
    clock.now += 45  # 10.0.0.3 was reported 75 s ago, .4 65 s, .5 55 s
    assert lines(cache.answer("/?hostfile=1", "10.0.0.1")) == ["10.0.0.5:6346"]


def test_seed_hosts_fill_short_answers_and_never_expire() -> None:
    cache, clock = service(max_hosts=2, host_max_age=60, answer_hosts=2)
    cache.add_seed(("192.0.2.1", 6346))
    cache.add_seed(("192.0.2.2", 6346))
    assert lines(cache.answer("/?hostfile=1", "10.0.0.1")) == ["192.0.2.1:6346", "192.0.2.2:6346"]
    cache.answer("/?update=1&ip=10.0.0.7:6346", "10.0.0.7")
    # A reported host comes first; seeds only fill what is left of the answer.
    assert lines(cache.answer("/?hostfile=1", "10.0.0.1")) == ["10.0.0.7:6346", "192.0.2.1:6346"]
    clock.now += 3600  # the reported host expired; the seeds did not
    assert lines(cache.answer("/?hostfile=1", "10.0.0.1")) == ["192.0.2.1:6346", "192.0.2.2:6346"]
    assert len(cache.hosts) == 0


def test_seed_hosts_are_bounded() -> None:
    from gnutella_router.discovery.gwebcache_service import MAX_SEEDS

    cache, _ = service()
    for n in range(MAX_SEEDS):
        cache.add_seed((f"10.1.{n // 250}.{n % 250 + 1}", 6346))
    cache.add_seed(("10.1.0.1", 6346))  # one it holds already: fine
    with pytest.raises(ValueError, match="at most"):
        cache.add_seed(("192.0.2.99", 6346))


def test_a_client_that_comes_back_too_early_is_told_so() -> None:
    cache, clock = service(client_interval=60, trust_updates=True)
    cache.add_host(("10.0.0.5", 6346))
    assert "H|10.0.0.5:6346|0" in lines(cache.answer("/?get=1", "10.0.0.1"))
    clock.now += 30
    assert lines(cache.answer("/?get=1&net=gnutella", "10.0.0.1")) == [
        "I|WARNING|You came back too early"
    ]
    assert lines(cache.answer("/?hostfile=1", "10.0.0.2")) == ["10.0.0.5:6346"]  # another
    clock.now += 31
    assert "H|10.0.0.5:6346|61" in lines(cache.answer("/?get=1", "10.0.0.1"))
    assert cache.statistics.too_early == 1
    for n in range(MAX_CLIENTS_REMEMBERED + 10):  # the memory of clients is bounded
        cache.answer("/?hostfile=1", f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}")
    assert len(cache.last_asked) == MAX_CLIENTS_REMEMBERED


def test_ping_answers_in_both_protocols() -> None:
    cache, _ = service()
    assert lines(cache.answer("/?ping=1&net=gnutella", "10.0.0.1"))[0].startswith(
        "I|pong|gnutella-router-gwebcache/"
    )
    assert lines(cache.answer("/?ping=1", "10.0.0.1"))[0].startswith("PONG gnutella-router")


def test_our_client_reports_itself_in_the_request_it_asks_with() -> None:
    _, _, target = build_request_target("http://127.0.0.1:8080/", update=("10.0.0.3", 6346))
    cache, _ = service()
    body = cache.answer(target, "10.0.0.3")
    reply = parse_gwebcache_body(body)
    assert "update|OK" in reply.info
    assert reply.hosts == (("10.0.0.3", 6346),)  # the update came first


# --- over HTTP -------------------------------------------------------------------------


@pytest.mark.e2e
async def test_the_service_over_http_for_our_client_and_for_garbage() -> None:
    cache = GWebCacheService(ServiceSettings(), clock=trio.current_time)
    cache.add_host(("127.0.0.5", 6346))
    server = GWebCacheServer(cache)
    async with trio.open_nursery() as nursery:
        where = await nursery.start(server.serve, "127.0.0.1", 0)
        host, port = where[0]
        url = f"http://{host}:{port}/"
        reply = await fetch_hosts(url, timeout=5, update=("127.0.0.1", 7777))
        assert ("127.0.0.5", 6346) in reply.hosts
        assert ("127.0.0.1", 7777) in reply.hosts  # we came from 127.0.0.1: accepted
        assert "update|OK" in reply.info

        async def raw(data: bytes) -> bytes:
            stream = await trio.open_tcp_stream(host, port)
            await stream.send_all(data)
            answer = b""
            with trio.fail_after(5):
                while chunk := await stream.receive_some(4096):
                    answer += chunk
            await stream.aclose()
            return answer

        assert (await raw(b"POST / HTTP/1.1\r\nHost: x\r\n\r\n")).startswith(b"HTTP/1.1 405")
        assert (await raw(b"\x00\x01 nonsense\r\n\r\n")).startswith(b"HTTP/1.1 400")
        huge = b"GET /?" + b"a" * 9000 + b" HTTP/1.1\r\n"
        assert (await raw(huge)).startswith(b"HTTP/1.1 431")
        assert server.answered[200] == 1

        def broken(target: str, client: str) -> bytes:
            raise RuntimeError("a fault in the core")

        answer = cache.answer
        cache.answer = broken  # type: ignore[method-assign]
        assert (await raw(b"GET /?get=1 HTTP/1.1\r\nHost: x\r\n\r\n")).startswith(b"HTTP/1.1 500")
        cache.answer = answer  # type: ignore[method-assign]
        reply = await fetch_hosts(url, timeout=5)  # the service is still there
        assert ("127.0.0.5", 6346) in reply.hosts
        assert server.answered[500] == 1
        nursery.cancel_scope.cancel()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.e2e
def test_a_router_finds_another_through_the_gwebcache_command(tmp_path: Path) -> None:
    cache_port, first, second = free_port(), free_port(), free_port()
    command = [sys.executable, "-m", "gnutella_router"]
    processes = []
    try:
        service = subprocess.Popen(
            [*command, "gwebcache", "--listen", f"127.0.0.1:{cache_port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        processes.append(service)
        config = tmp_path / "router.toml"
        config.write_text(
            f'[catcher]\ngwebcache = "http://127.0.0.1:{cache_port}/"\nmin_connections = 1\n'
            'gwebcache_interval = 1\n[admin]\nlisten = "127.0.0.1:0"\n'
        )
        for port, name in ((first, "a"), (second, "b")):
            argv = [*command, "run", "--config", str(config), "--listen", f"127.0.0.1:{port}"]
            argv += ["--state-dir", str(tmp_path / name), "--log-format", "json"]
            router = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            processes.append(router)
            time.sleep(0.5)
        # The first reports itself when it asks; the second is told of it and dials it.
        deadline = time.monotonic() + 30
        while True:
            hosts = set(_get(cache_port, "/?hostfile=1").split())
            ready = read_ready_file(tmp_path / "b")
            admin_port = int(str(ready["admin"]).rsplit(":", 1)[1]) if ready else 0
            admin = _get(admin_port, "/connections") if admin_port else ""
            if f"127.0.0.1:{first}" in hosts and f'"127.0.0.1:{first}"' in admin:
                break
            assert time.monotonic() < deadline, (hosts, admin[:300])
            time.sleep(0.3)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _get(port: int, target: str) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), 2) as connection:
            connection.sendall(f"GET {target} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
            data = b""
            while chunk := connection.recv(65536):
                data += chunk
    except OSError:
        return ""
    return data.partition(b"\r\n\r\n")[2].decode(errors="replace")
