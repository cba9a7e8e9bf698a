"""Changing a running router: the admin interface's POSTs and ``gnutella-router ctl``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from gnutella_router.cli.ctl import request_for
from gnutella_router.cli.main import build_parser, main
from gnutella_router.logs import current_level, set_level
from gnutella_router.observe.admin_control import CONTROL_ENDPOINTS
from tests.support.peers import Peer, running_daemons
from tests.support.waiting import wait_until

TOKEN = "s3cret-token"
CONTROLLED = {"admin.token": TOKEN}


async def ctl(daemon_admin: tuple[str, int], *arguments: str, token: str = TOKEN) -> int:
    argv = ["ctl", "--admin", f"{daemon_admin[0]}:{daemon_admin[1]}", "--token", token]
    return int(await trio.to_thread.run_sync(main, [*argv, *arguments]))


@pytest.mark.e2e
async def test_peers_are_added_and_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running_daemons(tmp_path, 2, overrides=CONTROLLED) as (first, second):
        assert first.admin_address is not None
        host, port = second.address
        assert await ctl(first.admin_address, "peers", "add", f"{host}:{port}") == 0
        (answer,) = [
            json.loads(line)
            for line in capsys.readouterr().out.splitlines()
            if line.startswith('{"connected"')
        ]
        assert answer["connected"] is True
        await wait_until(lambda: len(second.server.connections) == 1)
        assert await ctl(first.admin_address, "peers", "drop", str(answer["connection"])) == 0
        await wait_until(lambda: len(second.server.connections) == 0)
        closed = answer["connection"]
        assert first.server.connections.get(closed) is None
        # Nothing left to drop: a clear refusal, exit 1.
        assert await ctl(first.admin_address, "peers", "drop", str(closed)) == 1
        assert "no open connection" in capsys.readouterr().err


@pytest.mark.e2e
async def test_adding_a_peer_already_connected_opens_no_second_connection(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running_daemons(tmp_path, 2, overrides=CONTROLLED) as (first, second):
        assert first.admin_address is not None
        peer = f"{second.address[0]}:{second.address[1]}"
        assert await ctl(first.admin_address, "peers", "add", peer) == 0
        await wait_until(lambda: len(second.server.connections) == 1)
        (connection,) = first.server.connections.snapshot()
        capsys.readouterr()
        assert await ctl(first.admin_address, "peers", "add", peer) == 1
        err = capsys.readouterr().err
        assert "409" in err
        assert f"already connected to {peer} (connection {connection.id}); nothing dialled" in err
        await trio.sleep(0.2)
        assert len(first.server.connections) == 1
        assert len(second.server.connections) == 1


@pytest.mark.e2e
async def test_a_dropped_peer_is_not_redialled_until_its_hold_ends(tmp_path: Path) -> None:
    """The catcher wants one outgoing connection and knows the dropped peer: without a
    hold it dials it again within a second (its next look), undoing the drop. (The hold
    is ours: the other side, wanting no connections here, does not dial back.)"""
    settings = {**CONTROLLED, "catcher.min_connections": 1, "catcher.drop_hold": 3.0}
    async with (
        running_daemons(tmp_path / "a", overrides=settings) as (first,),
        running_daemons(tmp_path / "b") as (second,),
    ):
        assert first.admin_address is not None
        peer = f"{second.address[0]}:{second.address[1]}"
        assert await ctl(first.admin_address, "peers", "add", peer) == 0
        await wait_until(lambda: first.server.connections.count("outgoing") == 1)
        (connection,) = first.server.connections.snapshot()
        dropped_at = trio.current_time()
        assert await ctl(first.admin_address, "peers", "drop", peer) == 0
        await wait_until(lambda: first.server.connections.count("outgoing") == 0)
        while trio.current_time() - dropped_at < 2.0:
            assert first.server.connections.count("outgoing") == 0, "redialled while held"
            await trio.sleep(0.1)
        # After the hold the catcher may dial it again, as any known host.
        await wait_until(lambda: first.server.connections.count("outgoing") == 1, timeout=15)
        assert first.server.connections.snapshot()[0].id != connection.id


@pytest.mark.e2e
async def test_adding_a_dropped_peer_lifts_its_hold(tmp_path: Path) -> None:
    settings = {**CONTROLLED, "catcher.drop_hold": 600.0}
    async with running_daemons(tmp_path, 2, overrides=settings) as (first, second):
        assert first.admin_address is not None
        peer = f"{second.address[0]}:{second.address[1]}"
        assert await ctl(first.admin_address, "peers", "add", peer) == 0
        assert await ctl(first.admin_address, "peers", "drop", peer) == 0
        await wait_until(lambda: len(first.server.connections) == 0)
        assert await ctl(first.admin_address, "peers", "add", peer) == 0
        assert len(first.server.connections) == 1


@pytest.mark.e2e
async def test_an_unreachable_peer_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.support.processes import free_port

    async with running_daemons(tmp_path, overrides=CONTROLLED) as (daemon,):
        assert daemon.admin_address is not None
        status = await ctl(daemon.admin_address, "peers", "add", f"127.0.0.1:{free_port()}")
    assert status == 1
    assert "502" in capsys.readouterr().err


@pytest.mark.e2e
async def test_the_log_level_changes_at_run_time(tmp_path: Path) -> None:
    before = current_level()
    try:
        async with running_daemons(tmp_path, overrides=CONTROLLED) as (daemon,):
            assert daemon.admin_address is not None
            assert await ctl(daemon.admin_address, "log-level", "debug") == 0
            assert current_level() == "debug"
            assert await ctl(daemon.admin_address, "log-level", "error") == 0
            assert current_level() == "error"
    finally:
        set_level(before)


@pytest.mark.e2e
async def test_the_profiler_starts_and_stops_on_request(tmp_path: Path) -> None:
    async with running_daemons(tmp_path, overrides=CONTROLLED) as (daemon,):
        assert daemon.admin_address is not None
        assert daemon.profiler is None
        assert await ctl(daemon.admin_address, "profiler", "start") == 0
        assert daemon.profiler is not None
        profiler = daemon.profiler
        await wait_until(lambda: profiler.taken >= 2)
        assert await ctl(daemon.admin_address, "profiler", "stop") == 0
    assert (tmp_path / "node0" / "profile.json").is_file()


@pytest.mark.e2e
async def test_control_needs_the_token(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with running_daemons(tmp_path, overrides=CONTROLLED) as (daemon,):
        assert daemon.admin_address is not None
        assert await ctl(daemon.admin_address, "log-level", "debug", token="wrong") == 1
        assert "401" in capsys.readouterr().err
    async with running_daemons(tmp_path / "open") as (daemon,):
        # Reading needs no token on loopback; changing always does.
        assert daemon.admin_address is not None
        assert await ctl(daemon.admin_address, "log-level", "debug", token="") == 1
        assert "set [admin] token" in capsys.readouterr().err


@pytest.mark.e2e
async def test_bad_control_bodies_are_refused(tmp_path: Path) -> None:
    from tests.support.http import http_get

    async with running_daemons(tmp_path, overrides=CONTROLLED) as (daemon,):
        assert daemon.admin_address is not None
        auth = [("Authorization", f"Bearer {TOKEN}")]
        for path, body, status in [
            ("/log-level", b'{"level": "loud"}', 400),
            ("/peers/add", b"not json", 400),
            ("/peers/add", b'{"address": "nowhere"}', 400),
            ("/profiler", b'{"action": "dance"}', 400),
            ("/nothing", b"{}", 404),
            ("/log-level", b"x" * 5000, 413),
        ]:
            reply = await http_get(
                daemon.admin_address, path, method="POST", body=body, headers=auth
            )
            assert reply.status == status, (path, reply.body)


def test_check_config_prints_the_effective_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "router.toml"
    config.write_text('[network]\nmax_ttl = 5\n[admin]\ntoken = "hush"\n')
    assert main(["check-config", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "max_ttl = 5" in out
    assert "hush" not in out
    config.write_text("[network]\nmax_ttl = 99\n")
    assert main(["check-config", "--config", str(config)]) == 2
    assert "network.max_ttl = 99: expected an integer from 1 to 15" in capsys.readouterr().err


@pytest.mark.e2e
async def test_a_peer_can_be_dropped_by_its_address(tmp_path: Path) -> None:
    async with running_daemons(tmp_path, overrides=CONTROLLED) as (daemon,):
        assert daemon.admin_address is not None
        peer = await Peer.connect(daemon.address, extra_headers=[("Listen-IP", "192.0.2.4:6346")])
        await wait_until(lambda: len(daemon.server.connections) == 1)
        assert await ctl(daemon.admin_address, "peers", "drop", "192.0.2.4:6346") == 0
        await wait_until(lambda: len(daemon.server.connections) == 0)
        await peer.aclose()


def answers(out: str, first_key: str) -> list[dict[str, Any]]:
    """The JSON answers ``ctl`` printed that begin with ``first_key`` (the captured
    output holds the routers' log lines too)."""
    return [json.loads(line) for line in out.splitlines() if line.startswith(f'{{"{first_key}"')]


def test_every_control_endpoint_has_a_ctl_command() -> None:
    parser = build_parser()
    invocations = [
        ["peers", "add", "127.0.0.1:1"],
        ["peers", "drop", "3"],
        ["peers", "hold", "127.0.0.1:1", "--seconds", "5"],
        ["peers", "release", "127.0.0.1:1"],
        ["offline", "on"],
        ["inject", "query", "free jazz", "--ttl", "2"],
        ["log-level", "info"],
        ["profiler", "start"],
        ["reload"],
    ]
    paths = {request_for(parser.parse_args(["ctl", *argv]))[0] for argv in invocations}
    assert paths == set(CONTROL_ENDPOINTS)
    assert request_for(parser.parse_args(["ctl", "holds"])) == ("/holds", None)
    assert request_for(parser.parse_args(["ctl", "inject", "ping"])) == (
        "/inject",
        {"type": "ping"},
    )
    with pytest.raises(ValueError, match="hold only"):
        request_for(parser.parse_args(["ctl", "peers", "drop", "3", "--seconds", "5"]))


@pytest.mark.e2e
async def test_a_peer_is_held_down_and_released(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running_daemons(tmp_path, overrides=CONTROLLED) as (daemon,):
        assert daemon.admin_address is not None
        listen = "192.0.2.5:6346"
        peer = await Peer.connect(daemon.address, extra_headers=[("Listen-IP", listen)])
        await wait_until(lambda: len(daemon.server.connections) == 1)
        assert await ctl(daemon.admin_address, "peers", "hold", listen, "--seconds", "600") == 0
        (held,) = answers(capsys.readouterr().out, "held")
        assert held == {"held": listen, "closed": 1, "seconds": 600.0}
        await wait_until(lambda: len(daemon.server.connections) == 0)
        assert await ctl(daemon.admin_address, "holds") == 0
        (holds,) = answers(capsys.readouterr().out, "offline")
        assert [hold["address"] for hold in holds["holds"]] == [listen]
        assert await ctl(daemon.admin_address, "peers", "release", listen) == 0
        assert answers(capsys.readouterr().out, "released") == [{"released": True}]
        assert daemon.server.holds.holds(trio.current_time()) == []
        await peer.aclose()


@pytest.mark.e2e
async def test_offline_and_back_and_an_injected_query(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with running_daemons(tmp_path, overrides=CONTROLLED) as (daemon,):
        assert daemon.admin_address is not None
        peer = await Peer.connect(daemon.address)
        await wait_until(lambda: len(daemon.server.connections) == 1)
        assert await ctl(daemon.admin_address, "inject", "query", "free jazz", "--ttl", "2") == 0
        (injected,) = answers(capsys.readouterr().out, "guid")
        assert (injected["type"], injected["ttl"], injected["sent_to"]) == ("query", 2, 1)
        frame = await peer.receive_matching(lambda f: f.guid.hex() == injected["guid"])
        assert frame.ttl == 2
        assert await ctl(daemon.admin_address, "inject", "query") == 1  # a query needs text
        assert "text" in capsys.readouterr().err
        assert await ctl(daemon.admin_address, "offline", "on") == 0
        assert answers(capsys.readouterr().out, "offline") == [{"offline": True, "closed": 1}]
        assert daemon.server.holds.offline
        await wait_until(lambda: len(daemon.server.connections) == 0)
        assert await ctl(daemon.admin_address, "offline", "off") == 0
        assert not daemon.server.holds.offline
        await peer.aclose()
