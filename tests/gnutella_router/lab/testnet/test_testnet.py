"""The local test network: topologies, its GWebCache, and a whole run end to end."""

from __future__ import annotations

import csv
import io
import itertools
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from gnutella_router.cli.main import build_parser, main
from gnutella_router.discovery.gwebcache import fetch_hosts
from gnutella_router.lab.testnet.cache import HostCacheService
from gnutella_router.lab.testnet.network import LocalNetwork, run_network
from gnutella_router.lab.testnet.nodes import LocalNode
from gnutella_router.lab.testnet.settings import NetworkSettings
from gnutella_router.lab.testnet.topology import Topology, plan_topology, sink_nodes
from traffic_models.latency import LoadReport

# --- topologies ------------------------------------------------------------------------


def pairs(topology: Topology) -> list[frozenset[int]]:
    return [frozenset(link) for link in topology.links]


def test_ring_links_each_node_to_the_next() -> None:
    assert plan_topology("ring", 4).links == ((0, 1), (1, 2), (2, 3), (3, 0))
    assert plan_topology("ring", 2).links == ((0, 1),)  # one link, not two
    assert plan_topology("ring", 1).links == ()


def test_star_links_every_node_to_node_0() -> None:
    star = plan_topology("star", 5)
    assert star.links == ((1, 0), (2, 0), (3, 0), (4, 0))
    assert star.out_neighbours(0) == []
    assert star.degree(0) == 4
    assert star.distances(0) == {0: 0, 1: 1, 2: 1, 3: 1, 4: 1}


@pytest.mark.parametrize(
    ("nodes", "degree", "seed"), list(itertools.product((3, 8, 25), (0, 1, 3), (1, 7)))
)
def test_random_is_seeded_connected_and_simple(nodes: int, degree: int, seed: int) -> None:
    topology = plan_topology("random", nodes, degree=degree, seed=seed)
    assert topology == plan_topology("random", nodes, degree=degree, seed=seed)
    assert topology.is_connected()
    assert all(a != b for a, b in topology.links), "self-link"
    assert len(set(pairs(topology))) == len(topology.links), "two links between one pair"
    ring = {frozenset((n, (n + 1) % nodes)) for n in range(nodes)}
    assert ring <= set(pairs(topology)), "the ring keeps the network connected"
    for node in range(nodes):
        # Its ring link, plus `degree` drawn links unless too few pairs were left free
        # (pairs only ever get taken, so the ones still free now were free then).
        free = nodes - 1 - topology.degree(node)
        assert len(topology.out_neighbours(node)) >= 1 + min(degree, free)
    if nodes >= 8 and degree:
        assert len(topology.links) > nodes


def test_random_depends_on_the_seed() -> None:
    draws = {plan_topology("random", 20, degree=2, seed=seed).links for seed in range(5)}
    assert len(draws) > 1


def test_plan_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="unknown topology"):
        plan_topology("mesh", 3)
    with pytest.raises(ValueError, match="at least one node"):
        plan_topology("ring", 0)


def test_sinks_sit_within_query_reach_farthest_first() -> None:
    ring = plan_topology("ring", 14)  # node 7 is 7 hops away, beyond a TTL 7 query
    assert sink_nodes(ring) == [4, 5, 9, 10]
    assert sink_nodes(plan_topology("ring", 1)) == []
    assert sink_nodes(plan_topology("star", 3)) == [1, 2]


# --- the GWebCache ---------------------------------------------------------------------


