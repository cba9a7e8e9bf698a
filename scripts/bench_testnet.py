"""How big a test network this machine holds: start, formation, memory, traffic, stop.

    .venv/bin/python scripts/bench_testnet.py                                # the documented table
    .venv/bin/python scripts/bench_testnet.py --runs processes:200x3,netns:200x3

Each run is one ``gnutella-router testnet`` (a separate process, with its own results
folder under ``--out``) at a size and mode (``in-process``, ``processes``, or ``netns``:
processes in network namespaces, which needs root), with the default traffic (paper
mix, 200 messages/s) for ``--duration`` seconds; ``--repeat N`` runs each N times, one
after the other. While it runs, a sampler reads, once a second, the memory of every
router process (their pids come from their ready files; the fork server's is counted
with them, since the routers share its pages) or, in one-process mode, of the testnet
process itself: each process's peak resident set (RSS) and, summed over the processes
at each sample, their proportional set size (PSS: a page shared by N processes counts
1/N in each), whose peak is what the network takes of the machine's memory (the sum of
RSS counts every shared page once per process). From the run's ``summary.json``: how
long the nodes took to start and the network to form (every planned link up), the
messages the routers received per second of traffic, the copies that did not arrive,
and how long stopping took. The table goes to stdout and to ``docs/benchmarks.md``
(its ``bench_testnet`` section), with the date, the commit and the machine. Every run is
bounded (formation timeout, traffic duration, a hard timeout per run) and leaves
nothing behind: the testnet stops its children and removes its namespaces on every
path, this script kills the testnet's process group if a run overruns, and afterwards
checks that no router process and no namespace of the run is left.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchdocs import machine, provenance, replace_section

DEFAULT_RUNS = "in-process:24,in-process:500,processes:24,processes:100,processes:200x3,netns:200x3"
MODES = ("in-process", "processes", "netns")
SAMPLE_SECONDS = 1.0
START_SAMPLES = 20
"""Routers started one after the other, each way, to measure what one start costs."""


def memory_kib(pid: int) -> tuple[int, int] | None:
    """(RSS, PSS) of a process in KiB, or None when it is gone."""
    rss = pss = None
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss:"):
                pss = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None if rss is None or pss is None else (rss, pss)


def router_pids(results: Path) -> list[int]:
    pids = []
    for ready in results.glob("node-*/ready.json"):
        try:
            pids.append(int(json.loads(ready.read_text())["pid"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return pids


def fork_server_pid(controller: int) -> int | None:
    """The testnet's fork server: its child running ``gnutella_router.cli.fork_server``."""
    try:
        children = Path(f"/proc/{controller}/task/{controller}/children").read_text().split()
    except OSError:
        return None
    for child in children:
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"fork_server" in command:
            return int(child)
    return None


class MemorySampler(threading.Thread):
    """Peak RSS per process and the peak of the PSS summed over them, once a second."""

    def __init__(self, results: Path, controller: int, in_process: bool) -> None:
        super().__init__(daemon=True)
        self.results = results
        self.controller = controller
        self.in_process = in_process
        self.rss_peaks: dict[int, int] = {}
        self.pss_peak = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(SAMPLE_SECONDS):
            if self.in_process:
                pids = [self.controller]
            else:
                server = fork_server_pid(self.controller)
                pids = router_pids(self.results) + ([server] if server is not None else [])
            pss_total = 0
            for pid in pids:
                sample = memory_kib(pid)
                if sample is None:
                    continue
                rss, pss = sample
                self.rss_peaks[pid] = max(self.rss_peaks.get(pid, 0), rss)
                pss_total += pss
            self.pss_peak = max(self.pss_peak, pss_total)


