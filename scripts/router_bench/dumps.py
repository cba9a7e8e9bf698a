"""A router's route tables filled by a flood peer, and its largest dumps asked for: the
parts ``scripts/bench_dump_stall.py`` measures with and the attack suite's admin
scenarios (``scripts/router_attack/admin.py``) attack with.

The flood peer is an ultrapeer whose every message has a new GUID and TTL 1, so the
router records each and forwards nothing; the dumps are read to the end over HTTP (or,
for SIGUSR1, waited for as the file appears) and thrown away.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import h11
import trio

from gnutella_router.net.handshaking import next_handshake_event
from protocol.codec import encode_message
from protocol.constants import MessageType
from protocol.framing import FrameDecoder
from protocol.handshake import HandshakeComplete, HandshakeResponse, Initiator
from protocol.messages import Message, Ping, Query, random_guid
from scripts.router_bench.peers import MINIMAL_HEADERS, BenchError

LIMIT = 100_000
"""Entries asked for per table: the admin interface's largest page."""
PING_BURST = 200
"""Flood pings sent before waiting for their pongs."""


async def http_get(
    address: tuple[str, int], target: str, keep: bool = False
) -> tuple[int, int, bytes]:
    """GET ``target``: the status, the body's length and (with ``keep``) the body."""
    stream = await trio.open_tcp_stream(*address)
    async with stream:
        client = h11.Connection(h11.CLIENT)
        request = h11.Request(method="GET", target=target, headers=[("host", "admin")])
        await stream.send_all(
            (client.send(request) or b"") + (client.send(h11.EndOfMessage()) or b"")
        )
        status, size, body = 0, 0, bytearray()
        while True:
            event = client.next_event()
            if event is h11.NEED_DATA:
                client.receive_data(await stream.receive_some(1 << 20))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if keep:
                    body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return status, size, bytes(body)
            else:
                raise BenchError(f"GET {target}: the connection ended early ({event!r})")


async def table_sizes(admin: tuple[str, int]) -> dict[str, int]:
    status, _, body = await http_get(admin, "/stats", keep=True)
    if status != 200:
        raise BenchError(f"/stats answered {status}")
    tables = json.loads(body)["router"]["tables"]
    return {name: int(tables[name]["size"]) for name in ("ping", "query", "push")}


def messages(count: int, payload: Message) -> bytes:
    """``count`` copies of ``payload``'s message (TTL 1), each with a new GUID."""
    rest = encode_message(payload)[16:]
    guids = os.urandom(16 * count)
    return b"".join(guids[n : n + 16] + rest for n in range(0, 16 * count, 16))


async def handshaken(address: tuple[str, int]) -> tuple[trio.SocketStream, FrameDecoder]:
    """A peer, handshaken as an ultrapeer that does not cache pongs (a router records
    such a peer's pings, which fill its ping table; a caching peer's pings it answers
    without recording them); its decoder holds what the router sent right after the
    handshake."""
    stream = await trio.open_tcp_stream(*address)
    initiator = Initiator()
    headers = [*MINIMAL_HEADERS, ("GUID", random_guid().hex())]
    await stream.send_all(initiator.start(headers))
    response = await next_handshake_event(stream, initiator)
    if not isinstance(response, HandshakeResponse):
        raise BenchError(f"a handshake was refused: {response!r}")
    await stream.send_all(initiator.confirm())
    complete = await next_handshake_event(stream, initiator)
    assert isinstance(complete, HandshakeComplete), complete
    decoder = FrameDecoder()
    if complete.trailing_data:  # (empty data would mean the end of the stream)
        decoder.receive_data(complete.trailing_data)
    return stream, decoder


class Flooder:
    """The peer that fills the route tables, and counts the pongs it gets back."""

    def __init__(self, stream: trio.SocketStream, decoder: FrameDecoder) -> None:
        self.stream = stream
        self.decoder = decoder
        self.pongs = 0
        self._wanted = 0
        self._arrived = trio.Event()

    async def read(self) -> None:
        """Count the pongs until the connection ends."""
        while data := await self.stream.receive_some(1 << 20):
            frames = self.decoder.receive_data(data)
            self.pongs += sum(1 for f in frames if f.payload_type == MessageType.PONG)
            if self.pongs >= self._wanted:
                self._arrived.set()
        raise BenchError("the router closed the flood peer's connection")

    async def pongs_reach(self, count: int) -> None:
        self._wanted = count
        self._arrived = trio.Event()
        if self.pongs < count:
            await self._arrived.wait()

    async def fill(
        self, admin: tuple[str, int], sizes: dict[str, int], queries: int, pings: int
    ) -> None:
        """Send a flood of ``queries`` and ``pings`` and wait until the router has recorded
        all of it (``sizes``: the route tables' sizes, as last read).

        The queries go at once (nothing answers them); the pings a burst at a time, the
        next once the last one's pongs are in: a router lets a peer's outgoing queue
        hold a bounded number of messages (2,000 by default), and one read of a flood
        of pings would make more pongs.
        """
        query, ping = Message(bytes(16), 1, 0, Query(b"dump")), Message(bytes(16), 1, 0, Ping())
        await self.stream.send_all(messages(queries, query))
        for sent in range(0, pings, PING_BURST):
            burst = min(PING_BURST, pings - sent)
            await self.stream.send_all(messages(burst, ping))
            await self.pongs_reach(sent + burst)
        while True:
            sizes.update(await table_sizes(admin))
            if sizes["query"] >= queries and sizes["ping"] >= pings:
                return
            await trio.sleep(0.2)


async def sigusr1(pid: int, state: Path) -> int:
    """SIGUSR1, then wait for the dump file (renamed into place once written); its size.

    Polled: another process makes it. Listing a directory of a file or two every 10 ms
    costs microseconds, so it is done inline rather than in a thread.
    """

    def dumps() -> set[Path]:
        return set(state.glob("dump-*.json"))

    before = dumps()
    os.kill(pid, signal.SIGUSR1)
    while not (new := dumps() - before):  # noqa: ASYNC110 - a file another process makes
        await trio.sleep(0.01)
    return sum(path.stat().st_size for path in new)
