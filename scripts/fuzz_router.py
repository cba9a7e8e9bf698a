"""Fuzz a gnutella-router process over loopback TCP and check that it keeps routing.

Run from the repository root, in the project's virtual environment:

    python scripts/fuzz_router.py                              # 1,000,000 frames, print figures
    python scripts/fuzz_router.py --output docs/robustness.md  # ... and write them there
    python scripts/fuzz_router.py --quick                      # about 30 s, a smoke run

Theory of operation
-------------------
A router faces peers it does not know. Whatever they send (broken messages, broken
handshakes, or nothing at all, slowly) may cost them their connection, but must never
cost the router its life, its memory or its service to the other peers. This script
checks exactly that, from outside, on a real ``gnutella-router run`` process.

1. **The router.** A child process on a free port of 127.0.0.1 with its own temporary
   state directory and a generated TOML configuration (printed, and written to the
   docs): the admin interface on a free loopback port; ``catcher.min_connections = 0``,
   so that the addresses named in fuzzed pongs and headers are never dialled (the run
   stays on loopback); ``network.max_connections`` raised above the number of
   connections the fuzzer holds at once; ``network.connects_per_ip_per_minute`` raised
   to 600 (from 60). The fuzzer's connections come from 64 loopback source addresses
   (127.77.0.1-56 and 127.78.0.1-8), as many hostile hosts would, so that what is fuzzed
   is the router's parsers and not only its door. Where the router has
   ``network.trusted`` (addresses exempt from the attempt limit and from bans by IP; all
   of loopback by default), it is narrowed so that only the first 56 fuzzing addresses
   are trusted: the other eight, the good peers and one burst of attempts beyond the
   limit (for the 429 answer) are treated as single hosts. Everything else, ``[abuse]``
   kicks and bans included, is at its defaults. JSON logs go to a file.
2. **Two good peers**, from addresses of their own (127.66.0.1 and .2), handshake as
   ultrapeers (one of them with deflate both ways) and read everything the router sends
   them, checking that it frames (the router must never forward anything broken). Every
   second each sends a fresh query (TTL 2) to the router; the other must receive it and
   answer with a query hit, which must come back to the first. A routing check passes
   when both legs arrive within ``--check-deadline`` seconds (30 by default: the router
   is kept saturated, and its backpressure makes the good peers' messages wait their
   turn with everyone else's, which takes seconds on a busy machine); one that does not
   is a failure, and if its legs arrive later the report says when. The checks start before
   the fuzzing (after an uncounted warm-up: the router registers a peer only once it has
   read its last handshake step) and go on for ``--settle`` seconds after it, so a
   router that stops routing, or only recovers late, is caught.
3. **Frame fuzzing** over ``--connections`` concurrent connections. Each one runs
   *sessions* back to back: connect, handshake (with randomly chosen but well-formed
   headers; 15 % also negotiate deflate both ways), send a run of frames, then end in
   one of several ways. A session draws how hostile it is: the share of its frames (5 %,
   20 %, 50 % or all) that are hostile. A peaceful frame is a valid message of a kind a
   servent sends (ping, pong, query, query hit, a huge query hit, push, Bye, vendor 0x31
   and 0x32, a known but unrouted type, and the next message of a valid QRP RESET and
   PATCH sequence), built with ``protocol/`` from a pool of templates and given a fresh
   GUID, TTL and hops. A hostile frame may also be a garbage QRP message or a random
   header, and gets one mutation: bit flips in the payload or the header, truncation,
   extension, garbage GGEP, garbage extension areas (HUGE/XML/GGEP items), extreme
   TTL/hops, another type code, a replay of an earlier frame, padding to exactly 64 KiB.
   Mutations keep the length field true, so the stream stays in step and the router
   reads every frame; the hostile sessions are soon kicked by the router's abuse rules
   or closed at their first bad QRP message, the mild ones live long and carry the valid
   traffic that the router broadcasts to everyone. A session's *ending* is what breaks
   the stream: a reset (SO_LINGER 0) in the middle of a frame, a length beyond 64 KiB, a
   wrong length followed by more frames, raw random bytes, a Bye, and for deflate
   sessions garbage in the deflate stream or a deflate bomb (1 MiB of zeros, which
   inflates to 45,000 empty pings); or it ends quietly: a half frame or nothing, then
   our side closed (FIN) and the connection read until the router closes its own
   (closing it at once, with bytes unread, would send a reset and make the router drop
   what it had not yet routed). Every connection is read while it lives (the router
   answers pings and forwards queries to it), and the Bye that ends it, if any, is
   noted.
4. **Handshake fuzzing**, beside it: random header lines (bad names, control bytes,
   folding, missing colons, overlong lines), garbage request lines, a 10 MB header
   block, 10,000 header lines, a line that never ends (no CRLF ever), bad third steps (a
   refusal, garbage, ``Content-Encoding: gzip``), the 0.4 handshake, resets in the
   middle of a head, and connections reset or closed at once; ``--slowloris``
   connections that drip a handshake a byte a second (reopened when the router drops
   them) and some that handshake and then drip a frame while never reading; once, a
   crowd of as many handshakes as ``max_connections`` at once (503), and once the burst
   beyond the per-address limit (429).
5. **Watching.** The router's resident set (VmRSS, from /proc; psutil is not a
   dependency) is sampled every 0.25 s and must stay below ``--rss-limit-mb``; the
   process must stay alive. At the end the router's own counters are read from its admin
   interface (``/stats``, ``/stages``): no connection task may have failed and no stage
   handler may have raised. Then it is stopped with SIGTERM (SIGKILL after 15 s) and
   must exit 0, and its log must contain no "Traceback", no "connection task failed" and
   no "stage handler failed".

Refusals are expected outcomes, not failures: 400-class handshake answers, 429, 503,
Byes, closes and resets are counted and reported. What fails the run (exit status 1):
the router dying or exiting non-zero, a traceback, a failed connection task or an error
line in its log or counters, RSS over the bound, a routing check failing, a good peer
closed by the router or sent something that does not frame, or a handshake the router
holds open far past its ``handshake_timeout``.

The run stops after ``--frames`` frames (1,000,000 by default) or ``--duration``
seconds, whichever comes first, and stops the router on every path (SIGTERM to this
script or Ctrl-C included: exit status 130). Each worker draws from its own generator
seeded from ``--seed``, so the frames each one builds are the same from run to run;
where the sessions break depends on the router, so two runs are alike, not identical.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import datetime
import errno
import itertools
import json
import math
import os
import random
import shutil
import signal
import socket
import statistics
import struct
import sys
import tempfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import trio
from benchdocs import machine, replace_section

from gnutella_router.config.sections import NetworkConfig
from gnutella_router.net.handshaking import next_handshake_event
from gnutella_router.observe.admin_client import FetchError, fetch
from gnutella_router.observe.profiler import read_peak_rss_bytes, read_rss_bytes
from gnutella_router.testnet.process import (
    RouterProcess,
    RouterProcessError,
    start_router_process,
)
from protocol.codec import encode_message
from protocol.compression import DeflateCompressor, DeflateDecompressor
from protocol.constants import DEFAULT_MAX_PAYLOAD, HEADER_SIZE, ByeCode, MessageType
from protocol.errors import CompressionError, HandshakeError, RemoteProtocolError
from protocol.framing import Frame, FrameDecoder
from protocol.ggep import (
    GGEPBlock,
    GGEPExtension,
    daily_uptime_extension,
    packed_hosts_extension,
    ultrapeer_slots_extension,
    vendor_code_extension,
)
from protocol.handshake import (
    HandshakeComplete,
    HandshakeRejected,
    HandshakeResponse,
    Initiator,
)
from protocol.header import HEADER_STRUCT
from protocol.messages import (
    Bye,
    Extension,
    HugeExtension,
    Message,
    OpaquePayload,
    Payload,
    Ping,
    Pong,
    Push,
    QrpPatch,
    QrpReset,
    Query,
    QueryHit,
    QueryHitDescriptor,
    QueryHitResult,
    UnknownExtension,
    VendorMessage,
    XmlExtension,
    random_guid,
)
from protocol.qrp import ENTRY_BITS, QrpTable, table_messages
from protocol.vendor import (
    Feature,
    VendorMessageId,
    features_supported,
    hops_flow,
    messages_supported,
)

ROOT = Path(__file__).resolve().parent.parent
SECTION = "fuzzing"
LOOPBACK = "127.0.0.1"

TRUSTED_FUZZ_SOURCES = tuple(f"127.77.0.{n}" for n in range(1, 57))
UNTRUSTED_FUZZ_SOURCES = tuple(f"127.78.0.{n}" for n in range(1, 9))
FUZZ_SOURCES = TRUSTED_FUZZ_SOURCES + UNTRUSTED_FUZZ_SOURCES
"""Where fuzzing connections come from: spread over addresses, as many hostile hosts
would be, so that the per-address limit on attempts does not stop the fuzzing."""
GOOD_SOURCES = ("127.66.0.1", "127.66.0.2")
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


def positive_int(text: str) -> int:
    value = int(text.replace(",", "").replace("_", ""))
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive integer")
    return value


QUICK_DEFAULTS: dict[str, Any] = {
    "duration": 20.0,
    "connections": 16,
    "slowloris": 60,
    "drippers": 4,
    "handshake_workers": 2,
}
"""What ``--quick`` changes (a flag given explicitly still wins): a run of about 30 s."""


def parse_args(argv: Sequence[str] | None) -> tuple[Settings, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] if __doc__ else None,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of every frame generator")
    parser.add_argument(
        "--frames", type=positive_int, default=1_000_000, help="frames to send in all"
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=1_200.0,
        metavar="SECONDS",
        help="stop fuzzing after this long even if not every frame is sent",
    )
    parser.add_argument(
        "--connections", type=positive_int, default=48, help="concurrent frame-fuzzing connections"
    )
    parser.add_argument(
        "--slowloris",
        type=int,
        default=300,
        metavar="N",
        help="connections that drip a handshake a byte a second",
    )
    parser.add_argument(
        "--drippers",
        type=int,
        default=16,
        metavar="N",
        help="handshaken connections that drip a frame and never read",
    )
    parser.add_argument(
        "--handshake-workers",
        type=positive_int,
        default=4,
        metavar="N",
        help="concurrent connections with hostile handshakes",
    )
    parser.add_argument(
        "--rss-limit-mb",
        type=positive_int,
        default=256,
        metavar="MIB",
        help="the router's resident set must stay below this",
    )
    parser.add_argument(
        "--check-deadline",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="a routing check fails when its query and hit take longer: routing has stopped "
        "(the router is saturated on purpose, and its backpressure makes the good peers wait "
        "their turn, seconds on a busy machine; the report gives the round trips)",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=3.0,
        metavar="SECONDS",
        help="routing checks and RSS sampling go on this long after the fuzzing",
    )
    quick = ", ".join(f"--{k.replace('_', '-')} {v:g}" for k, v in QUICK_DEFAULTS.items())
    parser.add_argument("--quick", action="store_true", help=f"a short run for tests: {quick}")
    parser.add_argument(
        "--output",
        type=Path,
        metavar="FILE",
        help="write the figures there as the 'Fuzzing' section (e.g. docs/robustness.md); "
        "without it they are only printed",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the figures as JSON")
    parser.add_argument(
        "--router-log", type=Path, metavar="FILE", help="keep a copy of the router's log there"
    )
    arguments = list(sys.argv[1:] if argv is None else argv)
    if "--quick" in arguments:
        parser.set_defaults(**QUICK_DEFAULTS)
    args = parser.parse_args(arguments)
    if args.duration <= 0 or args.check_deadline <= 0 or args.settle < 0:
        parser.error("--duration and --check-deadline must be positive, --settle not negative")
    if not 0 <= args.slowloris <= 2_000 or not 0 <= args.drippers <= 500:
        parser.error("--slowloris must be within 0..2,000 and --drippers within 0..500")
    if args.connections > 1_000 or args.handshake_workers > 100:
        parser.error("--connections must be at most 1,000 and --handshake-workers 100")
    settings = Settings(
        seed=args.seed,
        frames=args.frames,
        duration=args.duration,
        connections=args.connections,
        slowloris=args.slowloris,
        drippers=args.drippers,
        handshake_workers=args.handshake_workers,
        rss_limit_mb=args.rss_limit_mb,
        check_deadline=args.check_deadline,
        settle=args.settle,
        quick=args.quick,
    )
    return settings, args


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
    """What fails the run; see the module docstring."""

    def problem(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)
            print(f"PROBLEM: {text}", flush=True)

    @property
    def refused_by_router(self) -> int:
        return sum(n for code, n in self.answers_from_router.items() if code != 200)


# ---------------------------------------------------------------------------------------
# Valid messages, built with protocol/


WORDS = (
    b"jazz", b"free", b"ogg", b"seda", b"router", b"holiday", b"mp3", b"linux", b"iso",
    b"caf\xc3\xa9", b"\xe6\x97\xa5\xe6\x9c\xac", b"a" * 200, b"%s%n", b"..\\..", b"\xff\xfe",
)  # fmt: skip
VENDORS = (b"GTKG", b"LIME", b"BEAR", b"RAZA", b"\0\0\0\0", b"GRTR", b"\xff\xff\xff\xff")
UNKNOWN_TYPES = (MessageType.RUDP, MessageType.DHT, MessageType.HSEP, 0x03, 0x7F, 0x82, 0xFF)
KNOWN_TYPES = tuple(int(t) for t in MessageType)


def random_ip(rng: random.Random) -> str:
    special = ("0.0.0.0", "255.255.255.255", "127.0.0.1", "10.0.0.1", "192.168.1.1", "224.0.0.1")
    if rng.random() < 0.3:
        return rng.choice(special)
    return ".".join(str(rng.randrange(256)) for _ in range(4))


def random_host(rng: random.Random) -> str:
    return f"{random_ip(rng)}:{rng.randrange(65536)}"


def random_text(rng: random.Random, words: int) -> bytes:
    return b" ".join(rng.choice(WORDS) for _ in range(max(1, words)))


def random_ggep(rng: random.Random) -> GGEPBlock:
    """A well-formed block of the extensions routers read, and some they do not."""
    choices: list[Callable[[], GGEPExtension]] = [
        lambda: daily_uptime_extension(rng.randrange(1 << 32)),
        lambda: vendor_code_extension("GTKG", rng.randrange(256)),
        lambda: ultrapeer_slots_extension(
            rng.randrange(256), rng.randrange(256), rng.randrange(256)
        ),
        lambda: packed_hosts_extension(
            [(random_ip(rng), rng.randrange(1, 65536)) for _ in range(rng.randint(1, 20))]
        ),
        lambda: GGEPExtension("SCP", bytes([rng.randrange(256)])),
        lambda: GGEPExtension("H", b"\x01" + rng.randbytes(20)),
        lambda: GGEPExtension("XYZZY", rng.randbytes(rng.randint(0, 300)), compressed=True),
        lambda: GGEPExtension("NUL", bytes(rng.randint(1, 40)), cobs=True),
    ]
    return GGEPBlock(tuple(rng.choice(choices)() for _ in range(rng.randint(1, 4))))


def maybe_ggep(rng: random.Random, share: float = 0.4) -> GGEPBlock | None:
    return random_ggep(rng) if rng.random() < share else None


def cobs_ggep(rng: random.Random) -> GGEPBlock:
    """A block without NUL bytes on the wire: what a query hit's result may carry."""
    extensions = tuple(
        dataclasses.replace(ext, cobs=True, compressed=False) for ext in random_ggep(rng).extensions
    )
    return GGEPBlock(extensions)