@pytest.mark.e2e
async def test_host_cache_serves_the_nodes_in_v2_format() -> None:
    topology = plan_topology("ring", 3)
    cache = HostCacheService(topology)
    nodes = [("127.0.0.1", 7001), ("127.0.0.1", 7002), ("127.0.0.1", 7003)]
    async with trio.open_nursery() as nursery:
        await nursery.start(cache.serve)
        cache.publish(nodes)
        stream = await trio.open_tcp_stream("127.0.0.1", cache.port)
        await stream.send_all(
            b"GET /gwc?get=1&net=gnutella HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        )
        answer = b""
        with trio.fail_after(5):
            while chunk := await stream.receive_some(4096):
                answer += chunk
        await stream.aclose()
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK")
        lines = body.decode().splitlines()
        assert lines[0].startswith("I|pong|")
        assert lines[1:] == [f"H|127.0.0.1:{port}|0" for _, port in nodes]

        # The project's own client reads it, and each node's page lists whom it dials.
        everyone = await fetch_hosts(cache.url(), timeout=5)
        assert list(everyone.hosts) == nodes
        assert (await fetch_hosts(cache.url(2), timeout=5)).hosts == (nodes[0],)
        nursery.cancel_scope.cancel()


@pytest.mark.e2e
async def test_host_cache_holds_a_request_briefly_and_answers_it_when_it_opens() -> None:
    cache = HostCacheService(plan_topology("star", 2), hold=0.3)
    async with trio.open_nursery() as nursery:
        await nursery.start(cache.serve)
        cache.publish_node(0, ("127.0.0.1", 9001))
        with trio.fail_after(3):  # the hold runs out: nobody listed, the router asks again
            assert (await fetch_hosts(cache.url(1), timeout=5)).hosts == ()
        cache.hold = 30.0
        answers: list[object] = []

        async def ask() -> None:
            answers.append((await fetch_hosts(cache.url(1), timeout=40)).hosts)

        nursery.start_soon(ask)
        await trio.sleep(0.2)
        assert answers == []  # held ...
        cache.open()
        with trio.fail_after(3):  # ... and answered as soon as the cache opens
            while not answers:
                await trio.sleep(0.01)
        assert answers == [(("127.0.0.1", 9001),)]
        nursery.cancel_scope.cancel()


# --- whole runs ------------------------------------------------------------------------


@pytest.mark.e2e
async def test_ring_network_forms_routes_collects_and_stops(tmp_path: Path) -> None:
    results = tmp_path / "results"
    out = io.StringIO()
    settings = NetworkSettings(
        nodes=3, topology="ring", duration=3.0, rate=50.0, results=results, form_timeout=10
    )
    with trio.fail_after(30):
        outcome = await run_network(settings, out=out)
    assert outcome.ok, outcome.error
    report = outcome.report
    assert report is not None
    assert report.sinks == 3  # one on node 0, one on each other node
    assert report.received.get("query", 0) > 0
    assert report.received.get("ping", 0) > 0
    assert report.loss == {"ping": 0.0, "query": 0.0}, report.to_text()
    assert report.disconnected == []

    summary = json.loads((results / "summary.json").read_text())
    assert summary["topology"]["links"] == [[0, 1], [1, 2], [2, 0]]
    assert summary["stopped"] is True
    assert summary["error"] is None
    assert summary["load"]["loss"] == {"ping": 0.0, "query": 0.0}
    assert [n["node"] for n in summary["nodes"]] == [0, 1, 2]
    for node in summary["nodes"]:
        assert node["connections"] == 2  # the ring itself; the load client has left
        assert node["received"].get("query", 0) > 0
        assert node["route_tables"]["query"] > 0
    for index in range(3):
        state = json.loads((results / f"node-{index}" / "state.json").read_text())
        assert state
        assert "error" not in state
    overlay = summary["overlay"]
    assert overlay["queries"] == report.sent["query"]  # every query, seen in the tables
    assert overlay["reach"]["min"] == 3  # a ring of 3 floods to everyone
    assert overlay["model"]["reach"][-1] == 3
    assert 0 < overlay["success_rate"] <= 1  # the sinks answer some queries with hits
    assert report.replies.get("query_hit", 0) > 0
    for name in ("queries.csv", "nodes.csv", "connectivity.csv"):
        assert (results / name).is_file(), name
    for name in ("overlay.png", "reach.png", "connectivity.png", "latency.png", "throughput.png"):
        assert (results / name).stat().st_size > 1000, name
    check_series(results, summary, report)
    assert all(n["links"]["messages_in_per_second"] > 0 for n in summary["nodes"])
    text = out.getvalue()
    assert "overlay: " in text
    assert "3 nodes stopped (Bye sent)" in text
    assert "copies reached the sinks by the end of the drain (not arrived 0.00%)" in text


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as source:
        return list(csv.DictReader(source))


def check_series(results: Path, summary: dict[str, Any], report: LoadReport) -> None:
    """The per-second series add up to the run's own totals, and every node's queues
    were read."""
    seconds = read_csv(results / "timeseries.csv")
    assert int(seconds[0]["second"]) == 0
    assert [int(r["second"]) for r in seconds] == sorted({int(r["second"]) for r in seconds})
    for column, totals in (
        ("offered", report.sent), ("delivered", report.received), ("owed", report.expected)
    ):  # fmt: skip
        assert sum(int(r[column]) for r in seconds) == sum(totals.values()), column
    timed = [r for r in seconds if int(r["latency_samples"])]
    assert timed
    for row in timed:
        p50, p90, p99, most = (float(row[k]) for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms"))
        assert 0 < p50 <= p90 <= p99 <= most
    queues = read_csv(results / "node-queues.csv")
    by_node: dict[str, set[str]] = {}
    for row in queues:
        by_node.setdefault(row["node"], set()).add(row["queue"])
        assert int(row["length"]) >= 0
    assert by_node == {node: {"router", "catcher", "outgoing"} for node in ("0", "1", "2")}
    counted: dict[tuple[str, str], int] = {}
    for row in read_csv(results / "latency.csv"):
        key = (row["kind"], row["type"])
        counted[key] = counted.get(key, 0) + int(row["count"])
    assert counted == {
        (kind, name): figures["count"]
        for kind, by_type in summary["load"]["latency"].items()
        for name, figures in by_type.items()
    }


@pytest.mark.e2e
async def test_idle_network_stays_up_until_stopped(tmp_path: Path) -> None:
    network = LocalNetwork(
        NetworkSettings(nodes=2, topology="star", duration=0, results=tmp_path), out=io.StringIO()
    )
    async with trio.open_nursery() as nursery:

        async def stop_when_formed() -> None:
            with trio.fail_after(15):
                while network.phase != "up":
                    await trio.sleep(0.05)
            assert network.missing_links() == []
            network.request_stop()

        nursery.start_soon(stop_when_formed)
        with trio.fail_after(25):
            outcome = await network.run()
    assert outcome.ok
    assert outcome.interrupted
    assert outcome.report is None
    assert outcome.summary["load"] is None
    assert outcome.summary["stopped"] is True
    assert (tmp_path / "node-1" / "state.json").exists()


@pytest.mark.e2e
async def test_a_link_outside_the_plan_is_counted_apart_everywhere(tmp_path: Path) -> None:
    network = LocalNetwork(
        NetworkSettings(nodes=3, topology="star", duration=0, results=tmp_path),
        out=io.StringIO(),
    )

    async def stray_when_formed() -> None:
        with trio.fail_after(15):
            while network.phase != "up":
                await trio.sleep(0.05)
        node1, node2 = network.nodes[1], network.nodes[2]
        assert isinstance(node1, LocalNode)
        assert node1.daemon is not None
        assert node2.address is not None
        await node1.daemon.add_peer(*node2.address)  # node 1 -> node 2: not planned
        await network.refresh()
        state = network.snapshot()
        assert state.formed  # every planned link is still up ...
        assert state.outside_plan == ((1, 2),)  # ... and the stray is counted apart
        assert "links 2/2 (+1 outside the plan)" in network.status.line()
        with trio.fail_after(10):  # a connectivity sample counts it too
            while not any(s.links_outside_plan for s in network.overlay.connectivity):
                await trio.sleep(0.1)
        network.request_stop()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stray_when_formed)
        with trio.fail_after(40):
            outcome = await network.run()
    assert outcome.ok, outcome.error
    assert outcome.summary["formation"]["outside_plan"] == []  # at formation: none yet
    rows = (tmp_path / "connectivity.csv").read_text().splitlines()
    column = rows[0].split(",").index("links_outside_plan")
    assert any(row.split(",")[column] == "1" for row in rows[1:])


@pytest.mark.e2e
async def test_a_network_that_does_not_form_names_the_missing_links(tmp_path: Path) -> None:
    # Far too short for any catcher to dial: every link is still missing.
    settings = NetworkSettings(nodes=3, topology="star", results=tmp_path, form_timeout=0.001)
    with trio.fail_after(25):
        outcome = await run_network(settings, out=io.StringIO())
    assert not outcome.ok
    assert outcome.error is not None
    assert "did not form within" in outcome.error
    assert "node-1 -> node-0 (127.0.0.1:" in outcome.error
    assert "node-2 -> node-0" in outcome.error
    assert outcome.summary["stopped"] is True  # still shut down, and collected
    assert json.loads((tmp_path / "summary.json").read_text())["error"] == outcome.error


# --- command line ----------------------------------------------------------------------


def test_defaults_need_no_configuration() -> None:
    args = build_parser().parse_args(["testnet"])
    assert (args.nodes, args.topology, args.traffic, args.rate, args.duration) == (
        None,  # 5, unless a topology file says how many
        "random",
        "paper",
        200.0,
        20.0,
    )
    assert args.seed == []
    assert args.base_port is None


@pytest.mark.e2e
@pytest.mark.parametrize(
    "argv",
    [["--nodes", "0"], ["--rate", "0"], ["--duration", "-1"], ["--seed", "nowhere"]],
)
def test_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["testnet", *argv]) == 2
    assert "gnutella-router testnet:" in capsys.readouterr().err


