"""How big a test network this machine holds: nodes vs. start, formation, memory, traffic.

    .venv/bin/python scripts/bench_testnet.py                                # the usual rows
    .venv/bin/python scripts/bench_testnet.py --runs shared-netns:1000       # one row
    .venv/bin/python scripts/bench_testnet.py --runs processes:200,netns:200 --duration 30

Each run is one ``gnutella-router testnet`` (a separate process, with its own results
folder under ``--out``) at a size and mode, with the default traffic (paper mix,
200 messages/s) for ``--duration`` seconds. The modes:

* ``in-process``: every router in the testnet's own process;
* ``processes``: a ``gnutella-router run`` process per router, on loopback;
* ``netns``: the same, each in a network namespace with an address of its own (root);
* ``shared``: ``--routers-per-process K`` routers to a process, on loopback;
* ``shared-netns``: the same, each router with an address of its own (root).

While a run goes, a sampler reads the resident set size of every router process
(``/proc/PID/status``; the pids come from the routers' ready files, and a process that
holds several routers counts once) and of the testnet's own process (the controller,
with the load client and the GWebCache), and keeps each one's peak; it also notes when
every router had listened (its ready file), to the second. From the run's
``summary.json``: how long the network took to form (every planned link up, counted
from the start of the run, namespaces included), how long stopping took, the messages
the routers received per second of traffic, and the copies the load client's sinks
missed. After each run the script checks that the run left nothing behind: no process
of its routers, no namespace or link of its network.

The table goes to stdout and to ``docs/benchmarks.md`` (the ``bench_testnet``
section): a run replaces the row of its mode and size and keeps the others, each row
saying when, at which commit and on how loaded a machine it was measured. Every run is
bounded (formation timeout, traffic duration, a hard timeout per run) and leaves no
process behind: the testnet stops its children on every path, and this script kills the
testnet's process group if a run overruns.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchdocs import BENCHMARKS_DOC, commit, machine, replace_section

from gnutella_router.testnet.namespaces import abandoned_leftovers

DEFAULT_RUNS = (
    "in-process:100,processes:100,netns:100,shared:100,shared-netns:100,shared-netns:1000"
)
MODES = {
    "in-process": ["--in-process"],
    "processes": ["--processes"],
    "netns": ["--netns"],
    "shared": [],
    "shared-netns": ["--netns"],
}
SAMPLE_SECONDS = 1.0
SECTION = "bench_testnet"
COLUMNS = (
    "mode",
    "nodes",
    "measured",
    "all listening (s)",
    "formed in (s)",
    "stopped in (s)",
    "RSS per node (MiB)",
    "all nodes' RSS (MiB)",
    "controller RSS (MiB)",
    "routed msgs/s (all nodes)",
    "copies lost",
    "queries not arrived",
    "one-hop query latency p50 / p99 (ms)",
    "exit, stopped, left behind",
)


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def router_pids(results: Path) -> dict[str, int]:
    """Each listening router's process, by node folder."""
    pids = {}
    for ready in results.glob("node-*/ready.json"):
        try:
            pids[ready.parent.name] = int(json.loads(ready.read_text())["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return pids


class RssSampler(threading.Thread):
    """Peak RSS per process, sampled once a second until stopped; and when every router
    had listened."""

    def __init__(self, results: Path, controller: int, nodes: int, in_process: bool) -> None:
        super().__init__(daemon=True)
        self.results = results
        self.controller = controller
        self.nodes = nodes
        self.in_process = in_process
        self.peaks: dict[int, int] = {}
        self.controller_peak = 0
        self.seen: set[int] = set()
        self.all_listening: float | None = None
        self.begun = time.monotonic()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(SAMPLE_SECONDS):
            routers = router_pids(self.results)
            if self.all_listening is None and len(routers) >= self.nodes:
                self.all_listening = time.monotonic() - self.begun
            self.seen |= set(routers.values())
            value = rss_kib(self.controller)
            if value is not None:
                self.controller_peak = max(self.controller_peak, value)
            if self.in_process:
                continue
            for pid in set(routers.values()):
                value = rss_kib(pid)
                if value is not None:
                    self.peaks[pid] = max(self.peaks.get(pid, 0), value)


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def network_names() -> set[str]:
    """Namespaces and links of test network runs that are over."""
    try:
        return set(abandoned_leftovers())
    except Exception:  # no iproute2 here: nothing of the kind can be left either
        return set()


def one_run(mode: str, nodes: int, duration: float, out: Path, per_process: int) -> dict[str, Any]:
    results = out / f"{mode}-{nodes}"
    argv = [
        sys.executable, "-m", "gnutella_router", "testnet", "--nodes", str(nodes),
        *MODES[mode], "--duration", str(duration), "--out", str(results), "--overwrite",
    ]  # fmt: skip
    if mode.startswith("shared"):
        argv += ["--routers-per-process", str(per_process)]
    names_before = network_names()
    load = os.getloadavg()[0]
    started = time.monotonic()
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    sampler = RssSampler(results, process.pid, nodes, mode == "in-process")
    sampler.start()
    limit = duration + 300 + 2 * nodes
    try:
        output, _ = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGINT)
        try:
            output, _ = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
    finally:
        sampler.done.set()
        sampler.join()
    elapsed = time.monotonic() - started
    time.sleep(1.0)  # a killed run's children get their parent-death signal meanwhile
    left = [f"pid {pid}" for pid in sorted(sampler.seen) if alive(pid)]
    left += sorted(network_names() - names_before)
    try:
        summary = json.loads((results / "summary.json").read_text())
    except (OSError, ValueError):
        summary = {}
    received = sum(n.get("received_total", 0) for n in summary.get("nodes", []))
    peaks = list(sampler.peaks.values())
    controller = sampler.controller_peak / 1024
    if mode == "in-process":
        total = controller
        per_node = controller / nodes
    else:
        total = sum(peaks) / 1024
        per_node = (
            total / nodes if mode.startswith("shared") else statistics.median(peaks) / 1024
        ) if peaks else 0.0  # fmt: skip
    report = summary.get("load") or {}
    expected = sum((report.get("expected") or {}).values())
    arrived = sum((report.get("received") or {}).values())
    label = f"{mode} ({per_process} a process)" if mode.startswith("shared") else mode
    return {
        "mode": label,
        "nodes": nodes,
        "measured": f"{time.strftime('%Y-%m-%d')}, {commit()}, load {load:.1f}",
        "exit": process.returncode,
        "error": summary.get("error"),
        "listening_s": None if sampler.all_listening is None else round(sampler.all_listening),
        "formed_s": summary.get("formed_after_seconds"),
        "stopped_s": summary.get("stop_seconds"),
        "rss_per_node_mib": round(per_node, 2) if total else None,
        "rss_total_mib": round(total, 1) if total else None,
        "controller_mib": round(controller, 1),
        "routed_per_s": round(received / duration) if duration and received else None,
        "copies_lost": None if not expected else 1 - arrived / expected,
        "not_arrived_query": (report.get("loss") or {}).get("query"),
        "query_latency_us": ((report.get("latency") or {}).get("one-hop") or {}).get("query"),
        "stopped": summary.get("stopped"),
        "left_behind": left,
        "wall_s": round(elapsed, 1),
        "tail": output.decode(errors="replace").splitlines()[-3:],
    }


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def table_row(r: dict[str, Any]) -> str:
    lost, query, latency = r["copies_lost"], r["not_arrived_query"], r["query_latency_us"]
    cells = [
        r["mode"],
        f"{r['nodes']:,}",
        r["measured"],
        "-" if r["listening_s"] is None else f"{r['listening_s']}",
        _number(r["formed_s"]),
        _number(r["stopped_s"]),
        _number(r["rss_per_node_mib"], 2),
        _number(r["rss_total_mib"], 0),
        _number(r["controller_mib"], 0),
        "-" if r["routed_per_s"] is None else f"{r['routed_per_s']:,}",
        "-" if lost is None else f"{lost:.2%}",
        "-" if query is None else f"{query:.2%}",
        "-" if not latency else f"{latency['p50'] / 1000:,.0f} / {latency['p99'] / 1000:,.0f}",
        f"{r['exit']}, {r['stopped']}, {len(r['left_behind']) or 'nothing'}",
    ]
    return "| " + " | ".join(cells) + " |"


def kept_rows(replaced: set[tuple[str, str]]) -> list[str]:
    """The section's rows of the current form, but those of the runs just made."""
    try:
        text = BENCHMARKS_DOC.read_text()
    except OSError:
        return []
    start, end = f"<!-- {SECTION}:start -->", f"<!-- {SECTION}:end -->"
    if start not in text or end not in text:
        return []
    section = text.split(start, 1)[1].split(end, 1)[0]
    rows = []
    header = "| " + " | ".join(COLUMNS) + " |"
    if header not in section:
        return []  # an older form of the table: its rows are measured again
    for line in section.split(header, 1)[1].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != len(COLUMNS) or set(line) <= {"|", "-", " "}:
            continue
        if (cells[0], cells[1]) not in replaced:
            rows.append(line.strip())
    return rows


def order(row: str) -> tuple[int, str, int]:
    cells = [c.strip() for c in row.strip("|").split("|")]
    mode = re.sub(r" \(.*\)", "", cells[0])
    rank = list(MODES).index(mode) if mode in MODES else len(MODES)
    return rank, cells[0], int(cells[1].replace(",", ""))


def newest_measured(rows: list[str]) -> str:
    """``DATE at commit HASH`` of the newest row (by date, then by order)."""
    found = []
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        match = re.match(r"(\d{4}-\d\d-\d\d), ([0-9a-f]+)", cells[2]) if len(cells) > 2 else None
        if match:
            found.append((match.group(1), match.group(2)))
    if not found:
        return "never"
    day, head = max(found, key=lambda f: f[0])
    return f"{day} at commit {head}"


FLOOR_NODES = 1000
FLOOR_FORMED_S = 300.0
FLOOR_LOST = 0.01
FLOOR_RSS_MIB = 8 * 1000**3 / 2**20
"""Issue 28's floors for a thousand nodes with an address each: formed within 5
minutes, under 1 % of the copies lost over the traffic, at most 8 GB of RSS in all."""


def floor_lines(rows: list[str]) -> list[str]:
    """The thousand-node floors, judged on each ``shared-netns`` row of that size."""
    lines = []
    for row in rows:
        cells = dict(
            zip(COLUMNS, (c.strip() for c in row.strip().strip("|").split("|")), strict=True)
        )
        if not cells["mode"].startswith("shared-netns") or cells["nodes"] != f"{FLOOR_NODES:,}":
            continue
        try:
            formed = float(cells["formed in (s)"].replace(",", ""))
            lost = float(cells["copies lost"].rstrip("%")) / 100
            rss = float(cells["all nodes' RSS (MiB)"].replace(",", "")) + float(
                cells["controller RSS (MiB)"].replace(",", "")
            )
        except ValueError:
            lines.append(f"{cells['mode']}, {cells['nodes']} nodes: the run gave no figures.")
            continue
        met = formed <= FLOOR_FORMED_S and lost < FLOOR_LOST and rss <= FLOOR_RSS_MIB
        lines.append(
            f"{cells['mode']}, {cells['nodes']} nodes, each with its own address: formed in "
            f"{formed:g} s (floor {FLOOR_FORMED_S:g} s), {lost:.2%} of the copies lost (floor "
            f"under {FLOOR_LOST:.0%}), {rss:,.0f} MiB of RSS in all, routers and controller "
            f"(floor 8 GB, {FLOOR_RSS_MIB:,.0f} MiB): {'met' if met else 'NOT met'}."
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs",
        default=DEFAULT_RUNS,
        help="MODE:NODES,... (default %(default)s); '' writes the table again from the "
        "rows in the docs, measuring nothing",
    )
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of traffic")
    parser.add_argument(
        "--routers-per-process", type=int, default=100, help="in the shared modes (default 100)"
    )
    parser.add_argument("--out", type=Path, default=Path(".gnutella-router/bench-testnet"))
    parser.add_argument("--no-docs", action="store_true", help="print only")
    args = parser.parse_args(argv)
    rows = []
    for spec in filter(None, args.runs.split(",")):
        mode, _, count = spec.partition(":")
        if mode not in MODES:
            parser.error(f"unknown mode {mode!r}: expected one of {', '.join(MODES)}")
        row = one_run(mode, int(count), args.duration, args.out, args.routers_per_process)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "tail"}), flush=True)
        if row["exit"] != 0 or row["left_behind"]:
            print("\n".join(row["tail"]), flush=True)
    new = [table_row(r) for r in rows]
    replaced = {(r["mode"], f"{r['nodes']:,}") for r in rows}
    table = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
        *sorted([*kept_rows(replaced), *new], key=order),
    ]
    floors = floor_lines(table[2:])
    print("\n".join([*table, "", *floors]))
    if not args.no_docs:
        lines = [
            "## Test network scale (`scripts/bench_testnet.py`)",
            "",
            f"Measured {newest_measured(table[2:])} (the newest row; each row names the day, "
            f"commit and load average it was measured at, the machine being shared) on "
            f"{machine()}. Each row is one `gnutella-router testnet` with the default traffic "
            "(paper mix, 200 messages/s, random topology of degree 1 plus the ring) for "
            f"{args.duration:g} s. Modes: `in-process` (every router in "
            "the testnet's process), `processes` (a `gnutella-router run` process each), "
            "`netns` (the same, each in a network namespace with an address of its own), "
            "`shared` (`--routers-per-process K`, K routers to a process) and `shared-netns` "
            "(the same, each router's sockets in its own namespace, so each keeps an address "
            "of its own). All listening: when every router's ready file was there, from the "
            "start, sampled each second. Formed in: every planned link up, from the start of "
            "the run (namespaces included). RSS per node: in one process, the process's peak "
            "divided by the nodes; a process per router, the median of their peaks; shared, "
            "the sum of the host processes' peaks divided by the nodes. All nodes' RSS: the "
            "sum of the router processes' peaks (taken at different moments, so an upper "
            "bound); the controller (testnet's process with the load client and the "
            "GWebCache) beside it. Routed msgs/s: messages all routers received per second "
            "of traffic (every copy of a flood counts at every node it reaches). Copies "
            "lost: of every copy owed to the load client's sinks, pings and queries, those "
            "that never came. One-hop query latency: from a query's scheduled send to its "
            "copy at node 0's sink (through the one router the injector talks to); where the "
            "machine cannot keep up (the load client shares it with every router), it grows. "
            "Left behind: processes, namespaces and links of the run still "
            "there after it (checked by the script). Rerun with "
            "`.venv/bin/python scripts/bench_testnet.py` (as root for the namespace modes), "
            "or `--runs shared-netns:1000` for one row; a run replaces its own row only.",
            "",
            *table,
            *(["", *floors] if floors else []),
        ]
        print(f"written to {replace_section(SECTION, lines)}")
    return 0 if all(r["exit"] == 0 and not r["left_behind"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
