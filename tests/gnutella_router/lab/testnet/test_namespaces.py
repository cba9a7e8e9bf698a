"""Test networks in network namespaces: addresses per node, and nothing left behind.

The end-to-end tests need root and iproute2 (they create namespaces, veths and a
bridge, all named for the run, and remove them); elsewhere they are skipped.
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from gnutella_router.cli.main import main
from gnutella_router.lab.testnet import namespaces
from gnutella_router.lab.testnet.namespaces import (
    NAME_PATTERN,
    POOL,
    NamespaceError,
    NamespaceNetwork,
    choose_subnet,
    list_leftovers,
)
from gnutella_router.lab.testnet.network import run_network
from gnutella_router.lab.testnet.settings import NetworkSettings
from gnutella_router.net.namespace_sockets import Namespace, install_socket_factory, use_namespace
from gnutella_router.ready_file import read_ready_file


def can_make_namespaces() -> bool:
    try:
        namespaces.check_available()
    except NamespaceError:
        return False
    return True


needs_root = pytest.mark.skipif(
    not can_make_namespaces(), reason="network namespaces need Linux, root and iproute2"
)


def running(pid: int) -> bool:
    """Alive and not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def ours(prefix: str) -> set[str]:
    """The namespaces and links of the run named ``prefix`` still here (other runs on
    the machine come and go)."""
    return {name for names in list_leftovers() for name in names if name.startswith(prefix)}


def leftovers(run: NamespaceNetwork) -> list[str]:
    found, links = list_leftovers()
    return [name for name in found + links if name.startswith(run.prefix)]


@contextlib.asynccontextmanager
async def namespaces_open(network: NamespaceNetwork, count: int) -> AsyncIterator[list[Namespace]]:
    """``network`` made, and its first ``count`` namespaces open for sockets made in them
    (:func:`use_namespace`), for the block; then each closed, the network removed, and
    nothing of it left behind (checked)."""
    try:
        await trio.to_thread.run_sync(network.create)
        install_socket_factory()
        spaces = [Namespace.open(network.namespace(i)) for i in range(count)]
        try:
            yield spaces
        finally:
            use_namespace(None)
            for space in spaces:
                space.close()
    finally:
        problems = network.remove()
    assert problems == []
    assert leftovers(network) == []


# --- without root ----------------------------------------------------------------------


def test_names_are_the_runs_own_and_fit_an_interface_name() -> None:
    run = NamespaceNetwork(300, run_id="0a1b")
    names = [run.bridge, run.namespace(299), run.host_interface(299)]
    assert names == ["grt0a1bbr", "grt0a1b-n299", "grt0a1bh299"]
    assert all(NAME_PATTERN.match(name) for name in names)
    assert all(len(name) <= 15 for name in names)  # IFNAMSIZ - 1
    for stranger in ("docker0", "grt0a1b", "grt0a1bbr0", "xgrt0a1bbr", "grtzzzzbr", "eth0"):
        assert not NAME_PATTERN.match(stranger), stranger


def test_the_subnet_avoids_every_network_in_use() -> None:
    used = [ipaddress.IPv4Network("10.64.0.0/16"), ipaddress.IPv4Network("10.66.0.0/15")]
    chosen = choose_subnet(used, start=0)
    assert chosen == ipaddress.IPv4Network("10.65.0.0/16")
    assert choose_subnet(used, start=1) == ipaddress.IPv4Network("10.65.0.0/16")
    assert choose_subnet(used, start=2) == ipaddress.IPv4Network("10.68.0.0/16")
    assert chosen.subnet_of(POOL)
    assert choose_subnet([], start=5) == ipaddress.IPv4Network("10.69.0.0/16")
    with pytest.raises(NamespaceError, match="in use"):
        choose_subnet([POOL], start=0)


def test_addresses_need_the_network_set_up() -> None:
    with pytest.raises(NamespaceError, match="not set up"):
        NamespaceNetwork(2).address(0)