def sha1_urn(rng: random.Random) -> HugeExtension:
    alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
    return HugeExtension(b"urn:sha1:" + bytes(rng.choice(alphabet) for _ in range(32)))


def random_extensions(rng: random.Random, result: bool) -> tuple[Extension, ...]:
    items: list[Extension] = []
    if rng.random() < 0.5:
        items.append(sha1_urn(rng))
    if rng.random() < 0.3:
        items.append(
            XmlExtension(b'<audios><audio title="' + random_text(rng, 3) + b'"/></audios>')
        )
    if rng.random() < 0.2:
        items.append(UnknownExtension(b"legacy text " + bytes([0x41 + rng.randrange(26)])))
    if rng.random() < 0.4:
        items.append(cobs_ggep(rng) if result else random_ggep(rng))
    return tuple(items)


def random_ping(rng: random.Random) -> Payload:
    return Ping(maybe_ggep(rng, 0.3))


def random_pong(rng: random.Random) -> Payload:
    return Pong(
        rng.randrange(65536),
        random_ip(rng),
        rng.randrange(1 << 32),
        rng.randrange(1 << 32),
        maybe_ggep(rng, 0.6),
    )


def random_query(rng: random.Random) -> Payload:
    flags = rng.choice((0x8000, 0x0000, 0xFFFF, 0x8800, 0x4000, rng.randrange(1 << 16)))
    search = random_text(rng, rng.randint(1, 6)).replace(b"\x00", b"")
    return Query(search, flags, random_extensions(rng, result=False))


def random_results(rng: random.Random, count: int, name_words: int) -> tuple[QueryHitResult, ...]:
    return tuple(
        QueryHitResult(
            rng.randrange(1 << 32),
            rng.randrange(1 << 32),
            random_text(rng, name_words) + b".ogg",
            random_extensions(rng, result=True),
        )
        for _ in range(count)
    )


def random_descriptor(rng: random.Random) -> QueryHitDescriptor | None:
    if rng.random() < 0.3:
        return None
    private = b"" if rng.random() < 0.5 else b"\xc3" + rng.randbytes(rng.randint(0, 30))
    return QueryHitDescriptor(rng.choice(VENDORS), rng.randbytes(rng.choice((0, 1, 2, 4))), private)


def random_query_hit(rng: random.Random) -> Payload:
    return QueryHit(
        rng.randrange(65536),
        random_ip(rng),
        rng.randrange(1 << 32),
        random_results(rng, rng.randint(0, 10), 3),
        rng.randbytes(16),
        random_descriptor(rng),
    )


def huge_query_hit(rng: random.Random) -> Payload:
    """255 results with long names: as close to 64 KiB as a query hit gets."""
    name = bytes(rng.choice(b"abcdefghij") for _ in range(230))
    results = tuple(
        QueryHitResult(index, rng.randrange(1 << 32), name + b"%03d" % index)
        for index in range(255)
    )
    return QueryHit(6346, random_ip(rng), 1_000, results, rng.randbytes(16), None)


def random_push(rng: random.Random) -> Payload:
    return Push(
        rng.randbytes(16),
        rng.randrange(1 << 32),
        random_ip(rng),
        rng.randrange(65536),
        maybe_ggep(rng, 0.2),
    )


def random_bye(rng: random.Random) -> Payload:
    code = rng.choice((*(int(c) for c in ByeCode), 0, 65535, rng.randrange(65536)))
    return Bye(code, random_text(rng, rng.randint(0, 8)).decode("utf-8", "replace"))


def garbage_qrp(rng: random.Random) -> Payload:
    """A reset or a patch out of any sequence, from plausible to garbage: odd sizes,
    unknown compressors, entry widths of 0 or 255, sequence numbers past their size, data
    that is not zlib. A router refuses any of them (Bye 413), as gtk-gnutella does."""
    if rng.random() < 0.3:
        length = rng.choice((0, 1, 65_536, 1 << 20, (1 << 32) - 1, rng.randrange(1 << 32)))
        return QrpReset(length, rng.randrange(256))
    compressor = rng.choice((0, 1, 1, 2, 255))
    if compressor == 1 and rng.random() < 0.5:
        data = zlib.compress(rng.randbytes(rng.randint(0, 2000)))
    else:
        data = rng.randbytes(rng.randint(0, 4000))
    return QrpPatch(
        rng.randrange(256),
        rng.randrange(256),
        compressor,
        rng.choice((0, 1, 2, 4, 8, 255)),
        data,
    )


def random_vendor(rng: random.Random, message_type: int = MessageType.VENDOR) -> Payload:
    pick = rng.randrange(4)
    if message_type == MessageType.VENDOR and pick == 0:
        ids = [
            VendorMessageId(rng.choice(VENDORS), rng.randrange(65536), rng.randrange(65536))
            for _ in range(rng.randint(0, 40))
        ]
        return messages_supported(ids).payload
    if message_type == MessageType.VENDOR and pick == 1:
        features = [Feature(rng.choice(("TLS!", "WHAT", "QRP1", "ZZZZ")), rng.randrange(65536))]
        return features_supported(features).payload
    if message_type == MessageType.VENDOR and pick == 2:
        return hops_flow(rng.randrange(256)).payload
    return VendorMessage(
        rng.choice(VENDORS),
        rng.randrange(65536),
        rng.randrange(65536),
        rng.randbytes(rng.randint(0, 300)),
        message_type,
    )


def random_unknown(rng: random.Random) -> Payload:
    return OpaquePayload(rng.choice(UNKNOWN_TYPES), rng.randbytes(rng.randint(0, 600)))


PAYLOAD_MAKERS: dict[str, Callable[[random.Random], Payload]] = {
    "ping": random_ping,
    "pong": random_pong,
    "query": random_query,
    "query hit": random_query_hit,
    "huge query hit": huge_query_hit,
    "push": random_push,
    "bye": random_bye,
    "qrp 0x30 garbage": garbage_qrp,
    "vendor 0x31": random_vendor,
    "vendor 0x32": lambda rng: random_vendor(rng, MessageType.STANDARD_VENDOR),
    "unknown type": random_unknown,
}

KIND_WEIGHTS: dict[str, float] = {
    "ping": 14,
    "pong": 14,
    "query": 18,
    "query hit": 10,
    "huge query hit": 0.15,
    "push": 8,
    "bye": 0.5,
    "qrp 0x30": 5,
    "qrp 0x30 garbage": 1,
    "vendor 0x31": 6,
    "vendor 0x32": 3,
    "unknown type": 6,
    "random header": 8,
}
"""How often each kind of frame is drawn. Byes are rare because a valid one ends the
connection; huge hits because each is 64 KiB. "qrp 0x30" is the next message of a valid
RESET and PATCH sequence (each connection starts one afresh)."""

HOSTILE_KINDS = frozenset({"qrp 0x30 garbage", "random header"})
"""Kinds that only hostile frames are drawn from: no servent sends them."""


def qrp_sequences(rng: random.Random) -> list[QrpReset | QrpPatch]:
    """Valid QRP tables, one after another, each a RESET and its PATCH messages (made
    by ``protocol.qrp``): sizes, entry widths and compression vary from table to table."""
    words = [w.decode("utf-8", "replace").lower() for w in WORDS]
    messages: list[QrpReset | QrpPatch] = []
    for _ in range(QRP_TABLES):
        shared = [f"{rng.choice(words)}{rng.randrange(1000)}" for _ in range(rng.randint(1, 300))]
        table = QrpTable.of_words(shared, slots=rng.choice((1 << 13, 1 << 16, 1 << 17)))
        messages += table_messages(
            table,
            entry_bits=rng.choice(ENTRY_BITS),
            infinity=rng.choice((2, 7)),
            compressed=rng.random() < 0.7,
            patch_bytes=rng.choice((1024, 4096, 16384)),
        )
    return messages


@dataclasses.dataclass(frozen=True, slots=True)
class Template:
    payload_type: int
    payload: bytes


def build_templates(rng: random.Random) -> dict[str, list[Template]]:
    """A pool of valid payloads per kind, built once: encoding through construct is far
    too slow to do for each of a million frames, and fresh header fields plus a mutation
    make every frame different anyway."""
    templates: dict[str, list[Template]] = {}
    for kind, make in PAYLOAD_MAKERS.items():
        count = 4 if kind == "huge query hit" else TEMPLATES_PER_KIND
        templates[kind] = [template_of(make(rng)) for _ in range(count)]
    templates["qrp 0x30"] = [template_of(message) for message in qrp_sequences(rng)]
    return templates


def template_of(payload: Payload) -> Template:
    data = encode_message(Message(bytes(16), 1, 0, payload))
    return Template(HEADER_STRUCT.unpack_from(data)[1], data[HEADER_SIZE:])


# ---------------------------------------------------------------------------------------
# Mutations: each changes a draft frame, keeping its length field true


@dataclasses.dataclass(slots=True)
class Draft:
    """A frame being built; :meth:`to_bytes` writes the true payload length."""

    guid: bytes
    payload_type: int
    ttl: int
    hops: int
    payload: bytes

    def to_bytes(self) -> bytes:
        return (
            HEADER_STRUCT.pack(self.guid, self.payload_type, self.ttl, self.hops, len(self.payload))
            + self.payload
        )


def flip_bits(rng: random.Random, data: bytes, flips: int) -> bytes:
    if not data:
        return data
    changed = bytearray(data)
    for _ in range(flips):
        bit = rng.randrange(len(changed) * 8)
        changed[bit >> 3] ^= 1 << (bit & 7)
    return bytes(changed)


def mutate_payload_bits(rng: random.Random, draft: Draft) -> None:
    draft.payload = flip_bits(rng, draft.payload, rng.randint(1, 8))


def mutate_header_bits(rng: random.Random, draft: Draft) -> None:
    """One bit of the GUID, the type, the TTL or the hops (never the length)."""
    field = rng.randrange(4)
    if field == 0:
        draft.guid = flip_bits(rng, draft.guid, 1)
    elif field == 1:
        draft.payload_type ^= 1 << rng.randrange(8)
    elif field == 2:
        draft.ttl ^= 1 << rng.randrange(8)
    else:
        draft.hops ^= 1 << rng.randrange(8)


