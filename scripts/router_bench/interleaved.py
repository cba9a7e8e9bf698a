"""Several servers under the same flood, their runs interleaved: the side-by-side method
of ``scripts/bench_query_flood.py`` and ``scripts/bench_deflate.py``, and two versions of the
router under the same loads (``scripts/bench_compiled.py``, ``scripts/bench_commits.py``).

Each server is started once, on its own free loopback port; then run after run goes to
each in turn, so a machine that gets busier during the benchmark slows every server
alike and the ratios between them hold. Every run is printed as it ends.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import trio

from scripts.router_bench.peers import (
    BLAST_MESSAGES,
    PEER_KINDS,
    SINKS,
    Blast,
    Wire,
    message_kinds,
    use_peers,
)
from scripts.router_bench.replies import Answers, LeafPlan
from scripts.router_bench.report import cpu_per_message
from scripts.router_bench.runs import ThroughputRun, attempt, median_of, throughput_run
from scripts.router_bench.servers import Problems, describe_cpu, stop_server
from scripts.runner import Server, free_port, started

ServerCommand = Callable[[int, Path], list[str]]
"""A server's command line, given its port and a folder of its own."""


def parse_flood_args(
    argv: Sequence[str] | None,
    description: str | None,
    what: str = "server",
    more: Callable[[argparse.ArgumentParser], object] | None = None,
) -> argparse.Namespace:
    """``--repeats``, ``--duration``, ``--warmup`` and ``--write``, checked, and what
    ``more`` adds."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--repeats", type=int, default=5, metavar="N", help=f"runs per {what} (5)")
    parser.add_argument(
        "--duration", type=float, default=3.0, metavar="SECONDS", help="window (3 s)"
    )
    parser.add_argument(
        "--warmup", type=float, default=1.0, metavar="SECONDS", help="before each window (1 s)"
    )
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument(
        "--peers",
        choices=sorted(PEER_KINDS),
        default="gtk-like",
        help="the handshake the peers send: gtk-gnutella 1.2.3's (Pong-Caching, GGEP, "
        "Vendor-Message, X-Max-TTL ...) or a bare ultrapeer's (gtk-like)",
    )
    if more is not None:
        more(parser)
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.duration <= 0 or args.warmup < 0:
        parser.error("--repeats and --duration must be positive, --warmup not negative")
    use_peers(args.peers)
    return args


def interleaved_runs(
    commands: Mapping[str, ServerCommand],
    *,
    wire: Wire,
    blast: Blast,
    args: argparse.Namespace,
    sinks: int,
    problems: Problems,
    unit: tuple[str, str] = ("msgs", "message"),
    deflate_sinks: bool = False,
    answers: Answers | None = None,
    leaves: LeafPlan | None = None,
    serving_leaves: Collection[str] = (),
    started_servers: Callable[[Mapping[str, int]], None] | None = None,
) -> dict[str, list[ThroughputRun]]:
    """``args.repeats`` throughput runs of every server, interleaved, by server name
    (``unit``: what a message is called in the printout, plural and singular). With
    ``answers`` the sinks answer the marked messages; with ``leaves`` leaves connect to
    each server, and those named in ``serving_leaves`` must pass the probe to the
    matching ones. ``started_servers`` is told each server's process id once all run."""
    runs: dict[str, list[ThroughputRun]] = {name: [] for name in commands}
    with (
        tempfile.TemporaryDirectory(prefix="bench-interleaved-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        workdir = Path(tmp)
        servers: list[tuple[str, Server]] = []
        for index, (name, command) in enumerate(commands.items()):
            port = free_port()
            home = workdir / f"server-{index}"
            home.mkdir()
            servers.append(
                (name, stack.enter_context(started(name, command(port, home), port, workdir)))
            )
        if started_servers is not None:
            started_servers({name: server.pid for name, server in servers})
        for rep in range(1, args.repeats + 1):
            for name, server in servers:
                what = f"{name}, run {rep}"
                flood = partial(
                    throughput_run,
                    deflate_sinks=deflate_sinks,
                    answers=answers,
                    leaves=leaves,
                    leaves_served=name in serving_leaves,
                )
                run = attempt(
                    problems,
                    what,
                    partial(trio.run, flood, server.address, server.pid, wire, blast, args, sinks),
                )
                if run is None:
                    continue
                runs[name].append(run)
                cost = cpu_per_message(run)
                extra = ""
                if answers is not None:
                    extra += (
                        f", replies {run.replies_sent:,.0f}/s sent, "
                        f"{run.replies_back:,.0f}/s routed back"
                    )
                if run.per_matching_leaf is not None:
                    extra += f", {run.per_matching_leaf:,.0f}/s per matching leaf"
                print(
                    f"  {what}: {run.per_sink:,.0f} {unit[0]}/s per sink, source "
                    f"{run.accepted:,.0f}/s{extra}, "
                    f"{'n/a' if cost is None else f'{cost:.2f}'} µs of server CPU per "
                    f"{unit[1]}; {describe_cpu(run.cpu)}",
                    flush=True,
                )
        for _, server in servers:
            stop_server(server, problems)
    return runs


def rates_and_costs(
    runs: Mapping[str, Sequence[ThroughputRun]],
) -> tuple[dict[str, float | None], dict[str, float | None]]:
    """Each server's median messages per sink and median µs of its CPU per message (None
    where no run measured it), the two figures every interleaved benchmark reports."""
    rates = {
        name: median_of(server_runs, lambda r: r.per_sink) for name, server_runs in runs.items()
    }
    costs = {name: median_of(server_runs, cpu_per_message) for name, server_runs in runs.items()}
    return rates, costs


LOADS = (
    ("mixed flood (85 % pings, 15 % queries), 3 sinks", 0.15, SINKS),
    ("query flood, 2 sinks", 1.0, 2),
)
"""Each load: its name, the share of queries and the number of sinks."""


@dataclass(frozen=True)
class SideBySide:
    """Two routers under one load: the first's and the second's median messages per
    sink and µs of CPU per message (None where no run gave a figure)."""

    load: str
    before: float | None
    after: float | None
    costs: tuple[float | None, float | None]

    @property
    def ratio(self) -> str:
        """The second's messages per sink over the first's."""
        return f"{self.after / self.before:.2f}x" if self.before and self.after else "n/a"

    @property
    def cost_change(self) -> str:
        """µs of CPU per message, first -> second."""
        return " -> ".join("n/a" if cost is None else f"{cost:.2f}" for cost in self.costs)


def side_by_side(
    commands: Mapping[str, ServerCommand],
    loads: Sequence[tuple[str, float, int]],
    args: argparse.Namespace,
    problems: Problems,
) -> list[SideBySide]:
    """The two routers of ``commands`` (before, then after) under each of ``loads`` (as
    in :data:`LOADS`), their runs interleaved. Raises BenchError when it cannot."""
    first, second = commands
    compared = []
    for load_name, query_share, sinks in loads:
        wire = Wire.build()
        blast = Blast(wire, message_kinds(BLAST_MESSAGES, query_share, 1))
        print(f"\n{load_name}; {args.repeats} runs per router")
        runs = interleaved_runs(
            commands, wire=wire, blast=blast, args=args, sinks=sinks, problems=problems
        )
        rates, costs = rates_and_costs(runs)
        compared.append(
            SideBySide(load_name, rates[first], rates[second], (costs[first], costs[second]))
        )
    return compared
