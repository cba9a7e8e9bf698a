"""Arrival processes: counts, spacing, windows, determinism, and the command-line forms."""

from __future__ import annotations

import bisect
import itertools
import math
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from traffic_models.arrival_text import parse_arrivals, parse_duration, parse_rate
from traffic_models.arrivals import ArrivalProcess, Bursts, ConstantRate, Poisson, Schedule


def window_counts(times: list[float], edges: list[float]) -> list[int]:
    """How many times fall in each [edges[i], edges[i+1])."""
    positions = [bisect.bisect_left(times, edge) for edge in edges]
    return [b - a for a, b in itertools.pairwise(positions)]


def assert_well_formed(times: list[float], duration: float) -> None:
    assert all(a <= b for a, b in itertools.pairwise(times))
    assert all(0 <= t < duration for t in times)


def within_sigmas(count: int, expected: float, sigmas: float = 5.0) -> bool:
    """A Poisson count's standard deviation is the square root of its mean."""
    return abs(count - expected) <= sigmas * math.sqrt(expected)


# ---------------------------------------------------------------------------------------
# Constant and Poisson


def test_constant_rate_is_exact_and_evenly_spaced() -> None:
    times = list(ConstantRate(1000).times(2.0))
    assert len(times) == 2000
    assert times[0] == 0.0
    assert times[1] == pytest.approx(0.001)
    assert times[-1] == pytest.approx(1.999)
    assert_well_formed(times, 2.0)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_poisson_count_is_within_a_few_standard_deviations(seed: int) -> None:
    rate, duration = 2000.0, 5.0
    times = list(Poisson(rate, seed=seed).times(duration))
    assert_well_formed(times, duration)
    assert within_sigmas(len(times), rate * duration)


def test_poisson_gaps_look_exponential() -> None:
    rate = 1000.0
    times = list(Poisson(rate, seed=9).times(20.0))
    gaps = [b - a for a, b in itertools.pairwise(times)]
    mean = sum(gaps) / len(gaps)
    assert mean == pytest.approx(1 / rate, rel=0.03)
    # Exponential: P(gap > mean) = 1/e; evenly spaced arrivals would give 0 or 1.
    above = sum(gap > 1 / rate for gap in gaps) / len(gaps)
    assert above == pytest.approx(math.exp(-1), abs=0.02)


def test_same_seed_same_times_and_different_seed_different_times() -> None:
    first = list(Poisson(300, seed=5).times(3.0))
    assert list(Poisson(300, seed=5).times(3.0)) == first
    process = Poisson(300, seed=5)
    assert list(process.times(3.0)) == list(process.times(3.0))
    assert list(Poisson(300, seed=6).times(3.0)) != first


def test_zero_rate_sends_nothing() -> None:
    assert list(ConstantRate(0).times(10)) == []
    assert list(Poisson(0).times(10)) == []
    assert list(Schedule([(5, 0)]).times(10)) == []


# ---------------------------------------------------------------------------------------
# Bursts


def test_bursts_are_exact_groups_at_each_interval() -> None:
    times = list(Bursts(10, 0.005).times(0.05))
    groups = Counter(times)
    assert len(times) == 100
    assert len(groups) == 10
    assert set(groups.values()) == {10}
    assert sorted(groups) == pytest.approx([k * 0.005 for k in range(10)])
    assert Bursts(10, 0.005).expected_rate(0.3) == pytest.approx(2000)


def test_paper_burst_settings_offer_the_paper_rates() -> None:
    # Quals proposal 5.2.2: n = 10, d from 100 ms to 10 ms: 100 to 1000 packets/s.
    for interval, rate in ((0.1, 100), (0.01, 1000)):
        assert len(list(Bursts(10, interval).times(1.0))) == rate


# ---------------------------------------------------------------------------------------
# Schedules


def test_steps_hold_each_rate_for_its_window() -> None:
    schedule = Schedule([(2, 100), (1, 1000), (1, 0), (1, 50)])
    times = list(schedule.times(5.0))
    assert window_counts(times, [0, 2, 3, 4, 5]) == [200, 1000, 0, 50]
    assert schedule.total_duration == 5.0
    assert [schedule.expected_rate(t) for t in (0, 1.9, 2.0, 3.5, 4.5)] == [
        100,
        100,
        1000,
        0,
        50,
    ]


