"""gtk-gnutella 1.2.3, replayed from its recorded loopback sessions, in both directions.

The bytes gtk-gnutella sends (its step-1 and step-2 headers, its bare deflated step 3,
the vendor and QRP messages it sends right after a handshake, its TTL 4 ping carrying
GGEP SCP, its shutdown Bye) come from shared/notes/gtk-gnutella-interop.md. What
gtk-gnutella demands of an ultrapeer (X-Ultrapeer; X-Degree >= 16 and
X-Dynamic-Querying for its leaves; no sflag; deflate offered) is checked on what the
daemon sends. Everything runs over loopback TCP against a real daemon.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from protocol.capabilities import Capabilities
from protocol.codec import encode_message
from protocol.compression import DeflateCompressor, DeflateDecompressor
from protocol.constants import MessageType
from protocol.framing import Frame, FrameDecoder
from protocol.ggep import GGEPBlock, GGEPExtension
from protocol.headers import HeaderBlock
from protocol.messages import (
    Bye,
    Message,
    Ping,
    Query,
    random_guid,
)
from protocol.qrp import QrpTable, table_messages
from protocol.vendor import (
    HOPS_FLOW,
    Feature,
    VendorMessageId,
    features_supported,
    messages_supported,
)
from tests.support.gtk_vectors import GTKG_STEP1, GTKG_STEP2
from tests.support.peers import Peer, message, running_daemons
from tests.support.waiting import wait_until

GTKG_STEP3_DEFLATE = b"GNUTELLA/0.6 200 OK\r\nContent-Encoding: deflate\r\n\r\n"


GTKG_VENDOR_MESSAGES = [
    VendorMessageId(vendor, selector, version)
    for vendor, selector, version in [
        *((b"BEAR", 4, 1), (b"BEAR", 7, 1), (b"BEAR", 11, 1), (b"BEAR", 12, 1)),
        *((b"GTKG", 7, 1), (b"GTKG", 7, 2), (b"GTKG", 9, 1), (b"GTKG", 10, 1)),
        *((b"GTKG", 21, 1), (b"GTKG", 22, 1), (b"GTKG", 23, 1)),
        *((b"LIME", 5, 1), (b"LIME", 11, 2), (b"LIME", 11, 3), (b"LIME", 12, 1)),
        *((b"LIME", 12, 2), (b"LIME", 12, 3), (b"LIME", 13, 1), (b"LIME", 21, 1)),
        *((b"LIME", 21, 2), (b"LIME", 22, 1), (b"LIME", 22, 2), (b"LIME", 23, 1)),
        *((b"LIME", 23, 2), (b"LIME", 24, 1), (b"LIME", 24, 2)),
    ]
]
"""The vendor messages a gtk-gnutella 1.2.3 built without GnuTLS lists (its vmsg.c)."""
GTKG_FEATURES = [
    Feature("HSEP", 1),
    Feature("WHAT", 1),
    Feature("QRP1", 1),
    Feature("F2FT", 0xFFFF),
    Feature("TCPI", 1),
]


def gtk_opening_messages() -> tuple[list[Message], bytes]:
    """What gtk-gnutella sends an ultrapeer right after the handshake, and its ping's GUID."""
    scp_ping = Message(random_guid(), 4, 0, Ping(GGEPBlock((GGEPExtension("SCP", b"\x01"),))))
    messages = [
        messages_supported(GTKG_VENDOR_MESSAGES),
        features_supported(GTKG_FEATURES),
        # Its last-hop table: what its leaves share, 65,536 slots of 4 bits, one
        # compressed PATCH.
        *(
            Message(random_guid(), 1, 0, qrp)
            for qrp in table_messages(
                QrpTable.of_words(["interop", "relay"]), entry_bits=4, infinity=2, patch_bytes=8192
            )
        ),
        scp_ping,
    ]
    return messages, scp_ping.guid


class DeflatedLink:
    """gtk-gnutella's side of a link after a handshake that negotiated deflate both ways."""

    def __init__(self, stream: trio.SocketStream, leftover: bytes = b"") -> None:
        self.stream = stream
        self.out = DeflateCompressor()
        self.inflater = DeflateDecompressor()
        self.decoder = FrameDecoder()
        self.frames: list[Frame] = []
        if leftover:
            self._take(leftover)

    def _take(self, data: bytes) -> None:
        self.inflater.receive_data(data)
        while chunk := self.inflater.read():
            self.frames.extend(self.decoder.receive_data(chunk))

    async def send(self, *messages: Message) -> None:
        await self.stream.send_all(self.out.compress(b"".join(map(encode_message, messages))))

    async def receive(self, message_type: int) -> Frame:
        with trio.fail_after(3):
            while True:
                for frame in self.frames:
                    if frame.payload_type == message_type:
                        self.frames.remove(frame)
                        return frame
                data = await self.stream.receive_some(65536)
                assert data, "the daemon closed the link"
                self._take(data)


