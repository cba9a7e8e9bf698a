"""The router routes exactly as a deliberately naive reference does, whatever its peers.

Each test drives the real router and :class:`~tests.support.naive_router.NaiveRouter`
(one message at a time, written for clarity) over links of the same kinds with the same
frames, and compares what every link was sent, which links closed, every counter and
the route tables. The network has every kind of peer the router meets: an ultrapeer
that caches pongs and speaks GGEP (as gtk-gnutella does), one that does neither, a
gtk-gnutella that refuses pre-0.6 queries and announces a low ``X-Max-TTL``, a leaf
with a QRP table, a peer under flow control with a small queue, one that sent Hops
Flow, and one whose small queue gets it closed by its own pongs. Hypothesis draws the
traffic: pings (some malformed), queries (matching the leaf or not, pre-0.6, extended,
malformed), pongs and hits for the GUIDs in play, duplicates and repeats within a run,
TTL abuse, and runs from every link, so that every drop reason comes up.
"""

from __future__ import annotations

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from gnutella_router import native
from gnutella_router.config.sections import SheddingConfig
from gnutella_router.net.flow_control_queue import FlowControlQueue
from gnutella_router.net.threshold_queue import ThresholdQueue
from gnutella_router.stages.router import GnutellaRouter
from protocol.codec import build_payload, encode_message
from protocol.framing import Frame, FrameDecoder
from protocol.ggep import GGEPBlock, daily_uptime_extension, vendor_code_extension
from protocol.messages import (
    HugeExtension,
    Message,
    Payload,
    Ping,
    Pong,
    Query,
    QueryHit,
    QueryHitResult,
)
from protocol.qrp import QrpTable, table_messages
from tests.support.links import FakeLink, Network
from tests.support.naive_router import NaiveRouter

GTK_LIKE = {"ultrapeer": True, "pong_caching": True, "ggep": True}


def make_links() -> list[FakeLink]:
    """One link of every kind (see the module)."""
    links = [
        FakeLink(1, **GTK_LIKE),
        FakeLink(2, ultrapeer=True),
        FakeLink(3, ultrapeer=True, user_agent="gtk-gnutella/1.2.3", max_ttl=3),
        FakeLink(4, ultrapeer=False),
        FakeLink(5, **GTK_LIKE),
        FakeLink(6, ultrapeer=True),
        FakeLink(7, **GTK_LIKE),
    ]
    links[4].outgoing = FlowControlQueue(max_bytes=600)  # flow control after a few copies
    links[5].hops_flow = 3
    links[6].outgoing = ThresholdQueue(max_messages=4)  # closed by its own pongs, or ours
    return links


LEAF_WORDS = ("abbey", "road", "jazz")


def leaf_table() -> list[Frame]:
    table = QrpTable.of_words(LEAF_WORDS)
    messages = [
        Message(bytes([0xEE, i]) + bytes(14), 1, 0, m) for i, m in enumerate(table_messages(table))
    ]
    return frames_of(4, messages)


def frames_of(link_id: int, messages: list[Message]) -> list[Frame]:
    data = b"".join(encode_message(m) for m in messages)
    return FrameDecoder(source=link_id).receive_data(data)


def degrading_shedding() -> SheddingConfig:
    """A response-time controller that never changes its cut or refuses anything."""
    return SheddingConfig(
        policy="response-time",
        degrade_ttl_by=6,
        response_time_initial_rate=1e9,
        response_time_max_rate=1e9,
        response_time_samples=1_000_000,
        response_time_interval=86_400,
    )


def worlds(
    cut: int, drop_ancient: bool = False, query_rate: tuple[float, int] | None = None
) -> tuple[Network, NaiveRouter]:
    network = Network(
        shedding=degrading_shedding() if cut else None,
        drop_ancient_queries=drop_ancient,
        query_rate=query_rate,
    )
    network.links[:] = make_links()
    if cut:
        assert network.router.admission is not None
        network.router.admission.cut = cut
    naive = NaiveRouter(
        make_links(), cut=cut, drop_ancient_queries=drop_ancient, query_rate=query_rate
    )
    return network, naive


