"""What every part of ``scripts/attack_router.py`` reads: where peers come from, the
floors, the run's settings and the figures one scenario fills in.
"""

from __future__ import annotations

import dataclasses

SECTION = "attacks"

HONEST_SOURCE = "127.0.0.1"
"""The honest peers' address: the only trusted one, as a test network's would be."""
TRUSTED_NETWORKS = ("127.0.0.1/32",)
"""``network.trusted`` for every scenario. By default all of loopback is trusted (exempt
from the per-address share, the query rate and bans by IP), so an attacker on loopback
from scripts import ROOT
from scripts.benchdocs import ROBUSTNESS_DOC
would be judged as a crowd of hosts; narrowed, every other 127/8 address is one host."""
ATTACKER_SOURCE = "127.0.0.2"
CROWD_SOURCE = "127.0.0.3"
DRIPPER_SOURCE = "127.0.0.4"
"""Untrusted loopback addresses the attackers bind their sockets to (Linux routes all of
127.0.0.0/8 to loopback, so no namespace is needed)."""

STALL_FLOOR_MS = 100.0
"""The longest an honest ultrapeer's TTL-1 ping may wait for its pong under attack."""
PENDING_QUERIES = 20
"""Queries an honest peer leaves pending before each attack, answered after it."""
BASELINE_SECONDS = 1.0
"""Pings timed before the attack: what the machine itself gives."""
SETTLE_SECONDS = 1.0
"""The attack window runs on this long after the attacker stops: a router still working
through what it was sent is still under attack."""
HIT_WAIT_SECONDS = 5.0
"""How long the honest peer waits for the hits of its pending queries."""
SAMPLE_SECONDS = 0.5
"""How often the attacker's slots are counted in the router's ``/connections``."""
HEARTBEAT_SECONDS = 0.5
"""The honest readers ping this often: a live peer talks, and one scenario sets short
idle deadlines."""
HANDSHAKE_TIMEOUT = 5.0
STATS_PATIENCE = 20.0
"""How long the harness keeps asking an admin interface that is busy (one scenario
keeps it busy on purpose) for its counters."""


class AttackError(Exception):
    """A scenario could not be carried out (not a verdict on the router)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    """What the run does: which scenarios, how long each attack lasts, its seed."""

    seed: int
    seconds: float
    """Length of a timed attack (a flood, a bomb); attacks with a fixed amount of work
    (the spray, the dumps) take what they take."""
    timeout: float
    """Bound on one scenario, router start and stop included."""
    scenarios: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Floor:
    """One floor the scenario is held to: met, not met, or not applicable (None)."""

    name: str
    met: bool | None
    detail: str

    @property
    def verdict(self) -> str:
        return "n/a" if self.met is None else "met" if self.met else "NOT MET"


@dataclasses.dataclass(slots=True)
class Result:
    """One scenario's figures, filled in by the harness and the attack."""

    key: str
    title: str
    config: dict[str, dict[str, object]]
    """The settings the scenario changes from the router's defaults."""
    pid: int = 0
    trips: list[float] = dataclasses.field(default_factory=list)
    """Round trips (s) of the honest ultrapeer's pings that overlapped the attack."""
    idle_trips: list[float] = dataclasses.field(default_factory=list)
    client_lag: float = 0.0
    """The longest this script's own event loop was late over the attack window (s)."""
    honest_closed: list[str] = dataclasses.field(default_factory=list)
    pending_sent: int = 0
    pending_delivered: int = 0
    """Pending queries that reached the honest peer that answers them."""
    pending_lost: int = 0
    attacker_slots: int | None = None
    """The most connections from one attacking address the router held at a sample."""
    slots_allowed: int = 1
    rss_before: int = 0
    rss_after: int = 0
    rss_peak: int = 0
    attack_seconds: float = 0.0
    exit_status: int | None = None
    log_problems: list[str] = dataclasses.field(default_factory=list)
    delta: dict[str, float] = dataclasses.field(default_factory=dict)
    """The router's ``/stats`` counters, after the attack less before, flattened."""
    figures: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    """The attack's own figures, in the order it made them."""
    floors: list[Floor] = dataclasses.field(default_factory=list)
    """The attack's own floors; the common ones are added by the report."""
    error: str | None = None

    def figure(self, label: str, value: object) -> None:
        text = (
            f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)
        )
        self.figures.append((label, text))
        print(f"    {label}: {text}", flush=True)

    def floor(self, name: str, met: bool | None, detail: str) -> None:
        self.floors.append(Floor(name, met, detail))

    def count(self, key: str) -> int:
        """A counter's growth over the attack (0 when the router has no such counter)."""
        return int(self.delta.get(key, 0))

    def counts(self, prefix: str) -> dict[str, int]:
        """Every counter under ``prefix`` that grew, by the rest of its name."""
        return {
            key[len(prefix) :]: int(value)
            for key, value in self.delta.items()
            if key.startswith(prefix) and value
        }

    @property
    def worst_ms(self) -> float:
        return max(self.trips, default=0.0) * 1000

    @property
    def median_ms(self) -> float:
        trips = sorted(self.trips)
        return trips[len(trips) // 2] * 1000 if trips else 0.0

    @property
    def idle_worst_ms(self) -> float:
        return max(self.idle_trips, default=0.0) * 1000