def mutate_truncate(rng: random.Random, draft: Draft) -> None:
    if draft.payload:
        draft.payload = draft.payload[: rng.randrange(len(draft.payload))]


def mutate_extend(rng: random.Random, draft: Draft) -> None:
    draft.payload += rng.randbytes(rng.randint(1, 64))


def garbage_ggep(rng: random.Random) -> bytes:
    """A block that starts like GGEP and is wrong in one of the ways parsers trip on."""
    ext_id = b"GX"
    variant = rng.randrange(9)
    if variant == 0:  # random bytes after the magic
        return b"\xc3" + rng.randbytes(rng.randint(0, 40))
    if variant == 1:  # deflate flag, data that does not inflate
        data = rng.randbytes(rng.randint(1, 60))
        return (
            b"\xc3"
            + bytes((0x80 | 0x20 | len(ext_id),))
            + ext_id
            + bytes((0x40 | len(data),))
            + data
        )
    if variant == 2:  # a deflate bomb: inflates far past any message
        bomb = DEFLATED_ZEROS
        length = bytes(
            (0x80 | len(bomb) >> 12, 0x80 | (len(bomb) >> 6) & 0x3F, 0x40 | len(bomb) & 0x3F)
        )
        return b"\xc3" + bytes((0x80 | 0x20 | len(ext_id),)) + ext_id + length + bomb
    if variant == 3:  # COBS flag, code bytes that run past the end
        data = bytes((0xFF,)) + rng.randbytes(rng.randint(0, 20)).replace(b"\x00", b"\x01")
        return (
            b"\xc3"
            + bytes((0x80 | 0x40 | len(ext_id),))
            + ext_id
            + bytes((0x40 | len(data),))
            + data
        )
    if variant == 4:  # a length whose chunks never end
        return b"\xc3" + bytes((0x80 | len(ext_id),)) + ext_id + b"\x80" * rng.randint(3, 10)
    if variant == 5:  # ID length 0, or the reserved bit
        return b"\xc3" + rng.choice((b"\x80", b"\x90GX")) + b"\x41x"
    if variant == 6:  # no "last" flag: the block runs off the end of the payload
        return b"\xc3" + bytes((len(ext_id),)) + ext_id + b"\x41x"
    if variant == 7:  # a length beyond the payload
        return b"\xc3" + bytes((0x80 | len(ext_id),)) + ext_id + b"\xbf\x7f" + b"x" * 10
    return b"\xc3\x82GX\x41x" + rng.randbytes(rng.randint(1, 10))  # bytes glued to a good block


DEFLATED_ZEROS = zlib.compress(bytes(BOMB_BYTES), 9)


def mutate_ggep(rng: random.Random, draft: Draft) -> None:
    garbage = garbage_ggep(rng)
    if rng.random() < 0.6 or not draft.payload:
        draft.payload += garbage
    else:
        at = rng.randrange(len(draft.payload))
        draft.payload = draft.payload[:at] + garbage + draft.payload[at:]


def garbage_extension_area(rng: random.Random) -> bytes:
    """Items separated by 0x1C as queries and results carry them, each one wrong."""
    items = [
        b"urn:" + rng.randbytes(rng.randint(0, 40)),
        b"urn:sha1:" + b"!" * rng.randint(0, 60),
        b"<" + rng.randbytes(rng.randint(0, 80)),
        b"{" + b"x" * rng.randint(0, 3000),
        b"\xc3" + rng.randbytes(rng.randint(0, 20)),
        b"text\x00with a NUL",
        b"\x1c" * rng.randint(1, 50),
        rng.randbytes(rng.randint(1, 100)),
    ]
    return b"\x1c".join(rng.choice(items) for _ in range(rng.randint(1, 6)))


def mutate_extension_area(rng: random.Random, draft: Draft) -> None:
    """Garbage where a query's extensions go (after its NUL), or inside a hit's results."""
    nul = draft.payload.find(b"\x00", 2)
    garbage = garbage_extension_area(rng)
    if draft.payload_type == MessageType.QUERY and nul >= 0:
        draft.payload = draft.payload[: nul + 1] + garbage
    elif draft.payload_type == MessageType.QUERY_HIT and nul >= 0:
        draft.payload = draft.payload[: nul + 1] + garbage + draft.payload[nul + 1 :]
    else:
        draft.payload += b"\x00\x1c" + garbage


def mutate_extreme_header(rng: random.Random, draft: Draft) -> None:
    draft.ttl = rng.choice((0, 1, 7, 8, 15, 16, 127, 255))
    draft.hops = rng.choice((0, 1, 7, 14, 15, 16, 255))


def mutate_type(rng: random.Random, draft: Draft) -> None:
    draft.payload_type = rng.choice((*KNOWN_TYPES, rng.randrange(256)))


def mutate_pad_to_limit(rng: random.Random, draft: Draft) -> None:
    """Exactly the longest payload the router accepts (64 KiB)."""
    room = DEFAULT_MAX_PAYLOAD - len(draft.payload)
    if room > 0:
        draft.payload += rng.choice((bytes(room), rng.randbytes(room), b"\xc3" * room))
    else:
        draft.payload = draft.payload[:DEFAULT_MAX_PAYLOAD]


Mutation = Callable[[random.Random, Draft], None]

MUTATIONS: dict[str, tuple[float, Mutation | None]] = {
    "payload bit flips": (16, mutate_payload_bits),
    "header bit flips": (6, mutate_header_bits),
    "truncated": (10, mutate_truncate),
    "extended": (8, mutate_extend),
    "GGEP garbage": (10, mutate_ggep),
    "extension-area garbage": (7, mutate_extension_area),
    "extreme TTL/hops": (6, mutate_extreme_header),
    "other type code": (5, mutate_type),
    "replayed": (4, None),
    "padded to 64 KiB": (0.15, mutate_pad_to_limit),
}
"""Mutation name: (weight, function) for hostile frames; "replayed" sends an earlier frame
again as it was. Peaceful frames are sent "valid", without one."""


@dataclasses.dataclass(frozen=True, slots=True)
class FuzzFrame:
    data: bytes
    kind: str
    mutation: str


class FrameFuzzer:
    """One worker's source of frames: deterministic for a given generator and templates."""

    def __init__(self, rng: random.Random, templates: dict[str, list[Template]]) -> None:
        self.rng = rng
        self.templates = templates
        self._kinds = list(KIND_WEIGHTS)
        self._kind_weights = list(itertools.accumulate(KIND_WEIGHTS.values()))
        peaceful = {k: w for k, w in KIND_WEIGHTS.items() if k not in HOSTILE_KINDS}
        self._peaceful_kinds = list(peaceful)
        self._peaceful_weights = list(itertools.accumulate(peaceful.values()))
        self._mutations = list(MUTATIONS)
        self._mutation_weights = list(itertools.accumulate(w for w, _ in MUTATIONS.values()))
        self._sent: collections.deque[FuzzFrame] = collections.deque(maxlen=REPLAY_KEPT)
        qrp = templates["qrp 0x30"]
        self._qrp_resets = [i for i, t in enumerate(qrp) if t.payload[:1] == b"\x00"]
        self._qrp_next = 0
        self.mutation_share = 1.0
        """The share of hostile frames: drawn from every kind, then given one of the
        :data:`MUTATIONS`. The rest are peaceful: valid, of the kinds a servent sends.
        Each session sets its own (:meth:`start_session`)."""

    def start_session(self, mutation_share: float) -> None:
        """A new connection: its own share of hostile frames, and its QRP table begins
        with a RESET (a router refuses a PATCH before one)."""
        self.mutation_share = mutation_share
        self._qrp_next = self.rng.choice(self._qrp_resets)

    def next_qrp(self) -> Template:
        """The next message of the valid QRP sequences, table after table."""
        qrp = self.templates["qrp 0x30"]
        template = qrp[self._qrp_next]
        self._qrp_next = (self._qrp_next + 1) % len(qrp)
        return template

    def header_fields(self) -> tuple[bytes, int, int]:
        """A fresh GUID (modern marks most of the time), a TTL and hops that are
        mostly usual: enough is forwarded for the router to do real work."""
        rng = self.rng
        guid = bytearray(rng.randbytes(16))
        if rng.random() < 0.9:
            guid[8], guid[15] = 0xFF, 0
        ttl = rng.choice((1, 1, 2, 2, 2, 3, 4, 7))
        hops = rng.choice((0, 0, 0, 1, 2, 3))
        return bytes(guid), ttl, hops

    def next_frame(self) -> FuzzFrame:
        rng = self.rng
        if rng.random() < self.mutation_share:
            mutation = rng.choices(self._mutations, cum_weights=self._mutation_weights)[0]
            if mutation == "replayed":
                if self._sent:
                    earlier = rng.choice(self._sent)
                    return FuzzFrame(earlier.data, earlier.kind, mutation)
                mutation = "payload bit flips"  # nothing sent yet to replay
            kind = rng.choices(self._kinds, cum_weights=self._kind_weights)[0]
        else:
            mutation = "valid"
            kind = rng.choices(self._peaceful_kinds, cum_weights=self._peaceful_weights)[0]
        guid, ttl, hops = self.header_fields()
        if kind == "random header":
            payload_type = rng.randrange(256)
            draft = Draft(guid, payload_type, rng.randrange(256), rng.randrange(256), b"")
            draft.payload = rng.randbytes(rng.randint(0, 512))
        else:
            template = self.next_qrp() if kind == "qrp 0x30" else rng.choice(self.templates[kind])
            draft = Draft(guid, template.payload_type, ttl, hops, template.payload)
        change = MUTATIONS[mutation][1] if mutation != "valid" else None
        if change is not None:
            change(rng, draft)
        frame = FuzzFrame(draft.to_bytes(), kind, mutation)
        self._sent.append(frame)
        return frame

    def frames(self, count: int) -> list[FuzzFrame]:
        return [self.next_frame() for _ in range(count)]

    def good_frame(self) -> bytes:
        """A valid, unmutated frame (the start of a half frame, a slow drip)."""
        guid, ttl, hops = self.header_fields()
        template = self.rng.choice(self.templates["query"])
        return Draft(guid, template.payload_type, ttl, hops, template.payload).to_bytes()


# ---------------------------------------------------------------------------------------
# Session endings: what breaks the stream at the end of a session


ENDINGS: dict[str, float] = {
    "close": 30,
    "reset mid-frame (SO_LINGER 0)": 15,
    "length beyond 64 KiB": 14,
    "wrong length, then more frames": 10,
    "random bytes": 10,
    "half a frame, then close": 8,
    "our Bye": 8,
}
DEFLATE_ENDINGS: dict[str, float] = {
    "garbage in the deflate stream": 12,
    "deflate bomb (1 MiB of zeros)": 3,
}


def oversized_header(rng: random.Random) -> bytes:
    length = rng.choice(
        (DEFAULT_MAX_PAYLOAD + 1, DEFAULT_MAX_PAYLOAD + 2, 1 << 20, 1 << 31, (1 << 32) - 1)
    )
    return HEADER_STRUCT.pack(rng.randbytes(16), rng.randrange(256), 1, 0, length)


def wrong_length_frames(rng: random.Random, fuzzer: FrameFuzzer) -> bytes:
    """A frame whose length field is off, followed by frames the router now misreads."""
    frame = bytearray(fuzzer.good_frame())
    length = len(frame) - HEADER_SIZE
    wrong = rng.choice(
        (0, max(0, length - rng.randint(1, 64)), length + rng.randint(1, 64), DEFAULT_MAX_PAYLOAD)
    )
    struct.pack_into("<I", frame, 19, wrong)
    return bytes(frame) + b"".join(f.data for f in fuzzer.frames(rng.randint(1, 20)))


# ---------------------------------------------------------------------------------------
# Sockets


