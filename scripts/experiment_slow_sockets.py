"""Protection from slow sockets (SEDA quals proposal, Fig. 14; SOSP'01 section 5.2.2).

Run from the repository root, in the project's virtual environment (unattended; the
default takes about 4 minutes):

    .venv/bin/python scripts/experiment_slow_sockets.py             # 60 s runs, print the table
    .venv/bin/python scripts/experiment_slow_sockets.py --write     # docs/experiments.md, figures
    .venv/bin/python scripts/experiment_slow_sockets.py --quick     # 15 s runs, a smoke test

What is run. Three runs of the same setup, one per slow-peer setting of the router:

1. ``slow_peer.policy = "threshold"`` with ``threshold_grace = 0``, the paper's policy
   (close a connection as soon as its outgoing queue passes ``threshold_messages``,
   2,000 by default);
2. the threshold lifted (``unbounded_experiment = true``, ``threshold_messages = 0``):
   the prototype's unbounded queues;
3. ``slow_peer.policy = "flow-control"`` with its defaults except
   ``flow_control_timeout`` (``--flow-control-timeout``, 30 s instead of 180 s), so that
   its Bye 405 falls inside the run.

Each run starts a fresh router as a child process on a free loopback port (generated
configuration: the setting above, the admin interface on its own free port, the
profiler on at 0.5 s). This process then connects one *slow peer* itself -- a 0.6
handshake as an ultrapeer announcing Bye-Packet, with ``SO_RCVBUF`` set to 4096 bytes
before connecting so that the router's queue, not kernel buffers, is what fills -- which
reads 360 bytes every 100 ms (3,600 bytes/s: a 28.8 kbit/s modem). Then the load client
(:class:`gnutella_router.lab.traffic.load.LoadRun`: one injector, two healthy sinks) offers the
paper's mix (85 % pings, 15 % queries) at ``--rate`` messages/s (800 by default; the
paper's router was processing over 624) for ``--duration`` seconds. The router
broadcasts every ping and query to the slow peer too, about 30 kB/s, far beyond what it
reads.

Sampled every 0.5 s from the start of the load: the router's resident set (``VmRSS``
from /proc/PID/status) and the slow peer's outgoing queue as the router sees it
(messages and bytes, from the admin interface's ``GET /connections``; the slow peer is
told apart by its User-Agent). When the slow peer is closed is taken from the router's
JSON log line "connection closed" (reason, Bye code sent); the slow peer also notes
when its own reads end (EOF or error: later, since it drains what the kernel still
holds at modem speed). The load client's report gives the healthy sinks' loss
(expected copies minus received) and one-hop latency p99.

Figures (``--write``, into docs/figures/): slow-sockets-rss.png (router RSS over time,
all three runs) and slow-sockets-queue.png (the slow peer's outgoing queue over time).
Raw results (per run: samples, router log, profiler export) stay in ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import shutil
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import trio

from gnutella_router.config.sections import SlowPeerConfig
from gnutella_router.lab.traffic.load import LoadError, LoadRun, LoadSettings, open_client_peer
from gnutella_router.observe.profiler import read_peak_rss_bytes, read_rss_bytes
from gnutella_router.run_folder import add_out_arguments, script_run
from protocol.constants import MessageType
from protocol.framing import FrameDecoder
from scripts.benchdocs import EXPERIMENTS_DOC, FIGURES, machine, replace_section, save_figure
from scripts.fig14.runs import ExperimentError, experiment_router
from scripts.runner import free_ports
from traffic_models.arrivals import ConstantRate
from traffic_models.generator import TrafficGenerator
from traffic_models.mix import PAPER_MIX

SECTION = "slow_sockets"
SLOW_AGENT = "slow-peer-28.8k/0.1"
READ_BYTES = 360
READ_EVERY = 0.1
RCVBUF = 4096
SAMPLE_EVERY = 0.5
POLICIES = ("threshold", "unbounded", "flow-control")
LABELS = {
    "threshold": f"threshold ({SlowPeerConfig().threshold_messages:,} messages)",
    "unbounded": "no threshold",
    "flow-control": "flow control",
}
COLORS = {"threshold": "tab:blue", "unbounded": "tab:red", "flow-control": "tab:green"}


# --- the router ----------------------------------------------------------------------


def router_config(policy: str, admin_port: int, fc_timeout: float) -> str:
    slow = {
        "threshold": 'policy = "threshold"\nthreshold_grace = 0\n',
        "unbounded": 'policy = "threshold"\nunbounded_experiment = true\nthreshold_messages = 0\n',
        "flow-control": f'policy = "flow-control"\nflow_control_timeout = {fc_timeout}\n',
    }[policy]
    return (
        f"[slow_peer]\n{slow}\n"
        f'[admin]\nlisten = "127.0.0.1:{admin_port}"\n\n'
        f"[profiler]\nenabled = true\ninterval = {SAMPLE_EVERY}\n"
    )


def admin_connections(admin_port: int) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{admin_port}/connections"
    with urllib.request.urlopen(url, timeout=5) as response:
        data = json.loads(response.read())
    return data if isinstance(data, list) else data.get("connections", [])


# --- the slow peer -------------------------------------------------------------------


class SlowPeer:
    """A 0.6 peer behind a 28.8 kbit/s modem: reads 360 bytes every 100 ms."""

    def __init__(self) -> None:
        self.stream: trio.SocketStream | None = None
        self.decoder = FrameDecoder()
        self.bytes_read = 0
        self.messages_read = 0
        self.bye_code: int | None = None
        self.ended_ns: int | None = None
        self.ended_how: str | None = None
        self.hung_up_ns: int | None = None

    async def connect(self, address: tuple[str, int]) -> None:
        try:
            peer = await open_client_peer(
                address, "slow peer", legacy=False, user_agent=SLOW_AGENT, receive_buffer=RCVBUF
            )
        except LoadError as exc:
            raise ExperimentError(str(exc)) from exc
        self.stream = peer.stream
        self._take(peer.leftover)

    def _take(self, data: bytes) -> None:
        if not data:  # b"" would tell the decoder the stream has ended
            return
        self.bytes_read += len(data)
        try:
            frames = self.decoder.receive_data(data)
        except Exception:  # a bad frame must not stop the reading
            return
        for frame in frames:
            self.messages_read += 1
            if frame.payload_type == MessageType.BYE and len(frame.payload) >= 2:
                self.bye_code = int.from_bytes(frame.payload[:2], "little")

    async def read_slowly(self) -> None:
        assert self.stream is not None
        next_read = trio.current_time()
        try:
            while True:
                data = await self.stream.receive_some(READ_BYTES)
                if not data:
                    self.ended_how = "EOF"
                    break
                self._take(data)
                next_read += READ_EVERY
                await trio.sleep_until(next_read)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self.ended_how = exc.__class__.__name__
        self.ended_ns = time.perf_counter_ns()

    async def close(self) -> None:
        self.hung_up_ns = time.perf_counter_ns()
        if self.stream is not None:
            with trio.move_on_after(0.5), contextlib.suppress(Exception):
                await self.stream.aclose()


async def sample_loop(
    pid: int, admin_port: int, samples: list[dict[str, Any]], slow: SlowPeer
) -> None:
    next_at = trio.current_time()
    while True:
        at_ns = time.perf_counter_ns()
        entry: dict[str, Any] = {"at_ns": at_ns, "rss": read_rss_bytes(pid)}
        try:
            connections = await trio.to_thread.run_sync(admin_connections, admin_port)
        except Exception as exc:  # a missed sample is noted, not fatal
            entry["error"] = str(exc)
        else:
            mine = [c for c in connections if c.get("user_agent") == SLOW_AGENT]
            if mine:
                out = mine[0]["outgoing"]
                entry.update(
                    present=True,
                    closing=bool(mine[0].get("closing")),
                    queue_messages=out["pending_messages"],
                    queue_bytes=out["pending_bytes"],
                    dropped=sum(n for k, n in out["dropped"].items() if k != "cleared"),
                    flow_control=bool(mine[0]["flow_control"]["active"]),
                )
            else:
                entry.update(present=False, queue_messages=0, queue_bytes=0)
        entry["slow_reading"] = slow.ended_ns is None
        samples.append(entry)
        next_at += SAMPLE_EVERY
        await trio.sleep_until(next_at)


async def drive(
    port: int, pid: int, admin_port: int, rate: int, duration: float
) -> tuple[Any, LoadRun, SlowPeer, list[dict[str, Any]], float]:
    slow = SlowPeer()
    await slow.connect(("127.0.0.1", port))
    with trio.fail_after(10):
        for _ in range(200):
            connections = await trio.to_thread.run_sync(admin_connections, admin_port)
            if any(c.get("user_agent") == SLOW_AGENT for c in connections):
                break
            await trio.sleep(0.05)
        else:
            raise ExperimentError("the router never listed the slow peer")
    settings = LoadSettings(target=("127.0.0.1", port), peers=3, injectors=1, duration=duration)
    load = LoadRun(settings, TrafficGenerator(mix=PAPER_MIX, arrivals=ConstantRate(rate), seed=1))
    samples: list[dict[str, Any]] = []
    wall_offset = time.time() - time.perf_counter()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow.read_slowly)
            nursery.start_soon(sample_loop, pid, admin_port, samples, slow)
            report = await load.run()
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await slow.close()
    return report, load, slow, samples, wall_offset


def slow_close_from_log(log_path: Path) -> dict[str, Any] | None:
    for line in log_path.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if entry.get("event") == "connection closed" and entry.get("user_agent") == SLOW_AGENT:
                return dict(entry)
    return None


def iso_to_epoch(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def one_run(
    policy: str, rate: int, duration: float, fc_timeout: float, out: Path
) -> dict[str, Any]:
    port, admin_port = free_ports(2)
    config = router_config(policy, admin_port, fc_timeout)
    with experiment_router(
        out / policy, config, port=port, admin_port=admin_port, wait_for_admin=True
    ) as router:
        report, load, slow, samples, wall_offset = trio.run(
            drive, port, router.pid, admin_port, rate, duration
        )
        peak_rss = read_peak_rss_bytes(router.pid)
        alive = router.alive()
    status = router.exit_status
    start_ns = load.started_ns
    start_wall = wall_offset + start_ns / 1e9
    series = [
        {**{k: v for k, v in s.items() if k != "at_ns"}, "t": (s["at_ns"] - start_ns) / 1e9}
        for s in samples
    ]
    closed = slow_close_from_log(router.log_path)
    closed_after = None
    hung_up_after = (slow.hung_up_ns - start_ns) / 1e9 if slow.hung_up_ns else None
    if closed is not None and "timestamp" in closed:
        closed_after = iso_to_epoch(str(closed["timestamp"])) - start_wall
        if hung_up_after is not None and closed_after >= hung_up_after - 0.05:
            # the router noticed our own hang-up at the end: not closed by the router
            closed_after = None
    profile_path = router.state / "profile.json"
    if profile_path.exists():
        shutil.copy(profile_path, out / f"profile-{policy}.json")
    during = [s for s in series if 0 <= s["t"] <= duration]
    rss = [s["rss"] for s in during if s["rss"]]
    queue = [s.get("queue_messages", 0) for s in during]
    one_hop = report.latency.get("one-hop", {})
    expected = sum(report.expected.values())
    received = sum(report.received.values())
    result = {
        "policy": policy,
        "rate": rate,
        "duration": duration,
        "flow_control_timeout": fc_timeout if policy == "flow-control" else None,
        "router_exit": status,
        "alive_at_end": alive,
        "sent": sum(report.sent.values()),
        "late": report.late,
        "expected": expected,
        "received": received,
        "loss": expected - received,
        "disconnected": report.disconnected,
        "p99_ms": {t: (one_hop[t].p99 / 1000 if t in one_hop else None) for t in ("ping", "query")},
        "slow_closed_after_s": closed_after,
        "slow_close_reason": closed.get("reason") if closed and closed_after is not None else None,
        "slow_bye_sent": closed.get("bye_sent") if closed and closed_after is not None else None,
        "slow_close_log": closed,
        "slow_hung_up_after_s": hung_up_after,
        "slow_dropped_while_connected": max(
            (s.get("dropped") or 0 for s in series if s.get("present")), default=0
        ),
        "slow_dropped_out": closed.get("dropped_out") if closed else None,
        "slow_messages_out": closed.get("messages_out") if closed else None,
        "slow_bytes_out": closed.get("bytes_out") if closed else None,
        "slow_read_bytes": slow.bytes_read,
        "slow_read_messages": slow.messages_read,
        "slow_bye_seen": slow.bye_code,
        "slow_reads_ended_after_s": (slow.ended_ns - start_ns) / 1e9 if slow.ended_ns else None,
        "slow_reads_ended_how": slow.ended_how,
        "rss_first_mib": rss[0] / 2**20 if rss else None,
        "rss_last_mib": rss[-1] / 2**20 if rss else None,
        "rss_peak_sampled_mib": max(rss) / 2**20 if rss else None,
        "peak_rss_mib": peak_rss / 2**20,
        "peak_queue_messages": max(queue, default=0),
        "peak_queue_bytes": max((s.get("queue_bytes", 0) for s in during), default=0),
        "samples": series,
    }
    (out / f"result-{policy}.json").write_text(json.dumps(result, indent=2, default=str))
    return result


# --- figures -------------------------------------------------------------------------


def plot(results: list[dict[str, Any]], key: str, ylabel: str, title: str, path: Path) -> Path:
    figure, axes = plt.subplots(figsize=(8, 4.5))
    for r in results:
        policy = r["policy"]
        points = [s for s in r["samples"] if key in s and s["t"] >= 0]
        scale = 2**20 if key == "rss" else 1
        axes.plot(
            [s["t"] for s in points],
            [s[key] / scale for s in points],
            color=COLORS[policy],
            label=LABELS[policy],
        )
        if r["slow_closed_after_s"] is not None:
            axes.axvline(r["slow_closed_after_s"], color=COLORS[policy], linestyle=":", alpha=0.8)
    axes.set_xlabel("time since the load started (s); dotted: slow peer closed by the router")
    axes.set_ylabel(ylabel)
    axes.set_ylim(bottom=0)  # growth is read against zero, not against the first sample
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend()
    return save_figure(figure, path)


# --- report --------------------------------------------------------------------------


def fmt(value: float | None, pattern: str, none: str = "-") -> str:
    return none if value is None else format(value, pattern)


def table(results: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| slow-peer setting | slow peer closed after | reason (Bye sent) "
        "| slow peer's peak queue, sampled (messages / bytes) | dropped for it while connected "
        "| RSS start -> end (MiB) | peak RSS (MiB) | healthy sinks: loss | p99 ping / query (ms) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        closed = r["slow_closed_after_s"]
        dropped_n = r["slow_dropped_while_connected"]
        lines.append(
            f"| {LABELS[r['policy']]} "
            f"| {fmt(closed, '.1f') + ' s' if closed is not None else 'not closed'} "
            f"| {r['slow_close_reason'] or '-'} ({r['slow_bye_sent'] or 'no Bye'}) "
            f"| {r['peak_queue_messages']:,} / {r['peak_queue_bytes']:,} "
            f"| {dropped_n:,} "
            f"| {fmt(r['rss_first_mib'], '.1f')} -> {fmt(r['rss_last_mib'], '.1f')} "
            f"| {r['peak_rss_mib']:.1f} "
            f"| {r['loss']:,} of {r['expected']:,} "
            f"| {fmt(r['p99_ms']['ping'], '.1f')} / {fmt(r['p99_ms']['query'], '.1f')} |"
        )
    return lines


def write_docs(
    results: list[dict[str, Any]], args: argparse.Namespace, figures: list[Path]
) -> None:
    date = datetime.date.today().isoformat()
    by = {r["policy"]: r for r in results}
    lines = [
        "## Protection from slow sockets (quals proposal Fig. 14, SOSP'01 section 5.2.2)",
        "",
        f"Measured {date} on {machine()}; `.venv/bin/python scripts/experiment_slow_sockets.py "
        f"--duration {args.duration:g} --rate {args.rate} --write`.",
        "",
        f"Three runs of {args.duration:g} s, each on a fresh router: the paper's mix (85 % "
        f"pings, 15 % queries) at {args.rate} messages/s from one injector to two healthy "
        "sinks (the load client), plus one slow peer that reads 360 bytes every 100 ms "
        "(3,600 bytes/s, a 28.8 kbit/s modem) with `SO_RCVBUF` = 4096. The router "
        "broadcasts every ping and query to the slow peer as well. Settings: `threshold` "
        "is the default policy (close above "
        f"{SlowPeerConfig().threshold_messages:,} queued messages); `no threshold` is "
        "`unbounded_experiment = true`, `threshold_messages = 0`; `flow control` is "
        f'`policy = "flow-control"` with its defaults except `flow_control_timeout = '
        f"{args.flow_control_timeout:g}` (180 s by default), so that its close falls "
        "inside the run. Router RSS (`VmRSS`) and the slow peer's outgoing queue (admin "
        "`GET /connections`) were sampled every 0.5 s; the close time and reason come "
        "from the router's `connection closed` log line; peak RSS is `VmHWM` at the end "
        "of the run. Loss is the healthy sinks' expected copies minus those received; "
        "p99 is one hop, client -> router -> sink. Peak queues are the maxima of the 0.5 s "
        "samples, so a queue that passed the threshold between two samples shows less.",
        "",
        *table(results),
        "",
        *(f"![{p.stem}](figures/{p.name})" for p in figures),
        "",
        *comparison(by),
    ]
    replace_section(SECTION, lines, path=EXPERIMENTS_DOC)


def comparison(by: dict[str, dict[str, Any]]) -> list[str]:
    """What the numbers say against the paper's account, from the numbers themselves."""
    text: list[str] = []
    t, u, f = by.get("threshold"), by.get("unbounded"), by.get("flow-control")
    if t is not None:
        closed = t["slow_closed_after_s"]
        text.append(
            "With the threshold, as in the paper's Fig. 14(b), the slow peer "
            + (
                f"was closed after {closed:.1f} s ({t['slow_close_reason']}) "
                if closed is not None
                else "was never closed "
            )
            + ("without a Bye " if closed is not None and not t["slow_bye_sent"] else "")
            + f"and the router's RSS went from {fmt(t['rss_first_mib'], '.1f')} to "
            f"{fmt(t['rss_last_mib'], '.1f')} MiB."
        )
    if u is not None:
        growth = (u["rss_last_mib"] or 0) - (u["rss_first_mib"] or 0)
        base = None if t is None else (t["rss_last_mib"] or 0) - (t["rss_first_mib"] or 0)
        text.append(
            f"Without it, the slow peer's queue grew steadily to {u['peak_queue_messages']:,} "
            f"messages ({u['peak_queue_bytes'] / 2**20:.1f} MiB of frames) in "
            f"{u['duration']:g} s and RSS grew by {growth:.1f} MiB"
            + (
                f", against {base:.1f} MiB with the threshold (growth with no backlog at "
                "all: the route tables filling, one entry per new GUID (one integer "
                "holding the next hop, the time, TTL and hops), capped at 50,000 "
                "entries per generation), "
                "so about "
                f"{growth - base:.1f} MiB is the slow peer's queue"
                if base is not None
                else ""
            )
            + ": the same unbounded growth as the paper's Fig. 14(a), though far from "
            "the paper's crash at this rate and length (there the heap filled up over hours)."
        )
    if f is not None:
        closed = f["slow_closed_after_s"]
        dropped_n = f["slow_dropped_while_connected"]
        flags = [bool(x.get("flow_control")) for x in f["samples"] if x.get("present")]
        entries = sum(1 for a, b in zip([False, *flags], flags, strict=False) if b and not a)
        text.append(
            "Flow control (not in the paper; gtk-gnutella's approach) kept the slow peer's "
            f"queue under {f['peak_queue_bytes']:,} bytes by dropping {dropped_n:,} "
            f"droppable messages for it over {entries} flow-control episodes"
            + (
                f", then closed it after {closed:.1f} s ({f['slow_close_reason']}, Bye "
                f"{f['slow_bye_sent']})."
                if closed is not None
                else "; it never sent Bye 405, because each episode ended (the queue fell "
                "below the leave mark once droppable traffic was shed) before "
                f"{f['flow_control_timeout']:g} s in flow control, so the slow peer stayed "
                "connected, receiving a thinned stream."
            )
        )
    losses = [r["loss"] for r in by.values()]
    text.append(
        "The healthy sinks "
        + (
            "received every copy in all three runs"
            if all(n == 0 for n in losses)
            else f"missed copies in some runs (loss {', '.join(str(n) for n in losses)})"
        )
        + ": one slow reader does not hold up the others."
    )
    return [" ".join(text)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per run (60)")
    parser.add_argument("--quick", action="store_true", help="15 s runs")
    parser.add_argument("--rate", type=int, default=800, help="offered load, messages/s (800)")
    parser.add_argument(
        "--flow-control-timeout",
        type=float,
        default=30.0,
        help="slow_peer.flow_control_timeout for the flow-control run (30 s)",
    )
    parser.add_argument("--policies", default=",".join(POLICIES), help="runs to make")
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
    args = parser.parse_args(argv)
    if args.quick:
        args.duration = 15.0
    policies = [p for p in args.policies.split(",") if p]
    if any(p not in POLICIES for p in policies):
        parser.error(f"--policies: choose from {', '.join(POLICIES)}")
    if args.from_results:
        out = args.from_results
        results = [
            json.loads((out / f"result-{p}.json").read_text())
            for p in policies
            if (out / f"result-{p}.json").exists()
        ]
        if results:
            args.duration, args.rate = results[0]["duration"], results[0]["rate"]
    else:
        out = script_run("experiment-slow-sockets", args)
        results = []
        for policy in policies:
            started = time.monotonic()
            r = one_run(policy, args.rate, args.duration, args.flow_control_timeout, out)
            results.append(r)
            print(
                f"{policy:>12}: slow peer closed after {fmt(r['slow_closed_after_s'], '.1f')} s "
                f"({r['slow_close_reason']}, Bye {r['slow_bye_sent']})  peak queue "
                f"{r['peak_queue_messages']:,} msgs  RSS {fmt(r['rss_first_mib'], '.1f')} -> "
                f"{fmt(r['rss_last_mib'], '.1f')} MiB (peak {r['peak_rss_mib']:.1f})  "
                f"loss {r['loss']} of {r['expected']}  [{time.monotonic() - started:.0f} s]",
                flush=True,
            )
    if not results:
        print("no results", file=sys.stderr)
        return 1
    print("\n".join(table(results)))
    # A smoke run must not replace the published figures: docs/ only with --write.
    figures_dir: Path = args.figures or (FIGURES if args.write else out)
    drawn = [
        plot(
            results,
            "rss",
            "router resident set (MiB)",
            f"Router RSS with a 28.8 kbit/s peer, {args.rate} messages/s",
            figures_dir / "slow-sockets-rss.png",
        ),
        plot(
            results,
            "queue_messages",
            "slow peer's outgoing queue (messages)",
            "The slow peer's outgoing queue in the router",
            figures_dir / "slow-sockets-queue.png",
        ),
    ]
    for path in drawn:
        print(path)
    print(*comparison({r["policy"]: r for r in results}))
    if args.write:
        write_docs(results, args, drawn)
        print(EXPERIMENTS_DOC)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
