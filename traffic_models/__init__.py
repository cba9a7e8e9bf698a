"""Synthetic Gnutella traffic, all of it synchronous, seeded and reproducible.

Four independent models, combined by :class:`~traffic_models.generator.TrafficGenerator`:

* :mod:`~traffic_models.arrivals`: when messages are due (constant, Poisson, the SEDA
  proposal's bursts of n every d ms, steps and ramps of rate), open loop, read from
  their command-line forms by :mod:`~traffic_models.arrival_text`; the calibrated
  trace model's arrivals are in :mod:`~traffic_models.trace_model`;
* :mod:`~traffic_models.mix`: which types, in what shares (the SOSP paper's 15 % queries,
  the proposal's trace where pongs are more than half);
* :mod:`~traffic_models.content`: Zipf query words, TTL and hops;
* :mod:`~traffic_models.samples`: realistic payload shapes.

:class:`~traffic_models.responder.Responder` is the far side: it answers the pings and
queries a router forwards. Nothing here does I/O or reads a clock; the load client and
the replay tool own those.
"""

from .arrival_text import parse_arrivals
from .arrivals import ArrivalProcess, Bursts, ConstantRate, Poisson, Schedule
from .content import HopsTtl, Vocabulary
from .generator import Scheduled, TrafficGenerator
from .mix import MIXES, PAPER_MIX, TRACE_LIKE_MIX, MessageMix, load_mix, mix_by_name_or_path
from .responder import Responder

__all__ = [
    "MIXES",
    "PAPER_MIX",
    "TRACE_LIKE_MIX",
    "ArrivalProcess",
    "Bursts",
    "ConstantRate",
    "HopsTtl",
    "MessageMix",
    "Poisson",
    "Responder",
    "Schedule",
    "Scheduled",
    "TrafficGenerator",
    "Vocabulary",
    "load_mix",
    "mix_by_name_or_path",
    "parse_arrivals",
]