class RouterTarget:
    """Where the router listens, and which loopback source addresses this host can use."""

    def __init__(self, address: tuple[str, int], spread_sources: bool) -> None:
        self.address = address
        self.spread_sources = spread_sources

    def source(self, wanted: str) -> str:
        return wanted if self.spread_sources else LOOPBACK


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports: all held open while they are picked, so that no two
    are the same (picking them one after another can give the same port twice)."""
    with contextlib.ExitStack() as stack:
        probes = [stack.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind((LOOPBACK, 0))
        return [int(probe.getsockname()[1]) for probe in probes]


def can_bind(address: str) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
    return True


async def open_from(target: RouterTarget, source: str) -> trio.SocketStream:
    """A TCP connection to the router from ``source`` (a loopback address)."""
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
    try:
        await sock.bind((target.source(source), 0))
        await sock.connect(target.address)
    except BaseException:
        sock.close()
        raise
    return trio.SocketStream(sock)


def reset(stream: trio.SocketStream) -> None:
    """Close with SO_LINGER 0: the kernel sends RST instead of FIN."""
    with contextlib.suppress(OSError):
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stream.socket.close()


async def close_quietly(stream: trio.SocketStream) -> None:
    with (
        trio.CancelScope(shield=True),
        trio.move_on_after(0.5),
        contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError),
    ):
        await stream.aclose()


STREAM_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


def trailing_bye(data: bytes | bytearray) -> int | None:
    """The code of the Bye that ends ``data`` (the last bytes read), if one does."""
    end = len(data)
    for start in range(max(0, end - HEADER_SIZE - 600), end - HEADER_SIZE - 1):
        _, payload_type, _, _, length = HEADER_STRUCT.unpack_from(data, start)
        if payload_type == MessageType.BYE and length >= 2 and start + HEADER_SIZE + length == end:
            return int.from_bytes(data[start + HEADER_SIZE : start + HEADER_SIZE + 2], "little")
    return None


def status_code(answer: bytes) -> int | None:
    """The code of a ``GNUTELLA/0.6 NNN`` answer, if ``answer`` starts with one."""
    first = answer.split(b"\n", 1)[0]
    parts = first.split()
    if len(parts) >= 2 and first.startswith(b"GNUTELLA/") and parts[1].isdigit():
        return int(parts[1])
    if first.strip() == b"GNUTELLA OK":
        return 200
    return None


class Drain:
    """Reads everything the router sends on a connection, so it is never a slow peer,
    and remembers how the connection ended."""

    def __init__(self, stream: trio.SocketStream, inflate: bool, initial: bytes) -> None:
        self.stream = stream
        self.decompressor = DeflateDecompressor() if inflate else None
        self.tail = bytearray()
        self.ended = trio.Event()
        self.how: str | None = None
        if initial:
            self._take(initial)

    def _take(self, data: bytes) -> None:
        if self.decompressor is not None:
            try:
                self.decompressor.receive_data(data)
                while chunk := self.decompressor.read():
                    self.tail += chunk
            except CompressionError:
                self.how = "the router's deflate stream is corrupt"
        else:
            self.tail += data
        if len(self.tail) > TAIL_KEPT:
            del self.tail[:-TAIL_KEPT]

    async def run(self) -> None:
        try:
            while True:
                data = await self.stream.receive_some(READ_SIZE)
                if not data:
                    self.how = self.how or "closed"
                    return
                self._take(bytes(data))
        except trio.ClosedResourceError:
            self.how = self.how or "closed by us"
        except (trio.BrokenResourceError, OSError):
            self.how = self.how or "reset"
        finally:
            self.ended.set()

    def bye_code(self) -> int | None:
        return trailing_bye(self.tail)


# ---------------------------------------------------------------------------------------
# Frame fuzzing


SESSION_HEADER_CHOICES: tuple[tuple[str, Callable[[random.Random], str]], ...] = (
    ("Bye-Packet", lambda rng: rng.choice(("0.1", "1.0", "nope"))),
    ("GGEP", lambda rng: rng.choice(("0.5", "0.1", "9"))),
    ("Pong-Caching", lambda rng: rng.choice(("0.1", "0.2"))),
    ("Vendor-Message", lambda rng: rng.choice(("0.1", "0.2", "x"))),
    ("X-Max-TTL", lambda rng: rng.choice(("0", "1", "3", "255", "-1", "seven"))),
    ("X-Degree", lambda rng: str(rng.randrange(1000))),
    ("X-Query-Routing", lambda rng: "0.1"),
    ("X-Dynamic-Querying", lambda rng: "0.1"),
    ("Listen-IP", lambda rng: rng.choice((random_host(rng), "::1", "x:y"))),
    ("X-Try-Ultrapeers", lambda rng: ",".join(random_host(rng) for _ in range(rng.randint(0, 30)))),
    ("Remote-IP", lambda rng: random_ip(rng)),
    ("X-Ultrapeer-Needed", lambda rng: rng.choice(("True", "False"))),
    ("X-Requeries", lambda rng: "False"),
)  # fmt: skip


def session_headers(rng: random.Random, deflate: bool) -> list[tuple[str, str]]:
    """Well-formed handshake headers in random combinations (the handshake fuzzer is
    what sends malformed ones)."""
    headers = [
        ("User-Agent", rng.choice(("fuzz/1.0", "gtk-gnutella/1.2.3", "LimeWire/5.5", "x" * 200))),
        ("X-Ultrapeer", rng.choice(("True", "True", "False", "maybe"))),
        ("GUID", random_guid().hex() if rng.random() < 0.9 else "not-a-guid"),
    ]
    headers += [(name, make(rng)) for name, make in SESSION_HEADER_CHOICES if rng.random() < 0.4]
    if deflate:
        headers.append(("Accept-Encoding", "deflate"))
    return headers


class FrameFuzzing:
    """The frame-fuzzing workers, sharing the budget of frames and the figures."""

    def __init__(
        self,
        target: RouterTarget,
        templates: dict[str, list[Template]],
        settings: Settings,
        figures: Figures,
    ) -> None:
        self.target = target
        self.templates = templates
        self.settings = settings
        self.figures = figures

    def budget_left(self) -> int:
        return self.settings.frames - self.figures.frames_sent

    async def worker(self, index: int) -> None:
        rng = random.Random(f"{self.settings.seed}/frames/{index}")
        fuzzer = FrameFuzzer(rng, self.templates)
        while self.budget_left() > 0:
            await self.session(rng, fuzzer)

    async def session(self, rng: random.Random, fuzzer: FrameFuzzer) -> None:
        figures = self.figures
        deflate = rng.random() < 0.15
        try:
            stream = await open_from(self.target, rng.choice(FUZZ_SOURCES))
        except OSError as exc:
            figures.sessions[f"could not connect ({errno.errorcode.get(exc.errno or 0, exc)})"] += 1
            await trio.sleep(0.05)
            return
        figures.connections_opened += 1
        figures.sessions["opened"] += 1
        try:
            complete = await self.handshake(stream, rng, deflate)
            if complete is None:
                return
            drain = Drain(stream, complete.decompress_incoming, complete.trailing_data)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(drain.run)
                await self.send_frames(stream, drain, rng, fuzzer, complete.compress_outgoing)
                nursery.cancel_scope.cancel()
        finally:
            await close_quietly(stream)

    async def handshake(
        self, stream: trio.SocketStream, rng: random.Random, deflate: bool
    ) -> HandshakeComplete | None:
        figures = self.figures
        initiator = Initiator()
        try:
            with trio.fail_after(HANDSHAKE_TIMEOUT):
                await stream.send_all(initiator.start(session_headers(rng, deflate)))
                event = await next_handshake_event(stream, initiator)
                if isinstance(event, HandshakeRejected):
                    figures.answers_from_router[event.status_code] += 1
                    figures.sessions[f"refused {event.status_code} {event.reason}"] += 1
                    return None
                assert isinstance(event, HandshakeResponse)
                figures.answers_from_router[200] += 1
                await stream.send_all(initiator.confirm(deflate=deflate))
                complete = await next_handshake_event(stream, initiator)
                assert isinstance(complete, HandshakeComplete)
        except trio.TooSlowError:
            figures.sessions["no handshake answer within 5 s"] += 1
            return None
        except (HandshakeError, *STREAM_ERRORS):
            figures.sessions["closed by the router during the handshake"] += 1
            figures.connections_closed_by_router += 1
            return None
        figures.sessions["handshaken"] += 1
        if complete.compress_outgoing:
            figures.sessions["handshaken with deflate"] += 1
        return complete

    async def send_frames(
        self,
        stream: trio.SocketStream,
        drain: Drain,
        rng: random.Random,
        fuzzer: FrameFuzzer,
        deflate: bool,
    ) -> None:
        figures = self.figures
        compressor = DeflateCompressor() if deflate else None
        share = rng.choice(list(MEAN_SESSION_FRAMES))
        planned = min(MAX_SESSION_FRAMES, 1 + int(rng.expovariate(1 / MEAN_SESSION_FRAMES[share])))
        fuzzer.start_session(share)
        endings = {**ENDINGS, **(DEFLATE_ENDINGS if deflate else {})}
        ending = rng.choices(list(endings), weights=list(endings.values()))[0]
        try:
            while planned > 0 and self.budget_left() > 0:
                if drain.ended.is_set():
                    raise trio.BrokenResourceError
                frames: list[FuzzFrame] = []
                size = 0
                while len(frames) < min(planned, SEND_CHUNK_FRAMES) and size < SEND_CHUNK_BYTES:
                    frame = fuzzer.next_frame()
                    frames.append(frame)
                    size += len(frame.data)
                data = b"".join(f.data for f in frames)
                await stream.send_all(compressor.compress(data) if compressor else data)
                planned -= len(frames)
                figures.frames_sent += len(frames)
                figures.bytes_sent += size
                for frame in frames:
                    figures.frames_by_type[frame.kind] += 1
                    figures.frames_by_mutation[frame.mutation] += 1
            if self.budget_left() <= 0:
                ending = "close"
            await self.end_session(stream, drain, rng, fuzzer, compressor, ending)
        except STREAM_ERRORS:
            figures.sessions["closed by the router before its end"] += 1
            await self.note_close(drain)

    async def end_session(
        self,
        stream: trio.SocketStream,
        drain: Drain,
        rng: random.Random,
        fuzzer: FrameFuzzer,
        compressor: DeflateCompressor | None,
        ending: str,
    ) -> None:
        def framed(data: bytes) -> bytes:
            return compressor.compress(data) if compressor is not None else data

        if ending != "close":
            # Let the router reach what came before, or it goes with the connection.
            await trio.sleep(ENDING_PAUSE)
        last = b""
        if ending in ("reset mid-frame (SO_LINGER 0)", "half a frame, then close"):
            frame = fuzzer.good_frame()
            last = framed(frame[: rng.randrange(1, len(frame))])
        elif ending == "our Bye":
            last = framed(encode_message(Message(random_guid(), 1, 0, Bye(200, "fuzz over"))))
        elif ending == "length beyond 64 KiB":
            last = framed(oversized_header(rng) + rng.randbytes(rng.randint(0, 100)))
        elif ending == "wrong length, then more frames":
            last = framed(wrong_length_frames(rng, fuzzer))
        elif ending == "random bytes":
            last = framed(rng.randbytes(rng.randint(1, 8192)))
        elif ending == "garbage in the deflate stream":
            last = rng.randbytes(rng.randint(1, 2048))
        elif ending == "deflate bomb (1 MiB of zeros)":
            last = framed(bytes(BOMB_BYTES))
        if last:
            await stream.send_all(last)
        self.figures.endings[ending] += 1
        if ending == "reset mid-frame (SO_LINGER 0)":
            reset(stream)
        elif ending in ("close", "half a frame, then close"):
            # A polite close: our side first, then read until the router closes its own.
            # Closing at once with its messages unread would make our kernel send a
            # reset, and the router would drop what it has not yet routed of ours.
            await stream.send_eof()
            with trio.move_on_after(POLITE_CLOSE_WAIT):
                await drain.ended.wait()
        else:
            # The router should close the connection now (or, after our Bye, we do).
            with trio.move_on_after(ENDING_WAIT):
                await drain.ended.wait()
            if drain.ended.is_set():
                await self.note_close(drain)

    async def note_close(self, drain: Drain) -> None:
        """Count a close by the router, with its Bye code when the last bytes hold one."""
        with trio.move_on_after(ENDING_WAIT):
            await drain.ended.wait()
        self.figures.connections_closed_by_router += 1
        code = drain.bye_code()
        if code is not None:
            self.figures.byes_from_router[code] += 1
            self.figures.sessions[f"closed by the router with Bye {code}"] += 1
        else:
            self.figures.sessions[
                f"closed by the router without a Bye ({drain.how or 'no end seen'})"
            ] += 1


# ---------------------------------------------------------------------------------------
# Handshake fuzzing


REQUEST_LINE = b"GNUTELLA CONNECT/0.6\r\n"


def random_header_lines(rng: random.Random) -> bytes:
    """A head whose header lines are random: bad names, control bytes, folding, no colon,
    repeated names, high bytes, overlong lines. Sometimes a well-formed line or two."""
    makers: list[Callable[[], bytes]] = [
        lambda: b"User-Agent: fuzz/1.0",
        lambda: rng.randbytes(rng.randint(0, 60)).translate(None, b"\r\n"),
        lambda: b"No colon here at all",
        lambda: b": empty name",
        lambda: b"Bad Name: spaces in the name",
        lambda: b"X-Control: \x01\x02\x7f\x00",
        lambda: b"  folded continuation " + rng.randbytes(10).translate(None, b"\r\n"),
        lambda: b"\tX-Tab-Folded: yes",
        lambda: b"X-High: \xff\xfe\xe9",
        lambda: b"X-Long: " + b"y" * rng.choice((4000, 4100, 9000)),
        lambda: b"Content-Encoding: " + rng.choice((b"gzip", b"deflate", b"br", b"")),
        lambda: b"Accept-Encoding: deflate, gzip, \xff",
        lambda: b"X-Try-Ultrapeers: " + b"1.2.3.4:5," * rng.randint(0, 300),
        lambda: b"GUID: " + rng.choice((b"00", b"z" * 32, b"0" * 64)),
        lambda: b"Listen-IP: " + rng.choice((b"999.1.1.1:1", b"1.2.3.4:99999", b"[::1]:6346", b"")),
        lambda: b"X-Max-TTL: " + rng.choice((b"-5", b"99999999999999999999", b"0x10")),
    ]  # fmt: skip
    lines = [rng.choice(makers)() for _ in range(rng.randint(1, 30))]
    terminator = rng.choice((b"\r\n", b"\n", b"\r\n", b"\r"))
    return REQUEST_LINE + b"".join(line + terminator for line in lines) + b"\r\n"


def garbage_request(rng: random.Random) -> bytes:
    return rng.choice(
        (
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GNUTELLA CONNECT/9.9\r\n\r\n",
            b"GNUTELLA CONNECT/0.4\r\nUser-Agent: x\r\n\r\n",
            b"GNUTELLA CONNECT/0.6.1\r\n\r\n",
            b"GNUTELLA/0.6 200 OK\r\n\r\n",
            b"\x00" * 64,
            b"\r\n\r\n",
            rng.randbytes(rng.randint(1, 2000)),
            b"GNUTELLA CONNECT/0.6\r\n" + bytes(range(256)) + b"\r\n\r\n",
        )
    )


def many_header_lines(count: int) -> bytes:
    return REQUEST_LINE + b"".join(b"X-H%d: v\r\n" % n for n in range(count)) + b"\r\n"


def header_block_of(size: int) -> Iterator[bytes]:
    """About ``size`` bytes of header lines, in pieces, never held whole."""
    yield REQUEST_LINE
    piece = b"".join(b"X-Filler-%06d: %s\r\n" % (n, b"f" * 80) for n in range(600))
    sent = len(REQUEST_LINE)
    while sent < size:
        yield piece
        sent += len(piece)
    yield b"\r\n"


def endless_line(size: int) -> Iterator[bytes]:
    """A request line that never ends: no CR or LF, ever."""
    piece = b"GNUTELLA CONNECT/0.6 " + b"A" * 65_000
    sent = 0
    while sent < size:
        yield piece
        sent += len(piece)


def valid_request(deflate: bool = False) -> bytes:
    headers = [("User-Agent", "fuzz/1.0"), ("X-Ultrapeer", "True"), ("GUID", random_guid().hex())]
    if deflate:
        headers.append(("Accept-Encoding", "deflate"))
    return Initiator().start(headers)


HANDSHAKE_SCENARIOS = (
    "random header lines",
    "garbage request line",
    "10 MB header block",
    "10,000 header lines",
    "no CRLF ever",
    "bad third step",
    "0.4 handshake",
    "reset mid-handshake",
    "reset at once",
    "close at once",
)
HANDSHAKE_WEIGHTS = (30, 15, 0.5, 3, 1, 20, 8, 15, 5, 8)


class HandshakeFuzzing:
    """Hostile handshakes, slow ones, a crowd and a burst of attempts."""

    def __init__(
        self,
        target: RouterTarget,
        templates: dict[str, list[Template]],
        settings: Settings,
        figures: Figures,
    ) -> None:
        self.target = target
        self.templates = templates
        self.settings = settings
        self.figures = figures
        self.stopping = False

    def count(self, what: str, outcome: str) -> None:
        self.figures.handshakes[f"{what}: {outcome}"] += 1

    async def worker(self, index: int) -> None:
        rng = random.Random(f"{self.settings.seed}/handshakes/{index}")
        # Every scenario early in the run, then at random.
        order = list(HANDSHAKE_SCENARIOS[index % len(HANDSHAKE_SCENARIOS) :])
        order += HANDSHAKE_SCENARIOS[: index % len(HANDSHAKE_SCENARIOS)]
        while True:
            scenario = (
                order.pop(0) if order else rng.choices(HANDSHAKE_SCENARIOS, HANDSHAKE_WEIGHTS)[0]
            )
            await self.one(scenario, rng)

    async def one(self, scenario: str, rng: random.Random) -> None:
        try:
            stream = await open_from(self.target, rng.choice(FUZZ_SOURCES))
        except OSError:
            self.count(scenario, "could not connect")
            await trio.sleep(0.05)
            return
        self.figures.connections_opened += 1
        try:
            outcome = await self.play(scenario, stream, rng)
        except STREAM_ERRORS as exc:
            outcome = f"stream error ({exc.__class__.__name__})"
        finally:
            await close_quietly(stream)
        self.count(scenario, outcome)

    async def play(self, scenario: str, stream: trio.SocketStream, rng: random.Random) -> str:
        if scenario == "random header lines":
            return await self.send_and_read(stream, [random_header_lines(rng)])
        if scenario == "garbage request line":
            return await self.send_and_read(stream, [garbage_request(rng)])
        if scenario == "10 MB header block":
            return await self.send_and_read(stream, header_block_of(10_000_000))
        if scenario == "10,000 header lines":
            return await self.send_and_read(stream, [many_header_lines(10_000)])
        if scenario == "no CRLF ever":
            return await self.send_and_read(stream, endless_line(2_000_000))
        if scenario == "bad third step":
            return await self.bad_third_step(stream, rng)
        if scenario == "0.4 handshake":
            return await self.legacy(stream, rng)
        if scenario == "reset mid-handshake":
            head = valid_request()
            await stream.send_all(head[: rng.randrange(1, len(head))])
            await trio.sleep(rng.random() * 0.2)
            reset(stream)
            return "reset by us"
        if scenario == "reset at once":
            reset(stream)
            return "reset by us"
        # "close at once"
        return "closed by us"

    async def send_and_read(
        self, stream: trio.SocketStream, pieces: Iterator[bytes] | list[bytes]
    ) -> str:
        """Send the pieces while reading the router's answer; the answer's code, or how
        the connection ended. A router must answer or close well within its timeout."""
        answer = bytearray()
        ended: list[str] = []
        started = trio.current_time()

        async def read() -> None:
            try:
                while len(answer) < 4096:
                    data = await stream.receive_some(4096)
                    if not data:
                        ended.append("closed")
                        return
                    answer.extend(data)
                    if b"\n\n" in answer or b"\r\n\r\n" in answer:
                        return
            except STREAM_ERRORS:
                ended.append("reset")

        async def send() -> None:
            with contextlib.suppress(*STREAM_ERRORS):
                for piece in pieces:
                    await stream.send_all(piece)

        with trio.move_on_after(HELD_TOO_LONG) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(send)
                await read()
                nursery.cancel_scope.cancel()
        return self.outcome(answer, ended, scope.cancelled_caught, trio.current_time() - started)

    def outcome(
        self, answer: bytes | bytearray, ended: list[str], held: bool, seconds: float
    ) -> str:
        code = status_code(bytes(answer))
        if code is not None:
            self.figures.answers_from_router[code] += 1
            return f"answered {code}"
        if held:
            self.figures.problem(
                f"the router held a hostile handshake open for over {HELD_TOO_LONG:g} s"
            )
            return f"held open over {HELD_TOO_LONG:g} s"
        self.figures.connections_closed_by_router += 1
        how = ended[0] if ended else "closed"
        return f"{how} by the router" + (
            " after its handshake timeout" if seconds >= ROUTER_HANDSHAKE_TIMEOUT - 1 else ""
        )

    async def bad_third_step(self, stream: trio.SocketStream, rng: random.Random) -> str:
        await stream.send_all(valid_request(deflate=True))
        first = await self.read_head(stream)
        code = status_code(first)
        if code != 200:
            return self.outcome(first, ["closed"], False, 0.0)
        self.figures.answers_from_router[200] += 1
        third = rng.choice(
            (
                b"GNUTELLA/0.6 503 Busy\r\n\r\n",
                b"GNUTELLA/0.6 200 OK\r\nContent-Encoding: gzip\r\n\r\n",
                b"GNUTELLA/0.6 2000 OK\r\n\r\n",
                b"GNUTELLA/1.0 200 OK\r\n\r\n",
                b"HTTP/1.1 200 OK\r\n\r\n",
                b"GNUTELLA/0.6 200 OK\r\n" + b"X: y\r\n" * 500 + b"\r\n",
                b"GNUTELLA/0.6 200 OK\r\nContent-Encoding: deflate\r\n\r\n" + rng.randbytes(500),
                rng.randbytes(rng.randint(1, 500)),
            )
        )
        return "after 200, " + await self.send_and_read(stream, [third])

    async def read_head(self, stream: trio.SocketStream) -> bytes:
        data = bytearray()
        with trio.move_on_after(HANDSHAKE_TIMEOUT):
            while b"\r\n\r\n" not in data and len(data) < 65536:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                data.extend(chunk)
        return bytes(data)

    async def legacy(self, stream: trio.SocketStream, rng: random.Random) -> str:
        """The headerless 0.4 handshake, then a few frames."""
        await stream.send_all(b"GNUTELLA CONNECT/0.4\n\n")
        answer = await self.read_head_04(stream)
        code = status_code(answer)
        if code is not None:
            self.figures.answers_from_router[code] += 1
        if code == 200:
            fuzzer = FrameFuzzer(rng, self.templates)
            await stream.send_all(b"".join(f.data for f in fuzzer.frames(20)))
            return "answered GNUTELLA OK, took frames"
        return self.outcome(answer, ["closed"], False, 0.0)

    async def read_head_04(self, stream: trio.SocketStream) -> bytes:
        data = bytearray()
        with trio.move_on_after(HANDSHAKE_TIMEOUT):
            while b"\n\n" not in data and b"\r\n\r\n" not in data and len(data) < 4096:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                data.extend(chunk)
        return bytes(data)

    # -- slow peers

    async def slowloris(self, index: int) -> None:
        """Drip a valid handshake a byte a second; when the router drops it, start again."""
        head = valid_request()
        while not self.stopping:
            try:
                stream = await open_from(self.target, FUZZ_SOURCES[index % len(FUZZ_SOURCES)])
            except OSError:
                self.count("slowloris", "could not connect")
                await trio.sleep(1.0)
                continue
            self.figures.connections_opened += 1
            started = trio.current_time()
            outcome = "still dripping at the end"
            try:
                for position in range(len(head) - 2):  # never the final CRLF
                    await stream.send_all(head[position : position + 1])
                    with trio.move_on_after(SLOWLORIS_DRIP_SECONDS):
                        data = await stream.receive_some(4096)
                        held = trio.current_time() - started
                        outcome = self.outcome(data, ["closed"], False, held)
                        self.figures.slowloris_hold_seconds.append(held)
                        break
                    if trio.current_time() - started > HELD_TOO_LONG:
                        self.figures.problem(
                            "the router held a slowloris handshake open for over "
                            f"{HELD_TOO_LONG:g} s"
                        )
                        outcome = f"held open over {HELD_TOO_LONG:g} s"
                        break
            except STREAM_ERRORS:
                held = trio.current_time() - started
                self.figures.slowloris_hold_seconds.append(held)
                self.figures.connections_closed_by_router += 1
                outcome = "reset by the router"
            finally:
                await close_quietly(stream)
            self.count("slowloris", outcome)

    async def dripper(self, index: int) -> None:
        """Handshake properly, then drip one frame a byte a second and never read: the
        router's queue towards it fills with broadcasts."""
        rng = random.Random(f"{self.settings.seed}/drippers/{index}")
        try:
            stream = await open_from(self.target, FUZZ_SOURCES[-1 - index % len(FUZZ_SOURCES)])
        except OSError:
            self.count("dripper", "could not connect")
            return
        self.figures.connections_opened += 1
        outcome = "still open at the end"
        try:
            initiator = Initiator()
            with trio.fail_after(HANDSHAKE_TIMEOUT):
                await stream.send_all(initiator.start(session_headers(rng, False)))
                event = await next_handshake_event(stream, initiator)
                if isinstance(event, HandshakeRejected):
                    self.figures.answers_from_router[event.status_code] += 1
                    outcome = f"refused {event.status_code}"
                    return
                self.figures.answers_from_router[200] += 1
                await stream.send_all(initiator.confirm())
                await next_handshake_event(stream, initiator)
            frame = FrameFuzzer(rng, self.templates).good_frame() * 1000
            for position in range(len(frame)):
                await stream.send_all(frame[position : position + 1])
                await trio.sleep(SLOWLORIS_DRIP_SECONDS)
        except (trio.TooSlowError, HandshakeError):
            outcome = "no handshake"
        except STREAM_ERRORS:
            self.figures.connections_closed_by_router += 1
            outcome = "closed by the router"
        finally:
            await close_quietly(stream)
            self.count("dripper", outcome)

    # -- crowds

    async def crowd(self) -> None:
        """As many handshakes at once as the router takes connections: the ones over
        its limit must get 503."""

        async def one() -> None:
            try:
                stream = await open_from(self.target, CROWD_SOURCE)
            except OSError:
                self.count("crowd", "could not connect")
                return
            self.figures.connections_opened += 1
            try:
                initiator = Initiator()
                with trio.fail_after(HANDSHAKE_TIMEOUT):
                    await stream.send_all(initiator.start(session_headers(random.Random(0), False)))
                    event = await next_handshake_event(stream, initiator)
                if isinstance(event, HandshakeRejected):
                    self.figures.answers_from_router[event.status_code] += 1
                    self.count("crowd", f"answered {event.status_code}")
                    return
                self.figures.answers_from_router[200] += 1
                await stream.send_all(initiator.confirm())
                self.count("crowd", "answered 200")
                await trio.sleep(1.0)
            except (trio.TooSlowError, HandshakeError, *STREAM_ERRORS):
                self.count("crowd", "closed during the handshake")
            finally:
                await close_quietly(stream)

        async with trio.open_nursery() as nursery:
            for _ in range(self.settings.max_connections):
                nursery.start_soon(one)

    async def flood(self) -> None:
        """More connection attempts from one address than the router allows a minute,
        fast: each only connects and listens for a moment. A refused attempt is answered
        429 at once; one let in hears nothing (the router waits for its request)."""
        limiter = trio.CapacityLimiter(FLOOD_CONCURRENCY)

        async def one() -> None:
            async with limiter:
                try:
                    stream = await open_from(self.target, FLOOD_SOURCE)
                except OSError:
                    self.count("attempt burst", "could not connect")
                    return
                self.figures.connections_opened += 1
                answer = b""
                try:
                    with trio.move_on_after(FLOOD_LISTEN_SECONDS):
                        answer = bytes(await stream.receive_some(4096))
                except STREAM_ERRORS:
                    pass
                finally:
                    await close_quietly(stream)
                code = status_code(answer)
                if code is not None:
                    self.figures.answers_from_router[code] += 1
                    self.count("attempt burst", f"answered {code}")
                else:
                    wait = f"{FLOOD_LISTEN_SECONDS:g} s"
                    self.count("attempt burst", f"no answer within {wait} (let in)")

        async with trio.open_nursery() as nursery:
            for _ in range(ATTEMPTS_PER_IP_PER_MINUTE + FLOOD_EXTRA_ATTEMPTS):
                nursery.start_soon(one)


