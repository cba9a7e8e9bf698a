"""The calibrated trace model reproduces what the papers report of their 37-hour trace."""

from __future__ import annotations

import collections
import itertools
import statistics

import pytest

from protocol.constants import HEADER_SIZE, MessageType
from traffic_models.arrival_text import parse_arrivals
from traffic_models.arrivals import ConstantRate, Poisson
from traffic_models.generator import TrafficGenerator
from traffic_models.trace_model import PAPER_TRACE, TRACE_MIX, TraceArrivals, dispersion

HOUR = 3600
TRACE_SECONDS = int(PAPER_TRACE.hours * HOUR)


@pytest.fixture(scope="module")
def rates() -> list[float]:
    """The model's rate in each second of a 37-hour trace (seed 1)."""
    arrivals = TraceArrivals(seed=1)
    return [arrivals.expected_rate(second) for second in range(TRACE_SECONDS)]


def per_second(times: collections.abc.Iterable[float], seconds: int) -> list[int]:
    counts = collections.Counter(int(at) for at in times)
    return [counts.get(second, 0) for second in range(seconds)]


def aggregate(counts: list[int], width: int) -> list[int]:
    return [sum(counts[i : i + width]) for i in range(0, len(counts), width)]


def test_the_37_hour_mean_is_the_papers_179_per_second(rates: list[float]) -> None:
    # Within 2 %: the cascade's factors have mean one, and 37 hours hold 222 of its
    # coarsest windows.
    assert statistics.fmean(rates) == pytest.approx(PAPER_TRACE.mean_rate, rel=0.02)
    expected = TraceArrivals(seed=1).expected_count(TRACE_SECONDS)
    assert expected == pytest.approx(sum(rates), rel=1e-9)


def test_ten_minute_totals_stay_under_fig_13s_axis_yet_vary(rates: list[float]) -> None:
    totals = [sum(rates[i : i + 600]) for i in range(0, len(rates), 600)]
    mean = statistics.fmean(totals)
    assert max(totals) <= PAPER_TRACE.interval_axis_top
    assert max(totals) >= 1.3 * mean  # bursty even at the coarsest scale
    assert statistics.pstdev(totals) / mean >= 0.1


def test_seconds_are_extremely_bursty(rates: list[float]) -> None:
    # A second carries more than ten times the mean rate somewhere in the trace.
    assert max(rates) >= 10 * PAPER_TRACE.mean_rate
    assert statistics.pstdev(rates) / statistics.fmean(rates) >= 0.7


def test_generated_arrivals_are_bursty_at_every_scale_unlike_poisson() -> None:
    trace = per_second(TraceArrivals(seed=1).times(HOUR), HOUR)
    poisson = per_second(Poisson(PAPER_TRACE.mean_rate, seed=1).times(HOUR), HOUR)
    assert statistics.fmean(trace) == pytest.approx(PAPER_TRACE.mean_rate, rel=0.1)
    trace_dispersion = [dispersion(aggregate(trace, width)) for width in (1, 10, 60)]
    poisson_dispersion = [dispersion(aggregate(poisson, width)) for width in (1, 10, 60)]
    # Poisson counts have variance = mean at any width; the cascade's grow with it.
    assert all(0.7 <= d <= 1.3 for d in poisson_dispersion)
    assert trace_dispersion[0] >= 50
    assert trace_dispersion[0] < trace_dispersion[1] < trace_dispersion[2]


def test_the_rate_is_what_the_arrivals_follow() -> None:
    arrivals = TraceArrivals(seed=3)
    counts = per_second(arrivals.times(600), 600)
    rates = [arrivals.expected_rate(second) for second in range(600)]
    # Busy seconds are busy: the counts follow the modulated rate, not the mean.
    busy = [c for c, r in zip(counts, rates, strict=True) if r > 2 * PAPER_TRACE.mean_rate]
    quiet = [c for c, r in zip(counts, rates, strict=True) if r < PAPER_TRACE.mean_rate / 2]
    assert busy
    assert quiet
    assert statistics.fmean(busy) > 4 * statistics.fmean(quiet)


def test_arrivals_are_deterministic_and_seeded() -> None:
    first = list(itertools.islice(TraceArrivals(seed=5).times(60), 2000))
    again = list(itertools.islice(TraceArrivals(seed=5).times(60), 2000))
    other = list(itertools.islice(TraceArrivals(seed=6).times(60), 2000))
    assert first == again
    assert first != other
    assert first == sorted(first)


def test_shares_and_mean_payload_match_the_papers() -> None:
    generator = TrafficGenerator(mix=TRACE_MIX, arrivals=ConstantRate(50_000), seed=1)
    messages = list(generator.schedule(1.0))
    counts = collections.Counter(m.message_type for m in messages)
    pongs = counts[MessageType.PONG] / len(messages)
    assert pongs > PAPER_TRACE.pong_share_above
    assert max(counts, key=counts.__getitem__) == MessageType.PONG
    for code, share in TRACE_MIX.shares().items():
        assert counts[code] / len(messages) == pytest.approx(share, abs=0.01)
    payload = statistics.fmean(len(m.data) - HEADER_SIZE for m in messages)
    assert payload == pytest.approx(PAPER_TRACE.mean_packet_bytes, abs=2.0)


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({"mean_rate": 0}, "mean rate"),
        ({"mean_rate": float("nan")}, "mean rate"),
        ({"scales": ()}, "at least one"),
        ({"scales": ((0, 0.5),)}, "window > 0"),
        ({"scales": ((1, -0.1),)}, "sigma"),
    ],
)
def test_bad_parameters_are_refused(arguments: dict[str, object], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        TraceArrivals(**arguments)  # type: ignore[arg-type]


def test_the_command_line_names_the_trace_arrivals() -> None:
    arrivals = parse_arrivals("trace:500", seed=4)
    assert isinstance(arrivals, TraceArrivals)
    assert (arrivals.mean_rate, arrivals.seed) == (500, 4)
    with pytest.raises(ValueError, match="mean rate"):
        parse_arrivals("trace:0")
