"""A router killed at any moment starts again with its host cache; SIGTERM under load
says Bye 200 to every peer and exits 0 quickly."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
import trio

from gnutella_router.discovery.host_cache import HostCache
from protocol.constants import MessageType
from protocol.messages import Bye, Query
from tests.support.peers import Peer, message
from tests.support.processes import free_port, start, wait_listening

HOSTS = 3000
KILLS = 12


def saved_hosts(path: Path) -> int:
    cache = HostCache(HOSTS * 2)
    return cache.load(path, time.monotonic())


def kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait(10)
    process.communicate()


@pytest.mark.e2e
async def test_kill_9_at_any_moment_never_costs_the_host_cache(tmp_path: Path) -> None:
    cache = HostCache(HOSTS * 2)
    for n in range(HOSTS):  # public hosts, from 20 tellers: well within every share
        cache.add(
            f"{11 + n % 100}.{n // 100}.0.1", 6346, "pong", 0.0, f"peer/{30 + n % 20}.1.0.0/16"
        )
    cache.save(tmp_path / "hosts.txt", 0.0)
    config = tmp_path / "router.toml"
    # Saving all the time, so that kills land in the middle of saves too.
    config.write_text("[catcher]\nsave_interval = 0.005\nmin_connections = 0\n")
    rng = random.Random(20261125)
    port = free_port()
    for _ in range(KILLS):
        process = start(["--listen", f"127.0.0.1:{port}", "--config", str(config)], tmp_path)
        try:
            await wait_listening(port, process)
            await trio.sleep(rng.uniform(0.0, 0.3))
        finally:
            kill(process)
        assert saved_hosts(tmp_path / "hosts.txt") == HOSTS

    process = start(
        ["--listen", f"127.0.0.1:{port}", "--config", str(config), "--log-format", "json"],
        tmp_path,
    )
    try:
        await wait_listening(port, process)
        process.send_signal(signal.SIGTERM)
        assert await trio.to_thread.run_sync(process.wait, 10) == 0
    finally:
        kill(process)
    _, stderr = process.communicate()
    (started,) = [
        entry
        for entry in map(json.loads, stderr.decode().splitlines())
        if entry["event"] == "catcher started"
    ]
    assert started["cached_hosts"] == HOSTS
    leftovers = await trio.to_thread.run_sync(lambda: list(tmp_path.glob(".hosts.txt.*.tmp")))
    assert not leftovers, "a killed save's temporary files were left behind"


@pytest.mark.e2e
async def test_sigterm_with_busy_peers_says_bye_200_to_each_and_exits_0_in_2_s(
    tmp_path: Path,
) -> None:
    port = free_port()
    process = start(["--listen", f"127.0.0.1:{port}"], tmp_path)
    try:
        await wait_listening(port, process)
        peers = [await Peer.connect(("127.0.0.1", port)) for _ in range(10)]

        async def keep_sending(peer: Peer) -> None:
            try:
                while True:
                    await peer.send(*[message(Query(b"busy"), ttl=3) for _ in range(50)])
                    await trio.sleep(0.01)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return

        byes: list[int] = []

        async def read_to_the_end(peer: Peer) -> None:
            frames = await peer.wait_closed(timeout=5)
            byes.extend(
                bye.code
                for f in frames
                if f.payload_type == MessageType.BYE and isinstance(bye := f.message().payload, Bye)
            )

        async with trio.open_nursery() as nursery:
            async with trio.open_nursery() as readers:  # peers read, as real ones do
                for peer in peers:
                    nursery.start_soon(keep_sending, peer)
                    readers.start_soon(read_to_the_end, peer)
                await trio.sleep(1.0)
                sent_at = time.monotonic()
                process.send_signal(signal.SIGTERM)
                exit_code = await trio.to_thread.run_sync(process.wait, 5)
                stopped_in = time.monotonic() - sent_at
            nursery.cancel_scope.cancel()
        assert exit_code == 0
        assert stopped_in < 2.0
        assert byes == [200] * 10
    finally:
        kill(process)
