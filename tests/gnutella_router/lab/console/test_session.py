"""The console's commands against routers faked at their admin interfaces: what each
command asks of which router, and what it shows, without sockets or a terminal."""

from __future__ import annotations

import io
import itertools
from collections.abc import Sequence
from typing import Any

import pytest

from gnutella_router.lab.console.commands import CommandError
from gnutella_router.lab.console.probes import Sighting, Spread, follow_text, sightings_in
from gnutella_router.lab.console.session import Session
from gnutella_router.lab.console.shell import PROMPT, run_script
from gnutella_router.lab.console.targets import ConsoleError, Network, Node

T0 = 1_800_000_000.0


class FakeRouters:
    """Routers in a line (node-0 dials node-1, node-1 dials node-2), as their admin
    interfaces answer: an injected probe floods the links that are up, within its TTL,
    one millisecond per hop, and is recorded in each router's route table."""

    def __init__(self, count: int = 3) -> None:
        self.count = count
        self.links = {(i, i + 1) for i in range(count - 1)}
        self.unreachable: set[int] = set()
        self.offline: set[int] = set()
        self.holds: dict[int, list[str]] = {i: [] for i in range(count)}
        self.posts: list[tuple[str, str, object]] = []
        self.routes: dict[tuple[int, str], dict[str, Any]] = {}
        self._guids = (f"{n:032x}" for n in itertools.count(0xABC))
        self._connections = itertools.count(41)

    @staticmethod
    def address(index: int) -> str:
        return f"127.0.0.1:{6346 + 2 * index}"

    def nodes(self) -> list[Node]:
        return [
            Node(f"node-{i}", i, ("127.0.0.1", 7000 + i), self.address(i), f"{i:032x}")
            for i in range(self.count)
        ]

    def neighbours(self, index: int) -> list[int]:
        return sorted(b if a == index else a for a, b in self.links if index in (a, b))

    def _check(self, node: Node) -> None:
        if node.index in self.unreachable:
            raise ConsoleError(f"{node.name}: cannot reach the admin interface: refused")

    def get(self, node: Node, path: str) -> object:
        self._check(node)
        index = node.index
        if path == "/healthz":
            return {"status": "ok", "connections": len(self.neighbours(index))}
        if path == "/holds":
            return {
                "offline": index in self.offline,
                "holds": [{"address": a, "seconds_left": None} for a in self.holds[index]],
            }
        if path == "/connections":
            return [
                {
                    "peer": self.address(other),
                    "listen_address": self.address(other),
                    "role": "outgoing" if (index, other) in self.links else "incoming",
                    "closing": False,
                }
                for other in self.neighbours(index)
            ]
        if path.startswith("/routes"):
            guid = path.split("guid=")[1]
            entry = self.routes.get((index, guid))
            page: dict[str, dict[str, dict[str, list[object]]]] = {
                "tables": {"query": {"entries": []}, "ping": {"entries": []}}
            }
            if entry is not None:
                page["tables"][str(entry["table"])]["entries"] = [entry]
            return page
        if path == "/dump?limit=0":
            return {
                "node": {"advertised": self.address(index)},
                "config": {"network": {"max_ttl": 7}},
            }
        raise AssertionError(f"unexpected GET {path}")

    def post(self, node: Node, path: str, body: object) -> object:
        self._check(node)
        assert isinstance(body, dict)
        self.posts.append((node.name, path, body))
        if path == "/inject":
            return self._flood(node.index, body.get("type", "query"), int(body.get("ttl", 7)))
        if path == "/peers/hold":
            other = self._index_of(body["address"])
            self.holds[node.index].append(body["address"])
            closed = sum(1 for link in list(self.links) if set(link) == {node.index, other})
            self.links -= {(node.index, other), (other, node.index)}
            return {"closed": closed}
        if path == "/peers/release":
            released = body["address"] in self.holds[node.index]
            self.holds[node.index] = [a for a in self.holds[node.index] if a != body["address"]]
            return {"released": released}
        if path == "/peers/add":
            self.links.add((node.index, self._index_of(body["address"])))
            return {"connected": True, "connection": next(self._connections)}
        if path == "/offline":
            if body["offline"]:
                self.offline.add(node.index)
                closed = len(self.neighbours(node.index))
                self.links = {link for link in self.links if node.index not in link}
                return {"offline": True, "closed": closed}
            self.offline.discard(node.index)
            return {"offline": False, "closed": 0}
        if path == "/log-level":
            return {"level": body["level"]}
        raise AssertionError(f"unexpected POST {path}")

    def _index_of(self, address: object) -> int:
        return next(i for i in range(self.count) if self.address(i) == address)

    def _flood(self, origin: int, kind: str, ttl: int) -> dict[str, object]:
        guid = next(self._guids)
        table = "ping" if kind == "ping" else "query"
        reach: dict[int, tuple[int, int | None]] = {origin: (0, None)}
        frontier = [origin]
        for hop in range(1 if kind == "ping" else ttl):
            nxt = []
            for here in frontier:
                for other in self.neighbours(here):
                    if other not in reach:
                        reach[other] = (hop + 1, here)
                        nxt.append(other)
            frontier = nxt
        for index, (distance, came_from) in reach.items():
            self.routes[(index, guid)] = {
                "table": table,
                "guid": guid,
                "next_hop": "local" if came_from is None else self.address(came_from),
                "ttl": ttl if distance <= 1 else ttl - distance + 1,
                "hops": 0 if distance == 0 else distance - 1,
                "hits": 0,
                "recorded_at": T0 + distance / 1000,
            }
        return {"guid": guid, "type": kind, "ttl": ttl, "sent_to": len(self.neighbours(origin))}


