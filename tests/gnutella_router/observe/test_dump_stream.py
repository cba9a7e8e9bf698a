"""Route dumps made in slices: the same text as before, the router running between
slices, nothing kept afterwards, and clients that leave part-way."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import gc
import json
import socket
import struct
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import trio

from gnutella_router.daemon import Daemon
from gnutella_router.observe.admin import AdminServer
from gnutella_router.observe.dump_files import write_dump_file
from gnutella_router.observe.dump_stream import (
    SLICE_ENTRIES,
    JsonDocument,
    JsonStyle,
    full_dump_document,
    routes_document,
    write_json,
)
from gnutella_router.observe.dumps import dump_routes, snapshot_routes
from gnutella_router.routing.replies import LOCAL
from protocol.constants import MessageType
from protocol.messages import Query, QueryHit, QueryHitResult
from tests.support.http import http_get
from tests.support.peers import message, peers, running_daemons, send_queries
from tests.support.waiting import wait_until

WALL = 1_790_000_000.0
"""What ``time.time()`` reads in the tests that compare texts: a fixed wall clock."""


async def text_of(document: JsonDocument, style: JsonStyle = JsonStyle.COMPACT) -> str:
    chunks: list[bytes] = []

    async def gather(data: bytes) -> None:
        chunks.append(data)

    written = await write_json(document, style, gather, chunk_bytes=512)
    assert written == sum(len(chunk) for chunk in chunks)
    return b"".join(chunks).decode()


def compact(data: object) -> str:
    return json.dumps(data, allow_nan=False, separators=(",", ":")) + "\n"


def fill(daemon: Daemon, count: int, value: int = 7) -> None:
    """``count`` query routes through connection ``value``, recorded directly."""
    now = trio.current_time()
    table = daemon.router.query_routes
    for n in range(count):
        table.record(n.to_bytes(16, "big"), value, now, ttl=3, hops=1)


async def small_tables(daemon: Daemon) -> list[bytes]:
    """A few routes of each kind: from a peer still here, one that left, this node's
    own query, and a route replies came back through."""
    asker, answerer, leaving = await peers(daemon, 3)
    guids = await send_queries(daemon, asker, 3)
    await send_queries(daemon, leaving, 2)
    await leaving.aclose()
    await wait_until(lambda: len(daemon.server.connections) == 2)
    own = message(Query(b"our own"), ttl=2)
    daemon.router.originate_query(None, own, trio.current_time())
    hit = QueryHit(6346, "192.0.2.10", 100, (QueryHitResult(1, 10, b"a.ogg"),), b"s" * 16)
    await answerer.send(message(hit, ttl=5, guid=guids[0]))
    await wait_until(lambda: daemon.router.forwarded[MessageType.QUERY_HIT] == 1)
    return guids


def before(daemon: Daemon, now: float, limit: int | None) -> dict[str, Any]:
    """The ``/routes`` answer as the dumps made it before they were made in slices
    (at aea9480), restated: the oracle for the content."""
    connections = daemon.server.connections
    wall = time.time() - now
    tables: dict[str, Any] = {}
    for name in ("ping", "query", "push"):
        routes = getattr(daemon.router, f"{name}_routes")
        statistics = routes.statistics(now)
        shown = []
        for entry in routes.entries(now, limit, 0):
            if entry.value == LOCAL:
                next_hop, connected = "local", True
            else:
                next_hop = connections.label(entry.value) or f"connection {entry.value}"
                connected = connections.get(entry.value) is not None
            at = wall + entry.recorded_at
            iso = datetime.datetime.fromtimestamp(at, datetime.UTC)
            shown.append(
                {
                    "guid": entry.guid.hex(),
                    "connection": entry.value,
                    "next_hop": next_hop,
                    "connected": connected,
                    "ttl": entry.ttl,
                    "hops": entry.hops,
                    "hits": entry.hits,
                    "age": round(entry.age, 3),
                    "recorded_at": round(at, 3),
                    "recorded_at_iso": iso.isoformat(timespec="milliseconds"),
                    "generation": entry.generation,
                }
            )
        tables[name] = {
            "statistics": dataclasses.asdict(statistics),
            "total": statistics.size,
            "shown": len(shown),
            "truncated": len(shown) < statistics.size,
            "entries": shown,
        }
    return {"limit": limit, "offset": 0, "guid": None, "tables": tables}


@pytest.mark.e2e
async def test_the_streamed_text_is_the_dump_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        await small_tables(daemon)
        monkeypatch.setattr(time, "time", lambda: WALL)
        now = trio.current_time()
        texts = {}
        for limit in (None, 1000, 2):
            # All three at one instant: the router may route something at any await.
            expected = compact(before(daemon, now, limit))
            snapshot = snapshot_routes(daemon, limit=limit, now=now)
            assert compact(dump_routes(daemon, limit=limit, now=now)) == expected
            assert await text_of(routes_document(snapshot)) == expected
            texts[limit] = json.loads(expected)["tables"]
    query = texts[None]["query"]["entries"]
    assert len(query) == 6
    assert {e["next_hop"] for e in query} >= {"local"}
    assert {e["connected"] for e in query} == {True, False}
    assert any(e["hits"] for e in query)
    assert len(texts[None]["push"]["entries"]) == 1
    assert texts[2]["query"]["truncated"] is True


@pytest.mark.e2e
async def test_every_page_and_style_is_the_text_json_dumps_makes(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        guids = await small_tables(daemon)
        now = trio.current_time()
        pages: list[dict[str, Any]] = [
            {},
            {"table": "query", "limit": 2},
            {"table": "query", "limit": 2, "offset": 2},
            {"table": "ping", "limit": 0},
            {"guid": guids[1]},
            {"guid": bytes(16)},
            {"limit": None, "offset": 4},
        ]
        for page in pages:
            snapshot = snapshot_routes(daemon, now=now, **page)
            data = snapshot.data()
            assert await text_of(routes_document(snapshot)) == compact(data), page
            indented = await text_of(routes_document(snapshot), JsonStyle.INDENTED)
            assert indented == json.dumps(data, indent=1, default=str), page
        for limit in (None, 1):
            document = full_dump_document(daemon, limit=limit, extra={"tasks": {"a": [1]}})
            text = await text_of(document)
            assert text == compact(json.loads(text))  # key order and numbers as json.dumps
            indented = await text_of(
                full_dump_document(daemon, limit=limit, extra={"x": []}), JsonStyle.INDENTED
            )
            assert indented == json.dumps(json.loads(indented), indent=1)
            assert json.loads(indented)["routes"]["tables"]["query"]["shown"] == (
                6 if limit is None else 1
            )


async def test_a_stand_in_anywhere_but_a_value_is_refused() -> None:
    document = JsonDocument()
    document.data = [document.stand_in("misplaced", lambda: iter([{"a": 1}]))]
    with pytest.raises(RuntimeError, match="1 lists stood in for, 0 written"):
        await text_of(document)


@pytest.mark.e2e
async def test_the_router_runs_between_slices_and_the_dump_shows_one_instant(
    tmp_path: Path,
) -> None:
    """Another task gets a turn between every two slices of a large dump (a check of
    the mechanism, not of timing), and routes recorded meanwhile are not in it."""
    count = 40 * SLICE_ENTRIES
    async with running_daemons(tmp_path) as (daemon,):
        fill(daemon, count)
        table = daemon.router.query_routes
        turns = 0
        done = False

        async def router_like() -> None:
            nonlocal turns
            while not done:
                turns += 1
                table.record(b"\xff" + turns.to_bytes(15, "big"), 7, trio.current_time())
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(router_like)
            await trio.lowlevel.checkpoint()
            snapshot = snapshot_routes(daemon, table="query", limit=None)
            held, started = len(table), turns
            text = await text_of(routes_document(snapshot))
            done = True
        answer = json.loads(text)["tables"]["query"]
        assert answer["shown"] == len(answer["entries"]) == held == count + started
        assert turns - started >= count // SLICE_ENTRIES
        assert len(table) == count + turns


@pytest.mark.e2e
async def test_nothing_is_kept_after_a_dump(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        fill(daemon, 20_000)
        written = 0

        async def discard(data: bytes) -> None:
            nonlocal written
            written += len(data)

        gc.collect()
        tracemalloc.start()
        try:
            baseline, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            document = full_dump_document(daemon, limit=None)
            await write_json(document, JsonStyle.COMPACT, discard)
            del document
            gc.collect()
            after, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert written > 20_000 * 200
    # The snapshot (copies of the table's dicts) was there while the dump was made:
    assert peak - baseline > 500_000
    # and neither it nor any text is left: far less than one entry's text per entry.
    assert after - baseline < 100_000


@pytest.mark.e2e
async def test_the_dump_file_of_a_large_table(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        fill(daemon, 3 * SLICE_ENTRIES + 5)
        path = await write_dump_file(daemon)
        text = path.read_text()
    dump = json.loads(text)
    assert len(dump["routes"]["tables"]["query"]["entries"]) == 3 * SLICE_ENTRIES + 5
    assert text == json.dumps(dump, indent=1)
    assert not list(path.parent.glob("*.tmp"))


async def start_admin(
    daemon: Daemon, nursery: trio.Nursery, timeout: float
) -> tuple[AdminServer, tuple[str, int]]:
    server = AdminServer(daemon, address=("127.0.0.1", 0), request_timeout=timeout)
    address = await nursery.start(server.serve)
    return server, address


async def request(address: tuple[str, int], target: str) -> trio.SocketStream:
    """A GET sent on a connection with a small receive buffer: the server has to wait
    for this client to read long before the answer is all sent (on loopback, a buffer
    left to grow can take the whole of a large dump)."""
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await sock.connect(address)
    stream = trio.SocketStream(sock)
    text = f"GET {target} HTTP/1.1\r\nHost: admin\r\n\r\n"
    await stream.send_all(text.encode())
    return stream


@pytest.mark.e2e
async def test_routes_are_sent_chunked(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,), trio.open_nursery() as nursery:
        fill(daemon, 2 * SLICE_ENTRIES)
        _, address = await start_admin(daemon, nursery, 5.0)
        fetched = await http_get(address, "/routes?table=query&limit=100000")
        assert fetched.status == 200
        assert fetched.headers["transfer-encoding"] == "chunked"
        assert "content-length" not in fetched.headers
        assert len(fetched.json()["tables"]["query"]["entries"]) == 2 * SLICE_ENTRIES
        nursery.cancel_scope.cancel()


@pytest.mark.e2e
async def test_a_client_that_leaves_or_stalls_mid_dump_harms_nothing(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,), trio.open_nursery() as nursery:
        fill(daemon, 100_000)
        server, address = await start_admin(daemon, nursery, 0.5)
        (pinger,) = await peers(daemon, 1)

        # Leaves after the first bytes, resetting the connection.
        leaving = await request(address, "/routes?limit=100000")
        assert await leaving.receive_some(1000)
        linger = struct.pack("ii", 1, 0)
        leaving.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        await leaving.aclose()
        with trio.fail_after(10):
            await wait_until(lambda: server.refused["io"] == 1, timeout=10)

        # Stops reading: cut off once a chunk has waited longer than the timeout.
        stalled = await request(address, "/dump?limit=100000")
        assert await stalled.receive_some(1000)
        await wait_until(lambda: server.refused["timeout"] == 1, timeout=20)
        await stalled.aclose()

        # The router still routes, and the next dump is served whole.
        await send_queries(daemon, pinger, 1)
        assert server.active == 0
        fetched = await http_get(address, "/routes?table=ping", timeout=10)
        assert fetched.status == 200
        assert (await http_get(address, "/healthz")).status == 200
        nursery.cancel_scope.cancel()


@pytest.mark.e2e
async def test_dumps_wait_their_turn(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,), trio.open_nursery() as nursery:
        fill(daemon, 100_000)
        server, address = await start_admin(daemon, nursery, 0.5)
        slow = await request(address, "/routes?limit=100000")

        async def read_slowly() -> None:  # each chunk taken in time, the whole for long
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                while await slow.receive_some(4096):
                    await trio.sleep(0.005)

        nursery.start_soon(read_slowly)
        await wait_until(lambda: server.requests["200"] == 1)  # being sent
        waiting = await http_get(address, "/routes?limit=1")
        assert waiting.status == 503
        assert "another dump" in waiting.json()["error"]
        await slow.aclose()
        await wait_until(lambda: server.active == 0, timeout=10)
        assert server.refused["io"] == 1
        assert (await http_get(address, "/routes?limit=1")).status == 200
        nursery.cancel_scope.cancel()


@pytest.mark.e2e
async def test_one_sigusr1_dump_at_a_time(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        fill(daemon, 20 * SLICE_ENTRIES)
        async with trio.open_nursery() as nursery:
            daemon._start_dump(nursery)
            daemon._start_dump(nursery)  # while the first is being written: ignored
        (written,) = daemon.config.state_path.glob("dump-*.json")
        async with trio.open_nursery() as nursery:
            daemon._start_dump(nursery)  # the first is done: a second file
        assert len(list(daemon.config.state_path.glob("dump-*.json"))) == 2
    assert len(json.loads(written.read_text())["routes"]["tables"]["query"]["entries"]) == (
        20 * SLICE_ENTRIES
    )