async def read_head(stream: trio.SocketStream) -> tuple[bytes, bytes]:
    """One handshake head (up to the blank line) and whatever followed it."""
    buffer = b""
    with trio.fail_after(3):
        while b"\r\n\r\n" not in buffer:
            chunk = await stream.receive_some(4096)
            assert chunk, "closed during the handshake"
            buffer += chunk
    head, _, rest = buffer.partition(b"\r\n\r\n")
    return head + b"\r\n\r\n", rest


def check_ultrapeer_headers(head: bytes) -> Capabilities:
    """What gtk-gnutella 1.2 requires of an ultrapeer it talks to (see the interop notes)."""
    lines = head.decode("latin-1").split("\r\n")
    headers = HeaderBlock.parse_lines([line.encode("latin-1") for line in lines[1:] if line])
    capabilities = Capabilities.from_headers(headers)
    assert capabilities.ultrapeer is True  # else "403 Normal nodes refused"
    assert capabilities.degree >= 16  # else its leaves: "403 High Outdegree ... Required"
    assert capabilities.dynamic_querying
    assert capabilities.accepts_deflate  # its leaves prefer compressed links
    assert not any(name == "sflag" for name, _ in capabilities.features)
    assert capabilities.user_agent is not None
    assert not capabilities.user_agent.lower().startswith("gtk-gnutella")
    assert capabilities.bye_packet
    return capabilities


@pytest.mark.e2e
async def test_gtk_gnutella_dialing_the_daemon(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,):
        stream = await trio.open_tcp_stream(*daemon.address)
        await stream.send_all(GTKG_STEP1)
        head, rest = await read_head(stream)
        assert head.startswith(b"GNUTELLA/0.6 200")
        check_ultrapeer_headers(head)
        assert b"\r\nContent-Encoding: deflate\r\n" in head  # gtk asked for it
        await stream.send_all(GTKG_STEP3_DEFLATE)
        link = DeflatedLink(stream, rest)
        opening, ping_guid = gtk_opening_messages()
        await link.send(*opening)

        pong = await link.receive(MessageType.PONG)
        assert pong.guid == ping_guid
        assert (pong.ttl, pong.hops) == (1, 0)
        await wait_until(lambda: daemon.router.consumed[MessageType.QRP] == 2)
        assert daemon.router.consumed[MessageType.VENDOR] == 2
        (connection,) = daemon.server.connections.snapshot()
        assert connection.session.malformed_in == 0
        assert connection.session.peer_vendor_messages is not None
        assert HOPS_FLOW in connection.session.peer_vendor_messages
        assert connection.session.peer_features is not None
        assert Feature("HSEP", 1) in connection.session.peer_features
        assert connection.capabilities.user_agent is not None
        assert connection.capabilities.user_agent.startswith("gtk-gnutella/1.2.3")
        assert connection.statistics(trio.current_time()).deflate_in

        # Traffic from another peer reaches gtk-gnutella, deflated, modern-flagged.
        other = await Peer.connect(daemon.address)
        await wait_until(lambda: len(daemon.server.connections) == 2)
        await other.send(message(Query(b"interop relay"), ttl=3))
        query = await link.receive(MessageType.QUERY)
        payload = query.message().payload
        assert isinstance(payload, Query)
        assert payload.is_modern

        # gtk-gnutella's shutdown Bye ends its link, and only its link.
        await link.send(Message(random_guid(), 1, 0, Bye(200, "Servent shutdown")))
        await wait_until(lambda: len(daemon.server.connections) == 1)
        assert connection.session.bye_code_received == 200
        await stream.aclose()


async def serve_as_gtk(
    record: list[bytes], *, task_status: trio.TaskStatus[tuple[str, int]]
) -> None:
    """Accept one connection the way gtk-gnutella does, then play its opening."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    listener = listeners[0]
    task_status.started(listener.socket.getsockname()[:2])
    stream = await listener.accept()
    await listener.aclose()
    step1, _ = await read_head(stream)
    record.append(step1)
    await stream.send_all(GTKG_STEP2)
    step3, rest = await read_head(stream)
    record.append(step3)
    link = DeflatedLink(stream, rest)
    opening, ping_guid = gtk_opening_messages()
    await link.send(*opening)
    pong = await link.receive(MessageType.PONG)
    record.append(b"pong" if pong.guid == ping_guid else b"wrong pong")
    await stream.aclose()


@pytest.mark.e2e
async def test_the_daemon_dialing_gtk_gnutella(tmp_path: Path) -> None:
    async with running_daemons(tmp_path) as (daemon,), trio.open_nursery() as nursery:
        record: list[bytes] = []
        address = await nursery.start(serve_as_gtk, record)
        connection = await daemon.server.dial(*address, timeout=5)
        assert connection.capabilities.user_agent is not None
        assert connection.capabilities.user_agent.startswith("gtk-gnutella/1.2.3")
        assert connection.capabilities.max_ttl == 4
        with trio.fail_after(5):
            while len(record) < 3:
                await trio.sleep(0.01)
        step1, step3, verdict = record
        assert step1.startswith(b"GNUTELLA CONNECT/0.6\r\n")
        check_ultrapeer_headers(step1)
        assert step3.startswith(b"GNUTELLA/0.6 200")
        assert b"\r\nContent-Encoding: deflate\r\n" in step3  # gtk offered deflate
        assert verdict == b"pong"
