"""The admin interface over real loopback HTTP, its access rules, the dump CLI, SIGUSR1."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from gnutella_router import __version__
from gnutella_router.cli.main import main
from gnutella_router.config import ConfigError, load_config
from gnutella_router.daemon import Daemon
from gnutella_router.lab.testnet.process import start_router_process
from gnutella_router.net.connection import format_address
from gnutella_router.observe.admin import AdminServer
from gnutella_router.observe.admin_text import format_table
from protocol.messages import Ping, Query
from tests.support.http import http_get
from tests.support.peers import Peer, connection_of, message, peers, running_daemons, send_queries
from tests.support.processes import free_port
from tests.support.waiting import wait_until

TOKEN = "correct-horse-battery-staple"


def admin_of(daemon: Daemon) -> tuple[str, int]:
    assert daemon.admin_address is not None
    return daemon.admin_address


# --- the endpoints ---------------------------------------------------------------------


@pytest.mark.e2e
async def test_the_admin_interface_listens_on_loopback(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        host, port = admin_of(daemon)
        assert host == "127.0.0.1"
        assert port not in (0, daemon.address[1])
        health = await http_get((host, port), "/healthz")
        assert health.status == 200
        assert health.headers["content-type"] == "application/json"
        assert health.headers["connection"] == "close"
        assert health.json()["status"] == "ok"
        assert health.json()["guid"] == daemon.guid.hex()
        index = (await http_get((host, port), "/")).json()
        assert set(index["endpoints"]) >= {"/routes", "/metrics", "/dump"}


@pytest.mark.e2e
async def test_endpoints_answer_json_of_the_right_shape(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        address = admin_of(daemon)
        sender, _ = await peers(daemon, 2)
        (guid,) = await send_queries(daemon, sender, 1)
        sender_text = connection_of(daemon, sender).peer_text

        routes = (await http_get(address, "/routes?table=query")).json()
        assert list(routes["tables"]) == ["query"]
        (entry,) = routes["tables"]["query"]["entries"]
        assert entry["guid"] == guid.hex()
        assert entry["next_hop"] == sender_text

        one = (await http_get(address, f"/routes?guid={guid.hex()}")).json()
        assert [e["guid"] for e in one["tables"]["query"]["entries"]] == [guid.hex()]
        assert one["tables"]["ping"]["entries"] == []

        await send_queries(daemon, sender, 3)
        limited = (await http_get(address, "/routes?table=query&limit=2")).json()
        assert limited["tables"]["query"]["shown"] == 2
        assert limited["tables"]["query"]["truncated"] is True

        connections = (await http_get(address, "/connections")).json()
        assert isinstance(connections, list)
        assert sender_text in [c["peer"] for c in connections]
        assert {c["user_agent"] for c in connections} == {"test-peer/1.0"}

        stages = (await http_get(address, "/stages")).json()
        assert stages["stages"]["router"]["queue"]["threshold"] == 1000
        assert stages["governor"] is None

        stats = (await http_get(address, "/stats")).json()
        assert stats["router"]["received"] == {"query": 4}
        assert stats["server"]["incoming"] == 2

        dump = (await http_get(address, "/dump?limit=1")).json()
        assert set(dump) >= {"node", "config", "stats", "stages", "connections", "routes"}
        assert dump["routes"]["tables"]["query"]["shown"] == 1
        assert dump["config"]["node"]["listen"] == "127.0.0.1:0"
        assert dump["stages"]["stages"]["admin"]["requests"]["200"] >= 6


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name, frozenset(sample.labels.items())] = sample.value
    return found


@pytest.mark.e2e
async def test_metrics_match_the_daemons_counters(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        a, b = await peers(daemon, 2)
        await send_queries(daemon, a, 1)
        ping = message(Ping(), ttl=1)
        await b.send(ping)
        await b.receive()  # our pong
        await wait_until(lambda: daemon.router.stage.queue.taken == 2)
        fetched = await http_get(admin_of(daemon), "/metrics")
        assert fetched.status == 200
        assert fetched.headers["content-type"].startswith("text/plain; version=0.0.4")
        text = fetched.body.decode()
        families = {f.name for f in text_string_to_metric_families(text)}
        assert families >= {
            "gnutella_messages_received",
            "gnutella_messages_forwarded",
            "gnutella_messages_generated",
            "gnutella_messages_dropped",
            "gnutella_connections",
            "gnutella_stage_queue_length",
            "gnutella_stage_queue_threshold",
            "gnutella_stage_pool_size",
            "gnutella_route_table_entries",
            "gnutella_outgoing_queue_bytes",
        }
        values = samples(text)

        def value(name: str, **labels: str) -> float:
            return values[name, frozenset(labels.items())]

        assert value("gnutella_messages_received_total", type="query") == 1
        assert value("gnutella_messages_received_total", type="ping") == 1
        assert value("gnutella_messages_forwarded_total", type="query") == 1
        assert value("gnutella_messages_generated_total", type="pong") == 1
        # Every known (type, reason) series exists from the start, at zero.
        dropped = [v for key, v in values.items() if key[0] == "gnutella_messages_dropped_total"]
        assert len(dropped) >= 50
        assert set(dropped) == {0}
        assert value("gnutella_messages_dropped_total", type="query_hit", reason="no-route") == 0
        assert value("gnutella_connections_refused_total", reason="rate-limited") == 0
        assert value("gnutella_connections_refused_total", reason="already-connected") == 0
        assert value("gnutella_connections_timed_out_total", deadline="idle") == 0
        assert value("gnutella_connections_timed_out_total", deadline="partial-message") == 0
        assert value("gnutella_connections_evicted_total") == 0
        assert value("gnutella_peers_kicked_total", offence="partial-message") == 0
        # Dial failures are counted once, by reason, not also as refusals.
        assert value("gnutella_dial_failures_total", reason="dial-failed") == 0
        assert (
            "gnutella_connections_refused_total",
            frozenset({("reason", "dial-failed")}),
        ) not in (values)
        # The process collector and the start time.
        assert value("process_resident_memory_bytes") > 0
        assert value("gnutella_start_time_seconds") > 1.7e9
        # Bytes on the wire, and the stages' histograms (one observation per batch).
        assert value("gnutella_bytes_received_total") >= 2 * 23
        assert value("gnutella_stage_queue_wait_seconds_count", stage="router") >= 1
        assert value("gnutella_stage_service_seconds_count", stage="router") >= 1
        assert value("gnutella_stage_service_seconds_bucket", stage="router", le="+Inf") >= 1
        assert value("gnutella_connections", role="incoming") == 2
        assert value("gnutella_connections", role="outgoing") == 0
        assert value("gnutella_route_table_entries", table="query") == 1
        assert value("gnutella_route_table_entries", table="ping") == 1
        assert value("gnutella_stage_queue_threshold", stage="router") == 1000
        assert value("gnutella_stage_queue_length", stage="router") == 0
        assert value("gnutella_stage_pool_size", stage="router") == 1
        assert value("gnutella_stage_batches_total", stage="router") >= 1
        # Two messages at this pace never fill a batch: no batch followed another at once.
        assert value("gnutella_stage_batches_back_to_back_total", stage="router") == 0
        assert value("gnutella_outgoing_queue_bytes") >= 0
        assert value("gnutella_router_info", version=__version__, guid=daemon.guid.hex()) == 1


@pytest.mark.e2e
async def test_drops_show_in_metrics_by_reason(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        a, b = await peers(daemon, 2)
        query = message(Query(b"twice"), ttl=3)
        await a.send(query)
        await b.send(query)
        await wait_until(lambda: daemon.router.total_dropped() == 1)
        text = (await http_get(admin_of(daemon), "/metrics")).body.decode()
        values = samples(text)
        key = frozenset({("type", "query"), ("reason", "duplicate")})
        assert values["gnutella_messages_dropped_total", key] == 1


@pytest.mark.e2e
async def test_two_daemons_keep_their_metrics_apart(tmp_path: Path) -> None:
    async with running_daemons(tmp_path, count=2) as (first, second):
        (peer,) = await peers(first, 1)
        await send_queries(first, peer, 1)
        one = samples((await http_get(admin_of(first), "/metrics")).body.decode())
        two = samples((await http_get(admin_of(second), "/metrics")).body.decode())
        key = ("gnutella_messages_received_total", frozenset({("type", "query")}))
        assert one[key] == 1
        assert two[key] == 0  # the series exists from the start, at zero


@pytest.mark.e2e
async def test_bad_requests_are_answered_and_bounded(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        address = admin_of(daemon)
        cases = [
            ("/nowhere", 404),
            ("/routes?table=bogus", 400),
            ("/routes?guid=abc", 400),
            ("/routes?limit=-1", 400),
            ("/routes?limit=100001", 400),
            ("/routes?limit=1&limit=2", 400),
            ("/stats?verbose=1", 400),
        ]
        for target, status in cases:
            fetched = await http_get(address, target)
            assert fetched.status == status, target
            assert "error" in fetched.json()
        # Without an admin token, no change is accepted at all, and the answer says why.
        post = await http_get(address, "/log-level", method="POST", body=b'{"level":"info"}')
        assert post.status == 403
        assert "set [admin] token" in post.json()["error"]
        put = await http_get(address, "/stats", method="PUT")
        assert put.status == 405
        assert put.headers["allow"] == "GET, POST"
        huge = await http_get(address, "/stats", headers=[("x-padding", "x" * 10_000)])
        assert huge.status == 431


@pytest.mark.e2e
async def test_connections_are_limited_and_timed_out(tmp_path: Path) -> None:
    """A connection that sends no request is closed at its deadline; when it holds the
    last slot, a newcomer takes it over instead of being turned away."""
    async with running_daemons(tmp_path) as (daemon,), trio.open_nursery() as nursery:
        server = AdminServer(
            daemon, address=("127.0.0.1", 0), max_connections=1, request_timeout=0.5
        )
        address = await nursery.start(server.serve)
        idle = await trio.open_tcp_stream(*address)
        await wait_until(lambda: server.active == 1)
        assert (await http_get(address, "/healthz")).status == 200  # took the idle's slot
        with trio.fail_after(3):
            assert await idle.receive_some(100) == b""  # closed to make room
        await idle.aclose()
        assert server.refused["slow-head"] == 1
        late = await trio.open_tcp_stream(*address)
        with trio.fail_after(3):
            assert await late.receive_some(100) == b""  # closed after the timeout
        await late.aclose()
        assert server.refused["timeout"] >= 1
        nursery.cancel_scope.cancel()


@pytest.mark.e2e
async def test_one_client_address_holds_a_few_connections_at_most(tmp_path: Path) -> None:
    from gnutella_router.observe.admin import MAX_PER_ADDRESS

    async with running_daemons(tmp_path) as (daemon,), trio.open_nursery() as nursery:
        server = AdminServer(daemon, address=("127.0.0.1", 0), request_timeout=5.0)
        address = await nursery.start(server.serve)
        hogs = [await trio.open_tcp_stream(*address) for _ in range(MAX_PER_ADDRESS)]
        await wait_until(lambda: server.active == MAX_PER_ADDRESS)
        assert (await http_get(address, "/healthz")).status == 503  # the same address
        other = trio.socket.socket()
        await other.bind(("127.0.0.2", 0))
        await other.connect(address)
        stream = trio.SocketStream(other)
        await stream.send_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        with trio.fail_after(3):
            assert (await stream.receive_some(100)).startswith(b"HTTP/1.1 200")
        await stream.aclose()
        for hog in hogs:
            await hog.aclose()
        nursery.cancel_scope.cancel()


# --- access ----------------------------------------------------------------------------


@pytest.mark.e2e
async def test_a_token_is_required_once_set(tmp_path: Path) -> None:
    async with running_daemons(tmp_path, overrides={"admin.token": TOKEN}) as (daemon,):
        address = admin_of(daemon)
        missing = await http_get(address, "/stats")
        assert missing.status == 401
        assert missing.headers["www-authenticate"].startswith("Bearer")
        wrong = await http_get(address, "/stats", headers=[("authorization", "Bearer nope")])
        assert wrong.status == 401
        basic = await http_get(address, "/stats", headers=[("authorization", f"Basic {TOKEN}")])
        assert basic.status == 401
        right = await http_get(address, "/stats", headers=[("authorization", f"Bearer {TOKEN}")])
        assert right.status == 200
        assert "router" in right.json()
        metrics = await http_get(
            address, "/metrics", headers=[("authorization", f"bearer {TOKEN}")]
        )
        assert metrics.status == 200


@pytest.mark.e2e
async def test_metrics_and_health_stay_open_when_a_token_guards_the_rest(
    tmp_path: Path,
) -> None:
    """A token set for control must not break a Prometheus scraper or a health check,
    which have no secret to send; the pages that name peers stay behind it."""
    async with running_daemons(tmp_path, overrides={"admin.token": TOKEN}) as (daemon,):
        address = admin_of(daemon)
        assert (await http_get(address, "/metrics")).status == 200
        assert (await http_get(address, "/healthz")).status == 200
        assert (await http_get(address, "/healthz/")).status == 200
        for guarded in ("/connections", "/routes", "/dump", "/stats", "/"):
            assert (await http_get(address, guarded)).status == 401, guarded


@pytest.mark.e2e
async def test_the_open_pages_are_a_setting(tmp_path: Path) -> None:
    settings = {"admin.token": TOKEN, "admin.open_pages": ["/healthz"]}
    async with running_daemons(tmp_path, overrides=settings) as (daemon,):
        server = AdminServer(daemon, address=("127.0.0.1", 0))
        assert server.respond("GET", "/healthz", [], "127.0.0.1").status == 200
        assert server.respond("GET", "/metrics", [], "127.0.0.1").status == 401
        # An open page is open to whoever may connect at all: remote clients still
        # need allow_remote.
        assert server.respond("GET", "/healthz", [], "192.0.2.7").status == 403
    with pytest.raises(ConfigError, match=r"admin\.open_pages"):
        load_config(None, {"admin.open_pages": ["/dump"]})


@pytest.mark.e2e
async def test_remote_peers_are_refused_unless_allowed(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        local = AdminServer(daemon, address=("127.0.0.1", 0))
        assert local.respond("GET", "/healthz", [], "127.0.0.1").status == 200
        assert local.respond("GET", "/healthz", [], "::1").status == 200
        assert local.respond("GET", "/healthz", [], "::ffff:127.0.0.1").status == 200
        refused = await local.answer("GET", "/healthz", [], "192.0.2.7")
        assert refused.status == 403
        assert b"admin.allow_remote" in refused.body
    remote_settings = {"admin.allow_remote": True, "admin.token": TOKEN}
    async with running_daemons(tmp_path / "remote", overrides=remote_settings) as (daemon,):
        remote = AdminServer(daemon, address=("127.0.0.1", 0))
        assert remote.respond("GET", "/stats", [], "192.0.2.7").status == 401
        bearer = [(b"Authorization", f"Bearer {TOKEN}".encode())]
        assert remote.respond("GET", "/stats", bearer, "192.0.2.7").status == 200
        # A scraper elsewhere reads the open pages without the token.
        assert remote.respond("GET", "/healthz", [], "192.0.2.7").status == 200


def test_allow_remote_without_a_token_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match=r"admin\.token") as caught:
        load_config(None, {"admin.allow_remote": True})
    assert caught.value.key == "admin.token"
    assert (
        load_config(None, {"admin.allow_remote": True, "admin.token": TOKEN}).admin.token == TOKEN
    )


def test_a_non_loopback_admin_address_needs_remote_access() -> None:
    with pytest.raises(ConfigError, match=r"admin\.allow_remote") as caught:
        load_config(None, {"admin.listen": "0.0.0.0:7000"})
    assert caught.value.key == "admin.listen"
    config = load_config(
        None, {"admin.listen": "0.0.0.0:7000", "admin.allow_remote": True, "admin.token": TOKEN}
    )
    assert config.admin_address == ("0.0.0.0", 7000)
    for loopback in ("127.0.0.1:7000", "[::1]:7000", "localhost:7000"):
        load_config(None, {"admin.listen": loopback})


def test_a_bad_token_is_refused_without_being_shown() -> None:
    with pytest.raises(ConfigError, match=r"admin\.token") as caught:
        load_config(None, {"admin.token": "has a space"})
    assert "has a space" not in str(caught.value)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({}, ("127.0.0.1", 6347)),
        ({"node.listen": "127.0.0.1:0"}, ("127.0.0.1", 0)),
        ({"node.listen": "0.0.0.0:7000"}, ("127.0.0.1", 7001)),
        ({"node.listen": "[::]:7000"}, ("::1", 7001)),
        ({"node.listen": "[::1]:7000"}, ("::1", 7001)),
        (
            {"node.listen": "0.0.0.0:7000", "admin.allow_remote": True, "admin.token": TOKEN},
            ("0.0.0.0", 7001),
        ),
        ({"admin.listen": "127.0.0.1:9999"}, ("127.0.0.1", 9999)),
    ],
)
def test_the_admin_address_follows_the_node(
    overrides: dict[str, object], expected: tuple[str, int]
) -> None:
    config = load_config(None, overrides)
    assert config.admin_address == expected


def test_no_port_after_65535() -> None:
    with pytest.raises(ConfigError, match=r"admin\.listen") as caught:
        load_config(None, {"node.listen": "127.0.0.1:65535"})
    assert caught.value.key == "admin.listen"
    load_config(None, {"node.listen": "127.0.0.1:65535", "admin.listen": "127.0.0.1:0"})


# --- the dump command -------------------------------------------------------------------


async def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    status = await trio.to_thread.run_sync(main, argv)
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.e2e
async def test_the_dump_command_prints_what_was_just_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        admin = format_address(*admin_of(daemon))
        sender, _ = await peers(daemon, 2)
        (guid,) = await send_queries(daemon, sender, 1)
        sender_text = connection_of(daemon, sender).peer_text

        status, out, _ = await run_cli(["dump", "routes", "--admin", admin], capsys)
        assert status == 0
        (line,) = [row for row in out.splitlines() if guid.hex() in row]
        assert sender_text in line
        assert "current" in line
        assert "query routes: 1-1 of 1 (capacity" in out
        assert "NEXT HOP" in out

        status, out, _ = await run_cli(
            ["dump", "routes", "--admin", admin, "--table", "ping", "--guid", guid.hex()], capsys
        )
        assert status == 0
        assert "ping routes: none of 0" in out
        assert "query routes" not in out

        status, out, _ = await run_cli(["dump", "connections", "--admin", admin], capsys)
        assert status == 0
        (line,) = [row for row in out.splitlines() if sender_text in row]
        assert "test-peer/1.0" in line
        assert "incoming" in line
        assert "ultrapeer,bye,ggep" in line

        status, out, _ = await run_cli(["dump", "connections", "--admin", admin, "--json"], capsys)
        assert status == 0
        assert sender_text in [c["peer"] for c in json.loads(out)]

        status, out, _ = await run_cli(["dump", "stats", "--admin", admin], capsys)
        assert status == 0
        (line,) = [row for row in out.splitlines() if row.startswith("query ")]
        assert line.split() == ["query", "1", "1", "0", "0", "0"]

        status, out, _ = await run_cli(["dump", "queues", "--admin", admin], capsys)
        assert status == 0
        (line,) = [row for row in out.splitlines() if row.startswith("router ")]
        assert line.split()[:3] == ["router", "0", "1000"]
        assert "governor: off" in out

        status, out, _ = await run_cli(["dump", "all", "--admin", admin, "--limit", "5"], capsys)
        assert status == 0
        assert daemon.guid.hex() in out
        assert guid.hex() in out
        assert sender_text in out

        status, out, _ = await run_cli(["dump", "all", "--admin", admin, "--json"], capsys)
        assert status == 0
        assert json.loads(out)["node"]["guid"] == daemon.guid.hex()


@pytest.mark.e2e
async def test_the_dump_command_reports_failures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GNUTELLA_ADMIN_TOKEN", raising=False)
    status, _, err = await run_cli(["dump", "stats", "--admin", f"127.0.0.1:{free_port()}"], capsys)
    assert status == 1
    assert "cannot reach the admin interface" in err

    status, _, err = await run_cli(["dump", "connections", "--guid", "00" * 16], capsys)
    assert status == 2
    status, _, err = await run_cli(["dump", "stats", "--limit", "5"], capsys)
    assert status == 2

    async with running_daemons(tmp_path, overrides={"admin.token": TOKEN}) as (daemon,):
        admin = format_address(*admin_of(daemon))
        status, _, err = await run_cli(["dump", "stats", "--admin", admin], capsys)
        assert status == 1
        assert "401" in err
        assert "--token" in err
        status, out, _ = await run_cli(
            ["dump", "stats", "--admin", admin, "--token", TOKEN], capsys
        )
        assert status == 0
        assert "messages by type" in out
        monkeypatch.setenv("GNUTELLA_ADMIN_TOKEN", TOKEN)
        status, _, _ = await run_cli(["dump", "queues", "--admin", admin], capsys)
        assert status == 0


@pytest.mark.e2e
async def test_ipv6_loopback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with running_daemons(tmp_path, overrides={"node.listen": "[::1]:0"}) as (daemon,):
        host, port = admin_of(daemon)
        assert host == "::1"
        assert (await http_get((host, port), "/healthz")).status == 200
        status, out, _ = await run_cli(["dump", "queues", "--admin", f"[::1]:{port}"], capsys)
        assert status == 0
        assert "router" in out


def test_tables_align_their_columns() -> None:
    text = format_table(["NAME", "COUNT"], [["a", 1], ["longer", 12345], ["b", None]])
    assert text.splitlines() == [
        "NAME    COUNT",
        "a           1",
        "longer  12345",
        "b           -",
    ]


# --- SIGUSR1 in a real process ----------------------------------------------------------


async def wait_healthy(address: tuple[str, int], timeout: float = 15) -> None:
    with trio.fail_after(timeout):
        while True:
            try:
                if (await http_get(address, "/healthz")).status == 200:
                    return
            except OSError:
                pass
            await trio.sleep(0.05)


def start_router(config: Path, port: int, state: Path) -> subprocess.Popen[bytes]:
    arguments = ["--config", str(config), "--listen", f"127.0.0.1:{port}", "--log-format", "json"]
    return start_router_process(state, arguments).process


@pytest.mark.e2e
async def test_sigusr1_writes_a_dump_and_the_daemon_keeps_running(tmp_path: Path) -> None:
    port, admin_port = free_port(), free_port()
    config = tmp_path / "router.toml"
    config.write_text(f'[admin]\nlisten = "127.0.0.1:{admin_port}"\n')
    state = tmp_path / "state"
    process = start_router(config, port, state)
    try:
        admin = ("127.0.0.1", admin_port)
        await wait_healthy(admin)
        peer = await Peer.connect(("127.0.0.1", port))
        await peer.send(message(Query(b"before the dump"), ttl=2))
        with trio.fail_after(5):
            while (await http_get(admin, "/stats")).json()["router"]["received"] != {"query": 1}:
                await trio.sleep(0.02)
        process.send_signal(signal.SIGUSR1)
        with trio.fail_after(10):
            while not (dumps := list(state.glob("dump-*.json"))):
                await trio.sleep(0.05)
        (path,) = dumps
        dump = json.loads(path.read_text())
        assert dump["stats"]["router"]["received"] == {"query": 1}
        assert "gnutella_router.daemon.Daemon._watch_signals" in json.dumps(dump["tasks"])
        assert dump["node"]["pid"] == process.pid
        # Still running, still serving.
        assert process.poll() is None
        assert (await http_get(admin, "/healthz")).status == 200
        await peer.aclose()
        process.send_signal(signal.SIGTERM)
        assert await trio.to_thread.run_sync(process.wait, 10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    _, stderr = process.communicate()
    events = [json.loads(line) for line in stderr.decode().splitlines() if line.startswith("{")]
    (written,) = [e for e in events if e["event"] == "dump written"]
    assert written["path"] == str(path.absolute())
    (started,) = [e for e in events if e["event"] == "router started"]
    assert started["admin"] == f"127.0.0.1:{admin_port}"


@pytest.mark.e2e
async def test_the_profile_page_serves_the_samples(tmp_path: Path) -> None:
    overrides = {"profiler.enabled": True, "profiler.interval": 0.05, "admin.listen": "127.0.0.1:0"}
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        await trio.sleep(0.3)
        assert daemon.admin_address is not None
        status, body = await _get_raw(daemon.admin_address, "/profile")
        assert status == 200
        samples = json.loads(body)["samples"]
        assert len(samples) >= 3
        status, body = await _get_raw(daemon.admin_address, "/profile?format=csv")
        assert status == 200
        assert body.count(b"\n") >= 4
    async with running_daemons(tmp_path / "off", overrides={"admin.listen": "127.0.0.1:0"}) as (
        daemon,
    ):
        assert daemon.admin_address is not None
        status, _ = await _get_raw(daemon.admin_address, "/profile")
        assert status == 404


async def _get_raw(address: tuple[str, int], target: str) -> tuple[int, bytes]:
    stream = await trio.open_tcp_stream(*address)
    request = f"GET {target} HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n".encode()
    await stream.send_all(request)
    data = b""
    with trio.fail_after(5):
        while chunk := await stream.receive_some(65536):
            data += chunk
    await stream.aclose()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


DASHBOARD = Path(__file__).resolve().parents[3] / "docs" / "grafana-dashboard.json"


@pytest.mark.e2e
async def test_the_grafana_dashboard_queries_metrics_that_exist(tmp_path: Path) -> None:
    import json
    import re

    dashboard = json.loads(DASHBOARD.read_text())
    expressions = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(expressions) >= 10
    used = {m for e in expressions for m in re.findall(r"\b(?:gnutella|process)_[a-z_]+", e)}
    async with running_daemons(tmp_path) as (daemon,):
        (peer,) = await peers(daemon, 1)
        await send_queries(daemon, peer, 1)
        text = (await http_get(admin_of(daemon), "/metrics")).body.decode()
    exposed = {name for name, _ in samples(text)}
    assert used <= exposed, used - exposed
    stage_panels = [p["title"] for p in dashboard["panels"] if "Stage" in p["title"]]
    assert len(stage_panels) >= 4