@pytest.fixture
def routers() -> FakeRouters:
    return FakeRouters()


@pytest.fixture
def session(routers: FakeRouters) -> Session:
    network = Network(routers.nodes(), routers, planned=sorted(routers.links))
    return Session(network, sleep=lambda seconds: None)


def lines(text: str | None) -> list[str]:
    assert text is not None
    return [" ".join(line.split()) for line in text.splitlines()]


def test_reach_shows_who_got_the_probe_by_hops_time_and_previous_node(
    session: Session, routers: FakeRouters
) -> None:
    shown = lines(session.execute("reach node-0 free jazz --ttl 5"))
    assert shown[0].startswith("query 00000000000000000000000000000abc from node-0, TTL 5")
    assert "reached 2 of 2 other nodes, farthest 2 hops, last 2 ms after it left" in shown[0]
    assert shown[2:] == [
        "node-0 0 0 - 5 0",
        "node-1 1 1 node-0 5 0",
        "node-2 2 2 node-1 4 0",
    ]
    assert routers.posts == [
        ("node-0", "/inject", {"type": "query", "ttl": 5, "text": "free jazz"})
    ]
    assert "00000000000000000000000000000abc" in session.guids


def test_reach_names_nodes_not_reached_and_not_read(session: Session, routers: FakeRouters) -> None:
    shown = lines(session.execute("reach 0 --ttl 1"))
    assert "reached 1 of 2 other nodes" in shown[0]
    assert shown[-1] == "not reached: node-2"
    routers.unreachable.add(2)
    shown = lines(session.execute("reach 0"))
    assert "reached 1 of 2 other nodes" in shown[0]
    assert shown[-1].startswith("not read: node-2: node-2: cannot reach")


def test_a_ping_carries_no_words_and_a_missing_node_is_named(session: Session) -> None:
    with pytest.raises(ConsoleError, match="a ping carries no words"):
        session.execute("reach 0 --ping hello")
    with pytest.raises(ConsoleError, match="no node 'node-7'; the nodes are node-0, node-1"):
        session.execute("reach node-7")
    with pytest.raises(CommandError):
        session.execute("reach")


def test_a_probe_from_an_unreachable_node_fails(session: Session, routers: FakeRouters) -> None:
    routers.unreachable.add(0)
    with pytest.raises(ConsoleError, match="node-0: cannot reach"):
        session.execute("reach 0")


