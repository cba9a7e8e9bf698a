"""Overlay measurements: the flood model, query records, connectivity, rates, CSV files."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from gnutella_router.lab.testnet.measure import (
    LinkCounters,
    OverlayRecord,
    flood_model,
    link_counters,
    node_rates,
    query_duplicates,
    query_records,
    reach_within,
    summarise,
)
from gnutella_router.lab.testnet.topology import Topology, plan_topology
from tests.gnutella_router.lab.testnet.test_formation import FakeNode


def test_a_flood_on_a_ring_reaches_two_more_nodes_per_ttl_without_duplicates() -> None:
    model = flood_model(plan_topology("ring", 9), ttl=5)
    assert model["ttl"] == [1, 2, 3, 4, 5]
    assert model["reach"] == [1, 3, 5, 7, 9]
    # The two fronts reach nodes 4 and 5 with TTL 1 left: they go no further.
    assert model["duplicates"] == [0, 0, 0, 0, 0]
    # One more: nodes 4 and 5 each send the other a copy it already has.
    assert flood_model(plan_topology("ring", 9), ttl=6)["duplicates"][-1] == 2


def test_a_flood_on_a_star_from_a_leaf() -> None:
    # Node 1 is a leaf of the star: its one neighbour, the hub, reaches everyone else.
    star = plan_topology("star", 5)
    model = flood_model(star, origin=1, ttl=3)
    assert model["reach"] == [1, 2, 5]
    assert model["duplicates"] == [0, 0, 0]


def test_a_flood_on_a_triangle_counts_the_copies_that_cross() -> None:
    triangle = Topology("file", 3, ((0, 1), (1, 2), (2, 0)))
    # TTL 3: node 0 sends 2 copies; 1 and 2 each forward 1 to the other: 2 duplicates.
    assert flood_model(triangle, ttl=3)["duplicates"] == [0, 0, 2]


def page(entries: list[tuple[str, int]], duplicates: int = 0) -> dict[str, Any]:
    return {
        "tables": {
            "query": {
                "statistics": {"duplicates": duplicates},
                "entries": [{"guid": g, "hops": h} for g, h in entries],
            }
        }
    }


def test_query_records_join_the_tables_and_the_hits() -> None:
    a, b, stranger = "aa" * 16, "bb" * 16, "cc" * 16
    pages = [
        page([(a, 0), (b, 0), (stranger, 2)], duplicates=3),
        page([(a, 1), (b, 1)], duplicates=1),
        page([(a, 2), (stranger, 1)]),
        None,  # a node that could not be read counts as not reached
    ]
    hits = {bytes.fromhex(a): [2, 4_500_000]}
    records = query_records(pages, hits)
    assert [r.guid for r in records] == [a, b]  # the stranger did not start at node 0
    first, second = records
    assert (first.reach, first.hops, first.hits, first.first_hit_ms) == (
        3,
        {0: 1, 1: 1, 2: 1},
        2,
        4.5,
    )
    assert (second.reach, second.hits, second.first_hit_ms) == (2, 0, None)
    assert reach_within(first, 1) == 1
    assert reach_within(first, 2) == 2
    assert reach_within(first, 7) == 3
    assert query_duplicates(pages) == 4

    figures = summarise(records, query_duplicates(pages), plan_topology("ring", 4))
    assert figures["queries"] == 2
    assert figures["reach"]["median"] == 2.5
    assert figures["duplicates_per_query"] == 2.0
    assert figures["success_rate"] == 0.5
    assert figures["first_hit_ms"]["median"] == 4.5
    assert summarise([], 0, plan_topology("ring", 4))["queries"] == 0


def test_rates_are_counter_deltas_over_the_span() -> None:
    before = link_counters(10.0, [{"messages_in": 100, "bytes_in": 1000, "messages_out": 5}])
    after = link_counters(
        12.0,
        [
            {"messages_in": 300, "bytes_in": 3000, "messages_out": 5, "bytes_out": 40},
            {"messages_in": 20, "bytes_in": 200},
            "not a connection",
        ],
    )
    assert after == LinkCounters(12.0, 320, 5, 3200, 40)
    rates = node_rates(before, after)
    assert rates["messages_in_per_second"] == 110.0
    assert rates["bytes_out_per_second"] == 20.0
    assert node_rates(None, after)["messages_in_per_second"] == 0.0


def test_the_record_writes_its_csv_files(tmp_path: Path) -> None:
    record = OverlayRecord(plan_topology("ring", 3))
    record.route_pages = [page([("aa" * 16, 0)]), page([("aa" * 16, 1)]), None]
    record.before[0] = LinkCounters(0.0, 0, 0, 0, 0)
    record.after[0] = LinkCounters(2.0, 10, 20, 30, 40)
    record.sample(1.0, [FakeNode(0, [1]), FakeNode(1, []), FakeNode(2, [], up=False)])  # type: ignore[list-item]
    figures = record.conclude({})
    assert figures["reach"]["max"] == 2
    written = record.write(tmp_path)
    assert sorted(p.name for p in written) == ["connectivity.csv", "nodes.csv", "queries.csv"]
    with (tmp_path / "queries.csv").open() as source:
        rows = list(csv.DictReader(source))
    assert rows[0]["reach"] == "2"
    assert rows[0]["reached_within_ttl_1"] == "1"
    assert rows[0]["first_hit_ms"] == ""
    with (tmp_path / "nodes.csv").open() as source:
        assert next(csv.DictReader(source))["messages_in_per_second"] == "5.0"
    with (tmp_path / "connectivity.csv").open() as source:
        (sample,) = csv.DictReader(source)
    assert sample == {
        "at": "1.0",
        "nodes_up": "2",
        "links_up": "1",
        "links_planned": "3",
        "links_outside_plan": "0",
        "components": "1",
        "largest_component": "2",
    }


@pytest.mark.parametrize("kind", ["ring", "star", "random"])
def test_the_model_reaches_everyone_on_a_small_connected_graph(kind: str) -> None:
    topology = plan_topology(kind, 6, degree=1, seed=3)
    assert flood_model(topology)["reach"][-1] == 6
