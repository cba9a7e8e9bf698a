"""Slots on loopback, with real sockets: one address's share (409), and a crowd's slots
given to newcomers from other networks (Bye 202).

Each peer connects from an address of its own in 127.0.0.0/8 (all loopback on Linux),
and the daemon trusts only ``::1``, so that these addresses count as separate hosts.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from gnutella_router.daemon import Daemon
from protocol.constants import MessageType
from protocol.framing import Frame
from protocol.messages import Bye, Ping
from tests.support.peers import Peer, PeerRefused, message, running_daemons
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
