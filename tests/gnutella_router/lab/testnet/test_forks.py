"""Routers forked from the fork server: started, reported, stopped, never left over."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from gnutella_router.lab.testnet.children import ChildNode
from gnutella_router.lab.testnet.forks import ForkServer, ForkServerError, LineReader, available
from gnutella_router.lab.testnet.nodes import NodeError, NodeFailure
from gnutella_router.ready_file import READY_FILE
from tests.gnutella_router.lab.testnet.test_children import child_config, pid_alive

pytestmark = pytest.mark.skipif(not available(), reason="forking routers needs Linux pidfds")


@asynccontextmanager
async def fork_server(tmp_path: Path) -> AsyncIterator[tuple[ForkServer, trio.Nursery]]:
    server = ForkServer(tmp_path / "fork-server.log")
    async with trio.open_nursery() as nursery:
        try:
            with trio.fail_after(30):
                await server.start(nursery)
            yield server, nursery
        finally:
            await server.close()
            nursery.cancel_scope.cancel()


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_lines_are_cut_into_messages_and_nonsense_is_refused() -> None:
    reader = LineReader()
    assert reader.feed(b'{"ready": 1}\n{"star') == [{"ready": 1}]
    assert reader.feed(b'ted": 2, "pid": 5}\n') == [{"started": 2, "pid": 5}]
    with pytest.raises(ForkServerError, match="not a JSON object"):
        reader.feed(b"[1, 2]\n")
    with pytest.raises(ForkServerError, match="not a JSON line"):
        LineReader().feed(b"hello\n")


@pytest.mark.e2e
async def test_a_forked_router_listens_answers_and_stops_with_status_0(tmp_path: Path) -> None:
    failures: list[NodeFailure] = []
    async with fork_server(tmp_path) as (server, nursery):
        node = ChildNode(0, tmp_path / "node-0", on_failure=failures.append, forks=server)
        with trio.fail_after(30):
            await node.start(nursery, child_config(node.state_dir))
        assert node.pid is not None
        assert node.pid not in (os.getpid(), server.pid)
        assert parent_of(node.pid) == server.pid  # forked, not a new interpreter
        assert node.address is not None
        assert (await node.get("/stats"))["router"]["received"] == {}
        node.request_stop()
        assert await node.wait_stopped(15)
    assert node.exit_status == 0
    assert failures == []
    assert not (node.state_dir / READY_FILE).exists()
    assert "router stopped" in node.log_path.read_text()


@pytest.mark.e2e
async def test_a_forked_router_that_dies_is_reported_with_its_status(tmp_path: Path) -> None:
    failures: list[NodeFailure] = []
    async with fork_server(tmp_path) as (server, nursery):
        node = ChildNode(0, tmp_path / "node-0", on_failure=failures.append, forks=server)
        with trio.fail_after(30):
            await node.start(nursery, child_config(node.state_dir))
        assert node.pid is not None
        os.kill(node.pid, signal.SIGKILL)
        with trio.fail_after(10):
            while not failures:
                await trio.sleep(0.02)
    assert failures[0].status == -signal.SIGKILL
    assert failures[0].reason == "was killed by SIGKILL"
    assert any("router started" in line for line in failures[0].log_tail)


@pytest.mark.e2e
async def test_a_forked_router_that_cannot_start_is_named_with_its_status(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    bad = child_config(blocker / "state")  # a state directory that cannot be made
    async with fork_server(tmp_path) as (server, nursery):
        node = ChildNode(0, tmp_path / "node-0", forks=server)
        with pytest.raises(NodeError, match=r"node-0 exited with status \d+ before it listened"):
            with trio.fail_after(30):
                await node.start(nursery, bad)
        # The server forks the next one all the same.
        good = ChildNode(1, tmp_path / "node-1", forks=server)
        with trio.fail_after(30):
            await good.start(nursery, child_config(good.state_dir))
        good.request_stop()
        assert await good.wait_stopped(15)
    assert node.failure is not None
    assert node.failure.status not in (0, None)


@pytest.mark.e2e
async def test_when_the_fork_server_dies_its_routers_stop_gracefully(tmp_path: Path) -> None:
    async with fork_server(tmp_path) as (server, nursery):
        nodes = [ChildNode(i, tmp_path / f"node-{i}", forks=server) for i in range(2)]
        for node in nodes:
            with trio.fail_after(30):
                await node.start(nursery, child_config(node.state_dir))
        pids = [node.pid for node in nodes]
        assert server.pid is not None
        os.kill(server.pid, signal.SIGKILL)
        with trio.fail_after(20):
            for node in nodes:
                await node.wait_stopped(20)
        with pytest.raises(ForkServerError, match="not running"):
            await server.spawn(["run"], tmp_path / "x.log")
    assert not any(pid_alive(pid) for pid in pids if pid is not None)
    for node in nodes:
        log = node.log_path.read_text()
        assert "router stopped" in log  # SIGHUP from the kernel: Bye, then exit
        assert "stopping at once" not in log


def test_a_router_forked_after_its_caller_gave_up_is_killed(tmp_path: Path) -> None:
    # The answer to a request nobody waits for any more: that child is nobody's.
    orphan = subprocess.Popen(["sleep", "60"])
    try:
        ForkServer(tmp_path / "log")._take({"started": 41, "pid": orphan.pid})
        assert orphan.wait(10) == -signal.SIGKILL
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()


@pytest.mark.e2e
async def test_a_relative_log_path_is_refused(tmp_path: Path) -> None:
    async with fork_server(tmp_path) as (server, _):
        with pytest.raises(ValueError, match="absolute"):
            await server.spawn(["run"], Path("relative.log"))
