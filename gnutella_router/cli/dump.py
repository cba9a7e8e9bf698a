"""``gnutella-router dump``: a running daemon's insides, fetched from its admin interface.

``dump routes|connections|stats|queues|all`` asks the admin interface
(:mod:`gnutella_router.observe.admin`) for one view and prints it as aligned tables, or as the
raw JSON with ``--json``. The client is :mod:`gnutella_router.observe.admin_client`, the
tables :mod:`gnutella_router.observe.admin_text`.

Exit status: 0 when the view was printed, 1 when the daemon could not be reached or
refused the request (the reason on stderr), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from gnutella_router.cli.arguments import admin_address
from gnutella_router.observe.admin_client import TOKEN_ENVIRONMENT, FetchError, fetch, token_from
from gnutella_router.observe.admin_text import FORMATTERS, view_path

DEFAULT_ADMIN = "127.0.0.1:6347"
"""The admin interface of a daemon run with the defaults (node port 6346, plus one)."""
VIEWS = ("routes", "connections", "qrp", "stats", "queues", "all")
TABLES = ("ping", "query", "push")

# --- the command ------------------------------------------------------------------------


def _guid_argument(text: str) -> str:
    try:
        if len(bytes.fromhex(text)) == 16:
            return text.lower()
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"{text!r}: expected 32 hex digits")


def _limit_argument(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) > 100_000:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number from 0 to 100000")
    return int(text)


def run_dump(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Fetch the view ``args`` names and print it; the exit status."""
    out = out or sys.stdout
    if args.view != "qrp" and args.keyword is not None:
        print("gnutella-router dump: --keyword applies to 'dump qrp'", file=sys.stderr)
        return 2
    if args.view != "routes" and (args.guid or args.table):
        print("gnutella-router dump: --guid and --table apply to 'dump routes'", file=sys.stderr)
        return 2
    if args.view not in ("routes", "all") and args.limit is not None:
        print(
            "gnutella-router dump: --limit applies to 'dump routes' and 'dump all'", file=sys.stderr
        )
        return 2
    token = token_from(args.token)
    path = view_path(
        args.view,
        table=args.table,
        guid=args.guid,
        limit=args.limit,
        offset=args.offset,
        keyword=args.keyword,
    )
    try:
        data = fetch(args.admin, path, token=token, timeout=args.timeout)
    except FetchError as exc:
        print(f"gnutella-router dump: {exc}", file=sys.stderr)
        return 1
    if args.json:
        out.write(json.dumps(data, indent=2) + "\n")
    else:
        out.write(FORMATTERS[args.view](data) + "\n")
    return 0


def add_dump_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``dump`` with the command line's subcommands."""
    dump = commands.add_parser(
        "dump",
        help="show a running router's routes, connections, counters or queues",
        description="Fetch a view of a running router from its admin interface and print "
        "it as tables (or JSON).",
    )
    dump.add_argument(
        "view",
        choices=VIEWS,
        help="routes: route tables; connections: peers and their queues; qrp: leaves' and "
        "ultrapeers' QRP tables; stats: counters by type and drop reason; queues: stage "
        "queues and pools; all: everything",
    )
    dump.add_argument(
        "--admin",
        type=admin_address,
        default=admin_address(DEFAULT_ADMIN),
        metavar="HOST:PORT",
        help=f"the router's admin interface (default {DEFAULT_ADMIN}: node port 6346 + 1)",
    )
    dump.add_argument("--json", action="store_true", help="print the raw JSON instead of tables")
    dump.add_argument("--table", choices=TABLES, help="routes: only this route table")
    dump.add_argument(
        "--keyword",
        metavar="WORD",
        help="qrp: say which peers a query with this word would be sent to",
    )
    dump.add_argument(
        "--guid", type=_guid_argument, metavar="HEX", help="routes: only this GUID's entry"
    )
    dump.add_argument(
        "--limit",
        type=_limit_argument,
        metavar="N",
        help="routes, all: entries shown per route table (default 1000, newest first)",
    )
    dump.add_argument(
        "--offset",
        type=_limit_argument,
        default=0,
        metavar="N",
        help="routes: skip the N newest entries first (the next page of a large table)",
    )
    dump.add_argument(
        "--token",
        metavar="TOKEN",
        help=f"the admin token, when the router has one (default: ${TOKEN_ENVIRONMENT})",
    )
    dump.add_argument(
        "--timeout", type=float, default=10.0, metavar="SECONDS", help="give up after this long"
    )
    dump.set_defaults(handler=run_dump)