# ---------------------------------------------------------------------------------------
# The good peers and the routing checks


GOOD_HEADERS = (
    ("User-Agent", "fuzz-good-peer/1.0"),
    ("X-Ultrapeer", "True"),
    ("Bye-Packet", "0.1"),
    ("GGEP", "0.5"),
)


class GoodPeer:
    """A well-behaved servent: handshakes, reads and frames all it is sent, answers the
    router's pings and the other good peer's probe queries."""

    def __init__(self, name: str, source: str, deflate: bool) -> None:
        self.name = name
        self.source = source
        self.deflate = deflate
        self.guid = random_guid()
        self.stream: trio.SocketStream | None = None
        self.send_lock = trio.Lock()
        self.compressor: DeflateCompressor | None = None
        self.decompressor: DeflateDecompressor | None = None
        self.decoder = FrameDecoder()
        self.closed = trio.Event()
        self.why_closed = ""

    async def connect(self, target: RouterTarget) -> HandshakeComplete:
        stream = await open_from(target, self.source)
        try:
            initiator = Initiator()
            headers = [*GOOD_HEADERS, ("GUID", self.guid.hex())]
            if self.deflate:
                headers.append(("Accept-Encoding", "deflate"))
            with trio.fail_after(10):
                await stream.send_all(initiator.start(headers))
                event = await next_handshake_event(stream, initiator)
                if isinstance(event, HandshakeRejected):
                    raise FuzzError(
                        f"good peer {self.name} refused: {event.status_code} {event.reason}"
                    )
                await stream.send_all(initiator.confirm(deflate=self.deflate))
                complete = await next_handshake_event(stream, initiator)
                assert isinstance(complete, HandshakeComplete)
        except BaseException:
            await close_quietly(stream)
            raise
        self.stream = stream
        self.compressor = DeflateCompressor() if complete.compress_outgoing else None
        self.decompressor = DeflateDecompressor() if complete.decompress_incoming else None
        self.decoder = FrameDecoder()
        self.closed = trio.Event()
        return complete

    async def send(self, message: Message) -> None:
        data = encode_message(message)
        if self.compressor is not None:
            data = self.compressor.compress(data)
        assert self.stream is not None
        async with self.send_lock:
            await self.stream.send_all(data)

    def frames(self, data: bytes) -> list[Frame]:
        if self.decompressor is None:
            return self.decoder.receive_data(data)
        self.decompressor.receive_data(data)
        frames: list[Frame] = []
        while chunk := self.decompressor.read():
            frames.extend(self.decoder.receive_data(chunk))
        return frames


