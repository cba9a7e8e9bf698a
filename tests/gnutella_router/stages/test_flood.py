"""The router's batch path routes exactly as the per-message rules do.

Each test drives two routers with the same frames: one as it is, one whose batch path
always declines (so every frame goes the per-message way, the reference), and compares
what every link was sent, the counters and the route tables. Hypothesis draws mixes of
pings and queries with duplicates, bad TTLs, repeats within a batch and several links.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from gnutella_router.config.sections import SheddingConfig
from gnutella_router.net.route_table import RouteTable, pack_detail
from protocol.capabilities import Capabilities
from protocol.codec import encode_message
from protocol.framing import Frame, FrameDecoder
from protocol.messages import HugeExtension, Message, Ping, Pong, Query
from tests.support.links import Network


class _Declines:
    """A batch path that routes nothing, so every frame goes the per-message way."""

    def route(self, link: object, frames: object, now: float) -> int:
        return 0


def reference(network: Network) -> Network:
    """``network`` with its router's batch path switched off (replaced, not patched: the
    batch path may be compiled, and a compiled object's methods cannot be patched)."""
    network.router._flood = _Declines()  # type: ignore[assignment]
    return network


def frames_of(link_id: int, messages: Sequence[Message]) -> list[Frame]:
    data = b"".join(encode_message(m) for m in messages)
    return FrameDecoder(source=link_id).receive_data(data)


def outcome(network: Network) -> tuple[object, ...]:
    router = network.router
    return (
        [link.sent() for link in network.links],
        [link.closing for link in network.links],
        list(router.received),
        list(router.forwarded),
        list(router.generated),
        dict(router.dropped),
        len(router.ping_routes),
        len(router.query_routes),
        sorted(e.guid for e in router.query_routes.entries(trio.current_time())),
        [dict(link.offences) for link in network.links],
        (router.degraded, router.degraded_hops),
    )


GUIDS = [bytes([i]) * 15 + b"\x00" for i in range(1, 7)]

# A query's search text ends in a NUL; most queries end there, the others go on with
# extensions (the batch path checks the two cases differently).
EXTENDED = (HugeExtension(b"urn:sha1:PLSTHIFQGSJZT45FJUPAKUZWUGYQYPFB"),)

message = st.builds(
    lambda guid, is_query, ttl, hops, ancient, extended: Message(
        guid,
        ttl,
        hops,
        (
            Query(b"flood test", flags=0, extensions=extended)
            if ancient
            else Query(b"flood test", extensions=extended)
        )
        if is_query
        else Ping(),
    ),
    st.sampled_from(GUIDS),
    st.booleans(),
    st.integers(0, 9),
    st.integers(0, 9),
    st.booleans(),  # a query in the pre-0.6 form (flags 0), which link 3 refuses
    st.sampled_from(((), EXTENDED)),
)
batch = st.lists(st.tuples(st.integers(1, 3), message), min_size=1, max_size=12)


def degrading(cut: int) -> Network:
    """A network whose router's admission controller cuts queries' TTL by ``cut`` and
    never changes it or refuses anything during a test."""
    if not cut:
        return _refusing_ancient_queries(Network())
    shedding = SheddingConfig(
        policy="response-time",
        degrade_ttl_by=6,
        response_time_initial_rate=1e9,
        response_time_max_rate=1e9,
        response_time_samples=1_000_000,
        response_time_interval=86_400,
    )
    network = _refusing_ancient_queries(Network(shedding=shedding))
    assert network.router.admission is not None
    network.router.admission.cut = cut
    return network


def _refusing_ancient_queries(network: Network) -> Network:
    """``network`` with its link 3 a gtk-gnutella, which refuses pre-0.6 queries: the
    router must not send it any, whichever path routed them."""
    network.links[2].capabilities = Capabilities(user_agent="gtk-gnutella/1.2.3")
    return network


