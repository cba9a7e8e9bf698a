"""Emulated link delay: writes held for their link's delay, in order, bounded, and the
4-hop latency of a chain of routers with 20 ms links."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import trio
import trio.testing

from gnutella_router.config import ConfigError, load_config
from gnutella_router.config.sections import EmulationConfig, parse_link
from gnutella_router.daemon import Daemon
from gnutella_router.lab.testnet.emulated_links import LinkPlan
from gnutella_router.lab.testnet.topology import Topology
from gnutella_router.net.link_emulation import (
    DelayedStream,
    LinkDelay,
    LinkEmulation,
    wrap_stream,
)
from protocol.constants import MessageType
from protocol.framing import Frame
from protocol.messages import Message, Query
from tests.support.peers import Peer, daemon_config, message
from tests.support.waiting import wait_until


def is_copy(query: Message, frame: Frame) -> bool:
    return frame.payload_type == MessageType.QUERY and frame.guid == query.guid


def emulation(**settings: object) -> LinkEmulation:
    return LinkEmulation(EmulationConfig(enabled=True, **settings))  # type: ignore[arg-type]


async def received(stream: trio.abc.Stream, size: int) -> list[tuple[float, bytes]]:
    """(arrival time, bytes) for each read, until ``size`` bytes came."""
    reads: list[tuple[float, bytes]] = []
    total = 0
    while total < size:
        data = await stream.receive_some(65536)
        reads.append((trio.current_time(), bytes(data)))
        total += len(data)
    return reads


# --- the settings ------------------------------------------------------------------------


def test_link_entries_name_an_address_or_a_host() -> None:
    assert parse_link("10.64.0.3:6346=20") == ("10.64.0.3", 6346, 20.0, 0.0)
    assert parse_link("[0:0::1]:7=3,1.5") == ("::1", 7, 3.0, 1.5)
    assert parse_link("10.64.0.3=5") == ("10.64.0.3", None, 5.0, 0.0)
    for bad in ("10.64.0.3:6346", "=5", "h:1=x", "h:1=1,2,3", "h:1=-1", "h:1=70000"):
        with pytest.raises(ValueError, match=r"HOST:PORT=DELAY_MS|milliseconds|from 0"):
            parse_link(bad)
    with pytest.raises(ConfigError, match=r"emulation\.links"):
        load_config(None, {"emulation.links": ["10.0.0.1:6346=fast"]})


def test_a_peer_gets_its_address_entry_then_its_host_entry_then_the_default() -> None:
    links = ("10.0.0.1:6346=20,2", "10.0.0.2=30")
    chosen = emulation(delay_ms=5.0, links=links)
    assert chosen.delay_for(("10.0.0.1", 6346), ("10.0.0.1", 40000)) == LinkDelay(0.02, 0.002)
    assert chosen.delay_for(None, ("10.0.0.2", 40000)) == LinkDelay(0.03)
    assert chosen.delay_for(("10.0.0.1", 6347), ("10.0.0.1", 40000)) == LinkDelay(0.005)
    # Off: nothing is wrapped, and a link without delay is not wrapped either.
    assert LinkEmulation.from_config(EmulationConfig(), log=None) is None  # type: ignore[arg-type]
    left, _ = trio.testing.memory_stream_pair()
    quiet = emulation(links=links)
    assert wrap_stream(quiet, left, listen=None, peer=("10.0.0.9", 1), nursery=None) is left


# --- the delay line ----------------------------------------------------------------------


async def test_writes_arrive_a_delay_late_in_order(autojump_clock: trio.abc.Clock) -> None:
    near, far = trio.testing.memory_stream_pair()
    link = emulation(jitter_ms=0.0)
    async with trio.open_nursery() as nursery:
        delayed = DelayedStream(near, LinkDelay(0.020, 0.010), link, nursery)
        begun = trio.current_time()
        sent: list[tuple[float, bytes]] = []
        for index in range(20):
            chunk = bytes([index]) * 100
            sent.append((trio.current_time(), chunk))
            await delayed.send_all(chunk)
            await trio.sleep(0.003)
        reads = await received(far, 2000)
        assert b"".join(data for _, data in reads) == b"".join(c for _, c in sent)
        # Each chunk is held its draw (10 to 30 ms), never less than 10 ms; due times
        # never go backwards, so nothing overtakes what was written before it.
        offset = 0
        for arrived, data in reads:
            first_written = sent[offset // 100][0]
            assert arrived - first_written >= 0.010 - 1e-9
            offset += len(data)
        assert reads[-1][0] - begun <= 20 * 0.003 + 0.030 + 1e-9
        statistics = link.statistics()
        assert statistics.delayed_bytes == 2000
        assert statistics.held_bytes == 0
        await delayed.aclose()


async def test_a_full_line_makes_the_writer_wait(autojump_clock: trio.abc.Clock) -> None:
    near, far = trio.testing.memory_stream_pair()
    link = emulation(held_bytes=64 * 1024)
    async with trio.open_nursery() as nursery:
        delayed = DelayedStream(near, LinkDelay(1.0), link, nursery)
        begun = trio.current_time()
        await delayed.send_all(b"x" * 40_000)
        assert trio.current_time() == begun  # under the bound: no wait
        await delayed.send_all(b"y" * 40_000)  # over it: waits until the first is out
        assert trio.current_time() >= begun + 1.0
        assert delayed.held_bytes <= 64 * 1024
        reads = await received(far, 80_000)
        assert reads[-1][0] >= begun + 1.0
        await delayed.aclose()


async def test_closing_writes_what_is_held_then_closes(autojump_clock: trio.abc.Clock) -> None:
    near, far = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        delayed = DelayedStream(near, LinkDelay(0.05), emulation(), nursery)
        await delayed.send_all(b"last words")
        await delayed.aclose()
        assert await far.receive_some(100) == b"last words"
        assert await far.receive_some(100) == b""  # then the end of the stream
        with pytest.raises(trio.ClosedResourceError):
            await delayed.send_all(b"more")


async def test_a_broken_socket_breaks_the_writer(autojump_clock: trio.abc.Clock) -> None:
    near, far = trio.testing.memory_stream_pair()
    link = emulation()
    async with trio.open_nursery() as nursery:
        delayed = DelayedStream(near, LinkDelay(0.01), link, nursery)
        await far.aclose()
        await delayed.send_all(b"into the void")
        await trio.sleep(0.05)
        with pytest.raises(trio.BrokenResourceError):
            await delayed.send_all(b"again")
        assert link.statistics().held_bytes == 0
        await delayed.aclose()


# --- routers -----------------------------------------------------------------------------


@pytest.mark.e2e
async def test_a_chain_of_five_routers_with_20_ms_links_takes_80_ms_for_4_hops(
    tmp_path: Path,
) -> None:
    """Node i + 1 dials node i; each router holds its writes to its chain neighbours for
    20 ms (their entries written by the test network's plan, as a run writes them). A
    query from a peer of node 0 reaches a peer of node 4 across 4 links: at least 80 ms
    (each hop holds it 20 ms by the clock, whatever the machine does), and well under
    the 160 ms that a delay applied twice per link (by both ends, say) could not go
    below. The fastest of several queries is taken: a busy machine only adds to some."""
    chain = Topology("file", 5, ((1, 0), (2, 1), (3, 2), (4, 3)))
    plan = LinkPlan(chain, delay_ms=20.0)
    plan.choose_ports(5)

    def address_of(index: int) -> tuple[str, int]:
        return "127.0.0.1", plan.ports[index]

    daemons = []
    async with trio.open_nursery() as nursery:
        for index in range(5):
            overrides: dict[str, object] = {
                "node.listen": f"127.0.0.1:{plan.ports[index]}",
                "admin.listen": "127.0.0.1:0",
                **plan.node_overrides(index, address_of),
            }
            if index:
                overrides |= {
                    "catcher.seeds": [f"127.0.0.1:{plan.ports[index - 1]}"],
                    "catcher.min_connections": 1,
                }
            daemon = Daemon(daemon_config(tmp_path / f"node{index}", overrides))
            await nursery.start(daemon.run)
            daemons.append(daemon)
        await wait_until(lambda: all(len(d.server.connections) >= 1 for d in daemons[1:4]), 20)
        await wait_until(lambda: len(daemons[0].server.connections) == 1, 20)
        source = await Peer.connect(daemons[0].address)
        sink = await Peer.connect(daemons[4].address)
        await wait_until(lambda: len(daemons[4].server.connections) == 2)
        latencies = []
        for index in range(8):
            query = message(Query(f"chain probe {index}".encode()), ttl=7)
            sent_at = trio.current_time()
            await source.send(query)
            frame = await sink.receive_matching(functools.partial(is_copy, query), timeout=10)
            latencies.append(trio.current_time() - sent_at)
            assert frame.hops == 5  # the source's link, then four between routers
            await trio.sleep(0.05)
        assert 0.080 <= min(latencies) < 0.150, latencies
        middle = daemons[2].server.link_emulation
        assert middle is not None
        assert middle.statistics().links == 2  # its two neighbours, nobody else
        await source.aclose()
        await sink.aclose()
        for daemon in daemons:
            daemon.request_stop()
