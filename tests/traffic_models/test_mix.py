"""Message mixes: drawn shares, spec files, and the errors a bad spec gets."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.constants import MessageType
from traffic_models import samples
from traffic_models.mix import (
    MIXES,
    PAPER_MIX,
    TRACE_LIKE_MIX,
    MessageMix,
    load_mix,
    mix_by_name_or_path,
    type_code,
)

PING, PONG, QUERY, HIT, PUSH = (
    int(MessageType.PING),
    int(MessageType.PONG),
    int(MessageType.QUERY),
    int(MessageType.QUERY_HIT),
    int(MessageType.PUSH),
)
DRAWS = 20_000
TOLERANCE = 0.015
"""Over 4 standard deviations of a share estimated from 20,000 draws."""

EXAMPLES = Path(__file__).resolve().parents[2] / "traffic_models" / "mixes"


def drawn_shares(mix: MessageMix, seed: int = 1) -> dict[int, float]:
    rng = random.Random(seed)
    counts = Counter(mix.choose(rng) for _ in range(DRAWS))
    return {code: count / DRAWS for code, count in counts.items()}


@pytest.mark.parametrize("mix", [PAPER_MIX, TRACE_LIKE_MIX], ids=lambda m: m.name)
def test_drawn_shares_match_the_weights(mix: MessageMix) -> None:
    shares = drawn_shares(mix)
    assert set(shares) == set(mix.types)
    for code in mix.types:
        assert shares[code] == pytest.approx(mix.share(code), abs=TOLERANCE)


def test_the_paper_mix_is_15_percent_queries_and_no_replies() -> None:
    assert PAPER_MIX.share(QUERY) == pytest.approx(0.15)
    assert PAPER_MIX.share(PING) == pytest.approx(0.85)
    assert PAPER_MIX.share(PONG) == PAPER_MIX.share(HIT) == 0.0


def test_the_trace_mix_is_mostly_pongs() -> None:
    assert TRACE_LIKE_MIX.share(PONG) > 0.5
    assert max(TRACE_LIKE_MIX.types, key=TRACE_LIKE_MIX.share) == PONG
    assert sum(TRACE_LIKE_MIX.shares().values()) == pytest.approx(1.0)


def test_builtin_mixes_by_name() -> None:
    assert MIXES["paper"] is PAPER_MIX
    assert MIXES["trace"] is TRACE_LIKE_MIX
    assert mix_by_name_or_path("paper") is PAPER_MIX
    assert mix_by_name_or_path(" Trace ") is TRACE_LIKE_MIX


def test_weights_are_normalised_and_zero_weights_never_drawn() -> None:
    mix = MessageMix("raw", {PING: 3, QUERY: 1, PUSH: 0})
    assert mix.share(PING) == pytest.approx(0.75)
    assert mix.share(PUSH) == 0.0
    shares = drawn_shares(mix)
    assert PUSH not in shares
    assert shares[PING] == pytest.approx(0.75, abs=TOLERANCE)


@given(
    st.dictionaries(
        st.sampled_from([PING, PONG, QUERY, HIT, PUSH]),
        st.floats(min_value=0.0, max_value=1e6),
        min_size=1,
    ).filter(lambda w: sum(w.values()) > 0),
    st.integers(0, 2**32),
)
def test_choose_only_draws_types_with_weight(weights: dict[int, float], seed: int) -> None:
    mix = MessageMix("any", weights)
    assert sum(mix.shares().values()) == pytest.approx(1.0)
    rng = random.Random(seed)
    for _ in range(50):
        assert weights[mix.choose(rng)] > 0


def test_mixes_are_read_only_and_hashable() -> None:
    with pytest.raises(TypeError):
        TRACE_LIKE_MIX.weights[PING] = 1.0  # type: ignore[index]
    assert hash(MessageMix("a", {PING: 1, QUERY: 2})) == hash(MessageMix("a", {QUERY: 2, PING: 1}))
    # Names work at run time too (spec files use them), though the type says codes.
    by_name = MessageMix("a", {"ping": 1})  # type: ignore[dict-item]
    assert by_name == MessageMix("a", {PING: 1.0})


def test_samples_keeps_its_trace_mix_mapping() -> None:
    assert isinstance(samples.TRACE_LIKE_MIX, Mapping)
    assert dict(samples.TRACE_LIKE_MIX) == dict(TRACE_LIKE_MIX.weights)
    messages = samples.SampleFactory(3).messages(200, samples.TRACE_LIKE_MIX)
    assert {m.payload_type for m in messages} <= set(TRACE_LIKE_MIX.types)


@pytest.mark.parametrize(
    ("key", "code"),
    [
        ("ping", PING),
        ("PONG", PONG),
        ("query-hit", HIT),
        ("QueryHit", HIT),
        ("0x40", PUSH),
        ("128", QUERY),
        (0x81, HIT),
    ],
)
def test_type_names_and_codes(key: str | int, code: int) -> None:
    assert type_code(key) == code


def test_load_mix_from_toml(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('name = "mine"\n[weights]\nping = 2\nquery = 1\n"0x81" = 1\n')
    mix = load_mix(path)
    assert mix.name == "mine"
    assert mix.shares() == pytest.approx({PING: 0.5, QUERY: 0.25, HIT: 0.25})
    assert mix_by_name_or_path(str(path)) == mix


def test_load_mix_from_json_names_it_after_the_file(tmp_path: Path) -> None:
    path = tmp_path / "heavy.json"
    path.write_text(json.dumps({"weights": {"query": 0.9, "ping": 0.1}}))
    mix = load_mix(path)
    assert mix.name == "heavy"
    assert mix.share(QUERY) == pytest.approx(0.9)


def test_example_specs_load() -> None:
    specs = sorted(EXAMPLES.glob("*.toml"))
    assert specs
    loaded = {path.stem: load_mix(path) for path in specs}
    assert loaded["paper"].shares() == pytest.approx(PAPER_MIX.shares())
    assert loaded["trace"].shares() == pytest.approx(TRACE_LIKE_MIX.shares())


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[weights]\nping = 1\nbye = 1\n", "bye"),
        ('[weights]\nping = 1\n"0x31" = 1\n', "0x31"),
        ("[weights]\nping = -1\nquery = 2\n", "negative"),
        ("[weights]\nping = 0\nquery = 0\n", "zero"),
        ("[weights]\n", "no message types"),
        ('[weights]\nping = "lots"\n', "number"),
        ("weights = 3\n", "weights"),
        ('name = "x"\n', "weights"),
        ('colour = "red"\n[weights]\nping = 1\n', "colour"),
        ("[weights\n", "TOML"),
        ("[weights]\nping = 1\nPing = 1\n", "twice"),
    ],
)
def test_bad_specs_are_refused_with_the_reason(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=problem) as info:
        load_mix(path)
    assert "bad.toml" in str(info.value)


def test_bad_json_and_missing_files(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(ValueError, match="JSON"):
        load_mix(broken)
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(ValueError, match="table"):
        load_mix(listed)
    with pytest.raises(ValueError, match="cannot read"):
        load_mix(tmp_path / "absent.toml")
    other = tmp_path / "mix.yaml"
    other.write_text("weights: {}")
    with pytest.raises(ValueError, match=r"\.toml or \.json"):
        load_mix(other)


def test_unknown_mix_names_list_the_choices() -> None:
    with pytest.raises(ValueError, match="paper, trace"):
        mix_by_name_or_path("uniform")
