"""``testnet --leaves``: leaf servents that publish QRP tables and search through the overlay."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import trio

from gnutella_router.cli.main import main
from gnutella_router.lab.testnet.leaves import (
    MAX_LEAVES,
    LeafPopulation,
    LeafSettings,
    leaves_per_node,
    router_totals,
)
from gnutella_router.lab.testnet.network import run_network
from gnutella_router.lab.testnet.settings import NetworkSettings
from gnutella_router.lab.testnet.topology import plan_topology


def test_leaves_are_spread_over_the_ultrapeers_in_turn() -> None:
    assert leaves_per_node(7, [0, 2, 5]) == {0: 3, 2: 2, 5: 2}
    assert leaves_per_node(0, [1]) == {1: 0}


def test_a_two_tier_plan_gives_leaves_only_to_its_ultrapeers() -> None:
    settings = NetworkSettings(nodes=10, topology="two-tier", leaves=LeafSettings(9))
    topology = settings.plan()
    ultrapeers = settings.ultrapeers(topology)
    assert ultrapeers
    assert not set(ultrapeers) & topology.leaves
    population = LeafPopulation(settings.leaves or LeafSettings(), ultrapeers, user_agent="t")
    assert {leaf.node for leaf in population.leaves} == set(ultrapeers)


@pytest.mark.parametrize(
    ("changes", "complaint"),
    [
        ({"count": MAX_LEAVES + 1}, "--leaves"),
        ({"count": -1}, "--leaves"),
        ({"files": 0}, "--leaf-files"),
        ({"query_interval": 0.0}, "--leaf-query-interval"),
        ({"query_interval": float("nan")}, "--leaf-query-interval"),
    ],
)
def test_leaf_settings_refuse_nonsense(changes: dict[str, float], complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        LeafSettings(**changes)  # type: ignore[arg-type]


def test_bad_leaf_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["testnet", "--leaves", "3", "--leaf-files", "0"]) == 2
    assert "--leaf-files must be from 1 to 1000" in capsys.readouterr().err


def test_the_oracle_counts_only_other_leaves_files() -> None:
    population = LeafPopulation(LeafSettings(2, files=5), [0], user_agent="t")
    first, second = population.leaves
    first.peer = second.peer = object()  # type: ignore[assignment]  # both joined
    population.searched = True
    own = sorted(next(f for f in first.servent.library if f.keywords).keywords)
    first.servent.queries.clear()
    guid = b"\x01" * 16
    from gnutella_router.lab.traffic.leaf import LeafQuery

    first.servent.queries[guid] = LeafQuery(guid, " ".join(own).encode(), tuple(own), 0.0)
    (row,) = population.rows()
    theirs = any(set(own) <= f.keywords for f in second.servent.library)
    assert row["answerable"] is theirs  # its own file does not count


def test_router_totals_sum_forwarded_copies_and_dynamic_queries() -> None:
    pages = [
        {"router": {"forwarded": {"query": 10, "query_hit": 2}, "dynamic_queries": {"copies": 3}}},
        {"router": {"forwarded": {"query": 5}, "dynamic_queries": {}}},
        {"error": "not read"},
    ]
    assert router_totals(pages, leaf_queries=4, load_queries=1) == {
        "query_copies": 15,
        "hit_copies": 2,
        "dynamic_copies": 3,
        "queries_issued": 5,
    }


@pytest.mark.e2e
async def test_leaves_publish_tables_search_and_find_other_leaves_files(tmp_path: Path) -> None:
    results = tmp_path / "results"
    out = io.StringIO()
    settings = NetworkSettings(
        nodes=3,
        topology="ring",
        duration=3.0,
        rate=30.0,
        results=results,
        form_timeout=10,
        leaves=LeafSettings(6, files=15, query_interval=0.3),
    )
    assert plan_topology("ring", 3).leaves == frozenset()
    with trio.fail_after(60):
        outcome = await run_network(settings, out=out)
    assert outcome.ok, outcome.error
    leaves = json.loads((results / "summary.json").read_text())["leaves"]
    assert leaves["joined"] == 6
    assert leaves["per_node"] == {"0": 2, "1": 2, "2": 2}
    assert leaves["lost_ultrapeer"] == 0, leaves["lost_reasons"]
    assert leaves["queries"] >= 6 * 5
    # Some queries name a file another leaf shares; nearly all of those find it.
    assert leaves["answerable"] > 0
    assert leaves["success_rate_of_answerable"] >= 0.9
    assert leaves["found"] >= leaves["answerable"] * 0.9
    # QRP: the leaves are passed queries, and few that match none of their files.
    assert leaves["queries_passed_to_leaves"] > 0
    assert leaves["passed_unmatched"] <= 0.2 * leaves["queries_passed_to_leaves"] + 1
    assert leaves["dynamic_copies_per_leaf_query"] > 0  # their ultrapeers widened them
    with (results / "leaf-queries.csv").open() as rows:
        assert len(list(csv.DictReader(rows))) == leaves["queries"]
    assert "leaf queries:" in out.getvalue()
    assert json.loads((results / "summary.json").read_text())["stopped"] is True
