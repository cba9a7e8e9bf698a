"""``gnutella-router ctl``: change a running router through its admin interface.

    gnutella-router ctl peers add 127.0.0.1:6348
    gnutella-router ctl peers drop 7            (a connection id, or HOST:PORT)
    gnutella-router ctl peers hold 127.0.0.1:6348 [--seconds 60]
    gnutella-router ctl peers release 127.0.0.1:6348
    gnutella-router ctl holds                   (the peers held down, and offline or not)
    gnutella-router ctl offline on|off
    gnutella-router ctl inject query 'free jazz' [--ttl 3]   (or: inject ping)
    gnutella-router ctl log-level debug
    gnutella-router ctl profiler start|stop
    gnutella-router ctl reload                  (read the configuration file again)

Each but ``holds`` is one POST (see :mod:`gnutella_router.observe.admin_control`), which
needs the router's admin token: ``--token`` or ``$GNUTELLA_ADMIN_TOKEN``; ``holds``
reads ``/holds``, which needs it once the router has one. The answer is printed as
JSON, but for ``reload``, which prints a line per setting applied and one naming those
that need a restart (``--json`` for the answer itself). Exit status 0 when the router
did it, 1 when it refused or could not be reached (the reason on stderr), 2 for bad
arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gnutella_router.cli.arguments import DefaultsHelpFormatter, admin_address
from gnutella_router.cli.dump import DEFAULT_ADMIN
from gnutella_router.logs import LOG_LEVELS
from gnutella_router.observe.admin_client import (
    TOKEN_ENVIRONMENT,
    FetchError,
    fetch,
    post,
    token_from,
)


def add_ctl_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ctl = commands.add_parser(
        "ctl",
        help="change a running router: peers, holds, offline, inject, log level, profiler, reload",
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
    peers = actions.add_parser(
        "peers",
        help="add, drop, hold down or release a peer",
        description="add: dial it now; drop: close it with Bye (not dialled again for "
        "catcher.drop_hold); hold: close it and neither dial nor accept it until "
        "released (or for --seconds); release: end its hold.",
    )
    peers.add_argument("change", choices=("add", "drop", "hold", "release"))
    peers.add_argument("peer", help="HOST:PORT; drop also takes a connection id")
    peers.add_argument(
        "--seconds", type=float, help="hold: for this long (default: until released)"
    )
    actions.add_parser("holds", help="the peers held down, and whether offline")
    offline = actions.add_parser(
        "offline",
        help="close every connection and accept and dial none (on), or come back (off)",
    )
    offline.add_argument("state", choices=("on", "off"))
    inject = actions.add_parser(
        "inject",
        help="send a ping or query of ours to the neighbours; prints its GUID",
    )
    inject.add_argument("kind", choices=("ping", "query"))
    inject.add_argument("text", nargs="?", help="the query's text (a query needs one)")
    inject.add_argument("--ttl", type=int, help="its TTL (default: network.max_ttl)")
    level = actions.add_parser("log-level", help="change the log level now")
    level.add_argument("level", choices=tuple(LOG_LEVELS))
    profiler = actions.add_parser("profiler", help="start or stop the profiler")
    profiler.add_argument("change", choices=("start", "stop"))
    reload = actions.add_parser(
        "reload",
        help="read the configuration file again (as SIGHUP does)",
        description="Read the router's configuration file again and apply the settings "
        "that can change while it runs; print them, and the settings that changed but "
        "need a restart.",
    )
    reload.add_argument("--json", action="store_true", help="print the answer as JSON")
    ctl.set_defaults(handler=cmd_ctl)


def request_for(args: argparse.Namespace) -> tuple[str, dict[str, object] | None]:
    """The endpoint and body that carry out ``args`` (no body: a GET)."""
    action = args.action
    if action == "log-level":
        return "/log-level", {"level": args.level}
    if action == "profiler":
        return "/profiler", {"action": args.change}
    if action == "reload":
        return "/reload", {}
    if action == "holds":
        return "/holds", None
    if action == "offline":
        return "/offline", {"offline": args.state == "on"}
    if action == "inject":
        body: dict[str, object] = {"type": args.kind}
        if args.text is not None:
            body["text"] = args.text
        if args.ttl is not None:
            body["ttl"] = args.ttl
        return "/inject", body
    if args.seconds is not None and args.change != "hold":
        raise ValueError("--seconds is for peers hold only")
    if args.change == "drop" and args.peer.isdigit():
        return "/peers/drop", {"connection": int(args.peer)}
    if args.change == "hold" and args.seconds is not None:
        return "/peers/hold", {"address": args.peer, "seconds": args.seconds}
    return f"/peers/{args.change}", {"address": args.peer}


def cmd_ctl(args: argparse.Namespace) -> int:
    try:
        path, body = request_for(args)
    except ValueError as exc:
        print(f"gnutella-router ctl: {exc}", file=sys.stderr)
        return 2
    token = token_from(args.token)
    try:
        if body is None:
            answer = fetch(args.admin, path, token=token, timeout=args.timeout)
        else:
            answer = post(args.admin, path, body, token=token, timeout=args.timeout)
    except FetchError as exc:
        print(f"gnutella-router ctl: {exc}", file=sys.stderr)
        return 1
    if args.action == "reload" and not args.json and isinstance(answer, dict):
        print("\n".join(reload_lines(answer)))
    else:
        print(json.dumps(answer))
    return 0


def reload_lines(answer: dict[str, Any]) -> list[str]:
    """``POST /reload``'s answer for a person: a line per setting applied, one naming
    the settings that need a restart."""
    applied = answer.get("applied") or {}
    restart = answer.get("needs_restart") or []
    lines = [
        f"applied: {key} = {_toml(change.get('to'))} (was {_toml(change.get('from'))})"
        for key, change in applied.items()
        if isinstance(change, dict)
    ]
    if restart:
        lines.append(f"needs a restart: {', '.join(map(str, restart))}")
    if not lines:
        lines.append("nothing changed")
    return lines


def _toml(value: object) -> str:
    """A value as the configuration file writes it."""
    return json.dumps(value)
