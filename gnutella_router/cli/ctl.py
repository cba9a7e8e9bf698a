"""``gnutella-router ctl``: change a running router through its admin interface.

    gnutella-router ctl peers add 127.0.0.1:6348
    gnutella-router ctl peers drop 7            (a connection id, or HOST:PORT)
    gnutella-router ctl log-level debug
    gnutella-router ctl profiler start|stop

Each is one POST (see :mod:`gnutella_router.observe.admin_control`), which needs the
router's admin token: ``--token`` or ``$GNUTELLA_ADMIN_TOKEN``. Exit status 0 when the
router did it, 1 when it refused or could not be reached (the reason on stderr), 2 for
bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys

from gnutella_router.cli.arguments import DefaultsHelpFormatter, admin_address
from gnutella_router.cli.dump import DEFAULT_ADMIN
from gnutella_router.logs import LOG_LEVELS
from gnutella_router.observe.admin_client import TOKEN_ENVIRONMENT, FetchError, post, token_from


def add_ctl_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ctl = commands.add_parser(
        "ctl",
        help="change a running router: add or drop peers, log level, profiler",
        description="Change a running router through its admin interface (needs its "
        f"admin token: --token or ${TOKEN_ENVIRONMENT}).",
        formatter_class=DefaultsHelpFormatter,
    )
    ctl.add_argument(
        "--admin",
        type=admin_address,
        default=DEFAULT_ADMIN,
        metavar="HOST:PORT",
        help="the router's admin interface",
    )
    ctl.add_argument("--token", help=f"the admin token (default: ${TOKEN_ENVIRONMENT})")
    ctl.add_argument("--timeout", type=float, default=30.0, help="seconds to wait")
    actions = ctl.add_subparsers(dest="action", required=True)
    peers = actions.add_parser("peers", help="add or drop a peer")
    peers.add_argument("change", choices=("add", "drop"))
    peers.add_argument("peer", help="add: HOST:PORT; drop: a connection id or HOST:PORT")
    level = actions.add_parser("log-level", help="change the log level now")
    level.add_argument("level", choices=tuple(LOG_LEVELS))
    profiler = actions.add_parser("profiler", help="start or stop the profiler")
    profiler.add_argument("change", choices=("start", "stop"))
    ctl.set_defaults(handler=cmd_ctl)


def request_for(args: argparse.Namespace) -> tuple[str, dict[str, object]]:
    """The control endpoint and body that carry out ``args``."""
    if args.action == "log-level":
        return "/log-level", {"level": args.level}
    if args.action == "profiler":
        return "/profiler", {"action": args.change}
    if args.change == "add":
        return "/peers/add", {"address": args.peer}
    if args.peer.isdigit():
        return "/peers/drop", {"connection": int(args.peer)}
    return "/peers/drop", {"address": args.peer}


def cmd_ctl(args: argparse.Namespace) -> int:
    path, body = request_for(args)
    token = token_from(args.token)
    try:
        answer = post(args.admin, path, body, token=token, timeout=args.timeout)
    except FetchError as exc:
        print(f"gnutella-router ctl: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(answer))
    return 0