def outcome(router: GnutellaRouter | NaiveRouter, links: list[FakeLink]) -> dict[str, object]:
    now = trio.current_time()
    return {
        "sent": [
            [(f.guid, f.payload_type, f.ttl, f.hops, f.payload) for f in link.sent()]
            for link in links
        ],
        "closing": [link.closing for link in links],
        "offences": [dict(link.offences) for link in links],
        "received": list(router.received),
        "forwarded": list(router.forwarded),
        "generated": list(router.generated),
        "consumed": list(router.consumed),
        "dropped": {k: v for k, v in router.dropped.items() if v},
        "ttl_trimmed": {k: v for k, v in router.ttl_trimmed.items() if v},
        "degraded": (router.degraded, router.degraded_hops),
        "relayed": router.relayed_higher_ttl,
        "ping_routes": sorted((e.guid, e.value) for e in router.ping_routes.entries(now)),
        "query_routes": sorted((e.guid, e.value) for e in router.query_routes.entries(now)),
        "push_routes": sorted((e.guid, e.value) for e in router.push_routes.entries(now)),
        "dynamic": router.dynamic.statistics(),
    }


GUIDS = [bytes([i]) * 15 + b"\x01" for i in range(1, 9)]
EXTENDED = (HugeExtension(b"urn:sha1:PLSTHIFQGSJZT45FJUPAKUZWUGYQYPFB"),)
HIT = QueryHit(6346, "192.0.2.9", 100, (QueryHitResult(1, 10, b"abbey road.ogg"),), b"S" * 16)
BIG_HIT = QueryHit(
    6346,
    "192.0.2.9",
    100,
    tuple(QueryHitResult(n, 10, b"abbey road, take %03d.ogg" % n) for n in range(150)),
    b"S" * 16,
)
"""A hit over 4 KiB: with no route back, an offence of its own, left unparsed."""
GTK_PONG = Pong(
    port=6346,
    ip="198.51.100.8",
    ggep=GGEPBlock((vendor_code_extension("GTKG", 0x12), daily_uptime_extension(3600))),
)
"""A pong as gtk-gnutella sends one: with GGEP "VC" and "DU"."""


def _payloads() -> st.SearchStrategy[Payload | bytes]:
    """Every kind of payload a run may hold; bytes stand for a raw malformed one."""
    return st.one_of(
        st.just(Ping()),
        st.just(b"\x00garbage"),  # a ping whose payload is not GGEP: malformed
        st.builds(
            lambda text, flags, extended: Query(text, flags=flags, extensions=extended),
            st.sampled_from([b"abbey road", b"jazz", b"yellow submarine", b"x"]),
            st.sampled_from([0x8000, 0x8000, 0]),  # 0: the pre-0.6 form
            st.sampled_from(((), EXTENDED)),
        ),
        st.just(b"\x80\x00no nul"),  # a query without its NUL: malformed
        st.just(Pong(port=6346, ip="198.51.100.7")),
        st.just(GTK_PONG),
        st.just(build_payload(Pong(port=6346, ip="198.51.100.7")) + b"\xc3junk"),
        st.just(HIT),
        st.just(BIG_HIT),
    )


def _frame(link_id: int, guid: bytes, ttl: int, hops: int, payload: Payload | bytes) -> Frame:
    if isinstance(payload, bytes):
        message_type = 0x00 if payload.startswith(b"\x00") else 0x80
        if len(payload) > 14 and payload[-5:] == b"\xc3junk":
            message_type = 0x01  # a pong whose GGEP block does not parse
        return Frame(guid, message_type, ttl, hops, payload, source=link_id)
    return frames_of(link_id, [Message(guid, ttl, hops, payload)])[0]


frame_drawn = st.builds(
    _frame,
    st.sampled_from([1, 1, 2, 3, 4, 5, 6, 7]),
    st.sampled_from(GUIDS),
    st.integers(0, 9),
    st.integers(0, 8),
    _payloads(),
)
# Runs of one link's frames, as a batch holds them: a few links' runs per batch.
run_drawn = st.tuples(
    st.sampled_from([1, 1, 2, 3, 4, 5, 6, 7]), st.lists(frame_drawn, min_size=1, max_size=10)
)
batch_drawn = st.lists(run_drawn, min_size=1, max_size=4)


