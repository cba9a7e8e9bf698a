"""Hostile and broken input: each gets its documented reaction, and others stay served."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest
import trio

from gnutella_router.daemon import Daemon
from protocol.constants import MessageType
from protocol.header import encode_header
from protocol.messages import Bye, Message, QrpPatch, QrpReset, Query, random_guid
from protocol.qrp import QrpTable, table_messages
from tests.support.peers import Peer, PeerRefused, message, running_daemons
from tests.support.waiting import of_type, wait_until


async def still_routes(daemon: Daemon) -> None:
    """Two fresh peers can still exchange a query through the daemon."""
    a = await Peer.connect(daemon.address)
    b = await Peer.connect(daemon.address)
    await wait_until(lambda: len(daemon.server.connections) >= 2)
    await a.send(message(Query(b"still alive"), ttl=2))
    await b.receive_matching(of_type(MessageType.QUERY))
    await a.aclose()
    await b.aclose()


async def raw_exchange(address: tuple[str, int], data: bytes, wait: float = 3.0) -> bytes:
    """Send raw bytes as a new connection; return everything until the daemon closes."""
    stream = await trio.open_tcp_stream(*address)
    received = b""
    try:
        if data:
            await stream.send_all(data)
        with trio.fail_after(wait):
            while chunk := await stream.receive_some(65536):
                received += chunk
    except trio.BrokenResourceError:
        pass  # a reset after the daemon's answer: what was read still counts
    finally:
        await stream.aclose()
    return received


@pytest.mark.e2e
async def test_oversized_length_gets_bye_400_and_a_close(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        attacker = await Peer.connect(daemon.address)
        await attacker.send(encode_header(random_guid(), MessageType.QUERY, 3, 0, 1 << 20))
        frames = await attacker.wait_closed()
        byes = [f.message().payload for f in frames if f.payload_type == MessageType.BYE]
        assert len(byes) == 1
        assert isinstance(byes[0], Bye)
        assert byes[0].code == 400
        await still_routes(daemon)


@pytest.mark.e2e
async def test_truncated_payload_then_close_is_harmless(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        attacker = await Peer.connect(daemon.address)
        await attacker.send(
            encode_header(random_guid(), MessageType.QUERY, 3, 0, 100) + b"\x80\x00abc"
        )
        await attacker.aclose()
        await wait_until(lambda: len(daemon.server.connections) == 0)
        await still_routes(daemon)


@pytest.mark.e2e
@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(64), id="tls-hello"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", id="http"),
        pytest.param(b"GNUTELLA CONNECT/1.0\r\n\r\n", id="version-1.0"),
        pytest.param(
            b"GNUTELLA CONNECT/0.6\r\n" + b"X-Long: " + b"a" * 10_000 + b"\r\n", id="1e4-line"
        ),
    ],
)
async def test_garbage_handshakes_are_refused(tmp_path: Path, garbage: bytes) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        reply = await raw_exchange(daemon.address, garbage)
        assert reply == b"" or reply.startswith((b"GNUTELLA/0.6 4", b"GNUTELLA/0.6 5"))
        assert daemon.server.refused["handshake-error"] == 1
        await still_routes(daemon)


@pytest.mark.e2e
async def test_endless_headers_are_cut_off(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        stream = await trio.open_tcp_stream(*daemon.address)
        await stream.send_all(b"GNUTELLA CONNECT/0.6\r\n")
        sent = 0
        with trio.fail_after(5):
            try:
                while sent < 10_000:
                    await stream.send_all(b"X-Filler: yes\r\n" * 50)
                    sent += 50
            except (trio.BrokenResourceError, OSError):
                pass
        await stream.aclose()
        assert sent < 10_000 or daemon.server.refused["handshake-error"] == 1
        await wait_until(lambda: daemon.server.refused["handshake-error"] == 1)
        await still_routes(daemon)


@pytest.mark.e2e
async def test_silent_handshake_times_out(tmp_path: Path) -> None:
    async with running_daemons(tmp_path, overrides={"network.handshake_timeout": 0.3}) as (daemon,):
        start = trio.current_time()
        assert await raw_exchange(daemon.address, b"", wait=3.0) == b""
        assert trio.current_time() - start < 2.0
        assert daemon.server.refused["handshake-timeout"] == 1
        await still_routes(daemon)


@pytest.mark.e2e
async def test_full_node_answers_503_with_hosts_to_try(tmp_path: Path) -> None:
    async with running_daemons(tmp_path, overrides={"network.max_connections": 2}) as (daemon,):
        first = await Peer.connect(daemon.address, extra_headers=[("Listen-IP", "10.1.1.1:6346")])
        await Peer.connect(daemon.address)
        await wait_until(lambda: len(daemon.server.connections) == 2)
        with pytest.raises(PeerRefused) as refused:
            await Peer.connect(daemon.address)
        assert refused.value.rejection.status_code == 503
        assert ("10.1.1.1", 6346) in refused.value.rejection.try_hosts
        await first.send(message(Query(b"full but working"), ttl=2))


@pytest.mark.e2e
async def test_connection_floods_from_one_address_are_limited(tmp_path: Path) -> None:
    overrides = {"network.connects_per_ip_per_minute": 3, "network.trusted": []}
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        for _ in range(3):
            peer = await Peer.connect(daemon.address)
            await peer.aclose()
            # (One connection per untrusted address: the next waits for this one to go.)
            await wait_until(lambda: len(daemon.server.connections) == 0)
        reply = await raw_exchange(daemon.address, b"GNUTELLA CONNECT/0.6\r\n\r\n")
        assert reply.startswith(b"GNUTELLA/0.6 429")
        assert daemon.server.refused["rate-limited"] == 1


@pytest.mark.e2e
async def test_graceful_stop_says_bye_200(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        peer = await Peer.connect(daemon.address)
        await wait_until(lambda: len(daemon.server.connections) == 1)
        daemon.request_stop()
        frames = await peer.wait_closed()
        byes = [f.message().payload for f in frames if f.payload_type == MessageType.BYE]
        assert [b.code for b in byes if isinstance(b, Bye)] == [200]
        with trio.fail_after(5):
            await daemon.stopped.wait()
        assert (tmp_path / "node0" / "hosts.txt").exists()


@pytest.mark.e2e
async def test_refusals_are_warned_once_per_kind_with_a_count(tmp_path: Path) -> None:
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        async with running_daemons(tmp_path, overrides={"network.max_connections": 1}) as (daemon,):
            await Peer.connect(daemon.address)
            await wait_until(lambda: len(daemon.server.connections) == 1)
            for _ in range(3):
                with pytest.raises(PeerRefused):
                    await Peer.connect(daemon.address)
            daemon.server.refusal_warnings.clock = lambda: 1e9  # ten seconds and more later
            with pytest.raises(PeerRefused):
                await Peer.connect(daemon.address)
    refusals = [entry for entry in logs if entry["event"] == "peer refused"]
    assert [entry["code"] for entry in refusals] == [503, 503]
    assert "suppressed" not in refusals[0]
    assert refusals[1]["suppressed"] == 2
    assert refusals[0]["log_level"] == "warning"


@pytest.mark.e2e
async def test_a_connection_summary_leaves_out_what_stayed_zero(tmp_path: Path) -> None:
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        async with running_daemons(tmp_path) as (daemon,):
            peer = await Peer.connect(daemon.address)
            await wait_until(lambda: len(daemon.server.connections) == 1)
            await peer.send(message(Query(b"one query"), ttl=2))
            await wait_until(lambda: daemon.router.received[MessageType.QUERY] == 1)
            await peer.aclose()
            await wait_until(lambda: len(daemon.server.connections) == 0)
    (summary,) = [entry for entry in logs if entry["event"] == "connection closed"]
    assert summary["messages_in"] == 1
    # (messages_out is not among them: the catcher may have pinged the peer meanwhile.)
    for zero in ("malformed_in", "dropped_out", "bye_sent", "bye_received"):
        assert zero not in summary, summary


@pytest.mark.e2e
async def test_loopback_is_trusted_with_connection_attempts_by_default(tmp_path: Path) -> None:
    overrides = {"network.connects_per_ip_per_minute": 3}
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        for _ in range(10):
            peer = await Peer.connect(daemon.address)
            await peer.aclose()
        assert daemon.server.refused["rate-limited"] == 0


def repeated(guid: bytes) -> Message:
    return Message(guid, 3, 0, Query(b"again and again"))


def qrp_tables(count: int) -> list[Message]:
    """``count`` whole QRP tables (a RESET and a patch each), sent at once."""
    table = table_messages(QrpTable.of_words(["again"]))
    return [message(m, ttl=1) for _ in range(count) for m in table]


def qrp_bomb() -> list[Message]:
    """A 64-slot table whose one patch inflates to a megabyte."""
    bomb = QrpPatch(1, 1, 1, 8, zlib.compress(bytes(1 << 20), 9))
    return [message(QrpReset(64, 7), ttl=1), message(bomb, ttl=1)]


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("abuse", "bye_code", "offence"),
    [
        ([repeated(b"D" * 16)] * 60, 401, "duplicate"),
        ([message(Query(b"far"), ttl=60) for _ in range(25)], 403, "high-ttl"),
        ([encode_header(random_guid(), MessageType.PING, 1, 0, 2) + b"xx"] * 25, 411, "malformed"),
        (qrp_tables(6), 410, "qrp-too-soon"),
        (qrp_bomb(), 413, "qrp-invalid"),
    ],
    ids=["same-guid", "ttl-60", "garbled", "qrp-flood", "qrp-zlib-bomb"],
)
async def test_an_abusive_peer_is_kicked_banned_and_others_keep_routing(
    tmp_path: Path, abuse: list[Message | bytes], bye_code: int, offence: str
) -> None:
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        async with running_daemons(tmp_path) as (daemon,):
            bystander = await Peer.connect(daemon.address)
            abuser = await Peer.connect(daemon.address)
            await abuser.send(*abuse)
            with trio.fail_after(15):
                frames = await abuser.wait_closed(timeout=15)
            (bye,) = [f.message().payload for f in frames if f.payload_type == MessageType.BYE]
            assert isinstance(bye, Bye)
            assert bye.code == bye_code
            await wait_until(lambda: daemon.server.kicked[offence] == 1)

            # Its reconnects are refused for a while, although it comes from loopback...
            with pytest.raises(PeerRefused) as refused:
                await Peer.connect(daemon.address, guid=abuser.guid)
            assert refused.value.rejection.status_code == 403
            # ... while others from the same address are welcome and routed.
            await still_routes(daemon)
            await bystander.send(message(Query(b"bystander"), ttl=2))
            await wait_until(lambda: daemon.router.received[MessageType.QUERY] >= 2)
    (summary,) = [e for e in logs if e["event"] == "connection closed" and e.get("bye_sent")]
    assert summary["bye_sent"] == bye_code
    assert summary["reason"].startswith("kicked:")
    (kick,) = [e for e in logs if e["event"] == "peer kicked"]
    assert kick["offence"] == offence
    assert kick["banned_by"] == ["guid"]  # loopback: never by IP


@pytest.mark.e2e
async def test_kicks_can_be_turned_off(tmp_path: Path) -> None:
    async with running_daemons(tmp_path, overrides={"abuse.enabled": False}) as (daemon,):
        peer = await Peer.connect(daemon.address)
        await peer.send(*[repeated(b"E" * 16)] * 100)
        await wait_until(lambda: daemon.router.dropped["duplicate", MessageType.QUERY] == 99)
        assert len(daemon.server.connections) == 1
        assert sum(daemon.server.kicked.values()) == 0


@pytest.mark.e2e
async def test_garbage_sent_as_query_hits_is_malformed_and_kicked(tmp_path: Path) -> None:
    import random

    rng = random.Random(7)
    garbage = [
        encode_header(random_guid(), MessageType.QUERY_HIT, 3, 0, 200) + rng.randbytes(200)
        for _ in range(25)
    ]
    async with running_daemons(tmp_path) as (daemon,):
        abuser = await Peer.connect(daemon.address)
        await abuser.send(*garbage)
        frames = await abuser.wait_closed(timeout=15)
        (bye,) = [f.message().payload for f in frames if f.payload_type == MessageType.BYE]
        assert isinstance(bye, Bye)
        assert bye.code == 411
        assert daemon.router.dropped["malformed", MessageType.QUERY_HIT] >= 20
        await still_routes(daemon)


@pytest.mark.e2e
async def test_a_connection_reset_before_it_is_looked_at_costs_nothing(tmp_path: Path) -> None:
    """A peer that resets between accept() and getpeername() (ENOTCONN) once stopped
    the whole daemon; now it is one accept error."""
    import errno
    from types import SimpleNamespace
    from typing import Any, cast

    class ResetSocket:
        def getpeername(self) -> tuple[str, int]:
            raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")

    closed: list[bool] = []

    async def aclose() -> None:
        closed.append(True)

    reset = SimpleNamespace(socket=ResetSocket(), aclose=aclose)
    async with running_daemons(tmp_path) as (daemon,):
        await daemon.server._serve_connection(cast(Any, reset))
        assert daemon.server.refused["accept-error"] == 1
        assert closed == [True]
        await still_routes(daemon)
