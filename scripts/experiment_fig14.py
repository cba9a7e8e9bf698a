"""The SEDA paper's Fig. 14 on this router: latency under a query delay, governor off and on.

Run from the repository root, in the project's virtual environment (unattended; the
default takes about 10 minutes):

    .venv/bin/python scripts/experiment_fig14.py                # 60 s runs, print the table
    .venv/bin/python scripts/experiment_fig14.py --write        # also docs/experiments.md + figures
    .venv/bin/python scripts/experiment_fig14.py --quick        # 30 s runs, a smoke test
    .venv/bin/python scripts/experiment_fig14.py --compare --write  # the governor's rules

What is run. For each offered load (100, 200, 400 and 1000 messages/s by default, the
paper's mix: 15 % queries, 85 % pings, constant rate) and each governor setting, a
fresh router is started as a child process on a free loopback port with a generated
configuration file: ``router.query_delay_ms = 20`` (the paper's injected 20 ms per
query, run in a worker thread), ``router.threads = 1``, the governor either off or on
with its defaults (a sample every 2 s, the pool sized by Little's law from the measured
arrival rate and service time, ``sizing = "littles-law"``), the profiler on at 0.1 s,
everything else at the defaults (backpressure admission). This process then
runs the load client in-process (:func:`gnutella_router.lab.traffic.load.LoadRun`: one injector,
three sinks) for ``--duration`` seconds, stops the router with SIGTERM (which writes
the profiler's export) and reads what it needs.

What is measured, and how:

* latency, one hop (client -> router -> sink), per type, measured from each message's
  *scheduled* time, so a client held up by a backed-up router counts the wait. Two
  figures for each: *steady state*, messages scheduled after ``--warmup`` seconds (20
  s: the governor has settled by then), as the load client's own report; and the
  *whole run*, from a second histogram fed by the same arrivals from time 0;
* late sends: messages the client wrote more than 1 ms after their scheduled time
  (whole run): with backpressure a router that cannot keep up stops reading, so the
  client's sends back up instead of anything being dropped;
* threads added, the final pool and when the pool last grew (governor samples in the
  profiler export), the peak router queue length (profiler samples every 0.1 s), drops
  (the router's own drop counters in the export), and the router's peak resident set
  (``VmHWM`` from /proc just before it is stopped).

Figures (``--write``, into docs/figures/): fig14a-latency-governor-off.png and
fig14b-latency-governor-on.png (mean steady-state latency against offered load, p99
dashed), fig14c-queue-1000.png (router queue length and pool size over time at the
highest load with the governor, thread additions marked). Raw results (summary JSON,
each run's profiler export and log) stay in ``--out`` (a fresh temporary directory by
default). Exit status 1 when one of the paper's floors, checked at the end, is missed.
The 1-minute load average is read at each run's start and end and printed with the
figures: the query delay is a sleep, so a busy machine shows in the latencies of the
light pings first.

``--compare`` runs, instead of the load sweep, the highest of ``--rates`` (1000) in four
configurations, ``--repeat`` times each (5), interleaved so that a change in the
machine's load falls on all of them alike: the governor with ``sizing =
"littles-law"``, with ``sizing = "queue-threshold"`` (SEDA's original rule: a thread
more at each sample that finds the queue at 1000), and the governor off with fixed
pools of 3 and 4 threads. It prints (and with ``--write`` puts in its own section of
docs/experiments.md) the peak and final pool of each run and the medians of the rest,
and draws fig14d-governor-rules-1000.png: pool and queue over time, first run of each
rule.

``--arrivals bursts`` offers, instead of evenly spaced messages, the quals proposal's load:
bursts of 10 every 100, 50, 25 and 10 ms (the same mean rates; see
scripts/fig14/bursts.py for the papers' words), and ``--arrivals both`` runs each; their
runs are reported side by side (table, fig14-bursts-latency.png, fig14-arrivals.csv, and
with ``--write`` their own subsection of docs/experiments.md), not in Fig. 14's table.

The parts are in scripts/fig14/: ``runs.py`` (one run of a configuration, and the
router helpers the other experiment scripts use), ``bursts.py`` (the bursty arrivals and
their side-by-side report), ``figures.py`` and ``report.py`` (the tables, the paper's
floors and the written sections); this script reads the flags and runs the sweep or the
comparison.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import matplotlib

from gnutella_router.run_folder import add_out_arguments, script_run
from scripts.benchdocs import EXPERIMENTS_DOC, FIGURES

matplotlib.use("Agg")

from scripts.fig14 import bursts
from scripts.fig14.figures import plot_latency, plot_queue, plot_rules
from scripts.fig14.report import comparison_table, floors, ms, table, write_comparison, write_docs
from scripts.fig14.runs import COMPARED, QUICK_DURATION, QUICK_WARMUP, RATES, one_run


def compare(rate: int, args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    """Each configuration ``--repeat`` times at ``rate``, interleaved, so that a change in
    the machine's load over the whole series falls on every configuration alike."""
    results = []
    for repeat in range(1, args.repeat + 1):
        for key, _label, governor, sizing, threads in COMPARED:
            started = time.monotonic()
            name = f"{key}-{rate}-r{repeat}"
            result = one_run(
                rate,
                governor,
                args.duration,
                args.warmup,
                out,
                sizing=sizing,
                threads=threads,
                name=name,
            )
            result["compared"] = key
            (out / f"result-{name}.json").write_text(json.dumps(result, indent=2))
            results.append(result)
            print(
                f"{name}: pool {result['peak_pool']} peak / {result['final_pool']} final, "
                f"last addition {result['last_addition_s']}, ping {ms(result['steady']['ping'])}"
                f"  query {ms(result['steady']['query'])} ms (steady), "
                f"per query {result['thread_ms'] or 0:.2f} ms on its thread, "
                f"{result['turn_wait_ms'] or 0:.2f} ms turn wait, "
                f"load average {result['load_average'][1]:.2f} "
                f"[{time.monotonic() - started:.0f} s]",
                flush=True,
            )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per run (60)")
    parser.add_argument("--warmup", type=float, default=20.0, help="steady state from (20 s)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_DURATION:g} s runs, {QUICK_WARMUP:g} s warm-up (the governor's additions "
        "and the backlog they drain fit inside the warm-up)",
    )
    parser.add_argument(
        "--rates", default=",".join(map(str, RATES)), help="offered loads, messages/s"
    )
    parser.add_argument("--governor", choices=("off", "on", "both"), default="both")
    parser.add_argument(
        "--arrivals",
        choices=(*bursts.ARRIVALS, "both"),
        default="constant",
        help="constant: evenly spaced, Fig. 14's table and figures; bursts: the quals "
        "proposal's 10 packets every 100/50/25/10 ms (the same mean rates); both: each, "
        "reported side by side in their own section (constant)",
    )
    add_out_arguments(parser)
    parser.add_argument("--write", action="store_true", help="update docs/experiments.md")
    parser.add_argument(
        "--figures",
        type=Path,
        help="where the PNGs go (default: docs/figures with --write, else the results dir)",
    )
    parser.add_argument(
        "--from-results", type=Path, help="skip the runs: redraw from a previous --out"
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="instead of the load sweep: at the highest of --rates, the governor's two rules "
        "and fixed pools of 3 and 4 threads, --repeat runs each",
    )
    parser.add_argument(
        "--repeat", type=int, default=5, help="runs per configuration with --compare (5)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.duration, args.warmup = QUICK_DURATION, QUICK_WARMUP
    if args.warmup >= args.duration:
        parser.error("--warmup must be shorter than --duration")
    rates = [int(r) for r in args.rates.split(",")]
    if args.compare:
        return main_compare(args, max(rates))
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.governor]
    if args.from_results:
        out = args.from_results
        results = [json.loads(p.read_text()) for p in sorted(out.glob("result-*.json"))]
    else:
        out = script_run("experiment-fig14", args)
        results = []
        kinds = bursts.ARRIVALS if args.arrivals == "both" else (args.arrivals,)
        for arrivals, governor, rate in ((a, g, r) for a in kinds for g in modes for r in rates):
            started = time.monotonic()
            result = one_run(rate, governor, args.duration, args.warmup, out, arrivals=arrivals)
            results.append(result)
            print(
                f"{arrivals:<8} governor {'on ' if governor else 'off'} {rate:>5}/s: "
                f"ping {ms(result['steady']['ping'])}  query {ms(result['steady']['query'])} "
                f"ms (steady)  added {result['threads_added']}  "
                f"peak queue {result['peak_queue']}  late {result['late']}  "
                f"drops {result['dropped']}  RSS {result['peak_rss_mib']:.1f} MiB  "
                f"[{time.monotonic() - started:.0f} s]",
                flush=True,
            )
        (out / "summary.json").write_text(
            json.dumps({"args": {**vars(args), "out": str(out)}, "results": results}, default=str)
        )
    figures: Path = args.figures or (FIGURES if args.write else out)
    bursts.report(results, args.duration, figures, EXPERIMENTS_DOC if args.write else None)
    if args.arrivals != "constant":
        # The side-by-side runs have their own section; Fig. 14's own table, figures and
        # checks are the constant-rate sweep's (`--arrivals constant`, the default).
        return 0
    results = [r for r in results if bursts.arrivals_of(r) == "constant"]
    print("\n".join(table(results)))
    checks = floors(results)
    for ok, text in checks:
        print(f"{'met   ' if ok else 'MISSED'} {text}")
    # A smoke run must not replace the published figures: docs/ only with --write.
    drawn = []
    for governor, name in (
        (False, "fig14a-latency-governor-off"),
        (True, "fig14b-latency-governor-on"),
    ):
        if any(r["governor"] == governor for r in results):
            drawn.append(plot_latency(results, governor, figures / f"{name}.png"))
    top = max(r["rate"] for r in results)
    profile_path = out / f"profile-on-{top}.json"
    if profile_path.exists():
        profile = json.loads(profile_path.read_text())
        drawn.append(plot_queue(profile, top, figures / "fig14c-queue-1000.png"))
    profile_path = out / f"profile-off-{top}.json"
    if profile_path.exists():
        profile = json.loads(profile_path.read_text())
        drawn.append(plot_queue(profile, top, figures / "fig14-queue-1000-governor-off.png", False))
    for path in drawn:
        print(path)
    if args.write:
        write_docs(results, args, figures)
        print(EXPERIMENTS_DOC)
    return 0 if all(ok for ok, _ in checks) else 1


def main_compare(args: argparse.Namespace, rate: int) -> int:
    if args.from_results:
        out = args.from_results
        results = [json.loads(p.read_text()) for p in sorted(out.glob("result-*.json"))]
    else:
        out = script_run("experiment-fig14-compare", args)
        results = compare(rate, args, out)
        (out / "summary.json").write_text(
            json.dumps({"args": {**vars(args), "out": str(out)}, "results": results}, default=str)
        )
    print("\n".join(comparison_table(results)))
    figures: Path = args.figures or (FIGURES if args.write else out)
    drawn = plot_rules(out, rate, figures / "fig14d-governor-rules-1000.png")
    if drawn is not None:
        print(drawn)
    if args.write:
        write_comparison(results, args, rate)
        print(EXPERIMENTS_DOC)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