@settings(max_examples=150, deadline=None)
@given(st.lists(batch, min_size=1, max_size=4), st.sampled_from([0, 0, 1, 3]))
def test_batch_path_matches_the_per_message_rules(
    batches: list[list[tuple[int, Message]]], cut: int
) -> None:
    """Also while the admission controller cuts forwarded queries' TTL (degradation)."""

    async def run() -> None:
        ours, theirs = degrading(cut), reference(degrading(cut))
        for drawn in batches:
            for network in (ours, theirs):
                frames: list[Frame] = []
                for link_id, m in drawn:
                    frames += frames_of(link_id, [m])
                await network.router.handle(frames)
        assert outcome(ours) == outcome(theirs)

    trio.run(run)


async def test_a_flood_of_new_messages_takes_the_batch_path() -> None:
    network = Network()
    messages = [
        Message(bytes([i, j]) + bytes(14), 3, 1, Query(b"jazz") if j % 7 == 0 else Ping())
        for i in range(1, 4)
        for j in range(50)
    ]
    await network.router.handle(frames_of(1, messages))
    assert network.router._flood.runs == 1
    assert network.router.received[0x00] + network.router.received[0x80] == 150
    # Every ping answered with our pong; every message forwarded to both other links.
    sent_back = network.links[0].sent()
    assert sum(isinstance(f.message().payload, Pong) for f in sent_back) == len(
        [m for m in messages if isinstance(m.payload, Ping)]
    )
    for link in network.links[1:]:
        copies = link.sent()
        assert [(f.guid, f.ttl, f.hops) for f in copies] == [(m.guid, 2, 2) for m in messages]


async def test_a_degrading_router_keeps_the_batch_path_and_cuts_queries_only() -> None:
    """Under the admission controller's TTL cut the run still takes the batch path; its
    queries go out with the cut (never under TTL 1), its pings without, and the cut is
    counted once per query it shortened."""
    network = degrading(2)
    messages = [
        Message(
            bytes([i, j]) + bytes(14), 5 if j % 2 else 2, 1, Query(b"jazz") if j % 3 else Ping()
        )
        for i in range(1, 3)
        for j in range(30)
    ]
    await network.router.handle(frames_of(1, messages))
    assert network.router._flood.runs == 1
    expected = []
    for m in messages:
        ttl = m.ttl if isinstance(m.payload, Ping) else max(1, m.ttl - 2)
        if ttl > 1:
            expected.append((m.guid, ttl - 1, 2))
    assert [(f.guid, f.ttl, f.hops) for f in network.links[1].sent()] == expected
    cut = [m for m in messages if isinstance(m.payload, Query)]
    assert network.router.degraded == len(cut)
    assert network.router.degraded_hops == sum(m.ttl - max(1, m.ttl - 2) for m in cut)


async def test_a_query_without_its_nul_is_left_to_the_per_message_rules() -> None:
    """Whether or not its last byte is a NUL (the batch path's quick case)."""
    good = frames_of(1, [Message(b"g" * 16, 3, 0, Query(b"fine"))])
    for broken in (b"\x80\x00no nul", b"\x80\x00", b"\x80"):
        bad = Frame(b"b" * 16, 0x80, 3, 0, broken, source=1)
        ours, theirs = Network(), reference(Network())
        for network in (ours, theirs):
            await network.router.handle([*good, bad])
        assert ours.router._flood.runs == 0
        assert outcome(ours) == outcome(theirs)


async def test_a_duplicate_in_the_run_leaves_it_to_the_per_message_rules() -> None:
    network = Network()
    first = Message(b"a" * 16, 3, 0, Ping())
    await network.router.handle(frames_of(1, [first, Message(b"b" * 16, 3, 0, Ping()), first]))
    assert network.router._flood.runs == 0
    assert network.router.dropped["duplicate", 0x00] == 1


async def test_a_pong_that_closes_its_link_stops_the_batch_where_it_did() -> None:
    network = Network()
    source = network.links[0]
    source.outgoing = type(source.outgoing)(max_messages=2)
    messages = [Message(bytes([j]) + bytes(15), 3, 0, Ping()) for j in range(1, 6)]
    theirs = reference(Network())
    theirs.links[0].outgoing = type(source.outgoing)(max_messages=2)
    for net in (network, theirs):
        await net.router.handle(frames_of(1, messages))
    assert source.closing
    assert network.router.dropped["connection-closing", 0x00] == 2
    assert outcome(network) == outcome(theirs)