@pytest.mark.skipif(os.geteuid() == 0, reason="checks the refusal a user without root sees")
def test_without_root_netns_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["testnet", "--netns", "--nodes", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "--netns needs" in err[0]


# --- as root ---------------------------------------------------------------------------


@needs_root
def test_namespaces_get_addresses_reach_each_other_and_go(tmp_path: Path) -> None:
    run = NamespaceNetwork(3)
    try:
        run.create()
        assert len(leftovers(run)) == 1 + 3 + 3  # bridge, namespaces, host-side veths
        addresses = {run.address(i) for i in range(3)}
        assert len(addresses) == 3
        assert all(ipaddress.IPv4Address(a) in POOL for a in addresses)
        # Node 2 reaches node 0 across the bridge, and the controller reaches node 1.
        listener = subprocess.Popen(
            [*run.exec_prefix(0), sys.executable, "-c",
             "import socket; s = socket.create_server(('', 7001)); print('up', flush=True); "
             "c, a = s.accept(); print(a[0], flush=True)"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert listener.stdout is not None
        assert listener.stdout.readline().strip() == "up"
        subprocess.run(
            [*run.exec_prefix(2), sys.executable, "-c",
             f"import socket; socket.create_connection(('{run.address(0)}', 7001), 5).close()"],
            check=True, timeout=20,
        )  # fmt: skip
        assert listener.stdout.readline().strip() == run.address(2)  # its own address
        listener.wait(10)
        listener.stdout.close()
        ping = subprocess.run(
            [sys.executable, "-c",
             f"import socket; socket.create_connection(('{run.address(1)}', 9), 2)"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert "refused" in ping.stderr.lower()  # reached: nothing listens there
    finally:
        problems = run.remove()
    assert problems == []
    assert leftovers(run) == []


def test_link_layer_addresses_are_the_runs_own_and_distinct() -> None:
    run = NamespaceNetwork(300, run_id="0a1b")
    macs = {run.mac(i) for i in range(300)} | {run.mac(None)}
    assert len(macs) == 301
    assert run.mac(258) == "02:67:0a:1b:01:02"  # locally administered, unicast
    assert run.mac(None) == "02:67:0a:1b:ff:ff"
    with pytest.raises(NamespaceError, match="outside"):
        NamespaceNetwork(3, pairs=[(0, 3)])


def neighbours(*where: str, device: str | None = None) -> dict[str, tuple[str, str]]:
    """The neighbour table (of one device) as {address: (link-layer address, state)}."""
    on = () if device is None else ("dev", device)
    text = subprocess.run(
        ["ip", *where, "neigh", "show", *on], capture_output=True, text=True, check=True
    ).stdout
    table = {}
    for line in text.splitlines():
        fields = line.split()
        if "lladdr" in fields:
            table[fields[0]] = (fields[fields.index("lladdr") + 1], fields[-1])
    return table


@needs_root
def test_planned_peers_and_the_bridge_are_permanent_neighbours() -> None:
    # Resolved in advance, outside the machine's ARP limit: nothing to overflow.
    run = NamespaceNetwork(3, pairs=[(0, 1)])
    try:
        run.create()
        node0 = neighbours("-n", run.namespace(0))
        assert node0[run.gateway] == (run.mac(None), "PERMANENT")
        assert node0[run.address(1)] == (run.mac(1), "PERMANENT")
        assert run.address(2) not in node0  # not a planned peer: resolved if ever needed
        assert neighbours("-n", run.namespace(1))[run.address(0)] == (run.mac(0), "PERMANENT")
        bridge = neighbours(device=run.bridge)
        assert {bridge[run.address(i)] for i in range(3)} == {
            (run.mac(i), "PERMANENT") for i in range(3)
        }
    finally:
        problems = run.remove()
    assert problems == []
    assert leftovers(run) == []
    assert run.address(0) not in neighbours()  # gone with the bridge


@needs_root
def test_a_half_made_network_is_still_removed() -> None:
    run = NamespaceNetwork(2)
    run.create()
    run.created.append(run.namespace(7))  # one that never came to be: a problem, no raise
    problems = run.remove()
    assert problems == [] or all("n7" in p for p in problems)
    assert leftovers(run) == []


@pytest.mark.e2e
@needs_root
async def test_a_network_in_namespaces_learns_real_addresses(tmp_path: Path) -> None:
    out = io.StringIO()
    settings = NetworkSettings(
        nodes=4, topology="ring", duration=1.0, rate=50.0, results=tmp_path, netns=True
    )
    with trio.fail_after(120):
        outcome = await run_network(settings, out=out)
    assert outcome.ok, out.getvalue()
    assert outcome.report is not None
    assert outcome.report.loss == {"ping": 0.0, "query": 0.0}
    nodes = outcome.summary["nodes"]
    hosts = [n["address"].rsplit(":", 1)[0] for n in nodes]
    assert len(set(hosts)) == 4
    assert all(n["address"].endswith(":6346") for n in nodes)
    # Peers tell each other where they listen: the host caches hold the others' own
    # addresses, not one shared loopback address.
    cached = set()
    for index in range(4):
        for line in (tmp_path / f"node-{index}" / "hosts.txt").read_text().splitlines():
            if not line.startswith("#"):
                cached.add(line.split()[0])
    assert cached >= set(hosts) - {hosts[0]}
    assert "127.0.0.1" not in cached
    state = json.loads((tmp_path / "node-1" / "state.json").read_text())
    assert {c["listen_address"].rsplit(":", 1)[0] for c in state["connections"]} <= set(hosts)
    # The run removed its namespaces, veths and bridge (other runs' may come and go).
    prefix = outcome.summary["namespaces"]["prefix"]
    found, links = list_leftovers()
    assert [name for name in found + links if name.startswith(prefix)] == []


@pytest.mark.e2e
@needs_root
def test_cleanup_removes_what_a_killed_run_left(tmp_path: Path) -> None:
    results = tmp_path / "results"
    controller = subprocess.Popen(
        [sys.executable, "-m", "gnutella_router", "testnet", "--netns", "--nodes", "3",
         "--topology", "ring", "--duration", "0", "--results", str(results)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while len(pids) < 3:
            assert time.monotonic() < deadline, "the nodes did not start"
            assert controller.poll() is None
            pids = [
                int(str(record["pid"]))
                for i in range(3)
                if (record := read_ready_file(results / f"node-{i}")) is not None
            ]
            time.sleep(0.1)
        identified = subprocess.run(
            ["ip", "netns", "identify", str(pids[0])], capture_output=True, text=True, check=True
        )
        prefix = identified.stdout.strip()[: namespaces.PREFIX_LENGTH]
        assert namespaces.owner(prefix) == controller.pid
        assert main(["testnet", "--cleanup"]) == 0  # its controller runs: left alone
        before = ours(prefix)
        assert len([n for n in before if "-n" in n]) >= 3
        controller.kill()
        controller.wait()
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
    assert ours(prefix) >= before  # killed: nothing was removed
    assert main(["testnet", "--cleanup"]) == 0
    assert ours(prefix) == set()
    deadline = time.monotonic() + 10
    while any(running(pid) for pid in pids):
        assert time.monotonic() < deadline, "a node outlived the cleanup"
        time.sleep(0.1)
    assert main(["testnet", "--cleanup"]) == 0  # nothing left: still a success