def test_pingall_says_which_nodes_reach_which(session: Session, routers: FakeRouters) -> None:
    assert lines(session.execute("pingall --ttl 1")) == [
        "node-0 -> node-1 X",
        "node-1 -> node-0 node-2",
        "node-2 -> X node-1",
        "*** not reached: 33% (4/6 pairs reached)",
    ]
    routers.unreachable.add(1)
    shown = lines(session.execute("pingall"))
    assert shown[-1] == "not sent: node-1: cannot reach the admin interface: refused"


def test_follow_draws_the_path_of_a_guid(session: Session) -> None:
    session.execute("reach 2")
    shown = lines(session.execute("follow 00000000000000000000000000000abc"))
    assert shown == [
        "query 00000000000000000000000000000abc: held by 3 nodes",
        "node-2 (sent it, TTL 7; 0 replies back)",
        "`-- node-1 hops 1 +1 ms TTL in 7 replies 0",
        "`-- node-0 hops 2 +2 ms TTL in 6 replies 0",
    ]
    unseen = lines(session.execute(f"follow {'f' * 32}"))
    assert unseen[0] == f"{'f' * 32}: in no node's route tables (never seen, or expired)"


def test_a_link_is_held_down_at_both_ends_and_brought_up_by_its_dialer(
    session: Session, routers: FakeRouters
) -> None:
    shown = session.execute("link node-1 node-0 down")
    assert shown is not None
    assert "held at both ends, 1 connection closed" in shown
    holds = [(n, p, b) for n, p, b in routers.posts if p == "/peers/hold"]
    assert holds == [
        ("node-1", "/peers/hold", {"address": routers.address(0)}),
        ("node-0", "/peers/hold", {"address": routers.address(1)}),
    ]
    assert "node-0 -> node-1 down yes node-0, node-1" in lines(session.execute("links"))
    routers.posts.clear()
    shown = session.execute("link node-1 node-0 up")
    assert shown is not None
    assert shown.endswith("node-0 dialled node-1 (connection 41)"), "the planned dialer"
    assert [p for _, p, _ in routers.posts] == ["/peers/release", "/peers/release", "/peers/add"]
    assert "2 of 2 planned links up" in lines(session.execute("links"))
    routers.posts.clear()
    shown = session.execute("link 0 1 up")
    assert shown is not None
    assert shown.endswith("node-0 and node-1 are connected")
    assert "/peers/add" not in [p for _, p, _ in routers.posts]
    with pytest.raises(ConsoleError, match="the same node"):
        session.execute("link 1 node-1 down")


def test_a_node_goes_offline_and_comes_back_with_its_planned_links(
    session: Session, routers: FakeRouters
) -> None:
    shown = session.execute("node 1 down")
    assert shown is not None
    assert shown.startswith("node-1 is offline: 2 connections closed")
    assert "node-1 127.0.0.1:6348 127.0.0.1:7001 00000000... offline 0 0" in lines(
        session.execute("nodes")
    )
    assert "0 of 2 planned links up" in lines(session.execute("links"))
    assert lines(session.execute("node 1 up")) == [
        "node-1 is online; its catcher dials its peers again",
        "node-0 dialled node-1 (connection 41)",
        "node-1 dialled node-2 (connection 42)",
    ]


def test_nodes_lists_an_unreachable_node_and_says_why(
    session: Session, routers: FakeRouters
) -> None:
    routers.unreachable.add(2)
    shown = lines(session.execute("nodes"))
    assert shown[0] == "NODE PEER ADDRESS ADMIN GUID STATE CONNECTIONS HELD"
    assert shown[1] == "node-0 127.0.0.1:6346 127.0.0.1:7000 00000000... online 1 0"
    assert shown[3] == "node-2 127.0.0.1:6350 127.0.0.1:7002 00000000... unreachable - -"
    assert shown[4].startswith("node-2: cannot reach")


