"""Query vocabulary (Zipf) and the TTL/hops distributions."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from traffic_models.content import HopsTtl, Vocabulary

VOCABULARY = Vocabulary()


def test_the_most_frequent_word_has_its_zipf_share() -> None:
    rng = random.Random(11)
    draws = 50_000
    counts = Counter(VOCABULARY.draw_rank(rng) for _ in range(draws))
    harmonic = sum(1 / rank for rank in range(1, 5001))
    assert VOCABULARY.probability(1) == pytest.approx(1 / harmonic)
    # The share's standard deviation is about 0.0014 at 50,000 draws.
    assert counts[1] / draws == pytest.approx(1 / harmonic, abs=0.006)
    assert counts[2] / draws == pytest.approx(1 / (2 * harmonic), abs=0.005)
    assert counts.most_common(1)[0][0] == 1
    assert set(counts) <= set(range(1, 5001))


def test_query_words_follow_the_ranks() -> None:
    rng = random.Random(2)
    words = Counter(
        word for _ in range(20_000) for word in VOCABULARY.query_text(rng).decode().split()
    )
    assert words.most_common(1)[0][0] == VOCABULARY.word(1)
    total = sum(words.values())
    assert words[VOCABULARY.word(1)] / total == pytest.approx(VOCABULARY.probability(1), abs=0.006)


def test_a_steeper_exponent_concentrates_the_draws() -> None:
    steep = Vocabulary(size=100, exponent=2.0)
    assert steep.probability(1) == pytest.approx(1 / sum(r**-2 for r in range(1, 101)))
    flat = Vocabulary(size=100, exponent=0.0)
    assert flat.probability(1) == pytest.approx(0.01)
    assert flat.probability(100) == pytest.approx(0.01)


def test_words_are_distinct_pronounceable_and_short_first() -> None:
    words = [VOCABULARY.word(rank) for rank in range(1, len(VOCABULARY) + 1)]
    assert len(set(words)) == len(words) == 5000
    assert all(word.isascii() and word.isalpha() and word.islower() for word in words)
    lengths = [len(word) for word in words]
    assert lengths == sorted(lengths)


def test_word_ranks_are_one_based() -> None:
    with pytest.raises(IndexError):
        VOCABULARY.word(0)
    with pytest.raises(IndexError):
        VOCABULARY.word(5001)
    assert VOCABULARY.word(5000)


def test_the_vocabulary_is_deterministic() -> None:
    again = Vocabulary()
    assert [again.word(r) for r in range(1, 50)] == [VOCABULARY.word(r) for r in range(1, 50)]
    other = Vocabulary(seed=1)
    assert [other.word(r) for r in range(1, 50)] != [VOCABULARY.word(r) for r in range(1, 50)]
    first = [VOCABULARY.query_text(random.Random(4)) for _ in range(3)]
    assert first == [VOCABULARY.query_text(random.Random(4)) for _ in range(3)]


@given(st.integers(0, 2**32), st.integers(1, 5), st.integers(0, 4))
def test_query_text_has_the_asked_number_of_words(seed: int, low: int, extra: int) -> None:
    text = VOCABULARY.query_text(random.Random(seed), low, low + extra)
    assert b"\x00" not in text
    assert low <= len(text.split(b" ")) <= low + extra


@pytest.mark.parametrize(("low", "high"), [(0, 3), (3, 2)])
def test_bad_word_counts_are_refused(low: int, high: int) -> None:
    with pytest.raises(ValueError, match="min_words"):
        VOCABULARY.query_text(random.Random(0), low, high)


@pytest.mark.parametrize("kwargs", [{"size": 0}, {"exponent": -1.0}, {"exponent": float("nan")}])
def test_bad_vocabularies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        Vocabulary(**kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------
# TTL and hops


def test_originated_messages_by_default() -> None:
    rng = random.Random(0)
    assert {HopsTtl().draw(rng) for _ in range(100)} == {(7, 0)}


def test_ttl_shares_follow_the_weights() -> None:
    model = HopsTtl(ttl={3: 1.0, 7: 3.0})
    rng = random.Random(5)
    counts = Counter(model.draw(rng)[0] for _ in range(20_000))
    assert counts[7] / 20_000 == pytest.approx(0.75, abs=0.015)
    assert set(counts) == {3, 7}


@given(
    st.dictionaries(st.integers(0, 255), st.floats(0.01, 10), min_size=1, max_size=6),
    st.dictionaries(st.integers(0, 255), st.floats(0.01, 10), min_size=1, max_size=6),
    st.integers(0, 2**32),
)
def test_draws_are_clamped_to_what_a_router_accepts(
    ttl: dict[int, float], hops: dict[int, float], seed: int
) -> None:
    model = HopsTtl(ttl=ttl, hops=hops)
    rng = random.Random(seed)
    for _ in range(20):
        drawn_ttl, drawn_hops = model.draw(rng)
        assert drawn_ttl >= 1
        assert drawn_ttl + drawn_hops <= 15
        assert drawn_hops >= 0


def test_clamping_keeps_hops_and_cuts_ttl() -> None:
    rng = random.Random(0)
    assert HopsTtl(ttl={10: 1}, hops={9: 1}).draw(rng) == (6, 9)
    assert HopsTtl(ttl={0: 1}, hops={0: 1}).draw(rng) == (1, 0)
    assert HopsTtl(ttl={7: 1}, hops={30: 1}).draw(rng) == (1, 14)


@pytest.mark.parametrize(
    "kwargs",
    [{"ttl": {}}, {"ttl": {7: -1.0}}, {"hops": {0: 0.0}}, {"ttl": {300: 1.0}}, {"hops": {-1: 1}}],
)
def test_bad_distributions_are_refused(kwargs: dict[str, dict[int, float]]) -> None:
    with pytest.raises(ValueError, match=r"TTL|hops"):
        HopsTtl(**kwargs)