def as_batch(runs: list[tuple[int, list[Frame]]]) -> list[Frame]:
    """The drawn runs, each frame given its run's link."""
    batch: list[Frame] = []
    for link_id, frames in runs:
        batch += [
            Frame(f.guid, f.payload_type, f.ttl, f.hops, f.payload, source=link_id) for f in frames
        ]
    return batch


async def drive(
    batches: list[list[Frame]],
    cut: int,
    drop_ancient: bool,
    query_rate: tuple[float, int] | None = None,
) -> tuple[dict[str, object], dict[str, object]]:
    network, naive = worlds(cut, drop_ancient, query_rate)
    for batch in [leaf_table(), *batches]:
        await network.router.handle(list(batch))
        naive.handle(list(batch))
        await trio.sleep(0.3)  # a new second now and then: cached pongs come due again
    return outcome(network.router, network.links), outcome(naive, naive.links)


EXAMPLES = 100 if native.sources_in_use() else 300
"""Fewer where the hot path runs from its sources in place of compiled modules: the
second spelling's run of the hot modules' tests (``tests/gnutella_router/test_native.py``),
which must stay short; the compiled spelling is held to the full count."""


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    st.lists(batch_drawn, min_size=1, max_size=5),
    st.sampled_from([0, 0, 1, 3]),
    st.booleans(),
    st.sampled_from([None, None, (2.0, 3), (10.0, 6)]),
)
def test_the_router_routes_as_the_naive_reference(
    drawn: list[list[tuple[int, list[Frame]]]],
    cut: int,
    drop_ancient: bool,
    query_rate: tuple[float, int] | None,
) -> None:
    """Also while the admission controller cuts forwarded queries' TTL (degradation),
    where pre-0.6 queries are dropped on arrival, and where peers' query rates are
    small enough to run out."""

    async def run() -> None:
        batches = [as_batch(runs) for runs in drawn]
        ours, reference = await drive(batches, cut, drop_ancient, query_rate)
        assert ours == reference

    trio.run(run, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_gtk_like_flood_is_routed_in_bulk() -> None:
    """New queries and pings from a peer announcing Pong-Caching and GGEP (what every
    real servent announces) go as one stretch: one bulk record, one fan-out call."""

    async def run() -> None:
        network, naive = worlds(0)
        messages = [
            Message(bytes([i, j]) + bytes(14), 4, 1, Query(b"jazz") if j % 5 else Ping())
            for i in range(1, 3)
            for j in range(40)
        ]
        frames = frames_of(1, messages)
        await network.router.handle(frames)
        naive.handle(frames)
        assert network.router._runs.stretches == 1
        ours = outcome(network.router, network.links)
        assert ours == outcome(naive, naive.links)
        to_an_ultrapeer = ours["sent"][1]  # type: ignore[index]
        queries = [m.guid for m in messages if isinstance(m.payload, Query)]
        assert [sent[0] for sent in to_an_ultrapeer] == queries

    trio.run(run, clock=trio.testing.MockClock(autojump_threshold=0))


def test_duplicates_and_refused_frames_split_a_run_into_stretches() -> None:
    async def run() -> None:
        network, naive = worlds(0)
        first = Message(GUIDS[0], 4, 1, Query(b"jazz"))
        messages = [
            first,
            Message(GUIDS[1], 4, 1, Query(b"abbey")),
            first,  # the same peer's own repeat: a duplicate, an offence
            Message(GUIDS[2], 0, 1, Query(b"jazz")),  # TTL 0: refused, ends the stretch
            Message(GUIDS[3], 4, 1, Ping()),
        ]
        frames = frames_of(2, messages)
        await network.router.handle(frames)
        naive.handle(frames)
        assert network.router._runs.stretches == 2
        assert outcome(network.router, network.links) == outcome(naive, naive.links)
        assert network.router.dropped["duplicate", 0x80] == 1
        assert network.router.dropped["ttl-zero", 0x80] == 1

    trio.run(run, clock=trio.testing.MockClock(autojump_threshold=0))