def test_record_new_is_all_or_nothing() -> None:
    table: RouteTable = RouteTable("t", 60.0, 10)
    assert table.record_new([b"a" * 16, b"b" * 16], 1, 0.0, [pack_detail(3, 1)] * 2)
    assert table.first(b"a" * 16) == (1, 3)
    # One known GUID: nothing recorded.
    assert not table.record_new([b"c" * 16, b"a" * 16], 2, 0.0, [0, 0])
    assert b"c" * 16 not in table
    # Twice in the batch: nothing recorded.
    assert not table.record_new([b"d" * 16, b"d" * 16], 2, 0.0, [0, 0])
    assert b"d" * 16 not in table
    # Two rotations for capacity in one batch: left to record().
    assert not table.record_new([bytes([i]) * 16 for i in range(25)], 2, 0.0, [0] * 25)
    assert len(table) == 2
    table.unrecord([b"b" * 16])
    assert b"b" * 16 not in table
    assert table.statistics(0.0).recorded == 1
    # One rotation for capacity: the first 9 fill the generation, the last begins anew.
    assert table.record_new([bytes([i]) * 16 for i in range(10)], 2, 0.0, [0] * 10)
    stats = table.statistics(0.0)
    assert (stats.rotations_for_capacity, stats.previous_size, stats.current_size) == (1, 10, 1)
    assert table.lookup(bytes([9]) * 16, 0.0) == 2
    # A rotation due by time: done first, as record() would.
    assert table.record_new([b"e" * 16], 3, 61.0, [0])
    assert table.lookup(b"e" * 16, 61.0) == 3
    assert table.statistics(61.0).rotations == 2


def test_the_batch_path_s_type_constants_are_the_protocol_s() -> None:
    """flood.py spells its message types as int literals (constants once compiled)."""
    from gnutella_router.stages import flood
    from protocol.constants import MessageType

    assert (flood.PING, flood.PONG, flood.QUERY) == (
        MessageType.PING,
        MessageType.PONG,
        MessageType.QUERY,
    )


def test_a_batch_is_cut_into_its_runs_of_one_link_s_frames_in_order() -> None:
    from gnutella_router.stages.flood import runs_of

    def frames(*sources: int) -> list[Frame]:
        return [Frame(bytes(16), 0x00, 1, 0, b"", source=s) for s in sources]

    assert runs_of([]) == []
    single = frames(3, 3, 3)
    assert runs_of(single) == [single]
    assert runs_of(single)[0] is single  # not copied
    mixed = frames(1, 1, 2, 1, 3, 3)
    assert [[f.source for f in run] for run in runs_of(mixed)] == [[1, 1], [2], [1], [3, 3]]
    assert [f for run in runs_of(mixed) for f in run] == mixed


@settings(max_examples=200)
@given(
    guid=st.binary(min_size=16, max_size=16),
    message_type=st.sampled_from([0x00, 0x80]),
    ttl=st.integers(0, 15),
    hops=st.integers(0, 15),
    payload=st.binary(max_size=300),
)
def test_a_copy_is_the_message_encoded_with_its_new_ttl_and_hops(
    guid: bytes, message_type: int, ttl: int, hops: int, payload: bytes
) -> None:
    from gnutella_router.stages.flood import Copies
    from protocol.header import HEADER_STRUCT

    copies = Copies()
    expected = HEADER_STRUCT.pack(guid, message_type, ttl, hops, len(payload)) + payload
    assert copies.copy(guid, message_type, ttl, hops, payload) == expected
    # Again, from what it kept, and after a copy of another shape.
    assert copies.copy(guid, message_type, ttl, hops, payload) == expected
    copies.copy(guid, message_type ^ 0x80, ttl, hops, payload + b"x")
    assert copies.copy(guid, message_type, ttl, hops, payload) == expected


def test_copies_keep_a_bounded_number_of_header_tails() -> None:
    from gnutella_router.stages.flood import TAILS_KEPT, Copies

    copies = Copies()
    for length in range(3 * TAILS_KEPT):
        data = copies.copy(b"g" * 16, 0x80, 3, 1, bytes(length))
        assert int.from_bytes(data[19:23], "little") == length
    assert len(copies._tails) <= TAILS_KEPT
