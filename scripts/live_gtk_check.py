#!/usr/bin/env python3
"""Check the router's ultrapeer duties live against gtk-gnutella leaves and ultrapeers.

Theory of operation
-------------------
The scripted peers of the test suite and the recorded gtk-gnutella session show that the
router follows the protocol as we read it; only a real servent shows that it follows it
as gtk-gnutella reads it. This script starts, on loopback only:

* one router (``gnutella-router run`` as a child process, with a config file of its own
  and a fresh state directory);
* a gtk-gnutella **leaf** sharing one file with a distinctive name, which connects to the
  router (shell ``node add``);
* two gtk-gnutella **ultrapeers**: ``up1`` connects to the router, the router dials
  ``up2`` (a seed), so both directions of the handshake are used.

gtk-gnutella without its GUI cannot start searches, so queries enter at a gtk ultrapeer
from two small scripted peers of ours, ``searcher`` (a leaf of ``up1``) and ``relay``
(an ultrapeer neighbour of ``up2``). Then, reading the router's admin interface (JSON)
and gtk-gnutella's shell, it checks:

1. the leaf's QRP table reached the router, and holds the file's words (``/qrp``);
2. every gtk ultrapeer that announced last-hop QRP was sent our leaves' table, as it
   is with the leaf's words, within 90 s of the leaf's table (``/qrp``'s
   ``last_hop_table_sent``; gtk-gnutella's ``nodes`` flags agree);
3. the searcher's query for the file, entering at ``up1``, comes back with the leaf's
   hit (``up1`` must route it to the router by our last-hop table, the router to the
   leaf by its table, the hit back along the same path);
4. queries that match nothing, flooded by ``relay`` through ``up2``, are kept from the
   leaf: the router's ``qrp-miss`` drops rise with them;
5. every link stays up for ``--duration`` seconds (the same router connection ids from
   start to end), no Bye either way, and gtk-gnutella drops nothing the router sent,
   but for pongs describing 127.0.0.1, which gtk-gnutella never uses (its own log line
   per drop, ``log_dropped_gnutella``, names the peer it came from).

It prints a report; ``--write`` puts the figures into docs/interop.md. Every process it
started is stopped on every way out (Ctrl-C and SIGTERM too): the router with SIGTERM,
the servents through their wrapper, which shuts gtk-gnutella down cleanly. The whole
run is bounded (``--duration`` plus a few minutes).

What it needs: a gtk-gnutella build (docs/interop.md says how) and its wrapper. The
wrapper is ``scripts/gtk-servent.sh`` unless ``--gtk`` (or ``$GTK_GNUTELLA_SERVENT``)
names another that keeps the same contract: called as ``WRAPPER PORT DIR``, it keeps a
``config_gnet`` it finds in DIR (the leaf's is written first) or writes an ultrapeer's,
runs the servent in the foreground, prints a line starting ``ready:`` once it listens,
and shuts it down cleanly on SIGTERM. The binary (``--gtk-binary`` or
``$GTK_GNUTELLA_BINARY``) is also run for its shell, as ``--gtk-user``; so the check
runs as root. Without a binary it prints ``skipped: ...`` and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import random
import shutil
import signal
import sys
import tempfile
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType

import trio

from gnutella_router import __version__
from scripts.live_gtk.checks import Figures, Interrupted, random_word, run_checks
from scripts.live_gtk.network import ROOT, CheckFailed, Network, Settings
from scripts.runner import leaf_exceptions

DOC = ROOT / "docs" / "interop.md"
SHIPPED_WRAPPER = ROOT / "scripts" / "gtk-servent.sh"


# --- report --------------------------------------------------------------------------------


def machine() -> str:
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} cores ({model}), {platform.system()} {platform.release()}"


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def report(figures: Figures, command: str, load_at_start: str) -> str:
    ok = all(passed for _, passed, _ in figures.checks) and bool(figures.checks)
    lines = [
        f"Run {figures.started} on {machine()}: gnutella-router {__version__} "
        f"against {figures.gtk_version or 'gtk-gnutella (version unknown)'}; "
        f"{load_at_start} at the start, {load_average().split(' ', 2)[2]} at the end.",
        "",
        "| check | result | figures |",
        "|---|---|---|",
        *(
            f"| {name} | {'passed' if passed else 'FAILED'} | {detail} |"
            for name, passed, detail in figures.checks
        ),
        "",
        f"Held {figures.held_seconds:.0f} s. Router messages by type: "
        + "; ".join(f"{kind} {counts}" for kind, counts in figures.messages.items())
        + f". Router drops by reason: {figures.router_drops or 'none'}.",
        "",
        "gtk-gnutella's `stats drop` (nonzero counters, whatever the sender): "
        + "; ".join(f"{n}: {d or 'none'}" for n, d in figures.gtk_drops.items())
        + ". Of these, logged as coming from the router: "
        + "; ".join(f"{n}: {d or 'none'}" for n, d in figures.gtk_drops_from_router.items())
        + ".",
        "",
        f"Overall: {'PASSED' if ok else 'FAILED'}. Rerun: `{command}`",
    ]
    return "\n".join(lines)


READING = """\
## Reading the figures

