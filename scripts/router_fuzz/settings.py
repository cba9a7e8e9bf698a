"""The fuzzer's constants, its settings and the figures it counts: what every other
part of ``scripts/fuzz_router.py`` reads, so it stands below them all. The flags that
fill :class:`Settings` are read by the script itself.
"""

from __future__ import annotations

import collections
import dataclasses

SECTION = "fuzzing"
LOOPBACK = "127.0.0.1"

TRUSTED_FUZZ_SOURCES = tuple(f"127.77.0.{n}" for n in range(1, 57))
UNTRUSTED_FUZZ_SOURCES = tuple(f"127.78.0.{n}" for n in range(1, 9))
FUZZ_SOURCES = TRUSTED_FUZZ_SOURCES + UNTRUSTED_FUZZ_SOURCES
"""Where fuzzing connections come from: spread over addresses, as many hostile hosts
would be, so that the per-address limit on attempts does not stop the fuzzing."""
GOOD_SOURCES = ("127.66.0.1", "127.67.0.1")
"""The good peers: two hosts in two networks (/24s), so that a full router's preference
for peers from networks it has fewer of never picks one of them to make room."""
FLOOD_SOURCE = "127.88.0.1"
CROWD_SOURCE = "127.99.0.1"
TRUSTED_NETWORKS = ("127.0.0.1/32", "127.77.0.0/16", "127.99.0.0/16")
"""``network.trusted`` for the run, where the router has that setting: most fuzzing
addresses, as if each were many hosts behind one address, so that an IP ban does not
shut the fuzzer out; the other eight fuzzing addresses, the good peers and the burst's
address are treated as single hosts (attempt limit, bans by IP)."""
ATTEMPTS_PER_IP_PER_MINUTE = 600
FLOOD_EXTRA_ATTEMPTS = 100
"""The 429 burst makes this many attempts more than the router allows an address."""
FLOOD_CONCURRENCY = 350
FLOOD_LISTEN_SECONDS = 2.0
"""How long each attempt of the burst listens for a 429 before it closes: one let in
hears nothing until the router's handshake timeout, so waiting costs only concurrency."""

SEND_CHUNK_BYTES = 64 * 1024
SEND_CHUNK_FRAMES = 64
"""Frames per write. Small, because a hostile session is kicked after a few dozen
malformed frames and what follows in the same write is never looked at."""
READ_SIZE = 1 << 20
TAIL_KEPT = 2048
"""Bytes of a connection's last reads kept to find the Bye that ended it."""
HANDSHAKE_TIMEOUT = 5.0
"""How long a fuzzing connection waits for the router's answer to its handshake."""
ENDING_WAIT = 2.0
"""How long a session that ends by breaking the stream waits for the router's close."""
ENDING_PAUSE = 0.3
"""Pause before an ending that breaks the stream: the router drops what it has not yet
routed of a connection it closes, and the frames before the ending should be read."""
POLITE_CLOSE_WAIT = 6.0
"""How long a session closed politely waits for the router to close its side (it takes
up to 5 s to finish routing what the peer sent before the end)."""
ROUTER_HANDSHAKE_TIMEOUT = 10.0
"""The router's ``network.handshake_timeout`` (its default, left as is)."""
HELD_TOO_LONG = 3 * ROUTER_HANDSHAKE_TIMEOUT
"""A handshake the router has not ended after this long is reported as a failure (a
saturated router's timers fire late: a few seconds past its timeout is no failure)."""
WARM_UP_SECONDS = 10
"""How long the good peers may take to see a first round trip before any fuzzing."""
FAILED_CHECKS_NAMED = 4
"""Failed routing checks listed one by one among the problems (all are counted)."""
CROWD_AFTER = 10.0
FLOOD_AFTER_CROWD = 5.0
"""Seconds into the fuzzing for the crowd (503) and then the burst of attempts (429)."""
SLOWLORIS_DRIP_SECONDS = 1.0
RSS_SAMPLE_SECONDS = 0.25
PROGRESS_SECONDS = 5.0
TEMPLATES_PER_KIND = 48
QRP_TABLES = 12
REPLAY_KEPT = 64
BOMB_BYTES = 1 << 20
MAX_SESSION_FRAMES = 5_000
MEAN_SESSION_FRAMES = {0.05: 300.0, 0.2: 150.0, 0.5: 60.0, 1.0: 40.0}
"""How hostile a session is (the share of its frames that are hostile: any kind, garbage
QRP and random headers included, then a mutation), one drawn per session, and how many
frames it means to send (exponentially distributed). The router kicks a peer after about
20 malformed messages in a short while (its ``[abuse]`` defaults) and closes it at its
first bad QRP message, and whatever it has already read of that peer's then goes
unread: so hostile sessions are planned short. The mild ones live long and carry most of
the valid traffic, which the router routes to everyone."""


class FuzzError(Exception):
    """The run could not be carried out (not a verdict on the router)."""


# ---------------------------------------------------------------------------------------
# Settings


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    seed: int
    frames: int
    duration: float
    connections: int
    slowloris: int
    drippers: int
    handshake_workers: int
    rss_limit_mb: int
    check_deadline: float
    settle: float
    quick: bool

    @property
    def max_connections(self) -> int:
        """Every handshaken connection the fuzzer holds at once, good peers and margin."""
        return self.connections + self.drippers + self.handshake_workers + 2 + 16


# ---------------------------------------------------------------------------------------
# What happened: every count the report shows


@dataclasses.dataclass(slots=True)
class Figures:
    """Counts of everything sent and every outcome seen, filled in as the run goes."""

    frames_by_type: collections.Counter[str] = dataclasses.field(
        default_factory=collections.Counter
    )
    frames_by_mutation: collections.Counter[str] = dataclasses.field(
        default_factory=collections.Counter
    )
    frames_sent: int = 0
    bytes_sent: int = 0
    sessions: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    """Frame-fuzzing sessions: how each began and ended."""
    endings: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    handshakes: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    """Handshake fuzzing, slowloris, drippers, crowd and flood: ``what: outcome``."""
    byes_from_router: collections.Counter[int] = dataclasses.field(
        default_factory=collections.Counter
    )
    answers_from_router: collections.Counter[int] = dataclasses.field(
        default_factory=collections.Counter
    )
    """Handshake status codes the router answered with, over every connection."""
    connections_opened: int = 0
    connections_closed_by_router: int = 0
    slowloris_hold_seconds: list[float] = dataclasses.field(default_factory=list)
    checks_passed: int = 0
    checks_failed: int = 0
    check_round_trips: list[float] = dataclasses.field(default_factory=list)
    late_round_trips: list[str] = dataclasses.field(default_factory=list)
    """Failed checks whose hit did come back, past the deadline (late, not lost)."""
    good_peer_frames: int = 0
    rss_before: int = 0
    rss_peak_sampled: int = 0
    rss_peak_kernel: int = 0
    rss_after: int = 0
    rss_samples: int = 0
    started: float = 0.0
    fuzz_seconds: float = 0.0
    ended_by: str = ""
    problems: list[str] = dataclasses.field(default_factory=list)
    """What fails the run; see the docstring of ``scripts/fuzz_router.py``."""

    def problem(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)
            print(f"PROBLEM: {text}", flush=True)

    @property
    def refused_by_router(self) -> int:
        return sum(n for code, n in self.answers_from_router.items() if code != 200)