@dataclasses.dataclass(slots=True)
class Probe:
    guid: bytes
    sender: GoodPeer
    receiver: GoodPeer
    payload: bytes
    sent_at: float
    query_at: float | None = None
    hit_at: float | None = None


class RoutingChecks:
    """Every second, a query from each good peer to the other and its hit back."""

    def __init__(self, target: RouterTarget, settings: Settings, figures: Figures) -> None:
        self.target = target
        self.settings = settings
        self.figures = figures
        self.peers = (
            GoodPeer("A", GOOD_SOURCES[0], deflate=True),
            GoodPeer("B", GOOD_SOURCES[1], deflate=False),
        )
        self.probes: dict[bytes, Probe] = {}
        self.sequence = 0
        self.nursery: trio.Nursery
        self.answered = trio.Event()
        """Set (and replaced) whenever a probe's hit comes back."""
        self.overdue: dict[bytes, Probe] = {}
        """Failed probes whose legs may still arrive, late."""
        self.sending = True
        self.passed_after: list[float] = []
        """When each passing check completed (to see routing recover after the fuzzing)."""

    async def start(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        for peer in self.peers:
            complete = await peer.connect(self.target)
            nursery.start_soon(self.read, peer, complete.trailing_data)

    def answer(self, peer: GoodPeer, message: Message) -> None:
        """Send from a task of its own: the reader must never wait on a write."""
        self.nursery.start_soon(self.send_quietly, peer, message)

    async def send_quietly(self, peer: GoodPeer, message: Message) -> None:
        with contextlib.suppress(*STREAM_ERRORS):
            await peer.send(message)

    async def read(self, peer: GoodPeer, trailing: bytes) -> None:
        """Read until the connection ends; a close by the router is a failure, and the
        peer connects again (as a servent would) so the checks can go on."""
        connected: bytes | None = trailing
        while True:
            if connected is not None:
                await self.read_connection(peer, connected)
            await trio.sleep(1.0)
            connected = None
            with contextlib.suppress(FuzzError, HandshakeError, trio.TooSlowError, *STREAM_ERRORS):
                connected = (await peer.connect(self.target)).trailing_data

    async def read_connection(self, peer: GoodPeer, trailing: bytes) -> None:
        assert peer.stream is not None
        try:
            if trailing:  # (b"" would tell the decoder the stream ended)
                self.handle(peer, peer.frames(trailing))
            while data := await peer.stream.receive_some(READ_SIZE):
                self.handle(peer, peer.frames(bytes(data)))
            self.figures.problem(
                f"the router closed good peer {peer.name}'s connection ({peer.why_closed or 'EOF'})"
            )
        except (RemoteProtocolError, CompressionError) as exc:
            self.figures.problem(
                f"the router sent good peer {peer.name} a stream that does not frame: {exc}"
            )
        except STREAM_ERRORS as exc:
            self.figures.problem(
                f"good peer {peer.name}'s connection broke ({peer.why_closed or repr(exc)})"
            )
        finally:
            await close_quietly(peer.stream)

    def handle(self, peer: GoodPeer, frames: list[Frame]) -> None:
        self.figures.good_peer_frames += len(frames)
        now = trio.current_time()
        for frame in frames:
            kind = frame.payload_type
            probe = self.probes.get(frame.guid) or self.overdue.get(frame.guid)
            if kind == MessageType.QUERY and probe is not None and probe.receiver is peer:
                if frame.payload != probe.payload:
                    self.figures.problem("a probe query arrived changed")
                if probe.query_at is None:
                    probe.query_at = now
                    hit = QueryHit(
                        6346, "127.0.0.1", 1000, (QueryHitResult(1, 1, b"probe.ogg"),), peer.guid
                    )
                    self.answer(peer, Message(frame.guid, 2, 0, hit))
            elif kind == MessageType.QUERY_HIT and probe is not None and probe.sender is peer:
                if probe.hit_at is None and probe.query_at is not None:
                    probe.hit_at = now
                    self.answered.set()
                    self.answered = trio.Event()
                    if self.overdue.pop(frame.guid, None) is not None:
                        self.note_late(probe)
            elif kind == MessageType.PING and frame.hops == 0:
                pong = Pong(6346, "127.0.0.1", 0, 0)
                self.answer(peer, Message(frame.guid, 1, 0, pong))
            elif kind == MessageType.BYE:
                with contextlib.suppress(RemoteProtocolError):
                    bye = frame.message().payload
                    assert isinstance(bye, Bye)
                    peer.why_closed = f"Bye {bye.code} {bye.reason}"

    async def send_probes(self) -> None:
        """A fresh query from each good peer to the other."""
        for sender, receiver in (self.peers, self.peers[::-1]):
            self.sequence += 1
            message = Message(random_guid(), 2, 0, Query(b"fuzz probe %d" % self.sequence))
            payload = encode_message(message)[HEADER_SIZE:]
            probe = Probe(message.guid, sender, receiver, payload, trio.current_time())
            self.probes[message.guid] = probe
            with contextlib.suppress(*STREAM_ERRORS):
                await sender.send(message)

    async def warm_up(self) -> None:
        """Probe until one round trip works both ways; these probes are not counted.

        Our side of a handshake ends before the router has read its last step, so the
        router may not yet know the other peer when the first probe arrives, and drop it
        for want of anyone to send it to."""
        with trio.move_on_after(WARM_UP_SECONDS):
            while True:
                await self.send_probes()
                with trio.move_on_after(0.5):
                    await self.all_answered()
                answered = all(p.hit_at is not None for p in self.probes.values())
                self.probes.clear()
                if answered:
                    return
        raise FuzzError(f"routing between the good peers did not work within {WARM_UP_SECONDS} s")

    async def run(self) -> None:
        """Send a probe each way every second and judge the ones past their deadline.

        The seconds are counted from the start, not from the end of the last round, so
        that a busy machine does not thin the checks out (a late round goes at once)."""
        tick = trio.current_time()
        while self.sending:
            await self.send_probes()
            self.judge(trio.current_time())
            tick = max(tick + 1.0, trio.current_time())
            await trio.sleep_until(tick)

    def judge(self, now: float, final: bool = False) -> None:
        """Pass the probes whose hit is back in time; fail those past the deadline, and
        keep watching for their late legs (late is not lost, and the report says which)."""
        deadline = self.settings.check_deadline
        for guid, probe in list(self.probes.items()):
            if probe.hit_at is not None and probe.hit_at - probe.sent_at <= deadline:
                self.figures.checks_passed += 1
                self.figures.check_round_trips.append(probe.hit_at - probe.sent_at)
                self.passed_after.append(probe.hit_at)
            elif probe.hit_at is not None:
                self.fail(probe, f"its hit came back after {probe.hit_at - probe.sent_at:.1f} s")
                self.note_late(probe)
            elif now - probe.sent_at > deadline or final:
                leg = "its query" if probe.query_at is None else "its hit"
                self.fail(probe, f"{leg} had not arrived {now - probe.sent_at:.1f} s later")
                self.overdue[guid] = probe
            else:
                continue
            del self.probes[guid]

    def note_late(self, probe: Probe) -> None:
        assert probe.hit_at is not None
        self.figures.late_round_trips.append(
            f"{probe.sender.name}->{probe.receiver.name} sent at "
            f"{probe.sent_at - self.figures.started:.1f} s: hit back after "
            f"{probe.hit_at - probe.sent_at:.1f} s"
        )

    def fail(self, probe: Probe, why: str) -> None:
        """Count a failed check; the first few are named (the count says the rest)."""
        self.figures.checks_failed += 1
        at = probe.sent_at - self.figures.started
        if self.figures.checks_failed <= FAILED_CHECKS_NAMED:
            self.figures.problem(
                f"routing check {probe.sender.name}->{probe.receiver.name} "
                f"sent at {at:.1f} s failed: {why}"
            )
        elif self.figures.checks_failed == FAILED_CHECKS_NAMED + 1:
            self.figures.problem("more routing checks failed (see the count)")

    async def finish(self) -> None:
        """Stop sending probes, wait for the ones in flight (up to their deadline), then
        judge them all."""
        self.sending = False
        with trio.move_on_after(self.settings.check_deadline):
            await self.all_answered()
        self.judge(trio.current_time(), final=True)

    async def all_answered(self) -> None:
        """Return once every probe sent so far has its hit back."""
        while True:
            answered = self.answered
            if all(p.hit_at is not None for p in self.probes.values()):
                return
            await answered.wait()


# ---------------------------------------------------------------------------------------
# The router process


def router_has_trusted_networks() -> bool:
    """Whether this router has ``network.trusted`` (addresses exempt from the attempt
    limit and from IP bans); older ones refuse the key."""
    return "trusted" in NetworkConfig.__struct_fields__


def router_config(path: Path, settings: Settings, admin_port: int) -> str:
    trusted = ", ".join(f'"{network}"' for network in TRUSTED_NETWORKS)
    text = (
        "# Written by scripts/fuzz_router.py for one run.\n"
        "[network]\n"
        f"max_connections = {settings.max_connections}\n"
        f"connects_per_ip_per_minute = {ATTEMPTS_PER_IP_PER_MINUTE}\n"
        + (f"trusted = [{trusted}]\n" if router_has_trusted_networks() else "")
        + "\n[catcher]\n"
        "min_connections = 0   # never dial: fuzzed pongs and headers name arbitrary hosts\n"
        "\n[admin]\n"
        f'listen = "127.0.0.1:{admin_port}"\n'
        "\n[log]\n"
        'format = "json"\n'
        'level = "info"\n'
    )
    path.write_text(text)
    return text


FATAL_LOG_TEXT = ("Traceback", "connection task failed", "stage handler failed")


def scan_log(path: Path) -> dict[str, list[str]]:
    """Lines of the router's log that hold each of :data:`FATAL_LOG_TEXT`."""
    found: dict[str, list[str]] = {text: [] for text in FATAL_LOG_TEXT}
    with contextlib.suppress(OSError), path.open(errors="replace") as log:
        for line in log:
            for text in FATAL_LOG_TEXT:
                if text in line:
                    found[text].append(line.strip()[:2000])
    return found


def error_lines(path: Path) -> list[str]:
    """The router's error-level log lines: what it says when it dies ("cannot start",
    even mid-run) or cannot write a dump, a profile or a trace."""
    with contextlib.suppress(OSError), path.open(errors="replace") as log:
        return [line.strip() for line in log if '"level": "error"' in line]
    return []


def stop_router(router: RouterProcess) -> int | None:
    """SIGTERM, wait, SIGKILL on timeout; a second Ctrl-C during the wait kills at once."""
    try:
        return router.close(grace=15.0)
    except BaseException:
        router.process.kill()
        router.process.wait()
        raise


class RssWatch:
    """Samples the router's resident set and whether it is alive."""

    def __init__(self, router: RouterProcess, settings: Settings, figures: Figures) -> None:
        self.router = router
        self.limit = settings.rss_limit_mb * 2**20
        self.figures = figures
        self.died = trio.Event()

    def sample(self) -> int:
        rss = read_rss_bytes(self.router.pid)
        figures = self.figures
        figures.rss_samples += 1
        figures.rss_peak_sampled = max(figures.rss_peak_sampled, rss)
        if rss > self.limit:
            figures.problem(
                f"the router's RSS reached {mib(rss)}, over the bound of {mib(self.limit)}"
            )
        return rss

    async def run(self) -> None:
        while True:
            status = self.router.process.poll()
            if status is not None:
                self.figures.problem(f"the router exited during the run with status {status}")
                self.died.set()
                return
            self.sample()
            await trio.sleep(RSS_SAMPLE_SECONDS)


# ---------------------------------------------------------------------------------------
# The run


async def progress(figures: Figures) -> None:
    last_frames, last_time = 0, trio.current_time()
    while True:
        await trio.sleep(PROGRESS_SECONDS)
        now = trio.current_time()
        rate = (figures.frames_sent - last_frames) / (now - last_time)
        last_frames, last_time = figures.frames_sent, now
        print(
            f"  {now - figures.started:5.0f} s  frames {figures.frames_sent:>9,} ({rate:,.0f}/s)"
            f"  sessions {figures.sessions['opened']:,}  connections {figures.connections_opened:,}"
            f"  checks {figures.checks_passed} passed / {figures.checks_failed} failed"
            f"  RSS {figures.rss_peak_sampled / 2**20:.0f} MiB peak",
            flush=True,
        )


async def fuzz(
    router: RouterProcess,
    target: RouterTarget,
    templates: dict[str, list[Template]],
    settings: Settings,
    figures: Figures,
) -> None:
    """Everything that talks to the router, from the first check to the last."""
    watch = RssWatch(router, settings, figures)
    figures.rss_before = watch.sample()
    checks = RoutingChecks(target, settings, figures)
    frames = FrameFuzzing(target, templates, settings, figures)
    handshakes = HandshakeFuzzing(target, templates, settings, figures)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch.run)
        figures.started = trio.current_time()
        await checks.start(nursery)
        await checks.warm_up()
        nursery.start_soon(checks.run)
        nursery.start_soon(progress, figures)

        fuzz_started = trio.current_time()
        deadline = fuzz_started + settings.duration
        with trio.move_on_at(deadline) as cap:
            async with trio.open_nursery() as fuzzing:
                async with trio.open_nursery() as frame_workers:
                    for index in range(settings.connections):
                        frame_workers.start_soon(frames.worker, index)
                    for index in range(settings.handshake_workers):
                        fuzzing.start_soon(handshakes.worker, index)
                    for index in range(settings.slowloris):
                        fuzzing.start_soon(handshakes.slowloris, index)
                    for index in range(settings.drippers):
                        fuzzing.start_soon(handshakes.dripper, index)
                    fuzzing.start_soon(crowd_then_flood, handshakes, settings)
                    fuzzing.start_soon(stop_if_died, watch, frame_workers.cancel_scope)
                fuzzing.cancel_scope.cancel()
        handshakes.stopping = True
        figures.fuzz_seconds = trio.current_time() - fuzz_started
        figures.ended_by = "the duration cap" if cap.cancelled_caught else "the frame target"
        if watch.died.is_set():
            figures.ended_by = "the router's death"
        print(
            f"fuzzing ended by {figures.ended_by} after {figures.fuzz_seconds:.1f} s; settling",
            flush=True,
        )

        settle_end = trio.current_time() + settings.settle
        await trio.sleep_until(settle_end)
        await checks.finish()
        recovered = [t for t in checks.passed_after if t > fuzz_started + figures.fuzz_seconds]
        if settings.settle >= 2 and not recovered and not watch.died.is_set():
            figures.problem("no routing check passed after the fuzzing ended")
        figures.rss_after = watch.sample() if not watch.died.is_set() else 0
        nursery.cancel_scope.cancel()
    for peer in checks.peers:
        if peer.stream is not None:
            await close_quietly(peer.stream)


