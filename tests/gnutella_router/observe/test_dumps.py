"""Dumps of a running daemon: routes just made, connections, stages, counters, files."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from pathlib import Path
from typing import Any

import pytest
import trio

from gnutella_router.observe.dump_files import write_dump_file
from gnutella_router.observe.dumps import (
    REDACTED,
    count_tasks,
    dump_connections,
    dump_routes,
    dump_stages,
    dump_stats,
    full_dump,
    jsonable,
    task_tree,
)
from gnutella_router.routing.route_table import RouteTable
from protocol.constants import MessageType
from protocol.messages import Ping, Query, QueryHit, QueryHitResult
from tests.support.peers import (
    Peer,
    connection_of,
    message,
    peers,
    running_daemons,
    send_queries,
)
from tests.support.waiting import wait_until


def as_json(value: object) -> Any:
    """``value`` after a trip through JSON: checks that it is JSON, and types it loosely."""
    return json.loads(json.dumps(value, allow_nan=False))


def entries(dump: object, table: str) -> list[dict[str, Any]]:
    shown: list[dict[str, Any]] = as_json(dump)["tables"][table]["entries"]
    return shown


@pytest.mark.e2e
async def test_a_query_shows_in_the_query_table_with_its_sender(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        sender, _ = await peers(daemon, 2)
        (guid,) = await send_queries(daemon, sender, 1)
        dump = as_json(dump_routes(daemon, table="query"))
        assert list(dump["tables"]) == ["query"]
        (entry,) = entries(dump, "query")
        connection = connection_of(daemon, sender)
        assert entry["guid"] == guid.hex()
        assert entry["connection"] == connection.id
        assert entry["next_hop"] == connection.peer_text
        assert entry["generation"] == "current"
        assert isinstance(entry["age"], float)
        assert 0 <= entry["age"] < 3


@pytest.mark.e2e
async def test_a_ping_shows_in_the_ping_table(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        (pinger,) = await peers(daemon, 1)
        ping = message(Ping(), ttl=2)
        await pinger.send(ping)
        await wait_until(lambda: ping.guid in daemon.router.ping_routes)
        dump = as_json(dump_routes(daemon))
        assert set(dump["tables"]) == {"ping", "query", "push"}
        (entry,) = entries(dump, "ping")
        assert entry["guid"] == ping.guid.hex()
        assert entry["next_hop"] == connection_of(daemon, pinger).peer_text
        assert entries(dump, "query") == []


@pytest.mark.e2e
async def test_guid_filter_and_limit(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        (sender,) = await peers(daemon, 1)
        guids = await send_queries(daemon, sender, 5)

        only = dump_routes(daemon, guid=guids[2])
        assert [e["guid"] for e in entries(only, "query")] == [guids[2].hex()]
        assert entries(only, "ping") == []
        assert only["guid"] == guids[2].hex()
        assert entries(dump_routes(daemon, table="query", guid=bytes(16)), "query") == []

        limited = as_json(dump_routes(daemon, table="query", limit=2))
        table = limited["tables"]["query"]
        assert table["shown"] == 2
        assert table["truncated"] is True
        assert table["statistics"]["size"] == 5
        # Newest first.
        assert [e["guid"] for e in entries(limited, "query")] == [g.hex() for g in guids[:-3:-1]]
        assert entries(dump_routes(daemon, table="query", limit=0), "query") == []
        everything = dump_routes(daemon, table="query", limit=None)
        assert len(entries(everything, "query")) == 5


@pytest.mark.e2e
async def test_next_hop_is_the_peers_listen_address_even_after_it_left(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        sender = await Peer.connect(daemon.address, extra_headers=[("Listen-IP", "192.0.2.9:6346")])
        other = await Peer.connect(daemon.address)
        await wait_until(lambda: len(daemon.server.connections) == 2)
        (guid,) = await send_queries(daemon, sender, 1)
        own = message(Query(b"our own"), ttl=2)
        daemon.router.originate_query(None, own, trio.current_time())
        by_guid = {e["guid"]: e for e in entries(dump_routes(daemon, table="query"), "query")}
        assert by_guid[guid.hex()]["next_hop"] == "192.0.2.9:6346"
        assert by_guid[guid.hex()]["connected"] is True
        await sender.aclose()
        await wait_until(lambda: len(daemon.server.connections) == 1)
        by_guid = {e["guid"]: e for e in entries(dump_routes(daemon, table="query"), "query")}
        assert by_guid[guid.hex()]["next_hop"] == "192.0.2.9:6346"  # named still
        assert by_guid[guid.hex()]["connected"] is False
        assert by_guid[own.guid.hex()]["next_hop"] == "local"
        assert by_guid[own.guid.hex()]["connection"] == 0
        await other.aclose()


def _hit() -> QueryHit:
    return QueryHit(6346, "192.0.2.10", 100, (QueryHitResult(1, 10, b"song.ogg"),), b"s" * 16)


@pytest.mark.e2e
async def test_entries_show_ttl_hops_hits_and_wall_clock_time(tmp_path: Path) -> None:
    import time

    async with running_daemons(tmp_path) as (daemon,):
        asker, answerer = await peers(daemon, 2)
        query = message(Query(b"who has it"), ttl=4, hops=2)
        await asker.send(query)
        await wait_until(lambda: query.guid in daemon.router.query_routes)
        for _ in range(3):
            hit = message(_hit(), ttl=5, guid=query.guid)
            await answerer.send(hit)
        await wait_until(lambda: daemon.router.forwarded[MessageType.QUERY_HIT] == 3)
        (entry,) = entries(dump_routes(daemon, table="query", guid=query.guid), "query")
    assert (entry["ttl"], entry["hops"], entry["hits"]) == (4, 2, 3)
    assert abs(float(entry["recorded_at"]) - time.time()) < 30
    assert str(entry["recorded_at_iso"]).endswith("+00:00")


@pytest.mark.e2e
async def test_routes_are_read_in_pages_never_silently_cut(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        (sender,) = await peers(daemon, 1)
        guids = await send_queries(daemon, sender, 7)
        seen: list[str] = []
        offset = 0
        while True:
            page = dump_routes(daemon, table="query", limit=3, offset=offset)
            table = page["tables"]["query"]  # type: ignore[index]
            assert table["total"] == 7
            seen += [e["guid"] for e in table["entries"]]
            offset += table["shown"]
            if not table["truncated"]:
                break
        full = full_dump(daemon, limit=None)
    assert seen == [g.hex() for g in reversed(guids)]  # newest first, each once
    assert len(full["routes"]["tables"]["query"]["entries"]) == 7  # type: ignore[index]


def test_a_table_entry_is_found_without_counting_a_lookup() -> None:
    table: RouteTable = RouteTable("query", 10.0, 100)
    table.record(b"a" * 16, 7, now=1.0)
    before = table.statistics(2.0)
    entry = table.entry(b"a" * 16, 2.0)
    assert entry is not None
    assert (entry.value, entry.age, entry.generation) == (7, 1.0, "current")
    assert table.entry(b"b" * 16, 2.0) is None
    after = table.statistics(2.0)
    assert (after.lookups, after.misses) == (before.lookups, before.misses)
    later = table.entry(b"a" * 16, 12.0)
    assert later is not None
    assert later.generation == "previous"
    assert table.entry(b"a" * 16, 25.0) is None


@pytest.mark.e2e
async def test_connections_dump(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        a, b = await peers(daemon, 2)
        await send_queries(daemon, a, 1)
        await b.receive()
        dump = as_json(dump_connections(daemon))
        assert [c["id"] for c in dump] == sorted(c.id for c in daemon.server.connections.snapshot())
        by_peer = {c["peer"]: c for c in dump}
        mine = by_peer[connection_of(daemon, a).peer_text]
        assert mine["role"] == "incoming"
        assert mine["user_agent"] == "test-peer/1.0"
        caps = mine["capabilities"]
        assert caps["ultrapeer"] is True
        assert caps["bye_packet"] is True
        assert caps["ggep"] is True
        assert caps["guid"] == a.guid.hex()
        assert mine["messages_in"] == 1
        assert mine["bytes_in"] > 0
        outgoing = mine["outgoing"]
        assert outgoing["policy"] == "threshold"
        assert outgoing["pending_messages"] == 0
        assert set(outgoing["dropped"]) >= {"flow_control", "queue_full", "evicted"}
        assert mine["flow_control"] == {"active": False, "entries": 0, "seconds": 0.0}
        other = by_peer[connection_of(daemon, b).peer_text]
        assert other["bytes_out"] > 0


@dataclasses.dataclass(frozen=True)
class FakeGovernorStatistics:
    pool_size: int
    recent: tuple[tuple[float, int], ...]


class FakeGovernor:
    def statistics(self) -> FakeGovernorStatistics:
        return FakeGovernorStatistics(pool_size=3, recent=((1.0, 2),))


@pytest.mark.e2e
async def test_stages_dump(tmp_path: Path) -> None:
    async with running_daemons(tmp_path, overrides={"router.queue_threshold": 600}) as (daemon,):
        dump = as_json(dump_stages(daemon))
        stages = dump["stages"]
        router = stages["router"]
        assert router["queue"]["threshold"] == 600
        assert router["queue"]["length"] == 0
        assert router["pool_size"] == 1
        assert router["busy_workers"] == 0
        assert "catcher" in stages
        assert "admin" in stages
        assert dump["governor"] is None
        daemon.governor = FakeGovernor()  # type: ignore[assignment]
        try:
            assert dump_stages(daemon)["governor"] == {"pool_size": 3, "recent": [[1.0, 2]]}
        finally:
            daemon.governor = None


@pytest.mark.e2e
async def test_stats_dump_counts_by_type_and_drop_reason(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        a, b = await peers(daemon, 2)
        query = message(Query(b"twice"), ttl=3)
        await a.send(query)
        await b.send(query)
        await wait_until(lambda: daemon.router.total_dropped() >= 1)
        stats = as_json(dump_stats(daemon))
        router = stats["router"]
        assert router["received"] == {"query": 2}
        assert router["forwarded"] == {"query": 1}
        assert router["dropped"] == {"duplicate": {"query": 1}}
        assert router["tables"]["query"]["size"] == 1
        server = stats["server"]
        assert server["incoming"] == 2
        assert server["completed"] == {"incoming": 2}
        catcher = stats["catcher"]
        assert catcher["target"] == 0
        assert stats["recorder"] is None


@pytest.mark.e2e
async def test_full_dump_is_json_and_hides_the_token(tmp_path: Path) -> None:
    async with running_daemons(tmp_path, overrides={"admin.token": "s3cret-token"}) as (daemon,):
        (peer,) = await peers(daemon, 1)
        await send_queries(daemon, peer, 1)
        dump = as_json(full_dump(daemon))
        assert "s3cret-token" not in json.dumps(dump)
        assert dump["config"]["admin"]["token"] == REDACTED
        node = dump["node"]
        assert node["guid"] == daemon.guid.hex()
        assert node["listening"] == [f"127.0.0.1:{daemon.address[1]}"]
        assert daemon.admin_address is not None
        assert node["admin"] == f"127.0.0.1:{daemon.admin_address[1]}"
        assert node["uptime_seconds"] >= 0
        assert set(dump) >= {"stats", "stages", "connections", "routes", "config"}
        assert len(entries(dump["routes"], "query")) == 1


class Colour(enum.Enum):
    RED = 1


@dataclasses.dataclass(frozen=True, slots=True)
class Inner:
    data: bytes
    colour: Colour
    ratio: float


def test_jsonable_rules() -> None:
    value = {
        "inner": Inner(b"\x01\xff", Colour.RED, math.inf),
        1: (1, 2.5),
        b"\xab": {"x", "y"},
        (1, "a"): None,
        "path": Path("/tmp/x"),
        "nan": math.nan,
    }
    assert jsonable(value) == {
        "inner": {"data": "01ff", "colour": "RED", "ratio": None},
        "1": [1, 2.5],
        "ab": ["x", "y"],
        "1:a": None,
        "path": "/tmp/x",
        "nan": None,
    }
    assert str(jsonable(object())).startswith("<object")


async def test_task_tree_walks_from_the_root() -> None:
    tree = task_tree()
    assert tree["name"] == "<init>"
    names: list[str] = []

    def walk(node: Any) -> None:
        names.append(node["name"])
        for nursery in node["nurseries"]:
            for child in nursery:
                walk(child)

    walk(tree)
    this = trio.lowlevel.current_task().name
    assert this in names
    assert count_tasks(tree) == len(names)


@pytest.mark.e2e
async def test_the_dump_file_holds_the_task_tree_and_the_stats(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        (peer,) = await peers(daemon, 1)
        (guid,) = await send_queries(daemon, peer, 1)
        path = await write_dump_file(daemon)
        second = await write_dump_file(daemon)
        assert path.parent == daemon.config.state_path.absolute()
        assert path.name.startswith("dump-")
        assert path.suffix == ".json"
        assert second != path
        assert not list(path.parent.glob("*.tmp"))
        dump = json.loads(path.read_text())
        assert dump["stats"]["router"]["received"] == {"query": 1}
        assert dump["routes"]["tables"]["query"]["entries"][0]["guid"] == guid.hex()
        text = json.dumps(dump["tasks"])
        assert "gnutella_router.daemon.Daemon.run" in text
        assert "router-worker" in text
        assert dump["task_count"] >= 5
        # A stage worker waits in Stage._work; its frames come with their source lines.
        frames = [frame for frame in _all_frames(dump["tasks"]) if frame["function"] == "_work"]
        assert frames
        assert "await" in frames[0]["source"]
        assert frames[0]["file"].endswith("stage.py")


def _all_frames(node: Any) -> list[Any]:
    found = list(node["frames"])
    for nursery in node["nurseries"]:
        for child in nursery:
            found.extend(_all_frames(child))
    return found
