"""How big a test network this machine holds: nodes vs. formation time, memory, traffic.

    .venv/bin/python scripts/bench_testnet.py                       # the documented table
    .venv/bin/python scripts/bench_testnet.py --runs processes:24,processes:200 --duration 60

Each run is one ``gnutella-router testnet`` (a separate process, with its own results
folder under ``--out``) at a size and mode, with the default traffic (paper mix,
200 messages/s) for ``--duration`` seconds. While it runs, a sampler reads the resident
set size of every router process (``/proc/PID/status``; the routers' pids come from
their ready files) or, in one-process mode, of the testnet process itself, and keeps
each one's peak. From the run's ``summary.json``: how long the network took to form
(every planned link up), the messages the routers received per second of traffic, and
whether every router stopped cleanly. The table goes to stdout and to
``docs/benchmarks.md`` (its ``bench_testnet`` section), with the machine's description.
Every run is bounded (formation timeout, traffic duration, a hard timeout per run) and
leaves no process behind: the testnet stops its children on every path, and this
script kills the testnet's process group if a run overruns.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchdocs import machine, provenance, replace_section

DEFAULT_RUNS = (
    "in-process:24,in-process:100,in-process:500,processes:24,processes:100,processes:200"
)
SAMPLE_SECONDS = 1.0


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def router_pids(results: Path) -> list[int]:
    pids = []
    for ready in results.glob("node-*/ready.json"):
        try:
            pids.append(int(json.loads(ready.read_text())["pid"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return pids


class RssSampler(threading.Thread):
    """Peak RSS per process, sampled once a second until stopped."""

    def __init__(self, results: Path, controller: int, in_process: bool) -> None:
        super().__init__(daemon=True)
        self.results = results
        self.controller = controller
        self.in_process = in_process
        self.peaks: dict[int, int] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(SAMPLE_SECONDS):
            pids = [self.controller] if self.in_process else router_pids(self.results)
            for pid in pids:
                value = rss_kib(pid)
                if value is not None:
                    self.peaks[pid] = max(self.peaks.get(pid, 0), value)


def one_run(mode: str, nodes: int, duration: float, out: Path) -> dict[str, Any]:
    results = out / f"{mode}-{nodes}"
    argv = [
        sys.executable, "-m", "gnutella_router", "testnet", "--nodes", str(nodes),
        "--processes" if mode == "processes" else "--in-process",
        "--duration", str(duration), "--out", str(results), "--overwrite",
    ]  # fmt: skip
    started = time.monotonic()
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    sampler = RssSampler(results, process.pid, mode == "in-process")
    sampler.start()
    limit = duration + 120 + 2 * nodes
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
    peaks = list(sampler.peaks.values())
    if mode == "in-process":
        rss_per_node = peaks[0] / nodes / 1024 if peaks else None
    else:
        rss_per_node = statistics.median(peaks) / 1024 if peaks else None
    load = summary.get("load") or {}
    return {
        "mode": mode,
        "nodes": nodes,
        "exit": process.returncode,
        "error": summary.get("error"),
        "formed_s": summary.get("formed_after_seconds"),
        "rss_per_node_mib": None if rss_per_node is None else round(rss_per_node, 1),
        "rss_max_mib": round(max(peaks) / 1024, 1) if peaks else None,
        "rss_total_mib": round(sum(peaks) / 1024, 1) if peaks else None,
        "routed_per_s": round(received / duration) if duration else None,
        "not_arrived_query": (load.get("loss") or {}).get("query"),
        "stopped": summary.get("stopped"),
        "wall_s": round(elapsed, 1),
        "tail": output.decode(errors="replace").splitlines()[-3:],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default=DEFAULT_RUNS, help="MODE:NODES,... (default %(default)s)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of traffic")
    parser.add_argument("--out", type=Path, default=Path(".gnutella-router/bench-testnet"))
    parser.add_argument("--no-docs", action="store_true", help="print only")
    args = parser.parse_args(argv)
    rows = []
    for spec in args.runs.split(","):
        mode, _, count = spec.partition(":")
        row = one_run(mode, int(count), args.duration, args.out)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "tail"}), flush=True)
        if row["exit"] != 0:
            print("\n".join(row["tail"]), flush=True)
    header = (
        "| mode | nodes | formed in (s) | RSS per node (MiB) | largest node RSS (MiB) | "
        "all nodes' RSS (MiB) | routed msgs/s (all nodes) | queries not arrived | "
        "exit, stopped |"
    )
    table = [header, "|" + "---|" * 9]
    for r in rows:
        lost = r["not_arrived_query"]
        table.append(
            f"| {r['mode']} | {r['nodes']} | {r['formed_s']} | {r['rss_per_node_mib']} | "
            f"{r['rss_max_mib']} | {r['rss_total_mib']} | {r['routed_per_s']:,} | "
            f"{'-' if lost is None else f'{lost:.2%}'} | {r['exit']}, {r['stopped']} |"
        )
    print("\n".join(table))
    if not args.no_docs:
        lines = [
            "## Test network scale (`scripts/bench_testnet.py`)",
            "",
            f"Measured {provenance()} on {machine()}; load average before the "
            f"runs {os.getloadavg()[0]:.2f}. Each row is one `gnutella-router testnet` with "
            f"the default traffic (paper mix, 200 messages/s, random topology of degree 1 "
            f"plus the ring) for {args.duration:g} s. RSS per node: in one process, the "
            "process's peak RSS divided by the nodes; as processes, the median of the "
            "routers' peak RSS. Routed msgs/s: messages all routers received per second of "
            "traffic (every copy of a flood counts at every node it reaches). Rerun with "
            "`.venv/bin/python scripts/bench_testnet.py` (or `--runs processes:200 "
            "--duration 60` for one row).",
            "",
            *table,
        ]
        print(f"written to {replace_section('bench_testnet', lines)}")
    return 0 if all(r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