def one_run(mode: str, nodes: int, duration: float, out: Path, attempt: int) -> dict[str, Any]:
    results = out / f"{mode}-{nodes}-{attempt}"
    flag = {"in-process": "--in-process", "processes": "--processes", "netns": "--netns"}[mode]
    argv = [
        sys.executable, "-m", "gnutella_router", "testnet", "--nodes", str(nodes), flag,
        "--duration", str(duration), "--out", str(results), "--overwrite",
    ]  # fmt: skip
    started = time.monotonic()
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    sampler = MemorySampler(results, process.pid, mode == "in-process")
    sampler.start()
    limit = duration + 180 + 2 * nodes
    try:
        output, _ = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGINT)
        try:
            output, _ = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
    finally:
        sampler.done.set()
        sampler.join()
    elapsed = time.monotonic() - started
    try:
        summary = json.loads((results / "summary.json").read_text())
    except (OSError, ValueError):
        summary = {}
    received = sum(n.get("received_total", 0) for n in summary.get("nodes", []))
    peaks = sorted(sampler.rss_peaks.values())
    if mode == "in-process":
        rss_per_node = peaks[0] / nodes / 1024 if peaks else None
    else:
        rss_per_node = peaks[len(peaks) // 2] / 1024 if peaks else None
    loss = (summary.get("load") or {}).get("loss") or {}
    left = _alive(router_pids(results))
    prefix = (summary.get("namespaces") or {}).get("prefix")
    left_namespaces = [n for n in _namespaces() if prefix and n.startswith(f"{prefix}-")]
    return {
        "mode": mode,
        "nodes": nodes,
        "attempt": attempt,
        "exit": process.returncode,
        "error": summary.get("error"),
        "started_s": summary.get("started_after_seconds"),
        "formed_s": summary.get("formed_after_seconds"),
        "stop_s": summary.get("stop_seconds"),
        "rss_per_node_mib": None if rss_per_node is None else round(rss_per_node, 1),
        "rss_total_mib": round(sum(peaks) / 1024, 1) if peaks else None,
        "pss_total_mib": round(sampler.pss_peak / 1024, 1) if sampler.pss_peak else None,
        "routed_per_s": round(received / duration) if duration else None,
        "not_arrived": {k: loss.get(k) for k in ("ping", "query")},
        "stopped": summary.get("stopped"),
        "left_behind": [f"process {p}" for p in left] + [f"namespace {n}" for n in left_namespaces],
        "wall_s": round(elapsed, 1),
        "tail": output.decode(errors="replace").splitlines()[-3:],
    }


def cpu_seconds(pid: int) -> float:
    """User and system CPU a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_costs(out: Path, count: int = START_SAMPLES) -> dict[str, dict[str, float]]:
    """What starting one router costs until it listens (wall time, and the CPU the router
    process used by then), with an interpreter of its own and forked from the fork
    server: medians over ``count`` routers started one after the other and stopped."""
    import statistics

    import trio

    from gnutella_router.config import load_config
    from gnutella_router.testnet.children import ChildNode
    from gnutella_router.testnet.forks import ForkServer

    def config(folder: Path) -> Any:
        return load_config(
            None,
            {
                "node.listen": "127.0.0.1:0",
                "admin.listen": "127.0.0.1:0",
                "node.state_dir": str(folder.resolve()),
                "log.level": "warning",
            },
        )

    results: dict[str, dict[str, float]] = {}
    out.mkdir(parents=True, exist_ok=True)
    server = ForkServer((out / "fork-server.log").resolve())

    async def measure() -> None:
        async with trio.open_nursery() as nursery:
            try:
                await server.start(nursery)
                for way, forks in (("interpreter", None), ("forked", server)):
                    walls, cpus = [], []
                    for index in range(count):
                        node = ChildNode(index, out / f"{way}-{index}", forks=forks)
                        began = trio.current_time()
                        await node.start(nursery, config(node.state_dir))
                        walls.append(trio.current_time() - began)
                        assert node.pid is not None
                        cpus.append(cpu_seconds(node.pid))
                        node.request_stop()
                        await node.wait_stopped(15)
                    results[way] = {
                        "wall_s": round(statistics.median(walls), 3),
                        "cpu_s": round(statistics.median(cpus), 3),
                    }
            finally:
                await server.close()
                nursery.cancel_scope.cancel()

    trio.run(measure)
    return results


def _namespaces() -> list[str]:
    try:
        listed = subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True, check=False
        ).stdout
    except OSError:
        return []
    return [line.split()[0] for line in listed.splitlines() if line.strip()]


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def _loss(row: dict[str, Any]) -> str:
    values = row["not_arrived"]
    if all(v is None for v in values.values()):
        return "-"
    return " / ".join("-" if v is None else f"{v:.2%}" for v in values.values())


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| mode | nodes | run | all started (s) | formed (s) | RSS per node (MiB) | "
        "all nodes' RSS (MiB) | all nodes' PSS (MiB) | routed msgs/s (all nodes) | "
        "not arrived: pings / queries | stopped in (s) | exit | left behind |",
        "|" + "---|" * 13,
    ]
    for r in rows:
        routed = "-" if r["routed_per_s"] is None else f"{r['routed_per_s']:,}"
        lines.append(
            f"| {r['mode']} | {r['nodes']} | {r['attempt']} | {r['started_s']} | "
            f"{r['formed_s']} | {r['rss_per_node_mib']} | {r['rss_total_mib']} | "
            f"{r['pss_total_mib']} | {routed} | {_loss(r)} | {r['stop_s']} | {r['exit']} | "
            f"{', '.join(r['left_behind']) or 'nothing'} |"
        )
    return lines


def verdicts(rows: list[dict[str, Any]]) -> list[str]:
    """One line per mode and size: how many runs formed, the slowest, any loss."""
    lines = []
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["mode"], row["nodes"]), []).append(row)
    for (mode, nodes), group in groups.items():
        formed = [r for r in group if r["formed_s"] is not None and r["exit"] == 0]
        slowest = max((r["formed_s"] for r in formed), default=None)
        lossless = sum(
            1 for r in formed if all(v == 0 for v in r["not_arrived"].values() if v is not None)
        )
        left = "see the table" if any(r["left_behind"] for r in group) else "nothing"
        lines.append(
            f"- {mode}, {nodes} nodes: formed in {len(formed)} of {len(group)} runs"
            + (f", the slowest in {slowest:.1f} s" if slowest is not None else "")
            + f"; nothing lost in {lossless} of {len(group)}; "
            + f"left behind: {left}."
        )
    return lines


def _without_out(arguments: list[str]) -> list[str]:
    """The arguments as a rerun would give them: without where this run wrote."""
    shown, skip = [], False
    for argument in arguments:
        if skip:
            skip = False
        elif argument == "--out":
            skip = True
        elif not argument.startswith("--out="):
            shown.append(argument)
    return shown


def start_cost_lines(costs: dict[str, dict[str, float]] | None) -> list[str]:
    if costs is None:
        return []
    own, forked = costs["interpreter"], costs["forked"]
    return [
        f"What one router costs to start, until it listens (median of {START_SAMPLES}, "
        "one at a time on loopback): with an interpreter of its own "
        f"(`python -m gnutella_router run`) {own['wall_s']:.3f} s, of which "
        f"{own['cpu_s']:.3f} s of CPU in the router process; forked from the fork "
        f"server {forked['wall_s']:.3f} s, {forked['cpu_s']:.3f} s of CPU.",
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs", default=DEFAULT_RUNS, help="MODE:NODES[xRUNS],... (default %(default)s)"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each size without xRUNS (default 1)"
    )
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of traffic")
    parser.add_argument("--out", type=Path, default=Path(".gnutella-router/bench-testnet"))
    parser.add_argument("--no-docs", action="store_true", help="print only")
    parser.add_argument(
        "--no-start-cost", action="store_true", help="skip measuring what one start costs"
    )
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be 1 or more")
    specs = []
    for spec in args.runs.split(","):
        mode, _, size = spec.partition(":")
        count, _, times = size.partition("x")
        if mode not in MODES or not count.isdigit() or not (times or "1").isdigit():
            parser.error(
                f"--runs: {spec!r} is not MODE:NODES[xRUNS] with MODE one of {', '.join(MODES)}"
            )
        specs.append((mode, int(count), int(times) if times else args.repeat))
    load_before = os.getloadavg()[0]
    costs = None if args.no_start_cost else start_costs(args.out / "start-cost")
    if costs is not None:
        print(json.dumps({"start_cost": costs}), flush=True)
    rows = []
    for mode, count, times in specs:
        for attempt in range(1, times + 1):
            row = one_run(mode, count, args.duration, args.out, attempt)
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "tail"}), flush=True)
            if row["exit"] != 0:
                print("\n".join(row["tail"]), flush=True)
    lines = table(rows)
    print("\n".join(lines))
    print("\n".join(verdicts(rows)))
    if not args.no_docs:
        shown = _without_out(sys.argv[1:] if argv is None else argv)
        rerun = "`.venv/bin/python scripts/bench_testnet.py" + "".join(f" {a}" for a in shown) + "`"
        text = [
            "## Test network scale (`scripts/bench_testnet.py`)",
            "",
            f"Measured {provenance()} on {machine()}; load "
            f"average before the runs {load_before:.2f}. Each row is one `gnutella-router "
            f"testnet` with the default traffic (paper mix, 200 messages/s, random topology "
            f"of degree 1 plus the ring) for {args.duration:g} s; `netns` is `--netns` (a "
            "process per node, each in a network namespace of its own). All started: from "
            "the run's start (namespaces made first in `netns`) until every node listened; "
            "formed: until every planned link was up (same origin). RSS per node: in one "
            "process, the process's peak RSS divided by the nodes; as processes, the median "
            "of the routers' peak RSS. All nodes' RSS sums the processes' peaks and counts "
            "every page they share once per process; PSS (a page shared by N processes "
            "counts 1/N in each; the fork server included) is the peak of their sum, what "
            "they took of the machine. Routed msgs/s: messages all routers received per "
            "second of traffic (every copy of a flood counts at every node it reaches). Not "
            "arrived: copies owed to the sinks that never came. Stopped in: from the first "
            "Bye to the last router's exit. Left behind: router processes or namespaces "
            "still there after the run.",
            "",
            *lines,
            "",
            *verdicts(rows),
            "",
            *start_cost_lines(costs),
            f"Rerun: {rerun} (as root for `netns`; each 200-node run takes both cores and a "
            "minute or two).",
        ]
        print(f"written to {replace_section('bench_testnet', text)}")
    return 0 if all(r["exit"] == 0 and not r["left_behind"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