@pytest.mark.e2e
def test_a_bad_mix_is_refused_before_any_router_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    status = main(["testnet", "--traffic", "nonsense", "--results", str(tmp_path / "r")])
    assert status == 2
    assert "--traffic nonsense" in capsys.readouterr().err
    assert time.monotonic() - started < 2
    assert not (tmp_path / "r").exists()  # nothing was started or written


def test_an_earlier_run_is_kept_unless_overwrite_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    for index in range(5):
        (results / f"node-{index}").mkdir(parents=True)
    (results / "summary.json").write_text("{}")
    (results / "queries.csv").write_text("old")
    (results / "old-run.png").write_text("old")
    argv = ["testnet", "--nodes", "2", "--duration", "0.5", "--rate", "50"]
    argv += ["--out", str(results), "--form-timeout", "15", "--random-seed", "7"]
    started = time.monotonic()
    assert main(argv) == 2  # refused before anything starts
    assert "holds an earlier run; give --overwrite" in capsys.readouterr().err
    assert time.monotonic() - started < 2
    assert (results / "queries.csv").read_text() == "old"
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("not a run")
    assert main([*argv[:-6], "--out", str(tmp_path / "mine"), "--overwrite"]) == 2
    assert "not a run's" in capsys.readouterr().err
    assert (tmp_path / "mine" / "notes.txt").exists()  # never removed

    # The run itself in a process of its own: it sets up logging for the process, which
    # must not keep writing into this test's captured (and then closed) stream.
    done = subprocess.run(
        [sys.executable, "-m", "gnutella_router", *argv, "--overwrite"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "replacing the earlier run" in done.stderr
    assert sorted(p.name for p in results.iterdir()) == [
        "connectivity.csv",
        "connectivity.png",
        "latency.csv",
        "latency.png",
        "manifest.json",
        "node-0",
        "node-1",
        "node-queues.csv",
        "nodes.csv",
        "overlay.png",
        "prometheus-targets.json",
        "queries.csv",
        "reach.png",
        "summary.json",
        "throughput.png",
        "timeseries.csv",
    ]
    assert (results / "queries.csv").read_text() != "old"
    assert len(json.loads((results / "summary.json").read_text())["nodes"]) == 2
    manifest = json.loads((results / "manifest.json").read_text())
    assert manifest["kind"] == "testnet"
    assert manifest["status"] == "ok"
    assert manifest["seed"] == 7
    assert manifest["configuration"]["nodes"] == 2
    assert manifest["configuration"]["mode"] == "in-process"
    assert manifest["command"].startswith("gnutella-router testnet --nodes 2")
    assert "--random-seed 7" in manifest["command"]
    assert manifest["machine"]["cores"] >= 1
    assert manifest["started"] <= manifest["ended"]
    assert manifest["seconds"] > 0


class _NonBlockingOutput:
    """What a child process has written so far, read without ever blocking the test."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        self.fd = process.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.text = b""

    def read(self) -> bytes:
        ready, _, _ = select.select([self.fd], [], [], 0)
        if ready:
            self.text += os.read(self.fd, 65536)
        return self.text


@pytest.mark.e2e
def test_signals_on_a_running_testnet(tmp_path: Path) -> None:
    """SIGUSR1 dumps every node and the network carries on; Ctrl-C stops it with its
    results written and exit status 130."""
    results = tmp_path / "results"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gnutella_router",
            "testnet",
            "--nodes",
            "2",
            "--duration",
            "0",
            "--results",
            str(results),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        output = _NonBlockingOutput(process)
        deadline = time.monotonic() + 30
        while b"Ctrl-C stops it" not in output.read():
            assert time.monotonic() < deadline, "the network did not come up"
            assert process.poll() is None, "the testnet ended early"
            time.sleep(0.2)
        process.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 15
        while not all(list((results / f"node-{i}").glob("dump-*.json")) for i in (0, 1)):
            assert time.monotonic() < deadline, "no dump per node"
            assert process.poll() is None, "SIGUSR1 ended the testnet"
            time.sleep(0.1)
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
    assert process.returncode == 130
    assert (results / "summary.json").is_file()
    dump = json.loads(next((results / "node-0").glob("dump-*.json")).read_text())
    assert "tasks" in dump


@pytest.mark.e2e
async def test_pages_list_the_planned_peers_that_listen_once_every_node_started() -> None:
    # Until every node has started (leaves join their ultrapeers then), no page lists
    # anyone; then each lists the planned peers that listen, and a node that left is
    # dropped from its neighbours' pages at once.
    cache = HostCacheService(plan_topology("ring", 3), hold=0.1)
    async with trio.open_nursery() as nursery:
        await nursery.start(cache.serve)
        cache.publish_node(2, ("127.0.0.1", 9002))
        assert (await fetch_hosts(cache.url(1), timeout=5)).hosts == ()
        cache.publish_node(0, ("127.0.0.1", 9000))
        cache.open()
        assert (await fetch_hosts(cache.url(1), timeout=5)).hosts == (("127.0.0.1", 9002),)
        cache.publish_node(0, None)  # node 0 left (churn): node 2 is told so at once
        assert (await fetch_hosts(cache.url(2), timeout=5)).hosts == ()
        nursery.cancel_scope.cancel()