- **Our leaves' table** goes to an ultrapeer that announced `X-Ultrapeer-Query-Routing`
  when it connects (empty here: the leaf comes later) and then, when our leaves changed,
  at most once a minute; so the leaf's words reach the gtk ultrapeers up to 60 s after
  the leaf's table reached the router. gtk-gnutella's `nodes` flags for the router show
  `Q` in the fifth place once it holds a table from us, `X` in the sixth once it sent
  us its own.
- **The search** enters at `up1` from a scripted leaf of it; `up1` widens it by dynamic
  querying and must pass it to the router by our last-hop table, the router to the gtk
  leaf by the leaf's table; the hit comes back the same way (hops 2 at the searcher:
  relayed by the router and `up1`).
- **`qrp-miss`** counts copies a table kept back: for a query matching nothing, one for
  the leaf and one for `up1` at its last hop (its table is empty), so twice the queries.
- **Unusable Pong** is gtk-gnutella's drop of every pong for 127.0.0.1 (not routable to
  it), whoever sends it: the router's own pong in answer to a ping, and the pongs of its
  cache. It is loopback's doing; on a routable network these pongs are usable. Every
  other drop logged against the router's user agent fails the check.
- **Not checked live:** a gtk leaf's own searches (gtk-gnutella without its GUI cannot
  search), so the router's dynamic querying of a gtk leaf's query was not seen live;
  Hops Flow and flow control (nothing clogged). Deflate was in use both ways on the
  ultrapeer links (flags `Z`).
