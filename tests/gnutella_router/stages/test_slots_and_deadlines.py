"""Slots and deadlines on loopback, with real sockets: one address's share (409), a
crowd's slots given to newcomers from other networks (Bye 202), and the idle and
half-sent-message deadlines (Bye 405).

Each peer connects from an address of its own in 127.0.0.0/8 (all loopback on Linux),
and the daemon trusts only ``::1``, so that these addresses count as separate hosts.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import trio
from structlog.testing import capture_logs

from gnutella_router.daemon import Daemon
from protocol.constants import MessageType
from protocol.framing import Frame
from protocol.header import encode_header
from protocol.messages import Bye, Ping, random_guid
from tests.support.peers import Peer, PeerRefused, message, open_stream, running_daemons
from tests.support.waiting import wait_until

UNTRUSTED_LOOPBACK = {"network.trusted": ["::1/128"]}


def byes(frames: Sequence[Frame]) -> list[Bye]:
    payloads = [f.message().payload for f in frames if f.payload_type == MessageType.BYE]
    return [p for p in payloads if isinstance(p, Bye)]


async def refused(daemon: Daemon, source: str) -> tuple[int, str]:
    with pytest.raises(PeerRefused) as refusal:
        await Peer.connect(daemon.address, source=source)
    return refusal.value.rejection.status_code, refusal.value.rejection.reason


@pytest.mark.e2e
async def test_a_second_connection_from_an_untrusted_address_gets_409(tmp_path: Path) -> None:
    with capture_logs() as logs:
        async with running_daemons(tmp_path, overrides=UNTRUSTED_LOOPBACK) as (daemon,):
            first = await Peer.connect(daemon.address, source="127.0.0.2")
            assert await refused(daemon, "127.0.0.2") == (409, "Already connected")
            await Peer.connect(daemon.address, source="127.0.0.3")  # another host
            await wait_until(lambda: len(daemon.server.connections) == 2)
            assert daemon.server.refused["already-connected"] == 1
            assert daemon.server.statistics().refused["already-connected"] == 1
            # Once it is gone, the address may connect again.
            await first.aclose()
            await wait_until(lambda: len(daemon.server.connections) == 1)
            await Peer.connect(daemon.address, source="127.0.0.2")
    (warning,) = [e for e in logs if e["event"] == "peer refused"]
    assert (warning["code"], warning["log_level"]) == (409, "warning")


@pytest.mark.e2e
async def test_the_share_of_an_address_is_a_setting_and_trusted_networks_have_none(
    tmp_path: Path,
) -> None:
    overrides = {**UNTRUSTED_LOOPBACK, "network.connections_per_address": 2}
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        await Peer.connect(daemon.address, source="127.0.0.2")
        await Peer.connect(daemon.address, source="127.0.0.2")
        assert (await refused(daemon, "127.0.0.2"))[0] == 409
    async with running_daemons(tmp_path / "trusting") as (daemon,):  # loopback trusted
        for _ in range(3):
            await Peer.connect(daemon.address, source="127.0.0.2")
        await wait_until(lambda: len(daemon.server.connections) == 3)


@pytest.mark.e2e
async def test_a_crowd_from_one_network_gives_its_slots_to_newcomers_from_others(
    tmp_path: Path,
) -> None:
    overrides = {**UNTRUSTED_LOOPBACK, "network.max_connections": 3}
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        crowd = [await Peer.connect(daemon.address, source=f"127.0.1.{n}") for n in (1, 2, 3)]
        await wait_until(lambda: len(daemon.server.connections) == 3)

        # A newcomer from another /24 takes the slot of the crowd's newest member.
        await Peer.connect(daemon.address, source="127.0.2.1")
        assert [b.code for b in byes(await crowd[2].wait_closed())] == [202]
        # So does the next: the crowd still holds 2 slots, the newcomer's network none.
        await Peer.connect(daemon.address, source="127.0.3.1")
        assert [b.code for b in byes(await crowd[1].wait_closed())] == [202]
        assert daemon.server.evicted == 2
        # Now every network holds one slot: a full node of diverse peers says 503.
        assert await refused(daemon, "127.0.4.1") == (503, "Too many connections")
        # The evicted peer, coming straight back, is refused too.
        assert (await refused(daemon, "127.0.1.3"))[0] == 503
        await wait_until(lambda: len(daemon.server.connections) == 3)
        assert daemon.server.evicted == 2
        assert daemon.server.statistics().evicted == 2
        # The crowd's first member kept its slot and is served.
        await crowd[0].send(message(Ping(), ttl=1))
        await crowd[0].receive_matching(lambda f: f.payload_type == MessageType.PONG)


@pytest.mark.e2e
async def test_a_silent_peer_is_sent_bye_405_after_the_idle_timeout(tmp_path: Path) -> None:
    overrides = {"network.idle_timeout": 0.5, "network.partial_message_timeout": 0}
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        talker = await Peer.connect(daemon.address)
        silent = await Peer.connect(daemon.address)

        async def talk() -> None:
            while True:
                await talker.send(message(Ping(), ttl=1))
                await trio.sleep(0.1)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(talk)
            frames = await silent.wait_closed(timeout=10)
            nursery.cancel_scope.cancel()
        assert [b.code for b in byes(frames)] == [405]
        assert daemon.server.timed_out["idle"] == 1
        assert sum(daemon.server.kicked.values()) == 0  # silence is no offence
        assert len(daemon.server.connections) == 1  # the talker is still served


@pytest.mark.e2e
async def test_a_message_held_half_sent_is_an_offence(tmp_path: Path) -> None:
    overrides = {"network.idle_timeout": 60.0, "network.partial_message_timeout": 0.5}
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        dripper = await Peer.connect(daemon.address)
        header = encode_header(random_guid(), MessageType.QUERY, 3, 0, 100)

        async def drip() -> None:
            await dripper.send(header + b"\x80\x00")
            for _ in range(80):  # one byte every 0.1 s: never idle, never whole
                await trio.sleep(0.1)
                await dripper.send(b"x")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drip)
            frames = await dripper.wait_closed(timeout=10)
            nursery.cancel_scope.cancel()
        assert [b.code for b in byes(frames)] == [405]
        assert daemon.server.timed_out["partial-message"] == 1
        await wait_until(lambda: daemon.server.kicked["partial-message"] == 1)
        # Kicked, so banned for a while.
        with pytest.raises(PeerRefused) as refusal:
            await Peer.connect(daemon.address, guid=dripper.guid)
        assert refusal.value.rejection.status_code == 403


@pytest.mark.e2e
async def test_half_a_handshake_line_is_cut_off_by_the_handshake_timeout(tmp_path: Path) -> None:
    overrides = {"network.handshake_timeout": 0.3}
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        stream = await open_stream(daemon.address, source="127.0.0.2")
        try:
            await stream.send_all(b"GNUTELLA CONNECT/0.6\r\nUser-Ag")
            with trio.fail_after(10):
                assert await stream.receive_some(4096) == b""
        finally:
            await stream.aclose()
        assert daemon.server.refused["handshake-timeout"] == 1
