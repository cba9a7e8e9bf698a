"""Emulated link delay: what the router writes to a peer is held for the link's delay.

Theory of operation
-------------------
A test network on one machine has links of a few microseconds; overlays on the
internet have tens of milliseconds per hop, and what a study measures (the time to a
first hit, how far a query gets before its answer) depends on it. The kernel's netem
qdisc delays packets where it exists; where it does not (this project's own machine has
no netem), the router delays its own writes: ``[emulation] enabled = true``, off by
default and only for test networks. Every startup says so in a warning, and ``/stats``
carries a ``link_emulation`` section with the figures below, so a delayed router is
never mistaken for a slow one.

Each connection's stream is wrapped (:func:`wrap_stream`, called once where the server
makes a connection) in a :class:`DelayedStream` when its link has a delay. Its
``send_all`` stamps the chunk with a due time, ``now + delay`` (plus a uniform draw in
``[-jitter, +jitter]``, never below zero), puts it in a first-in first-out line and
returns; a pump task, started when the line fills and ended when it empties (an idle
link has no task), sleeps until the first chunk is due, writes every chunk that is due
by then in one write, and so on. Due times never go backwards, so a stream's bytes keep
their order (netem's jitter reorders packets, which TCP puts back in order; holding the
stream in order gives what the peer's reader would see). The delay is one way: each end
of a link delays what it sends, so a message crossing four links is held four times.

Only what follows the handshake is delayed (the stream is wrapped when the connection
is made): handshakes cross an emulated link at the machine's own speed, so a network
forms a few round trips sooner than it would over real links of that delay.

The line is bounded (``held_bytes``, 1 MiB by default): past it ``send_all`` waits until
the pump has written enough, so the connection's writer waits and its outgoing queue
fills under the slow-peer policy, as with a socket whose buffer is full; nothing grows
without bound. Closing writes what is held first, within the caller's deadline (the
connection gives its Bye half a second), then closes the socket.

Which delay a peer gets: the ``links`` entry for its listening address (``HOST:PORT``,
announced in the handshake, or the address dialled), else the entry for its host, else
``delay_ms``/``jitter_ms``. A test network gives each router an entry per planned
neighbour and leaves the default at zero, so its load client's connections are not
delayed; a link with no delay is not wrapped at all.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import random

import structlog
import trio

from gnutella_router.config.sections import EmulationConfig, host_spelling, parse_link

NOTE = (
    "emulated link delay: writes to peers are held for their link's delay before they "
    "reach the socket, so latencies include it (a test network's setting, never a real "
    "network's)"
)


@dataclasses.dataclass(frozen=True, slots=True)
class LinkDelay:
    """One way: seconds a write is held, and the spread around it."""

    delay: float
    jitter: float = 0.0

    @property
    def none(self) -> bool:
        return self.delay <= 0 and self.jitter <= 0

    def draw(self, rng: random.Random) -> float:
        if not self.jitter:
            return self.delay
        return max(0.0, self.delay + rng.uniform(-self.jitter, self.jitter))


NO_DELAY = LinkDelay(0.0)


@dataclasses.dataclass(frozen=True, slots=True)
class EmulationStatistics:
    """What the emulation did, for ``/stats``."""

    note: str
    delay_ms: float
    jitter_ms: float
    links: int
    """Peers (addresses or hosts) with a delay of their own."""
    streams: int
    """Connections whose writes are being delayed now."""
    held_chunks: int
    held_bytes: int
    delayed_chunks: int
    delayed_bytes: int
    lateness_ms_mean: float
    """How long after its due time a chunk was written, on average: the machine's own
    delay on top of the emulated one (a busy machine's shows here)."""
    lateness_ms_max: float


class LinkEmulation:
    """One router's emulated links; see the module docstring."""

    def __init__(
        self,
        settings: EmulationConfig,
        *,
        rng: random.Random | None = None,
        log: structlog.typing.FilteringBoundLogger | None = None,
    ) -> None:
        self.settings = settings
        self.default = LinkDelay(settings.delay_ms / 1000, settings.jitter_ms / 1000)
        self.by_address: dict[tuple[str, int], LinkDelay] = {}
        self.by_host: dict[str, LinkDelay] = {}
        for text in settings.links:
            host, port, delay_ms, jitter_ms = parse_link(text)
            delay = LinkDelay(delay_ms / 1000, jitter_ms / 1000)
            if port is None:
                self.by_host[host] = delay
            else:
                self.by_address[(host, port)] = delay
        self.rng = rng or random.Random()
        self.capacity = settings.held_bytes
        self.streams = 0
        self.held_chunks = 0
        self.held_bytes = 0
        self.delayed_chunks = 0
        self.delayed_bytes = 0
        self._lateness_total = 0.0
        self._lateness_count = 0
        self._lateness_max = 0.0
        if log is not None:
            log.warning(
                "link emulation on",
                note=NOTE,
                delay_ms=settings.delay_ms,
                jitter_ms=settings.jitter_ms,
                links=len(settings.links),
            )

    @classmethod
    def from_config(
        cls, settings: EmulationConfig, log: structlog.typing.FilteringBoundLogger
    ) -> LinkEmulation | None:
        """The emulation the settings ask for, or None when it is off."""
        return cls(settings, log=log) if settings.enabled else None

    def delay_for(self, listen: tuple[str, int] | None, peer: tuple[str, int]) -> LinkDelay:
        """The delay of the link to a peer that listens at ``listen`` (when known) and
        is connected from ``peer``."""
        for address in (listen, peer):
            if address is None:
                continue
            host = host_spelling(address[0])
            found = self.by_address.get((host, address[1])) or self.by_host.get(host)
            if found is not None:
                return found
        return self.default

    def record_write(self, chunks: int, size: int, lateness: float) -> None:
        self.held_chunks -= chunks
        self.held_bytes -= size
        self.delayed_chunks += chunks
        self.delayed_bytes += size
        self._lateness_total += lateness
        self._lateness_count += 1
        self._lateness_max = max(self._lateness_max, lateness)

    def statistics(self) -> EmulationStatistics:
        count = self._lateness_count
        return EmulationStatistics(
            note=NOTE,
            delay_ms=self.settings.delay_ms,
            jitter_ms=self.settings.jitter_ms,
            links=len(self.by_address) + len(self.by_host),
            streams=self.streams,
            held_chunks=self.held_chunks,
            held_bytes=self.held_bytes,
            delayed_chunks=self.delayed_chunks,
            delayed_bytes=self.delayed_bytes,
            lateness_ms_mean=round(self._lateness_total / count * 1000, 3) if count else 0.0,
            lateness_ms_max=round(self._lateness_max * 1000, 3),
        )


def wrap_stream(
    emulation: LinkEmulation | None,
    stream: trio.abc.Stream,
    *,
    listen: tuple[str, int] | None,
    peer: tuple[str, int],
    nursery: trio.Nursery | None,
) -> trio.abc.Stream:
    """``stream``, or a :class:`DelayedStream` around it when the emulation is on and
    the peer's link has a delay; the pump of a delayed stream runs in ``nursery``."""
    if emulation is None or nursery is None:
        return stream
    delay = emulation.delay_for(listen, peer)
    if delay.none:
        return stream
    return DelayedStream(stream, delay, emulation, nursery)


class DelayedStream(trio.abc.Stream):
    """A stream whose writes reach the socket a link's delay late (module docstring)."""

    def __init__(
        self,
        inner: trio.abc.Stream,
        delay: LinkDelay,
        emulation: LinkEmulation,
        nursery: trio.Nursery,
    ) -> None:
        self.inner = inner
        self.delay = delay
        self._emulation = emulation
        self._nursery = nursery
        self._line: collections.deque[tuple[float, bytes]] = collections.deque()
        self._held = 0
        self._last_due = -math.inf
        self._pumping = False
        self._pump_scope: trio.CancelScope | None = None
        self._written = trio.lowlevel.ParkingLot()
        """Woken whenever the pump has written or ended."""
        self._failure: BaseException | None = None
        self._closed = False
        emulation.streams += 1

    @property
    def held_bytes(self) -> int:
        return self._held

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._closed:
            raise trio.ClosedResourceError("the stream was closed")
        if self._failure is not None:
            raise trio.BrokenResourceError("the link broke") from self._failure
        chunk = bytes(data)
        if chunk:
            due = max(self._last_due, trio.current_time() + self.delay.draw(self._emulation.rng))
            self._last_due = due
            self._line.append((due, chunk))
            self._held += len(chunk)
            self._emulation.held_chunks += 1
            self._emulation.held_bytes += len(chunk)
            if not self._pumping:
                self._pumping = True
                self._nursery.start_soon(self._pump)
        if self._held > self._emulation.capacity:
            await self.wait_send_all_might_not_block()
        else:
            await trio.lowlevel.checkpoint()

    async def wait_send_all_might_not_block(self) -> None:
        while self._held > self._emulation.capacity and self._failure is None:
            await self._written.park()
        if self._failure is not None:
            raise trio.BrokenResourceError("the link broke") from self._failure

    async def _pump(self) -> None:
        line = self._line
        in_flight = (0, 0)
        """Chunks and bytes taken off the line and being written."""
        try:
            with trio.CancelScope() as self._pump_scope:
                while line:
                    due = line[0][0]
                    await trio.sleep_until(due)
                    now = trio.current_time()
                    chunks = []
                    while line and line[0][0] <= now:
                        chunks.append(line.popleft()[1])
                    data = b"".join(chunks)
                    in_flight = (len(chunks), len(data))
                    await self.inner.send_all(data)
                    in_flight = (0, 0)
                    self._held -= len(data)
                    self._emulation.record_write(len(chunks), len(data), now - due)
                    self._written.unpark_all()
        except Exception as exc:  # a broken socket, or a bug: it costs this link only
            self._failure = exc
        finally:
            self._pumping = False
            self._pump_scope = None
            if self._failure is not None or self._closed:
                lost_chunks = len(line) + in_flight[0]
                lost = sum(len(chunk) for _, chunk in line) + in_flight[1]
                self._emulation.held_chunks -= lost_chunks
                self._emulation.held_bytes -= lost
                self._held -= lost
                line.clear()
            self._written.unpark_all()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        """Write what is held (within the caller's deadline), then close the socket."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        try:
            while self._pumping and self._failure is None:
                await self._written.park()
        finally:
            self._closed = True
            if self._pump_scope is not None:
                self._pump_scope.cancel()
            self._emulation.streams -= 1
            await trio.aclose_forcefully(self.inner)
