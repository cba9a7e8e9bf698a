"""Churn: the seeded schedule, and nodes that leave and come back in a running network."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path

import pytest
import trio

from gnutella_router.cli.main import main
from gnutella_router.lab.testnet.churn import LEAVE, ChurnSettings, churn_schedule
from gnutella_router.lab.testnet.file_sd import TARGETS_FILE
from gnutella_router.lab.testnet.network import LocalNetwork
from gnutella_router.lab.testnet.settings import NetworkSettings


def test_a_schedule_alternates_leaves_and_returns_per_node_in_time_order() -> None:
    events = churn_schedule(range(1, 6), ChurnSettings(5.0, 2.0), duration=120, seed=3)
    assert events == sorted(events)
    assert all(0 < e.at < 120 for e in events)
    for node in range(1, 6):
        actions = [e.action for e in events if e.node == node]
        assert actions, f"node {node} never left in 120 s with 5 s sessions"
        assert actions[0] == LEAVE
        assert all(a != b for a, b in itertools.pairwise(actions))  # alternate
    assert churn_schedule(range(1, 6), ChurnSettings(5.0, 2.0), 120, seed=3) == events
    assert churn_schedule(range(1, 6), ChurnSettings(5.0, 2.0), 120, seed=4) != events


def test_the_means_shape_the_schedule() -> None:
    events = churn_schedule(range(200), ChurnSettings(10.0, 5.0), duration=1000, seed=1)
    per_node = 1000 / 15  # cycles of 10 s up and 5 s down
    leaves = sum(1 for e in events if e.action == LEAVE)
    assert 0.8 * 200 * per_node < leaves < 1.2 * 200 * per_node
    # The time away, taken from each return to the leave before it, averages 5 s.
    away = []
    last_leave: dict[int, float] = {}
    for event in events:
        if event.action == LEAVE:
            last_leave[event.node] = event.at
        else:
            away.append(event.at - last_leave[event.node])
    assert 4.5 < sum(away) / len(away) < 5.5


@pytest.mark.parametrize(
    ("text", "error"),
    [("30", "UP:DOWN"), ("a:b", "UP:DOWN"), ("0:5", "mean session"), ("5:-1", "mean down")],
)
def test_bad_churn_specs_are_refused(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        ChurnSettings.parse(text)
    assert ChurnSettings.parse("30:10", kill=True) == ChurnSettings(30.0, 10.0, True)


def test_churn_is_refused_in_one_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["testnet", "--churn", "5:5", "--in-process"]) == 2
    assert "--churn restarts node processes" in capsys.readouterr().err


@pytest.mark.e2e
@pytest.mark.parametrize("kill", [False, True])
async def test_churned_nodes_leave_and_come_back_where_they_were(
    tmp_path: Path, kill: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = NetworkSettings(
        nodes=4,
        topology="ring",
        duration=0,
        results=tmp_path,
        churn=ChurnSettings(0.6, 0.4, kill=kill),
        seed=2,
    )
    out = io.StringIO()
    network = LocalNetwork(settings, out=out)
    addresses: dict[int, str] = {}
    # The Prometheus targets as each rewrite left them: after the start, after each
    # churn event, and at the end.
    targets_file = tmp_path / TARGETS_FILE
    written: list[dict[str, str]] = []
    rewrite = network._write_targets

    def record_targets() -> None:
        rewrite()
        groups = json.loads(targets_file.read_text())
        written.append({g["labels"]["node"]: g["targets"][0] for g in groups})

    monkeypatch.setattr(network, "_write_targets", record_targets)

    async def watch() -> None:
        with trio.fail_after(60):
            while network.phase != "up":
                await trio.sleep(0.05)
        addresses.update({n.index: n.peer_name for n in network.nodes})
        with trio.fail_after(60):
            while sum(1 for e in network.churn_log if e["action"] == "return") < 3:
                await trio.sleep(0.1)
        network.request_stop()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        with trio.fail_after(120):
            outcome = await network.run()
    assert outcome.error is None, outcome.summary["failures"]
    log = outcome.summary["churn"]["events"]
    assert {e["node"] for e in log} <= {1, 2, 3}  # node 0 stays: the load client's
    assert all(e["ok"] for e in log)
    assert {e["action"] for e in log} == {"kill" if kill else "leave", "return"}
    assert outcome.summary["failures"] == []  # a churned exit is not a failure
    for node in network.nodes:
        assert node.peer_name == addresses[node.index]  # back at the address it had
        assert not node.running()
    samples = (tmp_path / "connectivity.csv").read_text().splitlines()
    assert len(samples) >= 2  # the header and a sample a second
    churn = (tmp_path / "churn.csv").read_text().splitlines()
    assert churn[0] == "at,node,action,ok"
    assert len(churn) == 1 + len(log)
    assert json.loads((tmp_path / "summary.json").read_text())["churn"]["kill"] is kill
    assert f"Prometheus targets (file_sd, kept current): {targets_file}" in out.getvalue()
    assert list(written[0]) == ["node-0", "node-1", "node-2", "node-3"]
    assert written[-1] == {}  # every router stopped: nothing left to scrape
    after_events = written[1 : 1 + len(log)]
    assert len(after_events) == len(log)
    for event, targets in zip(log, after_events, strict=True):
        assert (f"node-{event['node']}" in targets) is (event["action"] == "return"), event
    assert all(t.startswith("127.0.0.1:") for ts in written for t in ts.values())