async def crowd_then_flood(handshakes: HandshakeFuzzing, settings: Settings) -> None:
    """The crowd and then the burst of attempts, early enough to happen in any run (the
    frame target is usually reached long before the duration cap)."""
    await trio.sleep(min(settings.duration / 3, CROWD_AFTER))
    await handshakes.crowd()
    await trio.sleep(min(settings.duration / 6, FLOOD_AFTER_CROWD))
    await handshakes.flood()


async def stop_if_died(watch: RssWatch, scope: trio.CancelScope) -> None:
    await watch.died.wait()
    scope.cancel()


def interrupt_instead(signum: int, frame: object) -> None:
    """SIGTERM and SIGHUP become SIGINT: inside trio, trio turns that into a
    KeyboardInterrupt at a safe point; outside, Python raises it at once. Either way the
    run unwinds like a Ctrl-C and the router is stopped on the way out."""
    os.kill(os.getpid(), signal.SIGINT)


def run_trio(
    router: RouterProcess,
    target: RouterTarget,
    templates: dict[str, list[Template]],
    settings: Settings,
    figures: Figures,
) -> None:
    """:func:`fuzz` under trio, with its exception groups opened: a Ctrl-C or a
    :class:`FuzzError` comes out as itself, anything else (a bug here) as it is."""
    try:
        trio.run(fuzz, router, target, templates, settings, figures)
    except BaseExceptionGroup as group:
        leaves = list(leaf_exceptions(group))
        for kind in (KeyboardInterrupt, FuzzError):
            for leaf in leaves:
                if isinstance(leaf, kind):
                    raise leaf from None
        raise


def leaf_exceptions(group: BaseExceptionGroup[BaseException]) -> Iterator[BaseException]:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from leaf_exceptions(exc)
        else:
            yield exc


def router_counters(admin: tuple[str, int], figures: Figures) -> dict[str, Any]:
    """The router's own account of the run, and what in it fails the run."""
    try:
        stats = fetch(admin, "/stats", timeout=10.0)
        stages = fetch(admin, "/stages", timeout=10.0)
    except FetchError as exc:
        figures.problem(f"the router's admin interface did not answer: {exc}")
        return {}
    assert isinstance(stats, dict)
    assert isinstance(stages, dict)
    server = stats.get("server", {})
    router = stats.get("router", {})
    failed = server.get("failed_connections", 0)
    if failed:
        figures.problem(f"{failed} connection tasks failed in the router (its failed_connections)")
    handler_errors = {name: stage.get("handler_errors", 0) for name, stage in iter_stages(stages)}
    if any(handler_errors.values()):
        figures.problem(f"stage handlers raised: {handler_errors}")
    dropped = collections.Counter[str]()
    for reason, by_type in router.get("dropped", {}).items():
        dropped[reason] += sum(by_type.values())
    return {
        "accepted": server.get("accepted"),
        "completed": server.get("completed"),
        "refused": server.get("refused"),
        "closed": server.get("closed"),
        "failed_connections": failed,
        "kicked": server.get("kicked"),
        "messages_in": server.get("messages_in"),
        "bytes_in": server.get("bytes_in"),
        "received_by_type": by_named_type(router.get("received", {})),
        "dropped_by_reason": dict(dropped.most_common()),
        "handler_errors": handler_errors,
    }


def by_named_type(counts: dict[str, int]) -> dict[str, int]:
    """Counts per message type, with the codes that have no name (``0x7f``...) summed."""
    named = {name: n for name, n in counts.items() if not name.startswith("0x")}
    named["codes without a name"] = sum(n for name, n in counts.items() if name.startswith("0x"))
    return dict(sorted(named.items(), key=lambda item: -item[1]))


