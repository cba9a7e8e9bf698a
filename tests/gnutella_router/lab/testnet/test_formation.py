"""When a test network has formed: links up, missing, outside the plan, and the message."""

from __future__ import annotations

from gnutella_router.lab.testnet.formation import (
    NAMED_IN_MESSAGES,
    failure_message,
    formation,
)
from gnutella_router.lab.testnet.nodes import NodeView, PeerConnection
from gnutella_router.lab.testnet.topology import Topology, plan_topology


class FakeNode:
    """What formation reads of a node: its index, address, view and whether it runs."""

    def __init__(self, index: int, outgoing: list[int], up: bool = True) -> None:
        self.index = index
        self.peer_name = f"127.0.0.1:{7000 + index}"
        self.up = up
        links = [PeerConnection(f"127.0.0.1:{7000 + o}", "outgoing", False) for o in outgoing]
        stranger = PeerConnection("127.0.0.1:55555", "incoming", False)  # a load client
        self.view = NodeView((*links, stranger))

    def running(self) -> bool:
        return self.up


def test_links_up_components_and_nodes_down() -> None:
    topology = Topology("file", 5, ((0, 1), (1, 2), (3, 4), (4, 0), (2, 3)))
    nodes = [FakeNode(0, [1]), FakeNode(1, [2]), FakeNode(2, []), FakeNode(3, [4]), FakeNode(4, [])]
    state = formation(1.5, topology, nodes)  # type: ignore[arg-type]
    assert (state.nodes_up, state.links_up, state.components, state.largest_component) == (
        5, 3, 2, 3,
    )  # fmt: skip
    assert state.missing == ((4, 0), (2, 3))
    assert not state.formed
    nodes[1].up = False  # its links go with it, and are not missing: it is down
    state = formation(2.0, topology, nodes)  # type: ignore[arg-type]
    assert (state.nodes_up, state.links_up, state.components, state.largest_component) == (
        4, 1, 3, 2,
    )  # fmt: skip
    assert state.down == (1,)
    assert state.missing == ((4, 0), (2, 3))


def test_a_planned_link_dialled_the_other_way_is_up_and_a_stray_one_is_outside_the_plan() -> None:
    topology = plan_topology("ring", 3)  # 0 -> 1, 1 -> 2, 2 -> 0
    # Node 1 dialled 0 (the plan says 0 dials 1), and node 2 dialled 1 twice over.
    nodes = [FakeNode(0, []), FakeNode(1, [0, 2]), FakeNode(2, [0])]
    state = formation(3.0, topology, nodes)  # type: ignore[arg-type]
    assert state.formed
    assert state.links_up == 3
    assert state.outside_plan == ()
    star = Topology("star", 3, ((1, 0), (2, 0)))
    state = formation(3.0, star, nodes)  # type: ignore[arg-type]
    assert state.formed  # every planned link is up ...
    assert state.outside_plan == ((1, 2),)  # ... and one more, counted apart
    assert state.counts() == "links 2/2 (+1 outside the plan)"
    assert state.row()["links_outside_plan"] == 1
    assert state.describe()["outside_plan"] == [[1, 2]]


def test_closing_connections_and_connections_to_strangers_are_no_links() -> None:
    topology = plan_topology("ring", 2)
    node0, node1 = FakeNode(0, []), FakeNode(1, [])
    node0.view = NodeView((PeerConnection(node1.peer_name, "outgoing", True),))
    state = formation(0.0, topology, [node0, node1])  # type: ignore[list-item]
    assert state.links_up == 0
    assert state.missing == ((0, 1),)


def test_the_failure_message_names_missing_links_nodes_down_and_strays() -> None:
    topology = Topology("file", 4, ((0, 1), (1, 2), (2, 3), (3, 0)))
    nodes = [FakeNode(0, [1, 2]), FakeNode(1, []), FakeNode(2, []), FakeNode(3, [], up=False)]
    state = formation(50.0, topology, nodes)  # type: ignore[arg-type]
    text = failure_message(state, nodes, 40)  # type: ignore[arg-type]
    assert text.startswith("the network did not form within 40 s: 1 of 4 planned links missing: ")
    assert "node-1 -> node-2 (127.0.0.1:7002)" in text
    assert "nodes missing links: node-1" in text
    assert "nodes not running: node-3" in text
    assert "1 links outside the plan: node-0 -> node-2" in text


def test_a_long_list_is_cut_and_points_at_the_summary() -> None:
    count = NAMED_IN_MESSAGES + 5
    topology = plan_topology("star", count + 1)
    nodes = [FakeNode(i, []) for i in range(count + 1)]
    state = formation(1.0, topology, nodes)  # type: ignore[arg-type]
    text = failure_message(state, nodes, 9)  # type: ignore[arg-type]
    assert f"{count} of {count} planned links missing" in text
    assert f"node-{NAMED_IN_MESSAGES} -> node-0" in text
    assert f"node-{NAMED_IN_MESSAGES + 1} -> node-0" not in text
    assert "and 5 more (summary.json lists them all)" in text
    assert len(state.describe()["missing"]) == count  # type: ignore[arg-type]
