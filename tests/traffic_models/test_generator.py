"""The traffic generator: mix, rate, GUIDs, and bytes that decode as what they claim."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.codec import encode_message
from protocol.constants import MessageType
from protocol.framing import Frame, FrameDecoder
from protocol.messages import Ping, Query, QueryFlags
from traffic_models.arrivals import Bursts, ConstantRate, Poisson
from traffic_models.content import HopsTtl, Vocabulary
from traffic_models.generator import Scheduled, TrafficGenerator
from traffic_models.mix import PAPER_MIX, TRACE_LIKE_MIX, MessageMix, type_code

PING, QUERY = int(MessageType.PING), int(MessageType.QUERY)


def generate(
    mix: MessageMix = TRACE_LIKE_MIX, rate: float = 20_000, duration: float = 1.0, **kwargs: object
) -> list[Scheduled]:
    generator = TrafficGenerator(mix=mix, arrivals=ConstantRate(rate), **kwargs)  # type: ignore[arg-type]
    return list(generator.schedule(duration))


def decode(schedule: list[Scheduled]) -> list[Frame]:
    frames = FrameDecoder().receive_data(b"".join(item.data for item in schedule))
    assert len(frames) == len(schedule)
    return frames


TRACE = generate(seed=1, guid_prefix=b"LD")
PAPER = generate(PAPER_MIX, seed=1)


@pytest.mark.parametrize(("mix", "schedule"), [(TRACE_LIKE_MIX, TRACE), (PAPER_MIX, PAPER)])
def test_the_schedule_reproduces_the_mix(mix: MessageMix, schedule: list[Scheduled]) -> None:
    counts = Counter(item.message_type for item in schedule)
    assert set(counts) == {code for code in mix.types if mix.share(code) > 0}
    for code in mix.types:
        assert counts[code] / len(schedule) == pytest.approx(mix.share(code), abs=0.015)


def test_the_schedule_follows_the_arrival_process() -> None:
    assert len(TRACE) == 20_000
    assert [item.at for item in TRACE] == list(ConstantRate(20_000).times(1.0))
    bursts = TrafficGenerator(mix=PAPER_MIX, arrivals=Bursts(10, 0.01))
    times = [item.at for item in bursts.schedule(1.0)]
    assert len(times) == 1000
    assert set(Counter(times).values()) == {10}


def test_every_message_decodes_as_its_type() -> None:
    for schedule in (TRACE, PAPER):
        for item, frame in zip(schedule, decode(schedule), strict=True):
            assert frame.payload_type == item.message_type
            assert frame.guid == item.guid
            message = frame.message()  # the full payload parses
            assert message.payload_type == item.message_type


def test_bytes_are_what_the_codec_would_write() -> None:
    for item, frame in itertools.islice(zip(TRACE, decode(TRACE), strict=True), 3000):
        assert encode_message(frame.message()) == item.data


def test_guids_are_unique_modern_and_carry_the_prefix() -> None:
    guids = [item.guid for item in TRACE]
    assert len(set(guids)) == len(guids)
    assert all(len(g) == 16 and g.startswith(b"LD") for g in guids)
    assert all(g[8] == 0xFF and g[15] == 0 for g in guids)
    assert len({g[2:8] for g in guids}) > len(guids) // 2  # random, not a constant


def test_a_full_length_prefix_still_gives_unique_guids() -> None:
    schedule = generate(PAPER_MIX, rate=5000, guid_prefix=b"LOADTEST")
    guids = {item.guid for item in schedule}
    assert len(guids) == len(schedule)
    assert all(g.startswith(b"LOADTEST") for g in guids)


def test_a_prefix_longer_than_eight_bytes_is_refused() -> None:
    with pytest.raises(ValueError, match="at most 8"):
        TrafficGenerator(mix=PAPER_MIX, arrivals=ConstantRate(1), guid_prefix=b"123456789")


def test_same_seed_same_bytes_and_different_seed_different_bytes() -> None:
    again = generate(seed=1, guid_prefix=b"LD")
    assert again == TRACE
    assert generate(seed=2, guid_prefix=b"LD")[:100] != TRACE[:100]
    generator = TrafficGenerator(mix=PAPER_MIX, arrivals=Poisson(3000, seed=4), seed=5)
    assert list(generator.schedule(0.5)) == list(generator.schedule(0.5))


def test_messages_do_not_depend_on_the_arrival_process() -> None:
    even = TrafficGenerator(mix=TRACE_LIKE_MIX, arrivals=ConstantRate(1000), seed=6)
    bursty = TrafficGenerator(mix=TRACE_LIKE_MIX, arrivals=Bursts(5, 0.005), seed=6)
    first = [item.data for item in even.schedule(0.5)]
    second = [item.data for item in bursty.schedule(0.5)]
    assert first == second


def test_queries_are_modern_with_zipf_text_and_pings_mostly_empty() -> None:
    frames = decode(PAPER)
    queries = [f.message() for f in frames if f.payload_type == QUERY]
    pings = [f.message() for f in frames if f.payload_type == PING]
    vocabulary = Vocabulary()
    top = vocabulary.word(1).encode()
    words = Counter(w for m in queries for w in m.payload.search.split())  # type: ignore[union-attr]
    assert words.most_common(1)[0][0] == top
    for message in queries:
        query = message.payload
        assert isinstance(query, Query)
        assert query.flags & QueryFlags.MARKER
        assert query.flags & QueryFlags.GGEP_H
        assert 1 <= len(query.search.split()) <= 4
        assert (message.ttl, message.hops) == (7, 0)
    urns = sum(bool(m.payload.extensions) for m in queries)  # type: ignore[union-attr]
    assert 0 < urns < len(queries) * 0.15
    scp = sum(isinstance(m.payload, Ping) and m.payload.ggep is not None for m in pings)
    assert scp / len(pings) == pytest.approx(0.2, abs=0.03)


def test_ttl_and_hops_come_from_the_model() -> None:
    hops_ttl = HopsTtl(ttl={3: 1.0, 5: 1.0}, hops={0: 1.0, 2: 1.0})
    schedule = generate(PAPER_MIX, rate=2000, hops_ttl=hops_ttl)
    pairs = Counter((item.data[17], item.data[18]) for item in schedule)
    assert set(pairs) == {(3, 0), (5, 0), (3, 2), (5, 2)}


def test_a_custom_vocabulary_is_used() -> None:
    tiny = Vocabulary(size=3, seed=42)
    schedule = generate(PAPER_MIX, rate=2000, vocabulary=tiny)
    words = {tiny.word(rank).encode() for rank in (1, 2, 3)}
    for frame in decode(schedule):
        if frame.payload_type == QUERY:
            query = frame.message().payload
            assert isinstance(query, Query)
            assert set(query.search.split()) <= words


@settings(max_examples=15)
@given(
    st.dictionaries(
        st.sampled_from(["ping", "pong", "query", "query_hit", "push"]),
        st.floats(0.01, 1.0),
        min_size=1,
    ),
    st.integers(0, 2**32),
    st.binary(max_size=8),
)
def test_any_mix_and_seed_give_decodable_messages(
    weights: dict[str, float], seed: int, prefix: bytes
) -> None:
    mix = MessageMix("any", {type_code(name): weight for name, weight in weights.items()})
    arrivals = Poisson(400, seed=seed)
    generator = TrafficGenerator(mix=mix, arrivals=arrivals, seed=seed, guid_prefix=prefix)
    schedule = list(generator.schedule(0.1))
    times = [item.at for item in schedule]
    assert times == sorted(times)
    assert all(0 <= t < 0.1 for t in times)
    for item, frame in zip(schedule, decode(schedule), strict=True):
        assert frame.message().payload_type == item.message_type
        assert item.guid.startswith(prefix)


def test_the_schedule_is_lazy() -> None:
    generator = TrafficGenerator(mix=TRACE_LIKE_MIX, arrivals=ConstantRate(30_000), seed=1)
    first = list(itertools.islice(generator.schedule(3600.0), 5))
    assert [item.at for item in first] == pytest.approx([k / 30_000 for k in range(5)])


def test_random_state_is_not_shared_with_the_caller() -> None:
    random.seed(0)
    before = random.random()
    random.seed(0)
    generate(PAPER_MIX, rate=100)
    assert random.random() == before