def test_links_count_connections_to_peers_that_are_not_nodes(routers: FakeRouters) -> None:
    nodes = routers.nodes()[:2]  # node-2 is not part of this console's network
    session = Session(Network(nodes, routers), sleep=lambda seconds: None)
    assert lines(session.execute("links")) == [
        "LINK STATE PLANNED HELD AT",
        "node-0 -> node-1 up no -",
        "connections to peers that are not nodes: node-1: 1",
    ]


def test_get_reads_a_dotted_path_and_names_what_is_there(session: Session) -> None:
    assert session.execute("get 0 config.network.max_ttl") == "config.network.max_ttl = 7"
    assert session.execute("get 0 config") == "config.network.max_ttl = 7"
    assert session.execute("get 0 holds.offline") == "holds.offline = false"
    with pytest.raises(ConsoleError, match=r"config\.network has no 'ttl'; it has max_ttl"):
        session.execute("get 0 config.network.ttl")
    with pytest.raises(ConsoleError, match="no part 'settings'"):
        session.execute("get 0 settings")
    shown = session.execute("get 0")
    assert shown is not None
    assert "parts to read: node, config" in shown


def test_set_changes_the_log_level(session: Session, routers: FakeRouters) -> None:
    assert session.execute("set node-2 log-level debug") == "node-2: log level debug"
    assert routers.posts[-1] == ("node-2", "/log-level", {"level": "debug"})


def test_a_script_echoes_each_command_and_stops_at_the_first_failure(
    session: Session, routers: FakeRouters
) -> None:
    out, err = io.StringIO(), io.StringIO()
    script = ["# setup\n", "\n", "set 0 log-level info\n", "reach node-9\n", "nodes\n"]
    assert run_script(session, script, out=out, err=err, name="s.txt") == 1
    assert out.getvalue().splitlines() == [
        f"{PROMPT}set 0 log-level info",
        "node-0: log level info",
        f"{PROMPT}reach node-9",
    ]
    assert err.getvalue().startswith("s.txt:4: no node 'node-9'")
    out, err = io.StringIO(), io.StringIO()
    assert run_script(session, ["nodes\n", "quit\n", "nodez\n"], out=out, err=err) == 0
    assert run_script(session, ["nodez"], out=out, err=err, name="x") == 1
    assert "x:1: unknown command 'nodez'" in err.getvalue()


# --- the tables' entries as the probes read them ---------------------------------------


def entry(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {
        "next_hop": "127.0.0.1:1",
        "ttl": 7,
        "hops": 0,
        "hits": 0,
        "recorded_at": T0,
    }
    return {**base, **fields}


def test_sightings_skip_what_is_malformed() -> None:
    page = {
        "tables": {
            "query": {"entries": [entry(hops=2), {"hops": "x"}, "junk"]},
            "push": {"entries": [entry(next_hop="local", hits=3)]},
            "ping": "junk",
        }
    }
    found = sightings_in("node-4", page)
    assert [(s.table, s.distance, s.replies) for s in found] == [("query", 3, 0), ("push", 0, 3)]
    assert sightings_in("node-4", "not a page") == []


def test_a_guid_that_came_from_outside_is_drawn_from_its_first_node() -> None:
    def seen(node: str, came_from: str, at_ms: int, hops: int) -> Sighting:
        return Sighting(node, "query", hops, 7 - hops, T0 + at_ms / 1000, came_from, 0)

    found: dict[str, Sequence[Sighting]] = {
        "node-1": [seen("node-1", "127.0.0.1:6348", 5, 1)],
        "node-0": [seen("node-0", "192.0.2.1:6346", 3, 0)],
        "node-2": [],
    }
    spread = Spread.of("ab" * 16, "query", found)
    assert spread.origin is None
    assert spread.missing == ("node-2",)
    names = {"127.0.0.1:6346": "node-0", "127.0.0.1:6348": "node-0x"}
    text = lines(follow_text([spread], {**names, "127.0.0.1:6348": "node-0"}))
    assert text[1] == ("node-0 hops 1 +0 ms TTL in 7 replies 0 from 192.0.2.1:6346, not a node")
    assert text[2] == "`-- node-1 hops 2 +2 ms TTL in 6 replies 0"
    assert text[3] == "not held by: node-2"
