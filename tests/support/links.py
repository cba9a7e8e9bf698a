"""A router driven without sockets: fake links whose outgoing queue is the real, sans-IO
threshold queue, written to by the real outbox, so what a link "sent" is what the router
queued for it; and the messages the tests hand it."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Sequence

import msgspec
import trio

from gnutella_router.config import Config
from gnutella_router.config.sections import SheddingConfig
from gnutella_router.control.abuse import Offence
from gnutella_router.net.outbox import Outbox
from gnutella_router.net.outqueue import OutgoingQueue, Verdict
from gnutella_router.net.threshold_queue import ThresholdQueue
from gnutella_router.stages.router import GnutellaRouter
from protocol.capabilities import Capabilities
from protocol.codec import encode_message
from protocol.framing import Frame, FrameDecoder
from protocol.messages import Message, Payload, QueryHit, QueryHitResult, random_guid
from protocol.vendor import NO_HOPS_FLOW, Feature, VendorMessageId

OWN_GUID = b"R" * 16


def message(payload: Payload, ttl: int = 7, hops: int = 0, guid: bytes | None = None) -> Message:
    return Message(guid or random_guid(), ttl, hops, payload)


def hit(servent: bytes = b"S" * 16) -> QueryHit:
    return QueryHit(6346, "192.0.2.9", 100, (QueryHitResult(1, 10, b"song.ogg"),), servent)


def types(frames: Iterable[Frame]) -> list[int]:
    return [frame.payload_type for frame in frames]


class FakeLink:
    """A :class:`Link` whose outgoing queue is a real one and whose socket is a list."""

    def __init__(self, link_id: int, **capabilities: object) -> None:
        self.id = link_id
        self.capabilities = Capabilities(**capabilities)  # type: ignore[arg-type]
        self.outgoing: OutgoingQueue = ThresholdQueue()
        self.closing = False
        self.close_reason: str | None = None
        self.bye_code_sent: int | None = None
        self.malformed_in = 0
        self.bye_code_received: int | None = None
        self.flushes = 0
        self.writer = self
        """The outbox's writer: a fake link is its own (its socket is a list)."""
        self.busy = False
        """A fake link has no writer task: tests set this to play one with work left."""
        self.deflates = False
        """Whether its writes count as deflated for the outbox: tests set it."""
        self.done = 0
        self.hops_flow = NO_HOPS_FLOW
        self.offences: collections.Counter[Offence] = collections.Counter()
        self.vendor_messages: tuple[VendorMessageId, ...] | None = None
        self.features: tuple[Feature, ...] | None = None

    @property
    def flow_controlled(self) -> bool:
        return self.outgoing.flow_controlled

    @property
    def listen_address(self) -> tuple[str, int] | None:
        return self.capabilities.listen_address

    def send(self, data: bytes, now: float) -> bool:
        """Offer one message straight to the queue: the naive reference router's way
        (the router under test offers through the outbox)."""
        verdict = self.outgoing.offer(data, data[16], data[18], now)
        self.act_on(verdict)
        return verdict is Verdict.QUEUED

    def act_on(self, verdict: Verdict) -> None:
        if verdict not in (Verdict.QUEUED, Verdict.DROPPED):
            self.close("slow peer")

    def flush(self) -> None:
        self.flushes += 1

    def frames_done(self, count: int) -> None:
        self.done += count

    def offended(self, offence: Offence, now: float) -> None:
        self.offences[offence] += 1
        if offence is Offence.MALFORMED:
            self.malformed_in += 1

    def received_messages_supported(self, understood: tuple[VendorMessageId, ...]) -> None:
        self.vendor_messages = understood

    def received_features_supported(self, features: tuple[Feature, ...]) -> None:
        self.features = features

    def understands(self, message: VendorMessageId) -> bool:
        return self.vendor_messages is not None and message in self.vendor_messages

    def received_hops_flow(self, hops: int) -> None:
        self.hops_flow = hops

    def received_bye(self, code: int, reason: str) -> None:
        self.bye_code_received = code
        self.close(f"peer said Bye {code}: {reason}")

    def close(self, reason: str, *, bye_code: int | None = None) -> None:
        self.closing = True
        self.close_reason = reason
        self.bye_code_sent = bye_code

    def sent(self) -> list[Frame]:
        """Everything queued for this link so far, decoded, oldest first."""
        data = b"".join(self.outgoing.take(1 << 30))
        return FrameDecoder().receive_data(data) if data else []


class LinkList:
    """The outbox's registry over a test's list of links (which tests may swap)."""

    def __init__(self, links: Callable[[], Sequence[FakeLink]]) -> None:
        self._links = links

    def snapshot(self) -> tuple[FakeLink, ...]:
        return tuple(self._links())

    def get(self, link_id: int) -> FakeLink | None:
        return next((link for link in self._links() if link.id == link_id), None)


def outbox_over(links: Callable[[], Sequence[FakeLink]]) -> Outbox[FakeLink]:
    """An outbox writing to the fake links ``links()`` returns at each call."""
    return Outbox(LinkList(links))


class Network:
    """A router and its fake links; ``send`` hands it frames as a reader would."""

    def __init__(
        self,
        links: int = 3,
        *,
        shedding: SheddingConfig | None = None,
        drop_ancient_queries: bool = False,
        query_rate: tuple[float, int] | None = None,
        **capabilities: object,
    ) -> None:
        self.links = [FakeLink(i + 1, **capabilities) for i in range(links)]
        config = Config()
        self.router = GnutellaRouter(
            msgspec.structs.replace(
                config.router,
                drop_ancient_queries=drop_ancient_queries,
                **(
                    {}
                    if query_rate is None
                    else {"peer_query_rate": query_rate[0], "peer_query_burst": query_rate[1]}
                ),
            ),
            shedding=shedding,
            outbox=outbox_over(lambda: self.links),
            own_address=lambda: ("192.0.2.1", 6346),
            own_guid=OWN_GUID,
            max_ttl=config.network.max_ttl,
            hard_ttl_limit=config.network.hard_ttl_limit,
            now=trio.current_time(),
        )

    def link(self, link_id: int) -> FakeLink | None:
        """The link with that id, as the server's registry answers (links may be swapped)."""
        return next((link for link in self.links if link.id == link_id), None)

    async def send(self, link: FakeLink, *messages: Message) -> None:
        data = b"".join(encode_message(m) for m in messages)
        frames = FrameDecoder(source=link.id).receive_data(data)
        await self.router.handle(frames)

    def dropped(self, reason: str, message_type: int) -> int:
        return self.router.dropped[reason, message_type]
