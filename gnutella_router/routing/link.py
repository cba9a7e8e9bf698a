"""What the router stage needs of its peers, and nothing more: a :class:`Link` for each,
and one :class:`Outbox` for everything it sends.

The router decides where messages go; it reads each peer through its :class:`Link`
(what it announced, whether it is closing or flow-controlled, its Hops Flow) and tells
the link what it saw of the peer (offences, Bye, vendor messages, frames done). It sends
only through the outbox: it offers a peer (named by its link id) encoded messages and
gets the queue's verdict back at once; the peer's too-slow verdicts are acted on behind
the outbox, which also decides when each peer's queue is written (the end of a batch)
and deflates them. Frames arrive carrying their link's id
(:attr:`protocol.framing.Frame.source`), never the link itself.

:class:`gnutella_router.net.connection.Connection` is the link of a TCP peer and
:class:`gnutella_router.net.outbox.Outbox` the outbox; the router's unit tests use the
same outbox over fake links that queue into a real sans-IO outgoing queue.
"""

from __future__ import annotations

from collections.abc import Sequence
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


class Outbox(Protocol):
    """The router's one way out (see :mod:`gnutella_router.net.outbox`)."""

    def links(self) -> Sequence[Link]:
        """The live peers, a snapshot safe to iterate while offering."""
        ...

    def link(self, link_id: int) -> Link | None:
        """The live peer of ``link_id``; None once it has gone."""
        ...

    def offer(self, link_id: int, data: bytes, now: float) -> bool:
        """Offer one encoded message; never waits or writes. False when not queued."""
        ...

    def offer_many(
        self, link_id: int, datas: list[bytes], total_bytes: int, now: float
    ) -> list[bytes]:
        """Offer several; returns those that were not queued."""
        ...

    def offer_whole(self, link_id: int, datas: list[bytes], total_bytes: int) -> bool:
        """Queue all if the queue takes them without a decision of its policy; else
        none (False), and the caller offers them one by one."""
        ...

    def write(self, link_id: int) -> None:
        """Write one peer's queue now (a message made outside a batch)."""
        ...

    def end_batch(self, upcoming: int = 0) -> None:
        """A batch is done: write every peer's queue (``upcoming``: the most the next
        batch, already queued, may offer one peer; a peer that can take that may wait
        for it, once)."""
        ...

    @property
    def idle(self) -> bool:
        """Whether no writer has work left from the last batch."""
        ...
