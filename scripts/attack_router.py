"""Attack a gnutella-router process with hostile peers and measure what its honest peers get.

Run from the repository root, in the project's virtual environment:

    .venv/bin/python scripts/attack_router.py  # every scenario, figures printed
    .venv/bin/python scripts/attack_router.py --only query-flood,large-hits --seconds 2
    .venv/bin/python scripts/attack_router.py --write                # also docs/robustness.md

Theory of operation
-------------------
The fuzzer (``scripts/fuzz_router.py``) throws random garbage at a router and checks it
survives. This script throws *designed* attacks, one at a time, each aimed at one
mechanism the router has to defend itself, and measures what the attack costs the honest
peers connected beside it: how long their messages wait, whether they lose their
connection, whether the router forgets their routes. Each attack is a scenario
(``--only`` picks some; ``router_attack/scenarios.py`` lists them):

=======================  ==============================================================
``qrp-bomb``             a leaf sends a full 2^21-slot QRP table, 8-bit entries (2 MiB
                         to inflate and count), once a second
``query-flood``          an ultrapeer sends unique TTL-2 queries as fast as it can
``guid-spray``           110,000 unique TTL-1 queries in 2 s (each a route to record)
``guid-spray-unlimited`` the same with ``router.peer_query_rate = 0``: the route table's
                         per-connection shares alone must keep the honest routes
``slot-hog``             40 handshakes at once from one address; a silent connection and
                         one that drips half a message, with 2 s deadlines
``admin-dumps``          ``/dump`` and ``/routes`` (limit 100,000) and SIGUSR1 with the
                         route tables full
``dq-amplification``     a leaf's 1,500 queries and 500 a second, each a would-be dynamic
                         query; then another leaf's one query must still start
``large-hits``           100 malformed relayed Byes, then 64 KiB query hits nobody asked
``slow-admin``           16 admin connections that send half a request and hold on
``deflate-bomb``         a deflate stream that inflates ~700:1 into vendor messages
=======================  ==============================================================

Every scenario gets a router process of its own (``gnutella-router run`` on free loopback
ports, on its defaults, JSON logs to a file), so one attack's bans, tables and memory do
not colour the next. Its configuration narrows ``network.trusted`` to 127.0.0.1, where
the honest peers are: by default all of loopback is trusted, exempt from the
per-address slot share, the per-peer query rate and bans by IP, and an attacker on
loopback would pass for a crowd. The attackers bind their sockets to 127.0.0.2-4 (Linux
routes all of 127/8 to loopback), so each is one untrusted host, and no network
namespace is needed. The router never dials (``catcher.min_connections = 0``). A
scenario changes other settings only where it says so (the slot scenario's 2 s idle and
partial-message deadlines, the unlimited spray's query rate).

Beside each attack, three honest ultrapeers with gtk-gnutella's handshake
(``router_bench``'s) read and frame everything they are sent and answer the router's
pings. U1 pings (TTL 1, answered by the router's own pong on its routing path) without a
break, 1 ms after each pong, as ``scripts/bench_dump_stall.py`` does: the longest round
trip that overlaps the attack is the worst routing stall an honest peer saw. U2 and U3
ping every half second (a live peer talks). Before the attack, U2 sends 20 queries that
reach U3; after it, U3 answers each with a hit that must reach U2: a hit that does not is
an honest pending route the attack made the router forget. The attacker's live
connections are counted in the router's ``/connections`` every half second, and by the
attacker itself (its handshakes answered 200 and not yet closed); the router's
``/stats`` counters are read before and after the attack, and their growth says whether
the attacker was counted as an offender, and kicked; VmRSS is read before and after,
VmHWM at the end.

The attack window runs from the attack's first byte until the router has read the
attacker's last (the pong to a ping sent after it: a router reads a connection in order)
and one second more: a router still working through an attack is under it.

The floors, printed as met / not met / n/a for every scenario:

* the worst routing stall of U1's pings is at most 100 ms;
* no honest peer is closed by the router;
* no honest pending route is lost;
* an untrusted address holds at most ``network.connections_per_address`` (1) slots;
* the attacker is counted as an offender (a drop reason, a refusal, a deadline or a kick
  that names it), and kicked where its attack breaks the protocol;
* the scenario's own (an idle connection closed within its deadline, the admin still
  answering, the deflate bomb cut off...);
* the router exits 0 on SIGTERM and logs no error or traceback.

A floor not met is a finding, not a failure of the script: it is reported as such (exit
status 1), and never hidden. The run is seeded (``--seed``: GUIDs and choices), bounded
(each timed attack lasts ``--seconds``; each scenario, router start and stop included,
at most ``--timeout`` seconds; the whole run a few minutes), and stops every router it
started on every way out: SIGTERM, SIGHUP and Ctrl-C unwind the run like an error
(exit status 130), and each router is stopped with SIGTERM, then SIGKILL.

With ``--write`` the figures replace the "Hostile peers" section of docs/robustness.md,
dated, with the commit, the machine and the command to rerun them; only a run of every
scenario at the default length is written.

Exit status: 0 when every floor is met, 1 when one is not or a scenario failed, 2 for
bad arguments, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from scripts.router_attack.arena import run_scenario
from scripts.router_attack.report import all_met, print_summary, write
from scripts.router_attack.scenarios import SCENARIOS
from scripts.router_attack.settings import ATTACKER_SOURCE, Result, Settings
from scripts.router_fuzz.wire import can_bind
from scripts.runner import stopped_like_ctrl_c

SECONDS = 8.0
"""A timed attack's default length: long enough for the decaying offence counts to
reach their kicks (the QRP bomb's fifth refused table comes some 6 s in)."""


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
        help="seed of the attacks' GUIDs and choices",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=SECONDS,
        metavar="S",
        help="length of each timed attack",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="bound on one scenario, its router's start and stop included",
    )
    parser.add_argument(
        "--only",
        metavar="KEYS",
        help="comma-separated scenarios to run (default: all): " + ", ".join(SCENARIOS),
    )
    parser.add_argument(
        "--write", action="store_true", help="write the figures to docs/robustness.md"
    )
    args = parser.parse_args(argv)
    keys = tuple(SCENARIOS) if not args.only else tuple(k.strip() for k in args.only.split(","))
    unknown = [key for key in keys if key not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}: one of {', '.join(SCENARIOS)}")
    if not 0 < args.seconds <= 60 or not 0 < args.timeout <= 600:
        parser.error("--seconds must be within 0..60 and --timeout within 0..600")
    if args.write and (keys != tuple(SCENARIOS) or args.seconds != SECONDS):
        parser.error("--write records a run of every scenario at the default --seconds")
    return Settings(args.seed, args.seconds, args.timeout, keys), args


def main(argv: Sequence[str] | None = None) -> int:
    settings, args = parse_args(argv)
    if not can_bind(ATTACKER_SOURCE):
        print(f"FAILED: cannot bind {ATTACKER_SOURCE}: attackers need their own loopback address")
        return 1
    load = os.getloadavg()[0]
    results: list[Result] = []
    try:
        with stopped_like_ctrl_c(), tempfile.TemporaryDirectory(prefix="attack-router-") as folder:
            for key in settings.scenarios:
                workdir = Path(folder) / key
                workdir.mkdir()
                results.append(run_scenario(SCENARIOS[key], settings, workdir))
    except KeyboardInterrupt:
        print("interrupted: every router was stopped", file=sys.stderr)
        return 130
    checked = {key: bool(SCENARIOS[key].attackers) for key in settings.scenarios}
    print_summary(results, checked)
    if args.write:
        print(f"\nwrote {write(results, checked, settings, load)}")
    return 0 if all_met(results, checked) else 1


if __name__ == "__main__":
    raise SystemExit(main())
