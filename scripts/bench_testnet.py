"""How big a test network this machine holds: nodes vs. start, formation, memory, traffic.

    .venv/bin/python scripts/bench_testnet.py                                # the usual rows
    .venv/bin/python scripts/bench_testnet.py --runs shared-netns:1000       # one row
    .venv/bin/python scripts/bench_testnet.py --runs processes:200x3,netns:200x3

Each run is one ``gnutella-router testnet`` (a separate process, with its own results
folder under ``--out``) at a size and mode, with the default traffic (paper mix,
200 messages/s) for ``--duration`` seconds; ``MODE:NODESxN`` (or ``--repeat N``) runs a
size N times, one after the other. The modes:

* ``in-process``: every router in the testnet's own process;
* ``processes``: a ``gnutella-router run`` process per router, on loopback;
* ``netns``: the same, each in a network namespace with an address of its own (root);
* ``shared``: ``--routers-per-process K`` routers to a process, on loopback;
* ``shared-netns``: the same, each router with an address of its own (root).

While a run goes, a sampler reads, once a second, the memory of every router process
(``/proc/PID/smaps_rollup``; the pids come from the routers' ready files, a process that
holds several routers counts once, and the fork server's is counted with them, since
the routers it forked share its pages) and of the testnet's own process (the
controller, with the load client and the GWebCache): each process's peak resident set
(RSS) and, summed over the router processes at each sample, their proportional set size
(PSS: a page shared by N processes counts 1/N in each), whose peak is what the network
takes of the machine's memory (the sum of RSS counts every shared page once per
process). From the run's ``summary.json``: when every node had been started and when
the network had formed (every planned link up, both counted from the start of the run,
namespaces included), how long stopping took, the messages the routers received per
second of traffic, and the copies the load client's sinks missed. After each run the
script checks that the run left nothing behind: no process of its routers, no namespace
or link of its network. Before the runs it measures what starting one router costs,
with an interpreter of its own and forked from the fork server (``--no-start-cost``
skips it).

The table goes to stdout and to ``docs/benchmarks.md`` (the ``bench_testnet``
section): a run replaces the row of its mode, size and repetition and keeps the others,
each row saying when, at which commit and on how loaded a machine it was measured. Every run is
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

from gnutella_router.lab.testnet.namespaces import abandoned_leftovers
from scripts.benchdocs import BENCHMARKS_DOC, commit, machine, replace_section
from scripts.runner import Child

DEFAULT_RUNS = (
    "in-process:24,in-process:100,in-process:500,processes:24,processes:100,processes:200x3,"
    "netns:100,netns:200x3,shared:100,shared-netns:100,shared-netns:1000"
)
MODES = {
    "in-process": ["--in-process"],
    "processes": ["--processes"],
    "netns": ["--netns"],
    "shared": [],
    "shared-netns": ["--netns"],
}
SAMPLE_SECONDS = 1.0
START_SAMPLES = 20
"""Routers started one after the other, each way, to measure what one start costs."""
SECTION = "bench_testnet"
COLUMNS = (
    "mode",
    "nodes",
    "run",
    "measured",
    "all started (s)",
    "formed in (s)",
    "stopped in (s)",
    "RSS per node (MiB)",
    "all nodes' RSS (MiB)",
    "all nodes' PSS (MiB)",
    "controller RSS (MiB)",
    "routed msgs/s (all nodes)",
    "copies lost",
    "not arrived: pings / queries",
    "one-hop query latency p50 / p99 (ms)",
    "exit, stopped, left behind",
)


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


def router_pids(results: Path) -> dict[str, int]:
    """Each listening router's process, by node folder."""
    pids = {}
    for ready in results.glob("node-*/ready.json"):
        try:
            pids[ready.parent.name] = int(json.loads(ready.read_text())["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return pids


class MemorySampler(threading.Thread):
    """Peak RSS per process and the peak of the router processes' summed PSS, sampled
    once a second until stopped; and when every router had listened."""

    def __init__(self, results: Path, controller: int, nodes: int, in_process: bool) -> None:
        super().__init__(daemon=True)
        self.results = results
        self.controller = controller
        self.nodes = nodes
        self.in_process = in_process
        self.peaks: dict[int, int] = {}
        self.pss_peak = 0
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
            sample = memory_kib(self.controller)
            if sample is not None:
                self.controller_peak = max(self.controller_peak, sample[0])
                if self.in_process:
                    self.pss_peak = max(self.pss_peak, sample[1])
            if self.in_process:
                continue
            pids = set(routers.values())
            server = fork_server_pid(self.controller)
            if server is not None:
                pids.add(server)
            pss_total = 0
            for pid in pids:
                sample = memory_kib(pid)
                if sample is not None:
                    self.peaks[pid] = max(self.peaks.get(pid, 0), sample[0])
                    pss_total += sample[1]
            self.pss_peak = max(self.pss_peak, pss_total)


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


def one_run(
    mode: str, nodes: int, duration: float, out: Path, per_process: int, attempt: int
) -> dict[str, Any]:
    results = out / f"{mode}-{nodes}-{attempt}"
    argv = [
        sys.executable, "-m", "gnutella_router", "testnet", "--nodes", str(nodes),
        *MODES[mode], "--duration", str(duration), "--out", str(results), "--overwrite",
    ]  # fmt: skip
    if mode.startswith("shared"):
        argv += ["--routers-per-process", str(per_process)]
    names_before = network_names()
    load = os.getloadavg()[0]
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)  # its output goes beside its results folder
    child = Child(f"testnet {mode} {nodes}", argv, out / f"{results.name}.log", own_session=True)
    sampler = MemorySampler(results, child.pid, nodes, mode == "in-process")
    sampler.start()
    limit = duration + 300 + 2 * nodes
    try:
        child.wait(limit)
    except subprocess.TimeoutExpired:
        child.stop(120, signal.SIGINT)  # its process group, as Ctrl-C would; then SIGKILL
    finally:
        sampler.done.set()
        sampler.join()
        child.close()
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
    started_s = summary.get("started_after_seconds")
    if started_s is None and sampler.all_listening is not None:
        started_s = round(sampler.all_listening)  # a summary of an older form, or none
    expected = sum((report.get("expected") or {}).values())
    arrived = sum((report.get("received") or {}).values())
    label = f"{mode} ({per_process} a process)" if mode.startswith("shared") else mode
    return {
        "mode": label,
        "nodes": nodes,
        "attempt": attempt,
        "measured": f"{time.strftime('%Y-%m-%d')}, {commit()}, load {load:.1f}, {duration:g} s",
        "exit": child.process.returncode,
        "error": summary.get("error"),
        "started_s": started_s,
        "formed_s": summary.get("formed_after_seconds"),
        "stopped_s": summary.get("stop_seconds"),
        "rss_per_node_mib": round(per_node, 2) if total else None,
        "rss_total_mib": round(total, 1) if total else None,
        "pss_total_mib": round(sampler.pss_peak / 1024, 1) if sampler.pss_peak else None,
        "controller_mib": round(controller, 1),
        "routed_per_s": round(received / duration) if duration and received else None,
        "copies_lost": None if not expected else 1 - arrived / expected,
        "not_arrived": {k: (report.get("loss") or {}).get(k) for k in ("ping", "query")},
        "query_latency_us": ((report.get("latency") or {}).get("one-hop") or {}).get("query"),
        "stopped": summary.get("stopped"),
        "left_behind": left,
        "wall_s": round(elapsed, 1),
        "tail": child.log_path.read_text(errors="replace").splitlines()[-3:],
    }


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def table_row(r: dict[str, Any]) -> str:
    lost, latency = r["copies_lost"], r["query_latency_us"]
    cells = [
        r["mode"],
        f"{r['nodes']:,}",
        str(r["attempt"]),
        r["measured"],
        _number(r["started_s"]),
        _number(r["formed_s"]),
        _number(r["stopped_s"]),
        _number(r["rss_per_node_mib"], 2),
        _number(r["rss_total_mib"], 0),
        _number(r["pss_total_mib"], 0),
        _number(r["controller_mib"], 0),
        "-" if r["routed_per_s"] is None else f"{r['routed_per_s']:,}",
        "-" if lost is None else f"{lost:.2%}",
        _loss(r),
        "-" if not latency else f"{latency['p50'] / 1000:,.0f} / {latency['p99'] / 1000:,.0f}",
        f"{r['exit']}, {r['stopped']}, {len(r['left_behind']) or 'nothing'}",
    ]
    return "| " + " | ".join(cells) + " |"


def _loss(row: dict[str, Any]) -> str:
    values = row["not_arrived"]
    if all(v is None for v in values.values()):
        return "-"
    return " / ".join("-" if v is None else f"{v:.2%}" for v in values.values())


def kept_rows(replaced: set[tuple[str, str, str]]) -> list[str]:
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
        if (cells[0], cells[1], cells[2]) not in replaced:
            rows.append(line.strip())
    return rows


def order(row: str) -> tuple[int, str, int, int]:
    cells = [c.strip() for c in row.strip("|").split("|")]
    mode = re.sub(r" \(.*\)", "", cells[0])
    rank = list(MODES).index(mode) if mode in MODES else len(MODES)
    return rank, cells[0], int(cells[1].replace(",", "")), int(cells[2])


def newest_measured(rows: list[str]) -> str:
    """``DATE at commit HASH`` of the newest row (by date, then by order)."""
    found = []
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        match = re.match(r"(\d{4}-\d\d-\d\d), ([0-9a-f]+)", cells[3]) if len(cells) > 3 else None
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
    from gnutella_router.lab.testnet.children import ChildNode
    from gnutella_router.lab.testnet.forks import ForkServer

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


def _cells(row: str) -> dict[str, str]:
    return dict(zip(COLUMNS, (c.strip() for c in row.strip().strip("|").split("|")), strict=True))


def verdicts(rows: list[str]) -> list[str]:
    """One line per mode and size of the table: how many runs formed, the slowest, any
    loss, anything left behind."""
    groups: dict[tuple[str, str], list[dict[str, str]]] = {}
    for row in rows:
        cells = _cells(row)
        groups.setdefault((cells["mode"], cells["nodes"]), []).append(cells)
    lines = []
    for (mode, nodes), group in groups.items():
        formed = [
            c
            for c in group
            if c["formed in (s)"] != "-" and c["exit, stopped, left behind"][0] == "0"
        ]
        slowest = max((float(c["formed in (s)"].replace(",", "")) for c in formed), default=None)
        lossless = sum(
            1
            for c in formed
            if all(v in ("0.00%", "-") for v in c["not arrived: pings / queries"].split(" / "))
            and c["copies lost"] in ("0.00%", "-")
        )
        left = (
            "nothing"
            if all(c["exit, stopped, left behind"].endswith("nothing") for c in group)
            else "see the table"
        )
        lines.append(
            f"- {mode}, {nodes} nodes: formed in {len(formed)} of {len(group)} runs"
            + (f", the slowest in {slowest:.1f} s" if slowest is not None else "")
            + f"; nothing lost in {lossless} of {len(group)}; left behind: {left}."
        )
    return lines


START_COST_OPENING = "What one router costs to start"


def start_cost_lines(costs: dict[str, dict[str, float]] | None) -> list[str]:
    """The start cost measured now, or the one the docs hold (measured with it)."""
    if costs is None:
        try:
            text = BENCHMARKS_DOC.read_text()
        except OSError:
            return []
        section = text.split(f"<!-- {SECTION}:start -->", 1)[-1].split(f"<!-- {SECTION}:end", 1)[0]
        kept = [line for line in section.splitlines() if line.startswith(START_COST_OPENING)]
        return [kept[0], ""] if kept else []
    own, forked = costs["interpreter"], costs["forked"]
    return [
        f"{START_COST_OPENING}, until it listens (median of {START_SAMPLES}, one at a time "
        f"on loopback; measured {time.strftime('%Y-%m-%d')}, {commit()}): with an "
        f"interpreter of its own (`python -m gnutella_router run`) {own['wall_s']:.3f} s, "
        f"of which {own['cpu_s']:.3f} s of CPU in the router process; forked from the fork "
        f"server {forked['wall_s']:.3f} s, {forked['cpu_s']:.3f} s of CPU.",
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs",
        default=DEFAULT_RUNS,
        help="MODE:NODES[xRUNS],... (default %(default)s); '' writes the table again from "
        "the rows in the docs, measuring nothing",
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each size without xRUNS (default 1)"
    )
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of traffic")
    parser.add_argument(
        "--routers-per-process", type=int, default=100, help="in the shared modes (default 100)"
    )
    parser.add_argument("--out", type=Path, default=Path(".gnutella-router/bench-testnet"))
    parser.add_argument("--no-docs", action="store_true", help="print only")
    parser.add_argument(
        "--no-start-cost", action="store_true", help="skip measuring what one start costs"
    )
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be 1 or more")
    specs = []
    for spec in filter(None, args.runs.split(",")):
        mode, _, size = spec.partition(":")
        count, _, times = size.partition("x")
        if mode not in MODES or not count.isdigit() or not (times or "1").isdigit():
            parser.error(
                f"--runs: {spec!r} is not MODE:NODES[xRUNS] with MODE one of {', '.join(MODES)}"
            )
        specs.append((mode, int(count), int(times) if times else args.repeat))
    costs = None
    if specs and not args.no_start_cost:
        costs = start_costs(args.out / "start-cost")
        print(json.dumps({"start_cost": costs}), flush=True)
    rows = []
    for mode, count, times in specs:
        for attempt in range(1, times + 1):
            row = one_run(mode, count, args.duration, args.out, args.routers_per_process, attempt)
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "tail"}), flush=True)
            if row["exit"] != 0 or row["left_behind"]:
                print("\n".join(row["tail"]), flush=True)
    new = [table_row(r) for r in rows]
    replaced = {(r["mode"], f"{r['nodes']:,}", str(r["attempt"])) for r in rows}
    table = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
        *sorted([*kept_rows(replaced), *new], key=order),
    ]
    floors = floor_lines(table[2:])
    judged = verdicts(table[2:])
    print("\n".join([*table, "", *judged, "", *floors]))
    if not args.no_docs:
        lines = [
            "## Test network scale (`scripts/bench_testnet.py`)",
            "",
            f"Measured {newest_measured(table[2:])} (the newest row; each row names the day, "
            "commit and load average it was measured at, the machine being shared, and its "
            f"seconds of traffic) on {machine()}. Each row is one `gnutella-router testnet` "
            "with the default traffic (paper mix, 200 messages/s, random topology of degree "
            "1 plus the ring); run: the repetition of that mode and size. Modes: "
            "`in-process` (every router in the testnet's process), `processes` (a process "
            "per router, forked from the fork server), `netns` (the same, each in a network "
            "namespace with an address of its own), `shared` (`--routers-per-process K`, K "
            "routers to a process) and `shared-netns` (the same, each router's sockets in its "
            "own namespace, so each keeps an address of its own); a mode marked `(an "
            "interpreter each)` was measured before routers were forked, each starting "
            "a Python of its own. All started: from the "
            "run's start (namespaces made first) until every node listened. Formed in: every "
            "planned link up, from the same origin. RSS per node: in one process, the "
            "process's peak divided by the nodes; a process per router, the median of their "
            "peaks; shared, the sum of the host processes' peaks divided by the nodes. All "
            "nodes' RSS: the sum of the router processes' peaks (taken at different moments, "
            "and every page they share counted once per process, so an upper bound); PSS (a "
            "page shared by N processes counts 1/N in each; the fork server included) is the "
            "peak of their sum, what they took of the machine; the controller (testnet's "
            "process with the load client and the GWebCache) beside it. Routed msgs/s: "
            "messages all routers received per second of traffic (every copy of a flood "
            "counts at every node it reaches). Copies lost: of every copy owed to the load "
            "client's sinks, pings and queries, those that never came; not arrived: the "
            "same, pings and queries apart. One-hop query latency: from a query's scheduled "
            "send to its copy at node 0's sink (through the one router the injector talks "
            "to); where the machine cannot keep up (the load client shares it with every "
            "router), it grows. Stopped in: from the first Bye to the last router's exit. "
            "Left behind: processes, namespaces and links of the run still there after it "
            "(checked by the script). A dash: not measured by the form of the script the row "
            "was measured with. Rerun with `.venv/bin/python scripts/bench_testnet.py` (as "
            "root for the namespace modes), or `--runs shared-netns:1000` for one row, "
            "`--runs processes:200x3` for three; a run replaces its own rows only.",
            "",
            *table,
            "",
            *judged,
            *(["", *floors] if floors else []),
            "",
            *start_cost_lines(costs),
        ]
        print(f"written to {replace_section(SECTION, lines)}")
    return 0 if all(r["exit"] == 0 and not r["left_behind"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