def test_the_last_rate_carries_on_after_the_schedule() -> None:
    times = list(Schedule([(1, 100), (1, 200)]).times(4.0))
    assert window_counts(times, [0, 1, 2, 3, 4]) == [100, 200, 200, 200]


def test_a_ramp_matches_the_interpolated_rate_in_every_window() -> None:
    # 100 -> 1000 messages/s over 10 s: the rate in the middle of second k is 145 + 90 k.
    schedule = Schedule([(10, 100), (0, 1000)], ramp=True)
    assert schedule.expected_rate(5.0) == pytest.approx(550)
    assert schedule.expected_rate(12.0) == pytest.approx(1000)
    times = list(schedule.times(10.0))
    assert_well_formed(times, 10.0)
    counts = window_counts(times, [float(k) for k in range(11)])
    for k, count in enumerate(counts):
        assert abs(count - (145 + 90 * k)) <= 1
    assert len(times) == pytest.approx(schedule.expected_count(10.0), abs=1)


def test_a_ramp_down_to_zero_stops() -> None:
    schedule = Schedule([(10, 200), (0, 0)], ramp=True)
    times = list(schedule.times(30.0))
    assert len(times) == pytest.approx(1000, abs=1)
    assert times[-1] < 10.0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_poisson_steps_and_ramps_match_the_rate_per_window(seed: int) -> None:
    steps = Schedule([(2, 500), (2, 3000)], seed=seed)
    counts = window_counts(list(steps.times(4.0)), [0, 2, 4])
    assert within_sigmas(counts[0], 1000)
    assert within_sigmas(counts[1], 6000)
    ramp = Schedule([(4, 0), (0, 4000)], ramp=True, seed=seed)
    times = list(ramp.times(4.0))
    assert_well_formed(times, 4.0)
    for k, count in enumerate(window_counts(times, [0, 1, 2, 3, 4])):
        assert within_sigmas(count, 500 + 1000 * k)  # integral of 1000 t over [k, k+1)


def test_poisson_schedules_are_deterministic() -> None:
    def make(seed: int) -> Schedule:
        return Schedule([(1, 100), (0, 900)], ramp=True, seed=seed)

    assert list(make(4).times(2)) == list(make(4).times(2))
    assert list(make(4).times(2)) != list(make(5).times(2))


@pytest.mark.parametrize(
    "steps", [[], [(1, -5)], [(-1, 5)], [(math.nan, 5)], [(1, math.inf)], [(1, 2, 3)]]
)
def test_bad_schedules_are_refused(steps: list[tuple[float, float]]) -> None:
    with pytest.raises(ValueError, match="step"):
        Schedule(steps)


@pytest.mark.parametrize(
    "make",
    [
        lambda: ConstantRate(-1),
        lambda: Poisson(math.nan),
        lambda: Bursts(0, 0.1),
        lambda: Bursts(5, 0),
        lambda: Bursts(2.5, 1),  # type: ignore[arg-type]
    ],
)
def test_bad_parameters_are_refused(make: object) -> None:
    with pytest.raises(ValueError, match="must"):
        make()  # type: ignore[operator]


# ---------------------------------------------------------------------------------------
# Properties every process shares

processes = st.one_of(
    st.builds(ConstantRate, st.floats(0, 5000)),
    st.builds(Poisson, st.floats(0, 5000), st.integers(0, 2**32)),
    st.builds(Bursts, st.integers(1, 50), st.floats(0.001, 1.0)),
    st.builds(
        Schedule,
        st.lists(st.tuples(st.floats(0, 1.0), st.floats(0, 5000)), min_size=1, max_size=5),
        ramp=st.booleans(),
        seed=st.none() | st.integers(0, 2**32),
    ),
)


@given(processes, st.floats(0, 1.5))
def test_times_are_ordered_bounded_and_repeatable(process: ArrivalProcess, duration: float) -> None:
    times = list(process.times(duration))
    assert_well_formed(times, duration)
    assert list(process.times(duration)) == times
    assert process.expected_rate(-1.0) == 0.0
    assert process.expected_rate(duration / 2) >= 0.0