"""


def write_doc(text: str, notes: str = "") -> None:
    DOC.write_text(
        "# Live interoperability: gtk-gnutella\n\n"
        "`scripts/live_gtk_check.py` starts a router and three gtk-gnutella 1.2 servents on\n"
        "loopback (a leaf sharing one file, an ultrapeer that dials the router, one the\n"
        "router dials), sends searches into the gtk ultrapeers from two scripted peers, and\n"
        "reads the router's admin interface and gtk-gnutella's shell and log (the script's\n"
        "docstring says what each check reads). It needs a gtk-gnutella build and root\n"
        "(gtk-gnutella runs as its own user); without one it prints `skipped` and exits 0.\n"
        "The servents run under `scripts/gtk-servent.sh`; [servents.md](servents.md) says\n"
        "what it does and how to build gtk-gnutella for it.\n"
        "gtk-gnutella without its GUI cannot search, hence the scripted searchers.\n\n"
        "## Last run\n\n" + text + "\n\n" + notes + READING
    )
    print(f"wrote {DOC.relative_to(ROOT)}")


# --- command line --------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--gtk",
        type=Path,
        default=os.environ.get("GTK_GNUTELLA_SERVENT"),
        help="gtk-gnutella's wrapper, run as WRAPPER PORT DIR (env GTK_GNUTELLA_SERVENT; "
        "None: scripts/gtk-servent.sh when the binary is known)",
    )
    parser.add_argument(
        "--gtk-binary",
        type=Path,
        default=os.environ.get("GTK_GNUTELLA_BINARY"),
        help="gtk-gnutella's binary, for the wrapper and its shell (env GTK_GNUTELLA_BINARY; "
        "None: inst/bin/gtk-gnutella beside --gtk)",
    )
    parser.add_argument("--gtk-user", default="gtkg", help="the user gtk-gnutella runs as")
    parser.add_argument(
        "--duration", type=float, default=600.0, help="seconds the links must stay up"
    )
    parser.add_argument("--keep", action="store_true", help="keep the run's folder (logs, trace)")
    parser.add_argument(
        "--write", action="store_true", help=f"record the figures in {DOC.relative_to(ROOT)}"
    )
    return parser.parse_args(argv)


@contextlib.contextmanager
def terminated_by_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP end the run as Ctrl-C does (cleanup runs)."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    old = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def why_it_ended(error: BaseException) -> tuple[bool, str]:
    """Whether the run was interrupted, and the failure to report (empty: none)."""
    leaves = leaf_exceptions(error)
    if any(isinstance(leaf, KeyboardInterrupt | Interrupted) for leaf in leaves):
        return True, ""
    for leaf in leaves:
        if isinstance(leaf, CheckFailed):
            return False, str(leaf)
    if any(isinstance(leaf, trio.TooSlowError) for leaf in leaves):
        return False, "the run took too long"
    first = leaves[0]
    return False, f"the check itself failed: {first.__class__.__name__}: {first}"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.gtk is None and args.gtk_binary is not None:
        args.gtk = SHIPPED_WRAPPER
    if args.gtk is None:
        print(
            "skipped: no gtk-gnutella given (--gtk-binary or GTK_GNUTELLA_BINARY, for "
            "scripts/gtk-servent.sh; or --gtk WRAPPER or GTK_GNUTELLA_SERVENT)"
        )
        return 0
    binary = args.gtk_binary or args.gtk.resolve().parent / "inst" / "bin" / "gtk-gnutella"
    missing = [str(p) for p in (args.gtk, binary) if not os.access(p, os.X_OK)]
    if missing:
        print(f"skipped: not executable: {', '.join(missing)}")
        return 0
    if os.geteuid() != 0:
        print("skipped: gtk-gnutella runs as its own user, so this needs root")
        return 0
    work = Path(tempfile.mkdtemp(prefix="gtk-live-"))
    work.chmod(0o755)  # the servents' user reaches its folders inside
    settings = Settings(args.gtk, binary, args.gtk_user, args.duration, args.keep, args.write, work)
    word = random_word(random.Random())
    network = Network(settings, word)
    load_at_start = load_average()
    figures = Figures(started=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"))
    command = (
        "sudo .venv/bin/python scripts/live_gtk_check.py --gtk-binary "
        + str(binary)
        + ("" if args.gtk == SHIPPED_WRAPPER else f" --gtk {args.gtk}")
    )
    if args.duration != 600:
        command += f" --duration {args.duration:g}"
    print(f"live check in {work}: router on 127.0.0.1:{network.router_port}, gtk-gnutella "
          + ", ".join(f"{s.name} on {s.port}" for s in network.servents.values())
          + f"; the leaf shares '{network.file_name}'", flush=True)  # fmt: skip
    failure = ""
    interrupted = False
    try:
        with terminated_by_signals():
            network.start()
            trio.run(run_checks, network, figures)
    except BaseException as exc:  # every way out keeps the verdict and the folder
        interrupted, failure = why_it_ended(exc)
        if failure:
            figures.check("run", False, failure)
        if not interrupted and not isinstance(
            leaf_exceptions(exc)[0], CheckFailed | trio.TooSlowError
        ):
            traceback.print_exception(exc)  # a fault of this script: show where
    finally:
        with signals_ignored():  # a second Ctrl-C must not leave servents behind
            network.stop()
        if settings.keep or failure or interrupted:
            print(f"run folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if interrupted:
        print("interrupted: everything stopped", file=sys.stderr)
        return 130
    text = report(figures, command, load_at_start)
    print()
    print(text)
    passed = all(p for _, p, _ in figures.checks) and bool(figures.checks)
    if args.write:
        write_doc(text)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
