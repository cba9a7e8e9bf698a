"""Test network nodes as processes: started, read, reported when they die, never left over."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import trio

from gnutella_router.config import Config, load_config
from gnutella_router.lab.testnet.children import (
    ChildNode,
    describe_exit,
    log_tail,
    stop_children,
)
from gnutella_router.lab.testnet.network import LocalNetwork, run_network
from gnutella_router.lab.testnet.nodes import NodeError, NodeFailure
from gnutella_router.lab.testnet.settings import NetworkSettings
from gnutella_router.ready_file import READY_FILE, read_ready_file, write_ready_file

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and signals")


def child_config(state: Path) -> Config:
    return load_config(
        None,
        {
            "node.listen": "127.0.0.1:0",
            "admin.listen": "127.0.0.1:0",
            "node.state_dir": str(state),
            "catcher.min_connections": 0,
            "log.level": "info",
        },
    )


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too: it only waits to be reaped.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True


# --- small parts -----------------------------------------------------------------------


def test_the_ready_file_is_whole_and_names_its_process(tmp_path: Path) -> None:
    write_ready_file(
        tmp_path, guid="ab" * 16, listening=["127.0.0.1:7"], advertised="127.0.0.1:7", admin=None
    )
    record = read_ready_file(tmp_path)
    assert record is not None
    assert record["pid"] == os.getpid()
    assert record["listening"] == ["127.0.0.1:7"]
    assert read_ready_file(tmp_path, pid=os.getpid()) == record
    assert read_ready_file(tmp_path, pid=os.getpid() + 1) is None  # another router's
    (tmp_path / READY_FILE).write_text("{half")
    assert read_ready_file(tmp_path) is None
    assert [p.name for p in tmp_path.iterdir()] == [READY_FILE]  # no temporary left


def test_exit_statuses_are_said_plainly() -> None:
    assert describe_exit(0) == "exited with status 0"
    assert describe_exit(3) == "exited with status 3"
    assert describe_exit(-9) == "was killed by SIGKILL"
    assert describe_exit(None) == "is still running"


def test_the_log_tail_is_the_last_lines_with_text(tmp_path: Path) -> None:
    log = tmp_path / "router.log"
    log.write_text("".join(f"line {n}\n\n" for n in range(20)))
    assert log_tail(log, 3) == ("line 17", "line 18", "line 19")
    assert log_tail(tmp_path / "missing.log") == ()
    failure = NodeFailure(4, "was killed by SIGKILL", -9, ("a", "b"))
    assert failure.describe() == "node-4 was killed by SIGKILL; its log ends:\n    a\n    b"


# --- one child -------------------------------------------------------------------------


@pytest.mark.e2e
async def test_a_child_listens_answers_its_admin_pages_and_stops_with_status_0(
    tmp_path: Path,
) -> None:
    failures: list[NodeFailure] = []
    node = ChildNode(0, tmp_path / "node-0", on_failure=failures.append)
    async with trio.open_nursery() as nursery:
        with trio.fail_after(30):
            await node.start(nursery, child_config(node.state_dir))
        assert node.running()
        assert node.address is not None
        assert node.address[1] != 0
        assert node.admin_address is not None
        written = tomllib.loads((node.state_dir / "router.toml").read_text())
        assert written["node"]["state_dir"] == str(node.state_dir)  # rerunnable by hand
        view = await node.refresh()
        assert view.connections == ()
        assert (await node.get("/stats"))["router"]["received"] == {}
        node.request_stop()
        assert await node.wait_stopped(15)
    assert node.exit_status == 0
    assert failures == []  # asked to stop: not a failure
    assert not (node.state_dir / READY_FILE).exists()
    assert "router stopped" in node.log_path.read_text()
    with pytest.raises(NodeError, match="not running"):
        await node.get("/stats")


@pytest.mark.e2e
async def test_a_child_that_dies_is_reported_with_its_status(tmp_path: Path) -> None:
    failures: list[NodeFailure] = []
    node = ChildNode(0, tmp_path / "node-0", on_failure=failures.append)
    async with trio.open_nursery() as nursery:
        with trio.fail_after(30):
            await node.start(nursery, child_config(node.state_dir))
        assert node.pid is not None
        os.kill(node.pid, signal.SIGKILL)
        with trio.fail_after(10):
            while not failures:
                await trio.sleep(0.02)
    assert failures[0].node == 0
    assert failures[0].status == -signal.SIGKILL
    assert failures[0].reason == "was killed by SIGKILL"
    assert any("router started" in line for line in failures[0].log_tail)
    assert not node.running()


@pytest.mark.e2e
async def test_a_child_that_exits_before_it_listens_is_named(tmp_path: Path) -> None:
    # A state directory the router cannot create: it exits with an error at once.
    blocker = tmp_path / "file"
    blocker.write_text("")
    node = ChildNode(0, tmp_path / "node-0")
    bad = load_config(
        None,
        {
            "node.listen": "127.0.0.1:0",
            "admin.listen": "127.0.0.1:0",
            "node.state_dir": str(blocker / "state"),
        },
    )
    async with trio.open_nursery() as nursery:
        with pytest.raises(NodeError, match=r"node-0 exited with status \d+ before it listened"):
            with trio.fail_after(30):
                await node.start(nursery, bad)
    assert node.failure is not None
    assert node.failure.status not in (0, None)
    assert not node.running()


@pytest.mark.e2e
async def test_a_child_that_never_listens_is_killed_after_the_timeout(tmp_path: Path) -> None:
    # Put before the router's command, `sh -c 'sleep 60'` stands for a node that hangs.
    node = ChildNode(0, tmp_path / "node-0", prefix=("sh", "-c", "sleep 60", "--"), start_timeout=1)
    async with trio.open_nursery() as nursery:
        with pytest.raises(NodeError, match="did not listen within 1 s"):
            with trio.fail_after(15):
                await node.start(nursery, child_config(node.state_dir))
    assert node.pid is not None
    assert not pid_alive(node.pid)
    assert node.exit_status == -signal.SIGKILL


@pytest.mark.e2e
async def test_stop_children_kills_what_ignores_sigterm(tmp_path: Path) -> None:
    # A node that says it listens, then takes no notice of SIGTERM: the grace runs
    # out, then SIGKILL.
    state = tmp_path / "node-0"
    ready = json.dumps({"pid": "PID", "listening": ["127.0.0.1:9"], "admin": None})
    stubborn = (
        "trap '' TERM; echo '"
        + ready
        + '\' | sed "s/\\"PID\\"/$$/" > '
        + str(state / READY_FILE)
        + "; while :; do sleep 0.1; done"
    )
    node = ChildNode(0, state, prefix=("sh", "-c", stubborn, "--"), start_timeout=10)
    async with trio.open_nursery() as nursery:
        with trio.fail_after(15):
            await node.start(nursery, child_config(state))
        assert node.running()
        started = trio.current_time()
        await stop_children([node], grace=0.5)
        assert trio.current_time() - started < 5
    assert node.pid is not None
    assert not pid_alive(node.pid)
    assert node.exit_status == -signal.SIGKILL


# --- whole runs ------------------------------------------------------------------------


@pytest.mark.e2e
async def test_a_process_network_forms_carries_traffic_and_leaves_nothing(tmp_path: Path) -> None:
    results = tmp_path / "results"
    out = io.StringIO()
    settings = NetworkSettings(
        nodes=4, topology="ring", duration=2.0, rate=50.0, results=results, mode="processes"
    )
    with trio.fail_after(90):
        outcome = await run_network(settings, out=out)
    assert outcome.ok, outcome.error + out.getvalue() if outcome.error else ""
    assert outcome.report is not None
    assert outcome.report.loss == {"ping": 0.0, "query": 0.0}, outcome.report.to_text()
    summary = json.loads((results / "summary.json").read_text())
    assert summary["settings"]["mode"] == "processes"
    assert summary["stopped"] is True
    assert summary["failures"] == []
    pids = [n["pid"] for n in summary["nodes"]]
    assert len(set(pids)) == 4
    assert os.getpid() not in pids
    assert [n["exit_status"] for n in summary["nodes"]] == [0, 0, 0, 0]
    for node in summary["nodes"]:
        assert node["connections"] == 2
        assert node["received"].get("query", 0) > 0
    for index in range(4):
        folder = results / f"node-{index}"
        assert {"router.toml", "router.log", "state.json"} <= {p.name for p in folder.iterdir()}
        assert "error" not in json.loads((folder / "state.json").read_text())
    assert not any(pid_alive(pid) for pid in pids)
    assert "4 nodes (processes)" in out.getvalue()


@pytest.mark.e2e
@pytest.mark.parametrize("policy", ["stop", "continue"])
async def test_a_node_that_dies_mid_run_stops_or_not_as_asked(tmp_path: Path, policy: str) -> None:
    out = io.StringIO()
    settings = NetworkSettings(
        nodes=4,
        topology="ring",
        duration=0,
        results=tmp_path,
        mode="processes",
        on_node_failure=policy,
    )
    network = LocalNetwork(settings, out=out)

    async def kill_one_when_up() -> None:
        with trio.fail_after(60):
            while network.phase != "up":
                await trio.sleep(0.05)
        victim = network.nodes[2]
        assert isinstance(victim, ChildNode)
        assert victim.pid is not None
        os.kill(victim.pid, signal.SIGKILL)
        if policy == "continue":
            with trio.fail_after(10):
                while not network.failures:
                    await trio.sleep(0.05)
            await trio.sleep(0.5)
            assert network.phase == "up"  # still running without node 2
            network.request_stop()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(kill_one_when_up)
        with trio.fail_after(60):
            outcome = await network.run()
    summary = outcome.summary
    assert [f["node"] for f in summary["failures"]] == [2]
    assert "node-2 was killed by SIGKILL" in out.getvalue()
    if policy == "stop":
        assert outcome.error == "node-2 was killed by SIGKILL (--on-node-failure stop)"
    else:
        assert outcome.error is None
    statuses = [n["exit_status"] for n in summary["nodes"]]
    assert statuses == [0, 0, -signal.SIGKILL, 0]


@pytest.mark.e2e
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_killing_the_controller_stops_every_node_gracefully(tmp_path: Path) -> None:
    results = tmp_path / "results"
    controller = subprocess.Popen(
        [
            *(sys.executable, "-m", "gnutella_router", "testnet", "--processes"),
            *("--nodes", "3", "--duration", "0", "--topology", "ring", "--results", str(results)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while len(pids) < 3:
            assert time.monotonic() < deadline, "the nodes did not start"
            assert controller.poll() is None
            pids = [
                int(record["pid"])  # type: ignore[call-overload]
                for i in range(3)
                if (record := read_ready_file(results / f"node-{i}")) is not None
            ]
            time.sleep(0.1)
        # The fork server the routers were forked from (where there is one) goes too.
        children = Path(f"/proc/{controller.pid}/task/{controller.pid}/children").read_text()
        pids += [int(child) for child in children.split()]
        controller.kill()
        controller.wait()
        deadline = time.monotonic() + 20
        while any(pid_alive(pid) for pid in pids):
            assert time.monotonic() < deadline, "a node outlived its controller"
            time.sleep(0.1)
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
        for pid in pids:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
    for index in range(3):
        log = (results / f"node-{index}" / "router.log").read_text()
        assert "stopping at once" not in log  # a hangup is one graceful stop


@pytest.mark.e2e
async def test_a_child_outlives_the_worker_threads_of_its_controller(tmp_path: Path) -> None:
    # The parent-death signal fires when the *thread* that started the child ends; trio's
    # idle worker threads end after 10 s, so a child started from one would get SIGHUP.
    failures: list[NodeFailure] = []
    node = ChildNode(0, tmp_path / "node-0", on_failure=failures.append)
    async with trio.open_nursery() as nursery:
        with trio.fail_after(30):
            await node.start(nursery, child_config(node.state_dir))
        await trio.to_thread.run_sync(time.sleep, 0.01)  # a worker thread, idle from now
        await trio.sleep(12)
        assert node.running(), failures
        node.request_stop()
        assert await node.wait_stopped(15)
    assert failures == []