@given(
    st.lists(st.tuples(st.floats(0.01, 1.0), st.floats(0, 3000)), min_size=1, max_size=4),
    st.booleans(),
)
def test_deterministic_schedules_send_their_expected_count(
    steps: list[tuple[float, float]], ramp: bool
) -> None:
    schedule = Schedule(steps, ramp=ramp)
    duration = schedule.total_duration
    count = len(list(schedule.times(duration)))
    # The first message is due at 0 and the k-th where the expected count reaches k.
    assert abs(count - schedule.expected_count(duration)) <= 1.0 + 1e-6 * count


def test_times_are_lazy_at_high_rates() -> None:
    # An hour at 30,000 messages/s: taking the first few must not build the rest.
    times = ConstantRate(30_000).times(3600.0)
    assert list(itertools.islice(times, 3)) == pytest.approx([0, 1 / 30_000, 2 / 30_000])


# ---------------------------------------------------------------------------------------
# The command-line forms


def test_parse_constant_poisson_and_bursts() -> None:
    constant = parse_arrivals("constant:1000")
    assert isinstance(constant, ConstantRate)
    assert constant.rate == 1000
    assert parse_arrivals("constant: 2.5k").expected_rate(0) == 2500
    poisson = parse_arrivals("poisson:500", seed=7)
    assert isinstance(poisson, Poisson)
    assert (poisson.rate, poisson.seed) == (500, 7)
    bursts = parse_arrivals("bursts:10x5ms")
    assert isinstance(bursts, Bursts)
    assert bursts.size == 10
    assert bursts.interval == pytest.approx(0.005)


def test_parse_steps() -> None:
    steps = parse_arrivals("steps:10s@100,10s@1000")
    assert isinstance(steps, Schedule)
    assert steps.steps == ((10, 100), (10, 1000))
    assert not steps.ramp
    assert steps.seed is None
    assert parse_arrivals("poisson-steps:1m@100", seed=3).seed == 3  # type: ignore[attr-defined]


def test_parse_ramp() -> None:
    ramp = parse_arrivals("ramp:30s@100-1000")
    assert isinstance(ramp, Schedule)
    assert ramp.ramp
    assert ramp.total_duration == 30
    assert ramp.expected_rate(0) == 100
    assert ramp.expected_rate(15) == pytest.approx(550)
    assert ramp.expected_rate(30) == 1000
    up_down = parse_arrivals("ramp:10s@0-100,10s@100-0,5s@300-300")
    assert [up_down.expected_rate(t) for t in (5, 10, 15, 20, 22, 40)] == pytest.approx(
        [50, 100, 50, 300, 300, 300]
    )


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10s", 10), ("5ms", 0.005), ("250us", 0.00025), ("2m", 120), ("1.5", 1.5), ("1h", 3600)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


def test_parse_rate() -> None:
    assert parse_rate("1000") == 1000
    assert parse_rate("30k") == 30_000
    assert parse_rate("500/s") == 500


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1000",
        "constant",
        "constant:",
        "constant:fast",
        "constant:-5",
        "poisson:1e999",
        "bursts:10",
        "bursts:x5ms",
        "bursts:10x5parsecs",
        "bursts:0x5ms",
        "bursts:10x0ms",
        "bursts:10x1e999s",
        "steps:1e999s@5",
        "steps:10s",
        "steps:10s@",
        "steps:10s@100,,",
        "ramp:30s@100",
        "ramp:30s@-1000",
        "uniform:100",
    ],
)
def test_bad_text_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"must|not a|unknown"):
        parse_arrivals(text)


def test_errors_say_what_was_expected() -> None:
    with pytest.raises(ValueError, match="SIZExINTERVAL"):
        parse_arrivals("bursts:lots")
    with pytest.raises(ValueError, match="DURATION@FROM-TO"):
        parse_arrivals("ramp:30s@100")
    with pytest.raises(ValueError, match="unknown arrival process 'uniform'"):
        parse_arrivals("uniform:100")


def test_a_ramp_step_too_short_for_its_slope_does_not_hang() -> None:
    # 5000 / 5e-324 overflows to infinity; the step must not poison the rest.
    schedule = Schedule([(5e-324, 0), (1.0, 5000)], ramp=True)
    assert schedule.expected_count(1.0) == pytest.approx(5000)
    assert len(list(itertools.islice(schedule.times(1.0), 10_000))) == 5000