def iter_stages(stages: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every stage in a ``/stages`` answer, wherever it is nested."""
    for key, value in stages.items():
        if isinstance(value, dict):
            if "handler_errors" in value:
                yield str(value.get("name", key)), value
            else:
                yield from iter_stages(value)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, dict) and "handler_errors" in item:
                    yield str(item.get("name", key)), item


# ---------------------------------------------------------------------------------------
# The report


def late_lines(checks: dict[str, Any]) -> list[str]:
    """A line on the failed checks whose hit did come back, later, if there were any."""
    late = checks["failed_but_back_later"]
    if not late:
        return []
    return ["", f"Failed checks whose hit came back after the deadline: {'; '.join(late)}."]


def inline(counts: dict[str, int] | None) -> str:
    """``200: 4,402, 403: 366`` for a table cell or a sentence; "n/a" when unknown."""
    if counts is None:
        return "n/a"
    return ", ".join(f"{name}: {n:,}" for name, n in counts.items()) or "none"


def number_or_na(n: int | None) -> str:
    return "n/a" if n is None else f"{n:,}"


def mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


def peak_rss(rss: dict[str, int]) -> int:
    """The higher of our samples' peak and the kernel's high-water mark (VmHWM)."""
    return max(rss["peak_sampled"], rss["peak_kernel_vmhwm"])


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)] if ordered else 0.0


def summary(
    figures: Figures,
    settings: Settings,
    counters: dict[str, Any],
    exit_status: int | None,
    log: dict[str, list[str]],
    config: str,
) -> dict[str, Any]:
    trips = figures.check_round_trips
    return {
        "verdict": "pass" if not figures.problems else "fail",
        "problems": figures.problems,
        "seed": settings.seed,
        "frames_target": settings.frames,
        "frames_sent": figures.frames_sent,
        "bytes_sent": figures.bytes_sent,
        "fuzz_seconds": round(figures.fuzz_seconds, 1),
        "ended_by": figures.ended_by,
        "frames_by_type": dict(figures.frames_by_type.most_common()),
        "frames_by_mutation": dict(figures.frames_by_mutation.most_common()),
        "session_endings": dict(figures.endings.most_common()),
        "sessions": dict(figures.sessions.most_common()),
        "handshake_fuzzing": dict(sorted(figures.handshakes.items())),
        "connections_opened": figures.connections_opened,
        "handshake_answers": {str(k): v for k, v in sorted(figures.answers_from_router.items())},
        "refused_by_router": figures.refused_by_router,
        "closed_by_router": figures.connections_closed_by_router,
        "byes_from_router": {str(k): v for k, v in sorted(figures.byes_from_router.items())},
        "slowloris_held_seconds": {
            "count": len(figures.slowloris_hold_seconds),
            "median": round(statistics.median(figures.slowloris_hold_seconds), 1)
            if figures.slowloris_hold_seconds
            else None,
            "max": round(max(figures.slowloris_hold_seconds), 1)
            if figures.slowloris_hold_seconds
            else None,
        },
        "routing_checks": {
            "passed": figures.checks_passed,
            "failed": figures.checks_failed,
            "deadline_s": settings.check_deadline,
            "failed_but_back_later": figures.late_round_trips,
            "round_trip_p50_ms": round(percentile(trips, 0.5) * 1000, 1),
            "round_trip_p99_ms": round(percentile(trips, 0.99) * 1000, 1),
            "round_trip_max_ms": round(max(trips, default=0.0) * 1000, 1),
        },
        "good_peer_frames_received": figures.good_peer_frames,
        "rss": {
            "before": figures.rss_before,
            "peak_sampled": figures.rss_peak_sampled,
            "peak_kernel_vmhwm": figures.rss_peak_kernel,
            "after": figures.rss_after,
            "bound": settings.rss_limit_mb * 2**20,
            "samples": figures.rss_samples,
        },
        "router_exit_status_after_sigterm": exit_status,
        "router_log": {text: len(lines) for text, lines in log.items()},
        "router_counters": counters,
        "router_config": config,
        "settings": dataclasses.asdict(settings),
    }


def table(counter: dict[str, int]) -> list[str]:
    return [f"| {name} | {count:,} |" for name, count in counter.items()]


def report_lines(result: dict[str, Any], command: str) -> list[str]:
    """The Fuzzing section of docs/robustness.md (also printed)."""
    rss = result["rss"]
    checks = result["routing_checks"]
    counters = result["router_counters"]
    held = result["slowloris_held_seconds"]
    lines = [
        "## Fuzzing",
        "",
        f"`scripts/fuzz_router.py` against a `gnutella-router run` process on loopback, "
        f"{datetime.date.today().isoformat()}, on {machine()}.",
        "",
        f"Verdict: **{result['verdict']}**"
        + ("" if not result["problems"] else ": " + "; ".join(result["problems"])),
        "",
        "| figure | value |",
        "|---|---:|",
        f"| seed | {result['seed']} |",
        f"| frames sent | {result['frames_sent']:,} of {result['frames_target']:,} "
        f"({result['bytes_sent'] / 2**20:,.0f} MiB), ended by {result['ended_by']} |",
        f"| fuzzing time | {result['fuzz_seconds']:.0f} s |",
        "| messages the router read, from every peer (its own count) | "
        f"{number_or_na(counters.get('messages_in'))} |",
        "| ... dropped unread because their connection was being closed | "
        f"{number_or_na(counters.get('dropped_by_reason', {}).get('connection-closing'))} |",
        f"| connections opened by the fuzzer | {result['connections_opened']:,} |",
        f"| handshakes refused by the router (non-200 answers) | {result['refused_by_router']:,} |",
        f"| connections closed by the router | {result['closed_by_router']:,} |",
        f"| routing checks (query there, hit back, within {checks['deadline_s']:g} s) | "
        f"{checks['passed']:,} passed, "
        f"{checks['failed']:,} failed; round trip p50 {checks['round_trip_p50_ms']} ms, "
        f"p99 {checks['round_trip_p99_ms']} ms, max {checks['round_trip_max_ms']} ms |",
        f"| router RSS before / peak / after (bound) | {mib(rss['before'])} / "
        f"{mib(peak_rss(rss))} / {mib(rss['after'])} "
        f"({mib(rss['bound'])}) |",
        f"| router exit status after SIGTERM | {result['router_exit_status_after_sigterm']} |",
        "| log lines with Traceback / connection task failed / stage handler failed | "
        + " / ".join(str(n) for n in result["router_log"].values())
        + " |",
        "| failed connection tasks (router's counter) | "
        f"{counters.get('failed_connections', 'n/a')} |",
        *late_lines(checks),
        "",
        "The router is kept saturated: the fuzzing connections send as fast as it reads, so "
        "its backpressure holds every reader, the good peers' included, and a probe's round "
        "trip is mostly its wait for a turn. Frames that arrive after the router has decided "
        "to close their connection (a kick for abuse, a length beyond 64 KiB, a corrupt "
        "deflate stream) are dropped unread, and those still in socket buffers when a "
        "connection is reset are never read at all: hence fewer messages read than sent.",
        "",
        "Frames by kind (each with a fresh GUID, TTL and hops; each session draws the share "
        "of its frames that are hostile, 5 %, 20 %, 50 % or all, and only those are "
        "mutated):",
        "",
        "| kind | frames |",
        "|---|---:|",
        *table(result["frames_by_type"]),
        "",
        "| mutation | frames |",
        "|---|---:|",
        *table(result["frames_by_mutation"]),
        "",
        "How frame-fuzzing sessions ended (what we sent last):",
        "",
        "| ending | sessions |",
        "|---|---:|",
        *table(result["session_endings"]),
        "",
        "What the router did with them:",
        "",
        "| session outcome | count |",
        "|---|---:|",
        *table(result["sessions"]),
        "",
        "Handshake fuzzing (scenario: outcome):",
        "",
        "| scenario: outcome | connections |",
        "|---|---:|",
        *table(result["handshake_fuzzing"]),
        "",
        f"Handshake answers over every connection, by status: "
        f"{inline(result['handshake_answers'])}. Byes from the router that ended a "
        f"connection, by code: {inline(result['byes_from_router'])}. "
        f"Slowloris handshakes dropped by the router: {held['count']:,}, held a median "
        f"{held['median']} s (max {held['max']} s; its handshake_timeout is 10 s).",
        "",
        "The router's own counters at the end of the run:",
        "",
        "| counter | value |",
        "|---|---|",
        f"| connections accepted | {number_or_na(counters.get('accepted'))} |",
        f"| handshakes completed | {inline(counters.get('completed'))} |",
        f"| connections refused, by reason | {inline(counters.get('refused'))} |",
        f"| peers kicked, by offence | {inline(counters.get('kicked'))} |",
        f"| messages read | {number_or_na(counters.get('messages_in'))} |",
        f"| messages dropped, by reason | {inline(counters.get('dropped_by_reason'))} |",
        "",
        "The router's configuration for the run (everything else at its defaults):",
        "",
        "```toml",
        *result["router_config"].strip().splitlines(),
        "```",
        "",
        "To run it again (the default sends 1,000,000 frames):",
        "",
        "```sh",
        command,
        "```",
    ]
    return lines


def write_output(path: Path, lines: list[str]) -> None:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "# Robustness\n\n"
            "How gnutella-router holds up against peers that send it garbage, break the\n"
            "protocol on purpose or hold on to it: what was thrown at it, what it did, and\n"
            "whether it kept routing for the well-behaved peers meanwhile.\n"
        )
    replace_section(SECTION, lines, path)


def print_result(result: dict[str, Any]) -> None:
    print()
    print(
        "frames by kind:    " + ", ".join(f"{k} {v:,}" for k, v in result["frames_by_type"].items())
    )
    print(
        "frames by mutation: "
        + ", ".join(f"{k} {v:,}" for k, v in result["frames_by_mutation"].items())
    )
    print(
        "session endings:   "
        + ", ".join(f"{k} {v:,}" for k, v in result["session_endings"].items())
    )
    print("session outcomes:  " + ", ".join(f"{k} {v:,}" for k, v in result["sessions"].items()))
    print(
        "handshake fuzzing: "
        + ", ".join(f"{k} {v:,}" for k, v in result["handshake_fuzzing"].items())
    )
    print(
        f"handshake answers: {result['handshake_answers']}; "
        f"Byes from the router: {result['byes_from_router']}"
    )
    checks = result["routing_checks"]
    rss = result["rss"]
    print(
        f"seed {result['seed']}: {result['frames_sent']:,} frames "
        f"({result['bytes_sent'] / 2**20:,.0f} MiB) "
        f"in {result['fuzz_seconds']:.0f} s, ended by {result['ended_by']}"
    )
    print(
        f"connections: {result['connections_opened']:,} opened, "
        f"{result['refused_by_router']:,} refused "
        f"by the router, {result['closed_by_router']:,} closed by the router"
    )
    print(
        f"routing checks: {checks['passed']} passed, {checks['failed']} failed "
        f"(round trip p50 {checks['round_trip_p50_ms']} ms, max {checks['round_trip_max_ms']} ms)"
    )
    print(
        f"router RSS: before {mib(rss['before'])}, peak {mib(peak_rss(rss))}, "
        f"after {mib(rss['after'])} (bound {mib(rss['bound'])})"
    )
    print(f"router exit status after SIGTERM: {result['router_exit_status_after_sigterm']}")
    print(f"router log: {result['router_log']}")
    print(f"router counters: {result['router_counters']}")
    print(f"VERDICT: {result['verdict'].upper()}")
    for problem in result["problems"]:
        print(f"  - {problem}")


def rerun_command(settings: Settings, args: argparse.Namespace) -> str:
    parts = [".venv/bin/python scripts/fuzz_router.py", f"--seed {settings.seed}"]
    if settings.quick:
        parts.append("--quick")
    if settings.frames != 1_000_000:
        parts.append(f"--frames {settings.frames}")
    if args.output is not None:
        parts.append(f"--output {args.output}")
    return " ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    settings, args = parse_args(argv)
    previous = {s: signal.signal(s, interrupt_instead) for s in (signal.SIGTERM, signal.SIGHUP)}
    # A background job may start with SIGINT ignored; the run needs it to unwind.
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with tempfile.TemporaryDirectory(prefix="fuzz-router-") as tmp:
            result = run(settings, args, Path(tmp))
    except KeyboardInterrupt:
        print("interrupted: nothing is left running", file=sys.stderr)
        return 130
    except (FuzzError, RouterProcessError) as exc:
        print(f"FAILED: {exc}")
        return 1
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    print_result(result)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.output is not None:
        write_output(args.output, report_lines(result, rerun_command(settings, args)))
        print(f"written to {args.output}")
    return 0 if result["verdict"] == "pass" else 1


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold interrupts back for the block and raise one as it ends, if one came.

    A KeyboardInterrupt raised inside :class:`subprocess.Popen` could leave its child
    running with no one holding it to stop it. Blocking the signals instead would not
    do: a child inherits the blocked mask through exec, and the router would ignore our
    SIGTERM; a handler that only takes note is reset to the default in the child."""
    arrived: list[int] = []
    signums = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    saved = {s: signal.signal(s, lambda signum, frame: arrived.append(signum)) for s in signums}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
    if arrived:
        raise KeyboardInterrupt


def run(settings: Settings, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Start the router, fuzz it, stop it (on every path) and judge the run."""
    figures = Figures()
    templates = build_templates(random.Random(f"{settings.seed}/templates"))
    spread = all(can_bind(a) for a in (FUZZ_SOURCES[0], GOOD_SOURCES[0], FLOOD_SOURCE))
    if not spread:
        print("note: only 127.0.0.1 can be bound here; every connection comes from it")
    port, admin_port = free_ports(2)
    config = router_config(workdir / "router.toml", settings, admin_port)
    state = workdir / "state"
    state.mkdir()
    log_path = workdir / "router.log"
    print(f"router configuration:\n{config}")
    router: RouterProcess | None = None
    counters: dict[str, Any] = {}
    try:
        with interrupts_deferred():
            router = start_router_process(
                state,
                ["--config", str(workdir / "router.toml"), "--listen", f"127.0.0.1:{port}"],
                log_path=log_path,
                wait_for=(port, admin_port),
                cwd=ROOT,
            )
        print(
            f"router pid {router.pid} on 127.0.0.1:{port}; seed {settings.seed}: "
            f"{settings.frames:,} frames or {settings.duration:g} s over "
            f"{settings.connections} connections, {settings.slowloris} slowloris, "
            f"{settings.drippers} drippers",
            flush=True,
        )
        run_trio(router, RouterTarget(("127.0.0.1", port), spread), templates, settings, figures)
        figures.rss_peak_kernel = read_peak_rss_bytes(router.pid)
        if router.process.poll() is None:
            counters = router_counters(("127.0.0.1", admin_port), figures)
    finally:
        exit_status = stop_router(router) if router is not None else None
    if exit_status != 0:
        figures.problem(f"the router did not exit 0 after SIGTERM ({exit_status})")
    for line in error_lines(log_path)[:3]:
        figures.problem(f"the router logged an error: {line[:300]}")
    log = scan_log(log_path)
    for text, lines in log.items():
        if lines:
            figures.problem(
                f"the router's log has {len(lines)} line(s) with {text!r}: {lines[0][:300]}"
            )
    if args.router_log is not None:
        shutil.copy(log_path, args.router_log)
    return summary(figures, settings, counters, exit_status, log, config)


if __name__ == "__main__":
    raise SystemExit(main())
