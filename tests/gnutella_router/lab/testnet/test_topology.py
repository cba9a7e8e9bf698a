"""Planned topologies on networkx: power-law, two-tier, files; and what a router imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from statistics import median

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gnutella_router.lab.testnet.topology import (
    LEAF_LINKS,
    MAX_FILE_NODES,
    TOPOLOGIES,
    Topology,
    load_topology,
    plan_topology,
)


def assert_simple_and_connected(topology: Topology) -> None:
    assert topology.is_connected()
    assert all(a != b for a, b in topology.links), "a self-link"
    pairs = [frozenset(link) for link in topology.links]
    assert len(set(pairs)) == len(pairs), "two links between one pair"
    assert all(0 <= n < topology.nodes for link in topology.links for n in link)


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(TOPOLOGIES),
    nodes=st.integers(1, 120),
    degree=st.integers(0, 4),
    seed=st.integers(0, 1000),
)
def test_every_kind_is_simple_connected_and_seeded(
    kind: str, nodes: int, degree: int, seed: int
) -> None:
    topology = plan_topology(kind, nodes, degree=degree, seed=seed)
    assert topology.nodes == nodes
    assert_simple_and_connected(topology)
    assert plan_topology(kind, nodes, degree=degree, seed=seed) == topology


def test_power_law_has_hubs_and_the_later_node_dials() -> None:
    topology = plan_topology("power-law", 200, degree=1, seed=7)
    degrees = [topology.degree(n) for n in range(200)]
    assert max(degrees) >= 5 * median(degrees)  # hubs, as preferential attachment makes
    assert min(degrees) >= 2  # every node attached to degree + 1 = 2 earlier ones
    assert all(dialer > listener for dialer, listener in topology.links)
    assert plan_topology("power-law", 200, degree=1, seed=8) != topology
    assert plan_topology("power-law", 2, degree=3).links == ((1, 0),)  # fewer than m + 1


def test_two_tier_leaves_link_only_with_ultrapeers() -> None:
    topology = plan_topology("two-tier", 50, degree=1, seed=3)
    ultrapeers = set(range(50)) - topology.leaves
    assert len(ultrapeers) == 10
    assert topology.leaves == frozenset(range(10, 50))
    graph = topology.graph()
    for leaf in topology.leaves:
        assert set(graph.neighbors(leaf)) <= ultrapeers
        assert graph.degree(leaf) == LEAF_LINKS
    core = graph.subgraph(ultrapeers)
    assert nx.is_connected(core)
    assert plan_topology("two-tier", 1).leaves == frozenset()


def test_describe_gives_the_shape() -> None:
    shape = plan_topology("ring", 6).describe()
    assert shape == {
        "degree_min": 2,
        "degree_mean": 2.0,
        "degree_max": 2,
        "diameter": 3,
        "clustering": 0.0,
    }


def test_an_edge_list_is_read_with_comments_names_and_repeats(tmp_path: Path) -> None:
    path = tmp_path / "net.txt"
    path.write_text("# a triangle and a tail\n0 1\n1 2  # the middle\n2 0\n1 0\n\n2 3\n")
    topology = load_topology(path)
    assert topology.nodes == 4
    assert topology.links == ((1, 0), (2, 0), (2, 1), (3, 2))
    assert topology.kind == "file"
    named = tmp_path / "named.txt"
    named.write_text("carol alice\nalice bob\n")
    assert load_topology(named).links == ((1, 0), (2, 0))  # alice 0, bob 1, carol 2


def test_numbers_keep_their_order(tmp_path: Path) -> None:
    path = tmp_path / "net.txt"
    path.write_text("10 2\n2 9\n")
    assert load_topology(path).links == ((1, 0), (2, 0))  # 2 -> 0, 9 -> 1, 10 -> 2


def test_graphml_is_read(tmp_path: Path) -> None:
    path = tmp_path / "net.graphml"
    nx.write_graphml(nx.path_graph(5), path)
    topology = load_topology(path)
    assert topology.nodes == 5
    assert topology.links == ((1, 0), (2, 1), (3, 2), (4, 3))


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "no nodes"),
        ("0 1\n2 3\n", "not connected: it has 2 separate parts"),
        ("0 0\n", "linked to itself"),
        ("0 1 2\n", ":1: expected two node names, got 3 words"),
        ("".join(f"{n} {n + 1}\n" for n in range(MAX_FILE_NODES + 1)), "at most"),
    ],
)
def test_bad_topology_files_are_refused(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "net.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=error):
        load_topology(path)


def test_unreadable_topology_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="No such file"):
        load_topology(tmp_path / "missing.txt")
    broken = tmp_path / "broken.graphml"
    broken.write_text("<graphml><graph><node")
    with pytest.raises(ValueError, match="not a graph"):
        load_topology(broken)


def test_a_router_does_not_import_the_test_networks_graph_library() -> None:
    # Every test network node runs the command line; networkx would cost each ~14 MiB.
    probe = "import sys, gnutella_router.cli.main as m; print('networkx' in sys.modules)"
    answer = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert answer.stdout.strip() == "False"


def test_a_topology_file_sets_the_node_count_and_must_agree_with_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gnutella_router.cli.main import main
    from gnutella_router.lab.testnet.settings import NetworkSettings

    path = tmp_path / "net.txt"
    path.write_text("0 1\n1 2\n2 3\n")
    assert NetworkSettings(nodes=4, topology_file=path).plan().nodes == 4
    with pytest.raises(ValueError, match="has 4 nodes, not 3"):
        NetworkSettings(nodes=3, topology_file=path)
    assert main(["testnet", "--topology-file", str(path), "--nodes", "3"]) == 2
    assert "has 4 nodes, not 3" in capsys.readouterr().err
    assert main(["testnet", "--topology-file", str(tmp_path / "none.txt")]) == 2
    assert "No such file" in capsys.readouterr().err
