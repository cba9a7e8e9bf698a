"""Soak a small network of gnutella-router processes under steady load; watch memory and FDs.

Run from the repository root, in the project's virtual environment:

    .venv/bin/python scripts/soak.py                          # 30 minutes at 5,000 msgs/s, docs
    .venv/bin/python scripts/soak.py --minutes 2 --no-write   # a short look, docs left alone
    .venv/bin/python scripts/soak.py --minutes 0.1 --sample-seconds 1 --output /tmp/r.md  # smoke

Theory of operation
-------------------
A router that routes correctly for a minute may still leak: a table that is never
trimmed, a buffer per closed connection, a file descriptor per dial. Such a leak shows
only over time, as memory or descriptors that keep growing while the load stays the
same. This script holds the load steady for a long time and watches for exactly that,
from outside, on real processes.

1. **The network.** Three ``gnutella-router run`` processes (R0, R1, R2) on free ports
   of 127.0.0.1, each with its own temporary state directory and a generated TOML file
   that sets only what a network on one machine needs: the admin interface on a free
   port of its own (its default, the node's port + 1, may be taken) and
   ``catcher.min_connections`` equal to the number of seeds the router is given, so
   that each router keeps exactly its planned links and never dials the addresses it
   hears of in pongs (the responders' made-up ones among them). Everything else is at
   its defaults. They are linked with ``--seed``: in a *line* (R1 dials R0, R2 dials
   R1; the default) or a *triangle* (R2 also dials R0, so every query reaches R2 twice
   and duplicate detection works all along). Routers are started one after the other,
   each once the previous one's admin interface answers (it opens after the peer
   listener; a bare connect to the peer port would count as a broken handshake), and
   the run waits until every planned link is up. Each router runs in a session of its
   own, so a Ctrl-C at the terminal reaches this script only, which stops the routers
   in order; and each is told by the kernel to stop (SIGTERM) if this script dies
   without doing so (``PR_SET_PDEATHSIG``), so no router outlives it whatever happens.
   Logs are JSON lines, one file per router.
2. **The load.** The project's own load client (:class:`~gnutella_router.lab.traffic.load.
   LoadRun`, in the form whose peers connect to several routers,
   :class:`~gnutella_router.lab.testnet.spread_load.SpreadLoadRun`) runs in this process:
   five peers, two injectors (on R0 and on R2) sharing one open-loop schedule of
   ``--rate`` msgs/s of the SEDA paper's mix (85 % pings, 15 % queries, TTL 7), and one
   sink on each router, answering like servents (``respond``: a pong per ping, a hit per
   query now and then) so that pongs and query hits flow back across the network to
   the injectors. Queries cross the whole network in both directions; pings stop one
   router from where they enter (routers answer each other's pings from their pong
   caches), so each ping is owed to one sink, the one beside its injector, and each
   query to all three. Latency is the load client's own: from each message's scheduled
   time (coordinated omission excluded) to its arrival at a sink (one-hop: through one
   to three routers) or, for replies, back at the injector (round-trip).
3. **Sampling.** Every ``--sample-seconds`` from the first message on (and once before
   the load connects, and once after it has gone), each router's resident set
   (``VmRSS`` in /proc/PID/status), open descriptors (entries of /proc/PID/fd, read
   before the admin request so that its own socket is not counted) and CPU time
   (/proc/PID/stat), then its own counters from its admin interface (``/stats``:
   messages read, drops, connections, peers refused and kicked, route table sizes);
   the same /proc figures for this process (the load client), the machine's load
   average and busy CPU time (/proc/stat), and the load client's counts so far; and the
   CPU time of every other process, so the report can say what else was running. A
   status line is printed with every sample.
4. **The figures.** Memory is judged at two points: *at minute 5* (``--reference-
   minutes``; route and duplicate tables fill up and reach their caps in the first
   minutes, so that is the start of the steady state) and *at the end*, each the median
   of the samples in the minute before it (one sample can be caught mid-collection;
   the median of seven cannot). Samples taken while the load client drains its last
   copies, after the last message, are kept out of "the end". The drift is
   ``end / minute-5 - 1`` and should stay under ``--max-drift`` percent; a
   least-squares slope over the same span (MiB an hour) is reported beside it, with
   the peak (``VmHWM``). Descriptors are judged the same
   way and must not grow by more than ``--fd-slack``; and after the load client has
   gone each router must be back to the descriptors it had before it came. A run
   shorter than twice the reference takes its reference at half time. Loss is the load
   client's (copies owed to the sinks that never arrived) set beside what the routers
   say they dropped during the load, by reason, read from their counters before and
   after it (the load client's own reconciliation reads one router; here there are
   three). Latency percentiles (p50/p90/p99/p99.9/max per kind and type) come from the
   load client's report.
5. **The verdict.** Met when every router ran to the end and exited 0 on SIGTERM, no
   router's RSS drifted by ``--max-drift`` % or more, no router's descriptors grew, no
   peer was refused or kicked and no connection task failed, no load client peer was
   disconnected, loss stayed within ``--max-loss`` %, and no router logged an error or
   a traceback. Latency and late sends are reported, not judged: on a shared machine
   they measure the machine as much as the routers. Exit status 0 when met, 1 when
   not, 2 when the network could not be started or the load client could not connect,
   130 when interrupted (whose verdict is "interrupted": no steady state to judge).
6. **The report.** Printed; with ``--json FILE`` every figure and sample as JSON; a plot
   of RSS, descriptors and load over time (``--plot``, by default ``soak.png`` beside
   ``--output``); and a section of ``--output`` (docs/robustness.md) between the lines
   ``<!-- soak:begin -->`` and ``<!-- soak:end -->``. Only that block is replaced (the
   file is created with a title if missing, the block appended if absent), by reading
   the file, replacing the block, writing a temporary file beside it and renaming it
   over the original (``os.replace``), so another script writing its own section of the
   same file meanwhile never sees a half-written file; if the file changed between the
   read and the rename, it is done again. ``--from-json`` redraws the plot and the
   report from a finished run's JSON without running anything.

Ctrl-C or SIGTERM ends the load early (a second one at once); the routers are then
stopped as always (SIGTERM, up to 15 s, then SIGKILL) and the partial figures printed,
but the docs are not written: an interrupted soak does not replace a full one. Any
exception stops the routers the same way. The temporary directory (state, logs) is
removed at the end unless ``--keep`` is given or the run failed, when its path is
printed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scripts.benchdocs import ROBUSTNESS_DOC
from scripts.router_soak.figures import analyse
from scripts.router_soak.plot import plot
from scripts.router_soak.processes import TOPOLOGIES, SoakError, stop_routers
from scripts.router_soak.report import BEGIN, END, replace_block, report_lines, write_block
from scripts.router_soak.runs import Settings, Soak, owe_each_ping_once

__all__ = ["BEGIN", "END", "Settings", "owe_each_ping_once", "replace_block", "write_block"]


class Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown, except where there is none to show (a flag, or "see the help")."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(
        description=doc.split("\nTheory of operation", 1)[0],
        formatter_class=Formatter,
        epilog="Exit status: 0 when every check is met, 1 when one is missed, 2 when the "
        "network could not be started, 130 when interrupted. The theory of operation is at "
        "the top of scripts/soak.py.",
    )
    defaults = Settings()
    parser.add_argument("--minutes", type=float, default=defaults.minutes, help="load duration")
    parser.add_argument("--rate", type=float, default=defaults.rate, help="offered msgs/s in all")
    parser.add_argument(
        "--sample-seconds", type=float, default=defaults.sample_seconds, help="between samples"
    )
    parser.add_argument(
        "--random-seed",
        "--seed",
        dest="seed",
        type=int,
        default=defaults.seed,
        help="traffic model seed",
    )
    parser.add_argument(
        "--topology", choices=sorted(TOPOLOGIES), default=defaults.topology, help="router links"
    )
    parser.add_argument(
        "--reference-minutes",
        type=float,
        default=defaults.reference_minutes,
        help="the steady-state point RSS and FDs at the end are compared with (half time "
        "when the run is shorter than twice this)",
    )
    parser.add_argument(
        "--max-drift", type=float, default=defaults.max_drift, help="largest RSS drift, %%"
    )
    parser.add_argument(
        "--fd-slack", type=int, default=defaults.fd_slack, help="FDs a router may gain"
    )
    parser.add_argument(
        "--max-loss", type=float, default=defaults.max_loss, help="largest share not arrived, %%"
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=ROBUSTNESS_DOC,
        help="Markdown file whose soak block is replaced",
    )
    parser.add_argument(
        "--plot", type=Path, default=None, help="plot file (default: soak.png beside --output)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write every figure here")
    parser.add_argument(
        "--from-json",
        type=Path,
        default=None,
        metavar="FILE",
        help="run nothing: redraw the plot and the report from a run's --json file",
    )
    parser.add_argument(
        "--no-write",
        action="store_true",
        help="leave --output alone; the plot goes to the kept work directory",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary directory (state, router logs)"
    )
    args = parser.parse_args(argv)
    if not (args.minutes > 0 and args.rate > 0 and args.sample_seconds > 0):
        parser.error("--minutes, --rate and --sample-seconds must be positive")
    if args.sample_seconds * 2 > args.minutes * 60:
        parser.error("--sample-seconds must leave at least two samples in the run")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.from_json is not None:
        # A report redrawn from a finished run: nothing is started.
        result = json.loads(args.from_json.read_text())
        return publish(result, args, args.from_json.parent)
    settings = Settings(
        minutes=args.minutes,
        rate=args.rate,
        sample_seconds=args.sample_seconds,
        seed=args.seed,
        topology=args.topology,
        reference_minutes=args.reference_minutes,
        max_drift=args.max_drift,
        fd_slack=args.fd_slack,
        max_loss=args.max_loss,
    )
    workdir = Path(tempfile.mkdtemp(prefix="soak-"))
    keep = args.keep
    # Outside the load (start-up, shutdown, report) SIGTERM is handled like Ctrl-C, so
    # the routers are stopped by the same `finally` on either.
    previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    soak = Soak(settings, workdir)
    try:
        print(
            f"soak: {settings.minutes:g} min at {settings.rate:,.0f} msgs/s, sampling every "
            f"{settings.sample_seconds:g} s; work directory {workdir}",
            flush=True,
        )
        try:
            soak.run()
        except SoakError as exc:
            print(f"soak: {exc}", file=sys.stderr)
            keep = True
            return 2
        if soak.aborted:
            print("soak: stopped at once; no report", file=sys.stderr)
            return 130
        status = publish(analyse(soak), args, workdir)
        keep = keep or status != 0 or args.no_write
        return status
    except KeyboardInterrupt:
        print("soak: interrupted", file=sys.stderr)
        return 130
    finally:
        stop_routers(soak.routers)
        signal.signal(signal.SIGTERM, previous)
        if keep:
            print(f"soak: state and router logs kept in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def publish(result: dict[str, Any], args: argparse.Namespace, scratch: Path) -> int:
    """Plot, print, and write the JSON and the doc block; the exit status of the run.

    An interrupted run never replaces a full one's figures: its plot goes to
    ``scratch`` and the doc is left alone.
    """
    interrupted = bool(result["interrupted"])
    to_docs = not (args.no_write or interrupted)
    plot_path = (args.plot or args.output.parent / "soak.png") if to_docs else None
    plot(result, plot_path or scratch / "soak.png")
    lines = report_lines(result, plot_path, args.output)
    print("\n" + "\n".join(lines))
    others = result["machine_load"]["other_commands"]
    if others:
        print(
            "\nother processes during the load (share of one core): "
            + ", ".join(f"{o['command']} {o['cpu_share']:.0%}" for o in others)
        )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1, default=str))
    if interrupted:
        print("soak: interrupted, so the docs were left alone", file=sys.stderr)
        return 130
    if to_docs:
        write_block(args.output, lines)
        print(f"\nwrote the soak section of {args.output}, and {plot_path}")
    return 0 if result["verdict"] == "pass" else 1


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
