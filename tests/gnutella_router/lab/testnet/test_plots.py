"""A test network run's pictures, drawn from a synthetic run folder: which files come
out of which data, what the overlay marks and numbers, and ``gnutella-router plot``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gnutella_router.cli.main import main
from gnutella_router.lab.testnet import plots
from gnutella_router.lab.testnet.plots import (
    LABELS_UP_TO,
    MAX_FIGURE_INCHES,
    draw_run,
    figure_inches,
    labelled_nodes,
    load_roles,
)
from gnutella_router.lab.testnet.timeseries import (
    LATENCY_FIELDS,
    TRAFFIC_FIELDS,
    CsvSeries,
    TrafficCounters,
    traffic_row,
)
from gnutella_router.lab.testnet.topology import plan_topology, sink_nodes
from gnutella_router.observe.profile_plot import pyplot

pytest.importorskip("matplotlib")

PNG = b"\x89PNG\r\n\x1a\n"


def synthetic_summary(nodes: int, kind: str = "power-law", *, load: bool = True) -> dict[str, Any]:
    """What ``summary.json`` holds that the pictures read, for a planned network."""
    topology = plan_topology(kind, nodes, degree=2, seed=3)
    distance = topology.distances(0)
    return {
        "settings": {"nodes": nodes, "seed": 3, "duration": 4.0},
        "topology": {
            "kind": kind,
            "links": [list(link) for link in topology.links],
            "sinks_on": [0, *sink_nodes(topology)] if load else [],
        },
        "nodes": [
            {"node": n, "links": {"messages_in_per_second": 100.0 / (1 + distance[n])}}
            for n in range(nodes)
        ],
        "failures": [],
        "overlay": None,
        "load": {"offered_rate": 100.0} if load else None,
    }


def write_series(folder: Path, seconds: int = 6) -> None:
    """``timeseries.csv`` and ``latency.csv`` as a run writes them, from made-up counts."""
    traffic = CsvSeries(folder / "timeseries.csv", TRAFFIC_FIELDS, 100)
    before = TrafficCounters()
    for second in range(seconds):
        sending = second < seconds - 2
        after = TrafficCounters(
            offered=before.offered + (100 if sending else 0),
            owed=before.owed + (150 if sending else 0),
            delivered_query=before.delivered_query + (140 if sending else 10),
        )
        window = {800 + 100 * second: 50, 5_000: 5} if sending else {}
        traffic.write([traffic_row(second, 1.0, before, after, window)])
        before = after
    traffic.close()
    latency = CsvSeries(folder / "latency.csv", LATENCY_FIELDS, 100)
    latency.write(
        {"kind": kind, "type": name, "latency_us": micros, "count": count}
        for kind, name in (("one-hop", "ping"), ("two-hop", "query"), ("round-trip", "query_hit"))
        for micros, count in ((300, 10), (900, 40), (4_000, 5), (90_000, 1))
    )
    latency.close()


def run_folder(tmp_path: Path, summary: dict[str, Any]) -> Path:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


def test_every_picture_its_data_allows(tmp_path: Path) -> None:
    folder = run_folder(tmp_path, synthetic_summary(5, "random"))
    assert [p.name for p in draw_run(folder, synthetic_summary(5, "random"))] == ["overlay.png"]
    write_series(folder)
    written = draw_run(folder, synthetic_summary(5, "random"))
    assert [p.name for p in written] == ["overlay.png", "latency.png", "throughput.png"]
    for path in written:
        data = path.read_bytes()
        assert data.startswith(PNG)
        assert len(data) > 10_000, path.name
    assert not list(folder.glob("*.tmp.png"))


def test_small_networks_number_every_node_and_large_ones_the_marked_and_the_hubs() -> None:
    few = dict.fromkeys(range(5), 2)
    assert labelled_nodes(few, {0}, {0, 3}) == (set(range(5)), set())
    degrees = dict.fromkeys(range(60), 2)
    degrees.update({10: 30, 11: 20, 12: 9, 13: 8, 14: 3})
    labelled, hubs = labelled_nodes(degrees, {0}, {0, 40, 41})
    assert hubs == {10, 11, 12}  # 5 % of 60, the best linked
    assert labelled == {0, 40, 41, 10, 11, 12}
    ring = dict.fromkeys(range(60), 2)  # nobody better linked than most: no hubs
    assert labelled_nodes(ring, set(), set()) == (set(), set())
    assert LABELS_UP_TO == 30


def test_the_overlay_figure_grows_with_the_network() -> None:
    assert figure_inches(5) < figure_inches(60) < figure_inches(200)
    assert figure_inches(5000) == MAX_FIGURE_INCHES


def test_the_load_client_s_nodes_come_from_the_summary() -> None:
    summary = synthetic_summary(10, "ring")
    assert load_roles(summary) == ({0}, {0, *sink_nodes(plan_topology("ring", 10))})
    assert load_roles(synthetic_summary(10, "ring", load=False)) == (set(), set())


def overlay_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, summary: dict[str, Any]
) -> tuple[list[str], list[str], Any]:
    """The overlay's numbers and legend entries, as drawn."""
    kept: list[Any] = []

    def keep(plt: Any, figure: Any, path: Path) -> Path:
        kept.append(figure)
        return path

    monkeypatch.setattr(plots, "_save", keep)
    plots._overlay(pyplot(), tmp_path / "overlay.png", summary)
    (figure,) = kept
    axes = figure.axes[0]
    numbers = sorted((t.get_text() for t in axes.texts), key=int)
    legend = [t.get_text() for t in axes.get_legend().get_texts()]
    return numbers, legend, figure


def test_a_large_overlay_marks_the_injector_and_sinks_and_numbers_few_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = synthetic_summary(60)
    summary["failures"] = [{"node": 33, "kind": "node", "reason": "died"}]
    numbers, legend, figure = overlay_figure(tmp_path, monkeypatch, summary)
    sinks = {str(n) for n in summary["topology"]["sinks_on"]}
    assert sinks <= set(numbers)
    assert "33" in numbers  # a failed node is always numbered
    assert len(numbers) <= len(sinks) + 1 + 3  # the hubs: 5 % of 60
    assert legend == [
        "injector (node 0, with a sink)",
        "sink of the load client",
        "router (size: its links)",
        "failed",
    ]
    small = overlay_figure(tmp_path, monkeypatch, synthetic_summary(5, "random"))
    assert small[0] == ["0", "1", "2", "3", "4"]
    assert figure.get_size_inches()[1] > small[2].get_size_inches()[1]
    unloaded = overlay_figure(tmp_path, monkeypatch, synthetic_summary(5, "random", load=False))
    assert unloaded[1] == ["router (size: its links)"]
    pyplot().close("all")  # kept open above, unsaved


def test_the_plot_command_draws_a_run_folder_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = run_folder(tmp_path, synthetic_summary(5, "random"))
    write_series(folder)
    assert main(["plot", str(folder)]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(folder / n) for n in ("overlay.png", "latency.png", "throughput.png")]
    assert (folder / "throughput.png").read_bytes().startswith(PNG)
    monkeypatch.setenv("GNUTELLA_ROUTER_RUNS", str(tmp_path))
    assert main(["plot", "run"]) == 0  # by its name under the runs folder
    capsys.readouterr()
    assert main(["plot", str(tmp_path / "nothing")]) == 1
    assert "no run folder" in capsys.readouterr().err
    load_run = tmp_path / "load"
    load_run.mkdir()
    (load_run / "summary.json").write_text(json.dumps({"offered_rate": 10}))
    assert main(["plot", str(load_run)]) == 1
    assert "not a testnet run" in capsys.readouterr().err
