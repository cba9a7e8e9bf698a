"""Churn: nodes of a test network leave and come back on a seeded schedule.

Measured Gnutella peers come and go; an overlay study that never loses a node measures
a network nobody runs. :func:`churn_schedule` draws, for every node that may churn,
alternating sessions and absences with exponentially distributed lengths (means given
on the command line, as in the measurement literature's session-time models), seeded so
that a run can be repeated. The network carries the schedule out (:mod:`.network`): a
leaving node says Bye and exits (or is killed with SIGKILL under ``--churn-kill``, as a
crashed host would be), and a returning node is started again from its own state
directory, so it bootstraps from the host cache it saved (or, killed, the one it saved
last) and from the run's GWebCache, as a real servent does after a restart.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterable

LEAVE = "leave"
RETURN = "return"


@dataclasses.dataclass(frozen=True, slots=True)
class ChurnSettings:
    mean_session: float
    """Mean seconds a node stays up before it leaves."""
    mean_down: float
    """Mean seconds a node stays away before it comes back."""
    kill: bool = False
    """Leave with SIGKILL (no Bye, no host cache saved) instead of a graceful stop."""

    def __post_init__(self) -> None:
        for name in ("mean_session", "mean_down"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"churn: the mean {name.replace('_', ' ')} must be > 0 s")

    @classmethod
    def parse(cls, text: str, *, kill: bool = False) -> ChurnSettings:
        """``"UP:DOWN"``: mean seconds up and mean seconds down (``"30:10"``)."""
        up, colon, down = text.partition(":")
        try:
            means = float(up), float(down)
        except ValueError:
            means = None
        if not colon or means is None:
            raise ValueError(f"--churn {text}: expected UP:DOWN mean seconds, e.g. 30:10")
        try:
            return cls(*means, kill)
        except ValueError as exc:
            raise ValueError(f"--churn {text}: {exc}") from None


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class ChurnEvent:
    at: float
    """Seconds from the start of the churn."""
    node: int
    action: str
    """:data:`LEAVE` or :data:`RETURN`."""


def churn_schedule(
    nodes: Iterable[int], settings: ChurnSettings, duration: float, seed: int
) -> list[ChurnEvent]:
    """Every leave and return within ``duration`` seconds, in time order.

    Each node starts up; its first session is drawn like the others (no node leaves
    at once unless the draw says so). A node still away at the end stays away until
    the run stops it with the rest.
    """
    rng = random.Random(f"churn:{seed}")
    events = []
    for node in sorted(nodes):
        at = 0.0
        while True:
            at += rng.expovariate(1.0 / settings.mean_session)
            if at >= duration:
                break
            events.append(ChurnEvent(round(at, 3), node, LEAVE))
            at += rng.expovariate(1.0 / settings.mean_down)
            if at >= duration:
                break
            events.append(ChurnEvent(round(at, 3), node, RETURN))
    return sorted(events)
