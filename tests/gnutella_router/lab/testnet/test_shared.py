"""Routers sharing OS processes (``--routers-per-process``): the host's wire, runs on
loopback and in namespaces, a host that dies, and nothing left behind."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio
import trio.testing

from gnutella_router.cli.main import main
from gnutella_router.lab.testnet.churn import ChurnSettings
from gnutella_router.lab.testnet.host_wire import MAX_LINE, MessageReader, WireError, encode
from gnutella_router.lab.testnet.namespaces import NamespaceNetwork, abandoned_leftovers
from gnutella_router.lab.testnet.network import run_network
from gnutella_router.lab.testnet.settings import NetworkSettings
from gnutella_router.net.namespace_sockets import use_namespace
from gnutella_router.ready_file import read_ready_file
from tests.gnutella_router.lab.testnet.test_namespaces import (
    leftovers,
    namespaces_open,
    needs_root,
    running,
)

# --- the wire ----------------------------------------------------------------------------


async def test_messages_carry_a_header_and_a_body_as_it_is() -> None:
    near, far = trio.testing.memory_stream_pair()
    page = b'{"router": {"received": {"query": 3}}}\n'
    await near.send_all(encode({"id": 1, "status": 200}, page) + encode({"event": "exited"}))
    await near.aclose()
    reader = MessageReader(far)
    assert await reader.next() == ({"id": 1, "status": 200, "length": len(page)}, page)
    assert await reader.next() == ({"event": "exited"}, b"")
    assert await reader.next() is None


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"not json\n", "not JSON"),
        (b"[1, 2]\n", "not a JSON object"),
        (b'{"length": -1}\n', "body length"),
        (b'{"length": 10}\nshort', "inside a body"),
        (b'{"id": 1', "inside a header line"),
        (b"x" * (MAX_LINE + 2), "longer than"),
    ],
)
async def test_a_broken_message_is_an_error_not_a_hang(data: bytes, problem: str) -> None:
    near, far = trio.testing.memory_stream_pair()
    await near.send_all(data)
    await near.aclose()
    with pytest.raises(WireError, match=problem):
        await MessageReader(far).next()


def test_the_mode_is_refused_where_it_cannot_work(capsys: pytest.CaptureFixture[str]) -> None:
    churn = ChurnSettings.parse("5:5")
    with pytest.raises(ValueError, match="--churn"):
        NetworkSettings(nodes=4, routers_per_process=2, churn=churn)
    with pytest.raises(ValueError, match="1 or more"):
        NetworkSettings(nodes=4, routers_per_process=0)
    with pytest.raises(SystemExit):
        main(["testnet", "--processes", "--routers-per-process", "2"])
    assert "not allowed with" in capsys.readouterr().err


# --- runs --------------------------------------------------------------------------------


@pytest.mark.e2e
async def test_routers_three_to_a_process_on_loopback(tmp_path: Path) -> None:
    settings = NetworkSettings(
        nodes=6, topology="ring", duration=1.5, rate=50.0, results=tmp_path,
        routers_per_process=3,
    )  # fmt: skip
    out = io.StringIO()
    with trio.fail_after(120):
        outcome = await run_network(settings, out=out)
    assert outcome.ok, out.getvalue()
    assert outcome.report is not None
    assert outcome.report.loss == {"ping": 0.0, "query": 0.0}
    nodes = outcome.summary["nodes"]
    assert [n["kind"] for n in nodes] == ["shared"] * 6
    pids = {n["pid"] for n in nodes}
    assert len(pids) == 2
    assert all(n["exit_status"] == 0 for n in nodes)  # each stopped its own way
    assert outcome.summary["stopped"]
    assert (tmp_path / "node-4" / "router.toml").is_file()  # rerunnable by hand
    assert (tmp_path / "host-1.log").is_file()
    assert not any(running(pid) for pid in pids)


@pytest.mark.e2e
async def test_a_host_that_dies_is_reported_and_stops_the_run(tmp_path: Path) -> None:
    settings = NetworkSettings(
        nodes=4, topology="ring", duration=0, results=tmp_path, routers_per_process=2
    )
    out = io.StringIO()
    outcome = None

    async def run() -> None:
        nonlocal outcome
        outcome = await run_network(settings, out=out)

    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            while "the network is up" not in out.getvalue():
                await trio.sleep(0.1)
            record = read_ready_file(tmp_path / "node-3")
            assert record is not None
            host = int(str(record["pid"]))
            other = read_ready_file(tmp_path / "node-0")
            assert other is not None
            os.kill(host, signal.SIGKILL)
    assert outcome is not None
    assert outcome.error is not None
    assert "its host process (host-1) was killed by SIGKILL" in outcome.error
    assert "host-1" in out.getvalue()
    assert not running(host)
    assert not running(int(str(other["pid"])))  # the other host was stopped too


@pytest.mark.e2e
@needs_root
def test_a_killed_controllers_hosts_go_and_cleanup_removes_the_rest(tmp_path: Path) -> None:
    results = tmp_path / "results"
    controller = subprocess.Popen(
        [sys.executable, "-m", "gnutella_router", "testnet", "--netns", "--nodes", "4",
         "--routers-per-process", "2", "--topology", "ring", "--duration", "0",
         "--results", str(results)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    hosts: set[int] = set()
    try:
        deadline = time.monotonic() + 90
        while len(hosts) < 2:
            assert time.monotonic() < deadline, "the routers did not start"
            assert controller.poll() is None
            hosts = {
                int(str(record["pid"]))
                for i in range(4)
                if (record := read_ready_file(results / f"node-{i}")) is not None
            }
            time.sleep(0.1)
        controller.kill()
        controller.wait()
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
    # The kernel tells each host its controller died (SIGHUP): its routers say Bye.
    deadline = time.monotonic() + 30
    while any(running(pid) for pid in hosts):
        assert time.monotonic() < deadline, "a host process outlived its controller"
        time.sleep(0.1)
    assert main(["testnet", "--cleanup"]) == 0
    assert abandoned_leftovers() == []


@needs_root
def test_removal_stops_a_process_that_holds_a_namespace_open() -> None:
    """A process whose sockets live in a namespace need not be in it: removal finds it
    by the namespace it holds open, stops it, and leaves nothing."""
    network = NamespaceNetwork(1)
    network.create()
    holder = subprocess.Popen(
        [sys.executable, "-c",
         f"import os, time; fd = os.open('/run/netns/{network.namespace(0)}', os.O_RDONLY); "
         "print('holding', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "holding"
        problems = network.remove()
        assert problems == []
        assert holder.wait(10) == -signal.SIGTERM
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    assert leftovers(network) == []


@needs_root
async def test_a_socket_made_in_a_namespace_has_its_address() -> None:
    network = NamespaceNetwork(2, pairs=[(0, 1)])
    async with namespaces_open(network, 2) as spaces:
        use_namespace(spaces[0])
        listeners = await trio.open_tcp_listeners(7200, host=network.address(0))
        use_namespace(spaces[1])
        dialled = await trio.open_tcp_stream(network.address(0), 7200)
        use_namespace(None)  # the process's own namespace again
        accepted = await listeners[0].accept()
        assert accepted.socket.getpeername()[0] == network.address(1)
        # Node 0's address is not in the process's own namespace.
        with pytest.raises(OSError, match=r"cannot listen|assign requested address"):
            await trio.open_tcp_listeners(7201, host=network.address(0))
        for stream in (dialled, accepted, *listeners):
            await stream.aclose()
