"""Reloading the configuration of a running router: what is applied live, what waits for
a restart, and a bad file that changes nothing (``POST /reload``, ``ctl reload``)."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from gnutella_router.cli.main import main
from gnutella_router.config import Config, load_config
from gnutella_router.config.live import LIVE_SETTINGS, plan_reload
from gnutella_router.config.sections import SECTIONS
from gnutella_router.daemon import Daemon, is_hangup
from gnutella_router.logs import current_level, set_level
from tests.support.http import http_get
from tests.support.peers import Peer, PeerRefused

TOKEN = "reload-token"
BASE = {
    "node.listen": "127.0.0.1:0",
    "catcher.min_connections": 0,
    "network.handshake_timeout": 2.0,
    "admin.token": TOKEN,
}


def base_overrides(state: Path) -> dict[str, object]:
    return {**BASE, "node.state_dir": str(state)}


@asynccontextmanager
async def reloadable(tmp_path: Path, text: str) -> AsyncIterator[tuple[Daemon, Path]]:
    """A router started from a file (``text``) under the flags of a test; yields it and
    its file, to be rewritten."""
    path = tmp_path / "router.toml"
    path.write_text(text)
    overrides: Mapping[str, object] = base_overrides(tmp_path / "state")
    daemon = Daemon(
        load_config(path, overrides), config_source=lambda: load_config(path, overrides)
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        try:
            yield daemon, path
        finally:
            daemon.request_stop()
            with trio.fail_after(10):
                await daemon.stopped.wait()


async def ctl(daemon: Daemon, *arguments: str) -> int:
    assert daemon.admin_address is not None
    host, port = daemon.admin_address
    argv = ["ctl", "--admin", f"{host}:{port}", "--token", TOKEN, *arguments]
    return int(await trio.to_thread.run_sync(main, argv))


def test_changes_are_sorted_into_live_ones_and_ones_for_a_restart() -> None:
    current = load_config(None, {"admin.token": "old-secret"})
    read = load_config(
        None,
        {
            "network.max_connections": 8,
            "catcher.min_connections": 2,
            "catcher.seeds": ["192.0.2.1:6346"],
            "network.max_ttl": 5,
            "admin.token": "new-secret",
        },
    )
    plan = plan_reload(current, read)
    assert plan.applied == {
        "network.max_connections": (32, 8),
        "catcher.min_connections": (4, 2),
        "catcher.seeds": ((), ("192.0.2.1:6346",)),
    }
    assert plan.needs_restart == ("network.max_ttl", "admin.token")
    # In force afterwards: the live changes only; the others keep their start values.
    assert plan.effective.network.max_connections == 8
    assert plan.effective.network.max_ttl == current.network.max_ttl
    assert plan.effective.admin.token == "old-secret"
    assert "secret" not in json.dumps(plan.to_json())  # a restart's values are not told
    assert plan_reload(current, current).applied == {}


def test_every_live_setting_exists() -> None:
    for key in LIVE_SETTINGS:
        section, _, name = key.partition(".")
        assert name in SECTIONS[section].__struct_fields__, key


@pytest.mark.e2e
async def test_live_settings_take_effect_and_the_others_wait_for_a_restart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    level = current_level()
    try:
        async with reloadable(tmp_path, "[network]\nmax_connections = 32\n") as (daemon, path):
            first = await Peer.connect(daemon.address)
            path.write_text(
                "[network]\nmax_connections = 1\nmax_ttl = 5\nconnects_per_ip_per_minute = 9\n"
                "[router]\npeer_query_rate = 7.5\npeer_query_burst = 30\n"
                "[log]\nlevel = 'debug'\n"
            )
            assert await ctl(daemon, "reload") == 0
            out = capsys.readouterr().out.splitlines()
            assert "applied: network.max_connections = 1 (was 32)" in out
            assert "needs a restart: network.max_ttl" in out
            # The holders took the new values...
            assert daemon.server.slots.max_connections == 1
            assert daemon.server.rate_limiter.limit == 9
            assert (daemon.router.query_rate.rate, daemon.router.query_rate.burst) == (7.5, 30)
            assert current_level() == "debug"
            # ... and act on them: the one slot is taken.
            with pytest.raises(PeerRefused, match="503"):
                await Peer.connect(daemon.address)
            # A fixed setting keeps its start value wherever it is read.
            assert daemon.config.network.max_ttl == daemon.server.config.network.max_ttl == 7
            assert daemon.config.network.max_connections == 1
            assert daemon.reloads == 1
            await first.aclose()
    finally:
        set_level(level)


@pytest.mark.e2e
async def test_seeds_added_and_removed_on_reload(tmp_path: Path) -> None:
    async with reloadable(tmp_path, "") as (daemon, path):
        hosts = daemon.catcher.hosts
        path.write_text("[catcher]\nseeds = ['127.0.0.1:16001', 'localhost:16002']\n")
        await daemon.reload()
        assert hosts.source_of("127.0.0.1", 16001) == "seed"
        assert hosts.source_of("127.0.0.1", 16002) == "seed"  # a name is resolved
        path.write_text("[catcher]\nseeds = ['127.0.0.1:16002']\n")
        plan = await daemon.reload()
        assert plan.changed("catcher.seeds")
        assert hosts.source_of("127.0.0.1", 16001) is None
        assert hosts.source_of("127.0.0.1", 16002) == "seed"
        assert daemon.catcher.settings.seeds == ("127.0.0.1:16002",)


@pytest.mark.e2e
async def test_a_bad_file_changes_nothing_and_the_router_runs_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with reloadable(tmp_path, "[network]\nmax_connections = 20\n") as (daemon, path):
        before = daemon.config
        path.write_text("[network]\nmax_connections = 2\nmax_ttl = 99\n")
        assert await ctl(daemon, "reload") == 1
        error = capsys.readouterr().err
        assert "network.max_ttl = 99" in error
        assert "runs on as it was" in error
        path.write_text("[network\n")
        assert await ctl(daemon, "reload", "--json") == 1
        assert "not valid TOML" in capsys.readouterr().err
        assert daemon.config is before
        assert daemon.server.slots.max_connections == 20
        peer = await Peer.connect(daemon.address)  # still serving
        await peer.aclose()
        # Fixed again, the file reloads.
        path.write_text("[network]\nmax_connections = 2\n")
        assert await ctl(daemon, "reload", "--json") == 0
        (answer,) = [
            json.loads(line)
            for line in capsys.readouterr().out.splitlines()
            if line.startswith('{"applied"')
        ]
        assert answer == {
            "applied": {"network.max_connections": {"from": 20, "to": 2}},
            "needs_restart": [],
        }


@pytest.mark.e2e
async def test_a_router_without_a_file_to_read_refuses_a_reload(tmp_path: Path) -> None:
    config = load_config(None, base_overrides(tmp_path))
    daemon = Daemon(config)
    async with trio.open_nursery() as nursery:
        await nursery.start(daemon.run)
        assert daemon.admin_address is not None
        auth = [("Authorization", f"Bearer {TOKEN}")]
        reply = await http_get(
            daemon.admin_address, "/reload", method="POST", body=b"{}", headers=auth
        )
        assert reply.status == 409
        assert b"not started from a configuration" in reply.body
        reply = await http_get(
            daemon.admin_address, "/reload", method="POST", body=b'{"x": 1}', headers=auth
        )
        assert reply.status == 400
        daemon.request_stop()
    assert isinstance(daemon.config, Config)


def test_a_sighup_is_a_reload_unless_the_router_lost_its_parent_or_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parent = os.getppid()
    monkeypatch.setattr(os, "isatty", lambda descriptor: False)
    assert not is_hangup(parent, on_terminal=False)  # systemd's or an operator's: reload
    assert is_hangup(parent + 1, on_terminal=False)  # reparented: the parent-death signal
    assert is_hangup(parent, on_terminal=True)  # started on a terminal, now none: hung up
    monkeypatch.setattr(os, "isatty", lambda descriptor: descriptor == 2)
    assert not is_hangup(parent, on_terminal=True)  # the terminal is still there
