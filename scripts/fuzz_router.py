"""Fuzz a gnutella-router process over loopback TCP and check that it keeps routing.

Run from the repository root, in the project's virtual environment:

    .venv/bin/python scripts/fuzz_router.py  # 1,000,000 frames, print figures
    .venv/bin/python scripts/fuzz_router.py --output docs/robustness.md  # ... and write them there
    .venv/bin/python scripts/fuzz_router.py --quick                      # about 30 s, a smoke run

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
2. **Two good peers**, from addresses of their own (127.66.0.1 and 127.67.0.1, in two
   networks), handshake as
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
import json
import random
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gnutella_router.observe.profiler import read_peak_rss_bytes
from scripts.router_fuzz.handshakes import random_header_lines
from scripts.router_fuzz.mutations import (
    MUTATIONS,
    FrameFuzzer,
    oversized_header,
    wrong_length_frames,
)
from scripts.router_fuzz.payloads import HOSTILE_KINDS, KIND_WEIGHTS, build_templates
from scripts.router_fuzz.report import (
    print_result,
    report_lines,
    rerun_command,
    summary,
    write_output,
)
from scripts.router_fuzz.router import (
    FATAL_LOG_TEXT,
    error_lines,
    router_config,
    scan_log,
)
from scripts.router_fuzz.runs import router_counters, run_trio
from scripts.router_fuzz.settings import (
    ATTEMPTS_PER_IP_PER_MINUTE,
    FLOOD_SOURCE,
    FUZZ_SOURCES,
    GOOD_SOURCES,
    Figures,
    FuzzError,
    Settings,
)
from scripts.router_fuzz.wire import RouterTarget, can_bind, status_code, trailing_bye
from scripts.runner import RunError, free_ports, router_started, stopped_like_ctrl_c

__all__ = [
    "ATTEMPTS_PER_IP_PER_MINUTE",
    "FATAL_LOG_TEXT",
    "HOSTILE_KINDS",
    "KIND_WEIGHTS",
    "MUTATIONS",
    "FrameFuzzer",
    "build_templates",
    "oversized_header",
    "random_header_lines",
    "router_config",
    "status_code",
    "trailing_bye",
    "wrong_length_frames",
]


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
    parser.add_argument(
        "--random-seed",
        "--seed",
        dest="seed",
        type=int,
        default=1,
        help="seed of every frame generator",
    )
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


def main(argv: Sequence[str] | None = None) -> int:
    settings, args = parse_args(argv)
    try:
        with stopped_like_ctrl_c(), tempfile.TemporaryDirectory(prefix="fuzz-router-") as tmp:
            result = run(settings, args, Path(tmp))
    except KeyboardInterrupt:
        print("interrupted: nothing is left running", file=sys.stderr)
        return 130
    except (FuzzError, RunError) as exc:
        print(f"FAILED: {exc}")
        return 1
    print_result(result)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.output is not None:
        write_output(args.output, report_lines(result, rerun_command(settings, args)))
        print(f"written to {args.output}")
    return 0 if result["verdict"] == "pass" else 1


def run(settings: Settings, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Start the router, fuzz it, stop it (on every path) and judge the run."""
    figures = Figures()
    templates = build_templates(random.Random(f"{settings.seed}/templates"))
    spread = all(can_bind(a) for a in (FUZZ_SOURCES[0], GOOD_SOURCES[0], FLOOD_SOURCE))
    if not spread:
        print("note: only 127.0.0.1 can be bound here; every connection comes from it")
    port, admin_port = free_ports(2)
    config = router_config(settings, admin_port)
    print(f"router configuration:\n{config}")
    counters: dict[str, Any] = {}
    with router_started(
        workdir, config, port=port, admin_port=admin_port, wait_for_admin=True
    ) as router:
        print(
            f"router pid {router.pid} on 127.0.0.1:{port}; seed {settings.seed}: "
            f"{settings.frames:,} frames or {settings.duration:g} s over "
            f"{settings.connections} connections, {settings.slowloris} slowloris, "
            f"{settings.drippers} drippers",
            flush=True,
        )
        run_trio(router, RouterTarget(router.address, spread), templates, settings, figures)
        figures.rss_peak_kernel = read_peak_rss_bytes(router.pid)
        if router.alive():
            counters = router_counters(router.admin, figures)
    exit_status = router.exit_status
    log_path = router.log_path
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
