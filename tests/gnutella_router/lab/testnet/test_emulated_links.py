"""A test network's emulated links: the values each link gets, the routers' delay tables,
tc's shaping in namespaces, and the chain's latency through a whole run."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest
import trio

from gnutella_router.cli.main import main
from gnutella_router.lab.testnet.emulated_links import LinkPlan, parse_delay
from gnutella_router.lab.testnet.namespaces import NamespaceNetwork, abandoned_leftovers
from gnutella_router.lab.testnet.network import run_network
from gnutella_router.lab.testnet.settings import NetworkSettings
from gnutella_router.lab.testnet.topology import LinkShape, Topology, load_topology
from gnutella_router.net.namespace_sockets import use_namespace
from tests.gnutella_router.lab.testnet.test_namespaces import (
    namespaces_open,
    needs_root,
    running,
)

GRAPHML = """<?xml version="1.0" encoding="UTF-8"?>
<graphml xmlns="http://graphml.graphdrawing.org/xmlns">
  <key id="d" for="edge" attr.name="delay" attr.type="double"/>
  <key id="b" for="edge" attr.name="bandwidth" attr.type="double"/>
  <key id="z" for="edge" attr.name="LinkSpeedRaw" attr.type="double"/>
  <graph edgedefault="undirected">
    <node id="a"/><node id="b"/><node id="c"/>
    <edge source="a" target="b"><data key="d">35</data><data key="b">512</data></edge>
    <edge source="b" target="c"><data key="z">2000000</data></edge>
  </graph>
