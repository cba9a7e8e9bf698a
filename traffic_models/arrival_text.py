"""Arrival processes from their command-line form: ``constant:1000``, ``bursts:10x5ms``,
``trace:179``, ``steps:10s@100,10s@1000``, ``ramp:30s@100-1000``...

The load client, the test network and the experiments take their offered load as one
such string; :func:`parse_arrivals` builds the process it names (from
:mod:`traffic_models.arrivals` or :mod:`traffic_models.trace_model`), and its errors say
what was expected. Rates and durations have their own small forms (``2.5k``, ``500/s``;
``5ms``, ``2m``).
"""

from __future__ import annotations

import math
import re

from .arrivals import ArrivalProcess, Bursts, ConstantRate, Poisson, Schedule, check_rate
from .trace_model import TraceArrivals

__all__ = ["parse_arrivals", "parse_duration", "parse_rate"]

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_DURATION_RE = re.compile(rf"({_NUMBER})\s*(us|ms|s|sec|min|m|h)?")
_RATE_RE = re.compile(rf"({_NUMBER})\s*(k)?\s*(?:/s)?", re.IGNORECASE)
_UNITS: dict[str | None, float] = {
    None: 1.0,
    "s": 1.0,
    "sec": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
}


def parse_duration(text: str) -> float:
    """Seconds from ``"5ms"``, ``"10s"``, ``"2m"``, ``"250us"``, ``"1.5"`` (bare = seconds)."""
    match = _DURATION_RE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a duration (e.g. 10s, 5ms, 2m)")
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if not math.isfinite(seconds):
        raise ValueError(f"{text!r} is not a finite duration")
    return seconds


def parse_rate(text: str) -> float:
    """Messages/s from ``"1000"``, ``"2.5k"``, ``"500/s"``."""
    match = _RATE_RE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a rate in messages/s (e.g. 1000, 2.5k)")
    value = float(match.group(1)) * (1000.0 if match.group(2) else 1.0)
    return check_rate(value)


def _parse_steps(body: str) -> list[tuple[float, float]]:
    steps = []
    for part in body.split(","):
        length, at, rate = part.partition("@")
        if not at:
            raise ValueError(f"step {part.strip()!r} must be DURATION@RATE, e.g. 10s@100")
        steps.append((parse_duration(length), parse_rate(rate)))
    return steps


def _parse_ramp(body: str) -> list[tuple[float, float]]:
    """``30s@100-1000[,30s@1000-200...]`` as knots for ``Schedule(ramp=True)``."""
    knots: list[tuple[float, float]] = []
    for part in body.split(","):
        length, at, rates = part.partition("@")
        low, dash, high = rates.partition("-")
        if not at or not dash:
            raise ValueError(
                f"ramp segment {part.strip()!r} must be DURATION@FROM-TO, e.g. 30s@100-1000"
            )
        # Each segment is a knot at its start rate followed by a zero-length knot at its
        # end rate: the ramp heads for the end rate, and a next segment starting
        # elsewhere is a jump.
        knots.append((parse_duration(length), parse_rate(low)))
        knots.append((0.0, parse_rate(high)))
    return knots


def parse_arrivals(text: str, *, seed: int = 0) -> ArrivalProcess:
    """An arrival process from its command-line form.

    ``constant:1000``
        1000 messages/s, evenly spaced. Rates may say ``2.5k`` or ``500/s``.
    ``poisson:500``
        Poisson arrivals at 500 messages/s (random source seeded with ``seed``).
    ``bursts:10x5ms``
        10 messages at once every 5 ms (the quals proposal's n and d).
    ``trace:179``
        The calibrated trace model's arrivals at a mean of 179 messages/s: bursty at
        every time scale, like the papers' 37-hour trace
        (:class:`traffic_models.trace_model.TraceArrivals`, seeded with ``seed``).
    ``steps:10s@100,10s@1000``
        100 messages/s for 10 s, then 1000 messages/s (held after the last step).
    ``ramp:30s@100-1000``
        From 100 up to 1000 messages/s over 30 s; segments chain with commas
        (``ramp:30s@100-1000,30s@1000-100``).
    ``poisson-steps:...``, ``poisson-ramp:...``
        The same shapes with Poisson arrivals instead of even spacing.

    Raises:
        ValueError: the text is not one of these forms; the message says what was
            expected.
    """
    kind, colon, body = text.strip().partition(":")
    kind = kind.strip().lower()
    body = body.strip()
    if not colon or not body:
        raise ValueError(
            f"arrival process {text!r} must be KIND:PARAMETERS, e.g. constant:1000, "
            "poisson:500, bursts:10x5ms, trace:179, steps:10s@100,10s@1000, ramp:30s@100-1000"
        )
    if kind == "constant":
        return ConstantRate(parse_rate(body))
    if kind == "poisson":
        return Poisson(parse_rate(body), seed=seed)
    if kind == "bursts":
        size, x, interval = body.lower().partition("x")
        if not x or not size.strip().isdigit():
            raise ValueError(f"bursts {body!r} must be SIZExINTERVAL, e.g. 10x5ms")
        return Bursts(int(size), parse_duration(interval))
    if kind == "trace":
        return TraceArrivals(parse_rate(body), seed=seed)
    poisson = kind.startswith("poisson-")
    shape = kind.removeprefix("poisson-")
    if shape == "steps":
        return Schedule(_parse_steps(body), seed=seed if poisson else None)
    if shape == "ramp":
        return Schedule(_parse_ramp(body), ramp=True, seed=seed if poisson else None)
    raise ValueError(
        f"unknown arrival process {kind!r}: use constant, poisson, bursts, trace, steps, ramp, "
        "poisson-steps or poisson-ramp"
    )
