"""``gnutella-router console``: a shell on a running test network, or on named routers.

    gnutella-router console                          the newest running test network kept
                                                     under .gnutella-router/runs
    gnutella-router console --network DIR            the one recorded in DIR (its network.json)
    gnutella-router console --admin 127.0.0.1:6347 --admin 127.0.0.1:6349
    gnutella-router console --script session.txt     the commands of a file, then exit

The console itself is :mod:`gnutella_router.lab.console`. Exit status: 0, or 1 when the
network cannot be found or a script's command fails, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gnutella_router.cli.arguments import admin_address, positive
from gnutella_router.observe.admin_client import TOKEN_ENVIRONMENT, token_from
from gnutella_router.run_folder import RUNS_ENVIRONMENT, runs_root


def add_console_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    console = commands.add_parser(
        "console",
        help="a shell on a running test network: nodes, links, reach, pingall, down/up",
        description=(
            "A shell on a running test network (found by the network.json its testnet "
            "writes into its results folder once formed) or on routers named by their "
            "admin addresses: list nodes and links; send a probe query or ping from a node "
            "and see which nodes got it, by how many hops and how many milliseconds later "
            "(reach, pingall); follow a GUID through the route tables; take a link or a "
            "node down and up; read what a node's admin interface shows and set its log "
            "level or profiler; print its tables. Tab completes, the history is kept "
            "between sessions; `help` lists the commands. Changes need the routers' admin "
            "token: a test network's record holds it."
        ),
    )
    where = console.add_mutually_exclusive_group()
    where.add_argument(
        "--network",
        type=Path,
        default=None,
        metavar="PATH",
        help="a test network's results folder or its network.json, or a folder of runs "
        "(the newest running one); default: the kept runs, .gnutella-router/runs or "
        f"${RUNS_ENVIRONMENT}",
    )
    where.add_argument(
        "--admin",
        type=admin_address,
        action="append",
        default=None,
        metavar="HOST:PORT",
        help="a router's admin interface instead of a test network; repeat for each "
        "router (they are named node-0, node-1, ... in this order)",
    )
    console.add_argument(
        "--token",
        default=None,
        help=f"the routers' admin token (default: the test network's, or ${TOKEN_ENVIRONMENT})",
    )
    console.add_argument(
        "--script",
        default=None,
        metavar="FILE",
        help="run the commands of FILE ('-': standard input), echoing each, then exit; "
        "the first that fails ends it with exit status 1 (commands piped in run so too)",
    )
    history = console.add_mutually_exclusive_group()
    history.add_argument(
        "--history",
        type=Path,
        default=None,
        metavar="FILE",
        help="where the command history is kept (default "
        "$XDG_STATE_HOME/gnutella-router/console_history)",
    )
    history.add_argument("--no-history", action="store_true", help="keep no history file")
    console.add_argument(
        "--timeout",
        type=positive,
        default=5.0,
        metavar="S",
        help="seconds to wait for one admin request (default 5)",
    )
    console.set_defaults(handler=cmd_console)


def cmd_console(args: argparse.Namespace) -> int:
    # Imported here: the other commands (a router above all) need none of it.
    from gnutella_router.lab.console.session import Session
    from gnutella_router.lab.console.shell import Shell, default_history, run_script
    from gnutella_router.lab.console.targets import ConsoleError, Network

    try:
        if args.admin:
            token = token_from(args.token)
            network = Network.from_admins(args.admin, token=token, timeout=args.timeout)
        else:
            network = Network.from_record(
                args.network or runs_root(), token=args.token, timeout=args.timeout
            )
    except ConsoleError as exc:
        print(f"gnutella-router console: {exc}", file=sys.stderr)
        return 1
    session = Session(network)
    if args.script is None and sys.stdin.isatty():
        names = network.names()
        shown = " ".join(names[:8]) + (" ..." if len(names) > 8 else "")
        greeting = (
            f"gnutella-router console on the {network.source}: {len(names)} "
            f"node{'s' * (len(names) != 1)} ({shown}). help lists the commands; Tab completes."
        )
        history = None if args.no_history else (args.history or default_history())
        return Shell(session, history=history).interact(greeting)
    if args.script in (None, "-"):
        return run_script(session, sys.stdin, out=sys.stdout, err=sys.stderr, name="stdin")
    try:
        with open(args.script, encoding="utf-8") as lines:
            return run_script(session, lines, out=sys.stdout, err=sys.stderr, name=args.script)
    except OSError as exc:
        print(f"gnutella-router console: {args.script}: {exc.strerror or exc}", file=sys.stderr)
        return 1