</graphml>
"""


def test_delays_are_milliseconds_with_an_optional_jitter() -> None:
    assert parse_delay("20") == (20.0, 0.0)
    assert parse_delay("20,5") == (20.0, 5.0)
    for bad in ("fast", "20,5,1", "-1", "nan", "70000"):
        with pytest.raises(ValueError, match="--link-delay"):
            parse_delay(bad)


def test_a_graphml_file_gives_links_their_own_values(tmp_path: Path) -> None:
    path = tmp_path / "net.graphml"
    path.write_text(GRAPHML)
    topology = load_topology(path)
    assert topology.shape(0, 1) == LinkShape(delay_ms=35.0, bandwidth_kbps=512.0)
    assert topology.shape(2, 1) == LinkShape(bandwidth_kbps=2000.0)  # bit/s, either way round
    # The file's values win; the run's fill in the rest.
    plan = LinkPlan(topology, delay_ms=10.0, jitter_ms=1.0)
    assert {(n, link.delay_ms, link.bandwidth_kbps) for n, link in plan.neighbours(1)} == {
        (0, 35.0, 512.0),
        (2, 10.0, 2000.0),
    }
    path.write_text(GRAPHML.replace('<data key="d">35</data>', '<data key="d">-3</data>'))
    with pytest.raises(ValueError, match=r"link b - a: delay = -3.0 is not a number from 0"):
        load_topology(path)


def test_the_routers_carry_delays_by_their_neighbours_addresses() -> None:
    chain = Topology("file", 3, ((1, 0), (2, 1)))
    plan = LinkPlan(chain, delay_ms=20.0, jitter_ms=2.0)
    addresses = {0: ("10.9.0.2", 6346), 1: ("10.9.0.3", 6346), 2: ("10.9.0.4", 6346)}
    assert plan.node_overrides(1, addresses.get) == {
        "emulation.enabled": True,
        "emulation.links": ["10.9.0.2:6346=20,2", "10.9.0.4:6346=20,2"],
    }
    assert LinkPlan(chain).node_overrides(1, addresses.get) == {}  # no delay: no section
    plan.kernel_delay = True  # netem carries them: the routers are left alone
    assert plan.node_overrides(1, addresses.get) == {}


def test_tc_sorts_by_neighbour_and_shapes_each_link() -> None:
    star = Topology("star", 3, ((1, 0), (2, 0)))
    plan = LinkPlan(star, delay_ms=20.0, bandwidth_kbps=800.0)
    lines = plan.tc_commands(0, lambda n: f"10.9.0.{n + 2}")
    assert lines[0] == "qdisc add dev eth0 root handle 1: htb"
    assert sum("tbf rate 800kbit" in line for line in lines) == 2
    assert "match ip dst 10.9.0.3/32 flowid 1:1" in " ".join(lines)
    assert not any("netem" in line for line in lines)  # no netem here: the routers delay
    plan.kernel_delay = True
    lines = plan.tc_commands(0, lambda n: f"10.9.0.{n + 2}")
    assert sum("netem delay 20ms" in line for line in lines) == 2
    assert any("parent 11:1" in line and "tbf" in line for line in lines)  # tbf under netem
    assert LinkPlan(star, delay_ms=20.0).tc_commands(0, str) == []  # delay by routers only


def test_bandwidth_needs_namespaces(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="--netns"):
        NetworkSettings(nodes=3, link_bandwidth_kbps=512.0)
    assert main(["testnet", "--nodes", "3", "--link-bandwidth", "512"]) == 2
    assert "--netns" in capsys.readouterr().err
    assert main(["testnet", "--nodes", "3", "--link-delay", "soon"]) == 2


@pytest.mark.e2e
async def test_a_chain_run_reports_latency_over_its_links(tmp_path: Path) -> None:
    """The whole path: --link-delay through the run's plan into the routers' settings.
    The sink on node 4 gets copies 4 links away, each at least 80 ms late, the sink on
    node 0 its copies with no link's delay; every router's /stats says its writes are
    held."""
    chain = tmp_path / "chain.txt"
    chain.write_text("0 1\n1 2\n2 3\n3 4\n")
    settings = NetworkSettings(
        nodes=5, topology_file=chain, mode="in-process", duration=2.0, rate=50.0,
        results=tmp_path / "results", link_delay_ms=20.0,
    )  # fmt: skip
    out = io.StringIO()
    with trio.fail_after(120):
        outcome = await run_network(settings, out=out)
    assert outcome.ok, out.getvalue()
    assert outcome.summary["emulated_links"]["delay_by"] == "routers"
    assert outcome.report is not None
    latency = outcome.report.latency  # rows by the hops a copy arrived with
    # Node 4's sink: five hops, four of them emulated links; node 0's: none of them.
    assert latency["five-hop"]["query"].min >= 80_000  # microseconds
    assert latency["one-hop"]["query"].min < 20_000
    for index in range(5):
        state = json.loads((tmp_path / "results" / f"node-{index}" / "state.json").read_text())
        emulation = state["stats"]["link_emulation"]
        assert emulation["links"] == (1 if index in (0, 4) else 2)
        assert emulation["delayed_chunks"] > 0


@needs_root
async def test_tbf_holds_a_link_to_its_rate() -> None:
    """Two namespaces with an 800 kbit/s link between them: 200 kB take at least
    (200 kB - the burst) / 100 kB/s, whatever the machine; nothing stays behind."""
    pair = Topology("ring", 2, ((1, 0),))
    plan = LinkPlan(pair, bandwidth_kbps=800.0)
    network = NamespaceNetwork(2, pairs=[(0, 1)], after_create=plan.shape_namespaces)
    size = 200_000
    async with namespaces_open(network, 2) as spaces:
        shown = (
            await trio.run_process(
                ["tc", "-n", network.namespace(1), "qdisc", "show", "dev", "eth0"],
                capture_stdout=True,
            )
        ).stdout.decode()
        assert "tbf" in shown
        assert "800Kbit" in shown
        use_namespace(spaces[0])
        listeners = await trio.open_tcp_listeners(7100, host=network.address(0))
        use_namespace(spaces[1])
        sender = await trio.open_tcp_stream(network.address(0), 7100)
        use_namespace(None)
        receiver = await listeners[0].accept()
        begun = time.monotonic()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sender.send_all, b"x" * size)
            got = 0
            with trio.fail_after(60):
                while got < size:
                    got += len(await receiver.receive_some(65536))
        elapsed = time.monotonic() - begun
        # The burst is 1514 bytes at this rate (a frame: 10 ms of it is less).
        assert elapsed >= (size - 1514) / 100_000
        for stream in (sender, receiver, *listeners):
            await stream.aclose()


@pytest.mark.e2e
@needs_root
async def test_shared_processes_in_namespaces_with_shaped_links(tmp_path: Path) -> None:
    """Routers two to a process, each with its own address, links delayed by the routers
    and shaped by tbf; the run ends with nothing left: no host process, namespace, veth."""
    settings = NetworkSettings(
        nodes=4, topology="ring", duration=1.5, rate=50.0, results=tmp_path, netns=True,
        routers_per_process=2, link_delay_ms=10.0, link_bandwidth_kbps=2000.0,
    )  # fmt: skip
    out = io.StringIO()
    with trio.fail_after(180):
        outcome = await run_network(settings, out=out)
    assert outcome.ok, out.getvalue()
    assert outcome.report is not None
    assert outcome.report.loss == {"ping": 0.0, "query": 0.0}
    nodes = outcome.summary["nodes"]
    assert len({n["address"] for n in nodes}) == 4
    assert len({n["pid"] for n in nodes}) == 2
    assert outcome.summary["emulated_links"] == {
        "links": 4,
        "delay_ms": {"min": 10.0, "max": 10.0},
        "delay_by": "routers",
        "bandwidth_kbps": {"min": 2000.0, "max": 2000.0},
        "bandwidth_by": "tbf",
    }
    assert abandoned_leftovers() == []
    assert not any(running(n["pid"]) for n in nodes)
