"""``gnutella-router testnet``: a local test network, loaded, summarised and shut down."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from functools import partial
from pathlib import Path

import trio

from gnutella_router.cli.arguments import add_random_seed, option_values
from gnutella_router.cli.interrupt import INTERRUPTED
from gnutella_router.config import ConfigError, parse_host_port
from gnutella_router.lab.testnet.churn import ChurnSettings
from gnutella_router.lab.testnet.emulated_links import parse_delay
from gnutella_router.lab.testnet.leaves import LeafSettings
from gnutella_router.lab.testnet.settings import (
    AUTO_PROCESSES_ABOVE,
    ON_NODE_FAILURE,
    SERVENT_START_TIMEOUT,
    NetworkSettings,
)
from gnutella_router.lab.testnet.topology import TOPOLOGIES, load_topology
from gnutella_router.run_folder import Manifest, RunFolderError, start_run

_AS_GIVEN = (
    "topology_file",
    "topology",
    "degree",
    "traffic",
    "rate",
    "arrivals",
    "duration",
    "base_port",
    "form_timeout",
    "mode",
    "routers_per_process",
    "netns",
    "servent",
    "servents",
    "servent_timeout",
    "on_node_failure",
    "console_script",
)
"""The options that set the `NetworkSettings` field of their own name, value as parsed;
:func:`cmd_testnet` works out the other fields."""


def add_testnet_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    testnet = commands.add_parser(
        "testnet",
        help="run a local test network of routers, drive traffic through it, collect results",
        description=(
            "Start NODES routers on loopback, in this process or one OS process each, link "
            "them in the chosen topology (bootstrapped from a local GWebCache), wait until "
            "every link is up, "
            "drive synthetic traffic through them with the load client, print a live "
            "status line and a final summary, write the results folder, and stop every "
            "router with Bye. Ctrl-C stops early (exit 130, results still written); a "
            "second Ctrl-C stops at once. SIGUSR1 writes a dump of every node into its "
            "node-* folder. Each run writes a new folder (.gnutella-router/runs/testnet-DATE-"
            "TIME, or --out) with a manifest.json saying what ran, where and when; "
            "`gnutella-router runs` lists and compares them. "
            "No router process outlives the run: children are stopped on every exit path "
            "and, on Linux, get SIGHUP (a graceful stop) from the kernel if the testnet "
            "itself is killed."
        ),
    )
    testnet.add_argument(
        "--nodes",
        type=int,
        default=None,
        metavar="N",
        help="routers (default 5, or as many as --topology-file has; at most 500 in one "
        "process, 300 as processes, 2000 with --routers-per-process, 1023 with --netns)",
    )
    mode = testnet.add_mutually_exclusive_group()
    mode.add_argument(
        "--processes",
        dest="mode",
        action="store_const",
        const="processes",
        help="run every node as its own 'gnutella-router run' process, with its config, "
        "log and state in its node-I folder (default above "
        f"{AUTO_PROCESSES_ABOVE} nodes)",
    )
    mode.add_argument(
        "--in-process",
        dest="mode",
        action="store_const",
        const="in-process",
        help=f"run every node in this process (default up to {AUTO_PROCESSES_ABOVE} nodes)",
    )
    mode.add_argument(
        "--routers-per-process",
        type=int,
        default=None,
        metavar="K",
        help="run the routers K to an OS process (about 2 MiB a router instead of a "
        "process's 43 MiB); with --netns each still has an address of its own, its sockets "
        "made in its own namespace; each node's config is in its node-I folder and each "
        "process's log in host-J.log",
    )
    testnet.set_defaults(mode="auto")
    testnet.add_argument(
        "--netns",
        action="store_true",
        help="Linux, as root: every node in a network namespace of its own with its own "
        "address on a private bridge (a /16 of 10.64.0.0/10); namespaces, veths and "
        "bridge are named grtXXXX* and removed when the run ends (implies --processes "
        "unless --routers-per-process is given)",
    )
    testnet.add_argument(
        "--cleanup",
        action="store_true",
        help="remove what killed --netns runs left (namespaces named grtXXXX-n*, the "
        "processes in them, their bridges and veths; a run whose controller still runs "
        "is left alone), then exit",
    )
    testnet.add_argument(
        "--on-node-failure",
        choices=ON_NODE_FAILURE,
        default="stop",
        help="when a node process dies (reported with its exit status and last log "
        "lines): stop the run, or continue without it (default stop)",
    )
    testnet.add_argument(
        "--servent",
        metavar="COMMAND",
        help="a foreign servent to link in (gtk-gnutella, or anything that speaks 0.6): "
        "a command line in which {port} is where it must listen, {dir} a folder of its "
        "own and {host} its address. The command runs in the foreground (its output goes "
        "to {dir}/router.log), must accept connections on {host}:{port} within "
        "--servent-timeout seconds, and must stop, taking its servent with it, on SIGTERM "
        "(after 10 s, or when it does not start, everything in its process group is "
        "killed). scripts/gtk-servent.sh is such a wrapper for gtk-gnutella: "
        "--servent 'scripts/gtk-servent.sh {port} {dir} {host}' (docs/interop.md). Each "
        "servent is dialled by 2 routers and reported from their side",
    )
    testnet.add_argument(
        "--servent-timeout",
        type=float,
        default=SERVENT_START_TIMEOUT,
        metavar="S",
        help=f"seconds a servent has to listen (default {SERVENT_START_TIMEOUT:g})",
    )
    testnet.add_argument(
        "--servents",
        type=int,
        default=0,
        metavar="N",
        help="how many --servent processes to start (default 1 with --servent)",
    )
    testnet.add_argument(
        "--churn",
        metavar="UP:DOWN",
        help="nodes leave and come back: sessions and absences drawn from exponential "
        "distributions with these mean seconds (e.g. 30:10), seeded by --random-seed; "
        "node 0 and the nodes with sinks stay up (implies --processes)",
    )
    testnet.add_argument(
        "--churn-kill",
        action="store_true",
        help="churned nodes leave with SIGKILL, as crashed hosts, instead of saying Bye",
    )
    testnet.add_argument(
        "--leaves",
        type=int,
        default=0,
        metavar="N",
        help="N leaf servents (in this process) spread over the ultrapeers: each shares "
        "--leaf-files files named from the traffic model's Zipf vocabulary, publishes "
        "their QRP table, searches every --leaf-query-interval seconds and answers what "
        "matches; the report gives the query success rate (and what an oracle would "
        "find) and messages per query (default 0)",
    )
    testnet.add_argument(
        "--leaf-files",
        type=int,
        default=LeafSettings().files,
        metavar="N",
        help=f"files each leaf shares (default {LeafSettings().files})",
    )
    testnet.add_argument(
        "--leaf-query-interval",
        type=float,
        default=LeafSettings().query_interval,
        metavar="SECONDS",
        help=f"seconds between one leaf's queries (default {LeafSettings().query_interval:g})",
    )
    testnet.add_argument(
        "--topology",
        choices=TOPOLOGIES,
        default="random",
        help="random: a ring plus --degree random links per node; ring: each node dials "
        "the next; star: every node dials node 0; power-law: Barabasi-Albert, each node "
        "attaching to --degree + 1 earlier ones (hubs, as in measured Gnutella "
        "overlays); two-tier: one node in five an ultrapeer (a ring plus --degree random "
        "links each), the others leaves linked with 2 ultrapeers (default random)",
    )
    testnet.add_argument(
        "--topology-file",
        type=Path,
        metavar="FILE",
        help="the planned graph from a file instead: an edge list (two node names per "
        "line, # comments) or GraphML (.graphml); it must be connected",
    )
    testnet.add_argument(
        "--link-delay",
        metavar="MS[,JITTER]",
        help="every planned link's one-way delay in milliseconds, give or take JITTER: "
        "by netem where the kernel has it (with --netns), else by the routers holding "
        "their writes ([emulation], shown in their /stats); a GraphML topology file's "
        "own delay/jitter edge attributes win (default none)",
    )
    testnet.add_argument(
        "--link-bandwidth",
        type=float,
        metavar="KBPS",
        help="every planned link's rate each way in kbit/s, shaped with tc's tbf in the "
        "nodes' namespaces (needs --netns); a GraphML topology file's own bandwidth "
        "(kbit/s) or LinkSpeedRaw (bit/s) edge attributes win (default none)",
    )
    testnet.add_argument(
        "--degree",
        type=int,
        default=1,
        metavar="D",
        help="random and two-tier: random links per node besides the ring; power-law: "
        "links per new node minus one (default 1)",
    )
    testnet.add_argument(
        "--traffic",
        default="paper",
        metavar="MODEL",
        help="message mix: 'paper' (15%% queries), 'trace', 'queries-only', or a mix file "
        "(default paper)",
    )
    rate = testnet.add_mutually_exclusive_group()
    rate.add_argument(
        "--rate", type=float, default=200.0, metavar="R", help="messages/s (default 200)"
    )
    rate.add_argument(
        "--arrivals",
        metavar="SPEC",
        help="arrival process instead of a constant rate: poisson:R, bursts:NxDms, "
        "steps:10s@100,10s@1000, ramp:30s@100-1000",
    )
    testnet.add_argument(
        "--duration",
        type=float,
        default=20.0,
        metavar="S",
        help="seconds of traffic; 0 forms the network and keeps it up until Ctrl-C (default 20)",
    )
    testnet.add_argument(
        "--console",
        action="store_true",
        help="once the network has formed, open the console on it (gnutella-router "
        "console: nodes, links, reach, pingall, link and node down/up, tables) instead of "
        "driving traffic; leaving the console stops the network (--duration is not used)",
    )
    testnet.add_argument(
        "--console-script",
        type=Path,
        default=None,
        metavar="FILE",
        help="with --console: run the console's commands from FILE instead of a terminal; "
        "a command that fails ends the run with exit status 1",
    )
    testnet.add_argument(
        "--seed",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="an outside servent (e.g. gtk-gnutella on loopback) every node also dials; repeatable",
    )
    testnet.add_argument(
        "--out",
        "--results",
        dest="out",
        type=Path,
        metavar="DIR",
        help="the run's folder, for summary.json, the CSV files, pictures and node-I "
        "folders (default: a new one, .gnutella-router/runs/testnet-DATE-TIME); refused if "
        "it holds anything, unless --overwrite",
    )
    testnet.add_argument(
        "--overwrite",
        action="store_true",
        help="let --out replace the earlier run it holds (never other files)",
    )
    testnet.add_argument(
        "--base-port",
        type=int,
        default=None,
        metavar="P",
        help="node I listens on 127.0.0.1:P+I (default: ports the system picks)",
    )
    add_random_seed(
        testnet,
        "the random topology, the traffic, churn, servent links and leaves",
        old="--seed-value",
    )
    testnet.add_argument(
        "--form-timeout",
        type=float,
        default=None,
        metavar="S",
        help="seconds to wait, once every node has started, for every planned link to come "
        "up (default 30 s plus 1 s per 10 nodes)",
    )
    testnet.add_argument(
        "--log-format",
        choices=("auto", "console", "json"),
        default="auto",
        help="format of the routers' warnings (default auto)",
    )
    testnet.set_defaults(handler=cmd_testnet)


def cmd_testnet(args: argparse.Namespace) -> int:
    # Imported here, not above: every other command (a router above all, run many
    # times over in a test network) would otherwise carry the test network's weight.
    from gnutella_router.lab.testnet import namespaces
    from gnutella_router.lab.testnet.network import run_network
    from gnutella_router.logs import configure_logging

    if args.cleanup:
        return _cleanup()
    if args.netns:
        try:
            namespaces.check_available()
        except namespaces.NamespaceError as exc:
            print(f"gnutella-router testnet: {exc}", file=sys.stderr)
            return 2
    try:
        delay, jitter = (0.0, 0.0) if args.link_delay is None else parse_delay(args.link_delay)
        nodes = 5 if args.nodes is None else args.nodes
        if args.topology_file is not None and args.nodes is None:
            nodes = load_topology(args.topology_file).nodes
        for seed in args.seed:
            parse_host_port(seed, key="--seed", allow_port_zero=False)
        settings = NetworkSettings(
            **option_values(args, _AS_GIVEN),
            nodes=nodes,
            seeds=tuple(args.seed),
            seed=args.random_seed,
            churn=None
            if args.churn is None
            else ChurnSettings.parse(args.churn, kill=args.churn_kill),
            link_delay_ms=delay,
            link_jitter_ms=jitter,
            link_bandwidth_kbps=args.link_bandwidth,
            console=args.console or args.console_script is not None,
            leaves=None
            if not args.leaves
            else LeafSettings(
                args.leaves,
                files=args.leaf_files,
                query_interval=args.leaf_query_interval,
                seed=args.random_seed,
            ),
        )
        kept = _keep(args, settings)
        settings = dataclasses.replace(settings, results=kept.folder)
    except (ConfigError, ValueError, RunFolderError) as exc:
        print(f"gnutella-router testnet: {exc}", file=sys.stderr)
        return 2
    # Warnings only: the terminal is for the network's status, not the routers' logs.
    configure_logging(args.log_format, "warning")
    try:
        outcome = trio.run(partial(run_network, settings, handle_signals=True))
    except KeyboardInterrupt:
        kept.finish("interrupted")
        print("gnutella-router testnet: interrupted", file=sys.stderr)
        return INTERRUPTED
    if outcome.interrupted:
        kept.finish("interrupted")
        return INTERRUPTED
    kept.finish("ok" if outcome.ok else "failed")
    return 0 if outcome.ok else 1


def _keep(args: argparse.Namespace, settings: NetworkSettings) -> Manifest:
    """The run's folder and manifest (the settings as the run resolves them)."""
    configuration = {
        **settings.describe(),
        "mode": settings.node_mode,
        "formation_timeout": settings.formation_timeout,
        "topology_file": None if settings.topology_file is None else str(settings.topology_file),
    }
    return start_run(
        "testnet",
        configuration,
        command=args.command_line,
        out=args.out,
        overwrite=args.overwrite,
        seed=settings.seed,
        notice=lambda text: print(f"gnutella-router testnet: {text}", file=sys.stderr),
    )


def _cleanup() -> int:
    """``--cleanup``: remove a killed run's namespaces and links; 0 when none is left."""
    from gnutella_router.lab.testnet import namespaces

    try:
        removed, problems, kept = namespaces.remove_leftovers()
    except namespaces.NamespaceError as exc:
        print(f"gnutella-router testnet --cleanup: {exc}", file=sys.stderr)
        return 2
    for thing in removed:
        print(f"removed {thing}")
    for run in kept:
        print(f"left alone: {run}")
    for problem in problems:
        print(f"gnutella-router testnet --cleanup: {problem}", file=sys.stderr)
    if not removed and not problems:
        print("nothing to clean up: no killed run's namespaces or links are left")
    return 1 if problems else 0
