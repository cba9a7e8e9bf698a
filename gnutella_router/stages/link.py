"""What the router stage needs of a peer connection, and nothing more: a :class:`Link`.

The router decides where messages go; a link carries them. The router hands a link one
encoded message (:meth:`Link.send`) or a batch's broadcasts (:meth:`Link.send_batch`),
and the link's outgoing queue gives its verdict at once; the link acts on that verdict
itself (a peer too slow to keep up is closed by its own link, with the right Bye), and
only tells the router what was not queued, so the router can count it. Frames arrive
carrying their link's id (:attr:`protocol.framing.Frame.source`), never the link itself.

:class:`gnutella_router.net.connection.Connection` is the link of a TCP peer; the
router's unit tests drive it with fake links that queue into a real sans-IO outgoing
queue.
"""

from __future__ import annotations

from typing import Protocol

from gnutella_router.control.abuse import Offence
from protocol.capabilities import Capabilities
from protocol.vendor import Feature, VendorMessageId


class Link(Protocol):
    """A handshaken peer as the router sees it."""

    @property
    def id(self) -> int:
        """Unique for the life of the process; routes hold this, never the link."""
        ...

    @property
    def capabilities(self) -> Capabilities:
        """What the peer announced in its handshake (Pong-Caching, Listen-IP, ...)."""
        ...

    @property
    def listen_address(self) -> tuple[str, int] | None:
        """Where the peer accepts connections, if we know: announced in its handshake,
        or the address we dialled it on."""
        ...

    @property
    def closing(self) -> bool:
        """Whether the link is ending: nothing more should be routed from or to it."""
        ...

    @property
    def flow_controlled(self) -> bool:
        """Whether the link's queue is clogged and shedding; the router then drops the
        queries this peer sends (it is the one clogging us)."""
        ...

    @property
    def hops_flow(self) -> int:
        """Queries whose hop count on the wire is this or more must not go to the peer
        (its Hops Flow vendor message; 255 until it sends one)."""
        ...

    def send(self, data: bytes, message_type: int, hops: int, now: float) -> bool:
        """Queue one encoded message; never waits. False when it was not queued.
        Nothing is written before :meth:`flush`."""
        ...

    def send_batch(self, datas: list[bytes], total_bytes: int, now: float) -> list[bytes]:
        """Queue a batch of encoded messages (their type and hops read from their
        headers); never waits. Returns the ones that were not queued. Nothing is
        written before :meth:`flush`."""
        ...

    def send_all(self, datas: list[bytes], total_bytes: int, now: float) -> bool:
        """Queue all of ``datas`` if the outgoing queue takes them without a decision
        of its policy (room for all, nothing to drop or evict, no verdict); otherwise
        queue none and answer False, and the caller offers them one by one."""
        ...

    def flush(self) -> None:
        """Start writing what was queued. The router calls it on every link once per
        batch (except one whose writes may wait for the next, see
        :meth:`may_defer_flush`), and after each message it originates outside a batch."""
        ...

    def may_defer_flush(self, upcoming: int) -> bool:
        """Whether what is queued may wait for the router's next batch, which will
        queue at most ``upcoming`` more messages here, before being written: true only
        when that cannot change a verdict of the link's outgoing-queue policy."""
        ...

    @property
    def writer_busy(self) -> bool:
        """Whether the link's writer has work the socket has not taken yet (the rest of
        a write, or a deflate under way): it needs the scheduler before the router
        queues another batch here."""
        ...

    def frames_done(self, count: int) -> None:
        """The router has finished with ``count`` more of this link's frames (routed,
        dropped or shed): a link whose peer hung up closes once all are done."""
        ...

    def offended(self, offence: Offence, now: float) -> None:
        """The router dropped a message of this peer for ``offence``: count it (the link
        kicks a peer whose offences pile up, see :mod:`gnutella_router.control.abuse`)."""
        ...

    def received_bye(self, code: int, reason: str) -> None:
        """The peer said Bye: remember its code and end the link."""
        ...

    def received_messages_supported(self, understood: tuple[VendorMessageId, ...]) -> None:
        """The peer's Messages Supported: the vendor messages it understands."""
        ...

    def received_features_supported(self, features: tuple[Feature, ...]) -> None:
        """The peer's Features Supported."""
        ...

    def understands(self, message: VendorMessageId) -> bool:
        """Whether the peer listed ``message`` in its Messages Supported."""
        ...

    def received_hops_flow(self, hops: int) -> None:
        """The peer's Hops Flow: from now on, see :attr:`hops_flow`."""
        ...

    def close(self, reason: str, *, bye_code: int | None = None) -> None:
        """End the link, with a Bye of ``bye_code`` if the peer understands Byes."""
        ...
