"""Carrying out the console's commands against a network: a command in, text out.

A :class:`Session` holds the :class:`~.targets.Network` and the GUIDs met so far (for
``follow``'s tab completion, a bounded few). :meth:`Session.execute` parses a line
(:mod:`.commands`) and carries it out through the network's gateway; it returns the text
to show, or raises :class:`~.commands.CommandError` (the line is wrong) or
:class:`~.targets.ConsoleError` (a node could not do it), which the shell reports and a
script counts as a failure. Listing commands (``nodes``, ``links``, ``pingall``) show a
node that does not answer as such and still succeed; commands aimed at one node fail
when it does not answer.

Everything the console knows of the routers comes from their admin interfaces: probes
are injected with ``POST /inject`` and found again in the route tables
(:mod:`.probes`), links are held down with ``POST /peers/hold``, nodes taken offline
with ``POST /offline``. Waiting is ``time.sleep`` unless a test gives another.
"""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gnutella_router.lab.console.commands import (
    PROBE_WORDS,
    READABLE,
    Command,
    command_help,
    general_help,
    parse,
)
from gnutella_router.lab.console.probes import (
    Sighting,
    Spread,
    follow_text,
    pingall_text,
    reach_text,
    sightings_in,
)
from gnutella_router.lab.console.targets import ConsoleError, Network, Node
from gnutella_router.net.connection import format_address
from gnutella_router.observe.admin_text import FORMATTERS, format_table, view_path

__all__ = ["Session"]

GUIDS_REMEMBERED = 64
MAX_GET_LINES = 400
"""Most lines ``get`` prints of one part (a big part says how many more there are)."""


class Session:
    """One console's state and its commands; see the module notes."""

    def __init__(self, network: Network, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.network = network
        self.gateway = network.gateway
        self.sleep = sleep
        self.guids: collections.deque[str] = collections.deque(maxlen=GUIDS_REMEMBERED)
        """GUIDs met in this session, newest last (for completion)."""

    def execute(self, line: str) -> str | None:
        """Carry out ``line``; the text to show (None for a blank line or a comment).

        Raises:
            CommandError: the line is not a command the console takes.
            ConsoleError: the command could not be carried out.
        """
        command = parse(line)
        return None if command is None else self.run(command)

    def run(self, command: Command) -> str:
        """Carry out a parsed command (``quit`` does nothing here: the shell leaves)."""
        if command.name == "quit":
            return ""
        handler: Callable[[Any], str] = getattr(self, f"_{command.name}")
        return handler(command.args)

    # ------------------------------------------------------------------ listing

    def _help(self, args: Any) -> str:
        return general_help() if args.command is None else command_help(args.command)

    def _nodes(self, args: Any) -> str:
        self.network.identify()

        def read(node: Node) -> tuple[object, object]:
            return self.gateway.get(node, "/healthz"), self.gateway.get(node, "/holds")

        results = self.network.each(self.network.nodes, read)
        rows: list[list[object]] = []
        problems = []
        for node in self.network.nodes:
            result = results[node.name]
            admin = None if node.admin is None else format_address(*node.admin)
            guid = node.guid[:8] + "..." if node.guid else None
            if isinstance(result, ConsoleError):
                rows.append([node.name, node.address, admin, guid, "unreachable", None, None])
                problems.append(str(result))
                continue
            health, holds = (_mapping(part) for part in result)
            state = "offline" if holds.get("offline") else "online"
            held = len(holds.get("holds") or [])
            rows.append(
                [node.name, node.address, admin, guid, state, health.get("connections"), held]
            )
        headers = ["NODE", "PEER ADDRESS", "ADMIN", "GUID", "STATE", "CONNECTIONS", "HELD"]
        return "\n".join([format_table(headers, rows), *problems])

    def _links(self, args: Any) -> str:
        self.network.identify()
        names = self.network.by_address()
        pages = self.network.each(self.network.nodes, self._connections_and_holds)
        up: dict[frozenset[str], tuple[str, str]] = {}
        others: collections.Counter[str] = collections.Counter()
        held: dict[frozenset[str], list[str]] = collections.defaultdict(list)
        problems = []
        for node in self.network.nodes:
            page = pages[node.name]
            if isinstance(page, ConsoleError):
                problems.append(str(page))
                continue
            connections, holds = page
            for hold in holds:
                other = names.get(hold)
                if other is not None:
                    held[frozenset((node.name, other))].append(node.name)
            for connection in connections:
                other = names.get(str(connection.get("listen_address"))) or names.get(
                    str(connection.get("peer"))
                )
                if other is None or other == node.name:
                    others[node.name] += 1
                    continue
                dialer, listener = (
                    (node.name, other)
                    if connection.get("role") == "outgoing"
                    else (other, node.name)
                )
                up.setdefault(frozenset((dialer, listener)), (dialer, listener))
        nodes = self.network.nodes
        planned = {
            frozenset((nodes[a].name, nodes[b].name)): (nodes[a].name, nodes[b].name)
            for a, b in self.network.planned
        }
        rows = []
        for pair, (dialer, listener) in {**planned, **up}.items():
            dialer, listener = planned.get(pair, (dialer, listener))
            rows.append(
                [
                    f"{dialer} -> {listener}",
                    "up" if pair in up else "down",
                    "yes" if pair in planned else "no",
                    ", ".join(held.get(pair, [])) or None,
                ]
            )
        lines = [
            format_table(["LINK", "STATE", "PLANNED", "HELD AT"], rows) if rows else "(no links)"
        ]
        if planned:
            lines.append(f"{sum(p in up for p in planned)} of {len(planned)} planned links up")
        if others:
            counts = ", ".join(f"{name}: {count}" for name, count in others.items())
            lines.append(f"connections to peers that are not nodes: {counts}")
        return "\n".join([*lines, *problems])

    def _connections_and_holds(self, node: Node) -> tuple[list[dict[str, Any]], list[str]]:
        connections = [
            c for c in _list(self.gateway.get(node, "/connections")) if not c.get("closing")
        ]
        holds = [
            str(h.get("address"))
            for h in _list(_mapping(self.gateway.get(node, "/holds")).get("holds"))
        ]
        return connections, holds

    # ------------------------------------------------------------------ probes

    def _reach(self, args: Any) -> str:
        origin = self.network.node(args.node)
        kind = "ping" if args.ping else "query"
        if args.ping and args.text:
            raise ConsoleError("reach --ping: a ping carries no words")
        self.network.identify()
        answer = self._inject(origin, kind, args.ttl, " ".join(args.text) or PROBE_WORDS)
        guid = str(answer["guid"])
        self.sleep(args.wait)
        spread = self._spread(guid, kind)
        text = reach_text(spread, self.network.by_address(), kind=kind, origin=origin.name)
        if not answer.get("sent_to"):
            text += f"\n{origin.name} had no neighbour to send it to"
        return text

    def _pingall(self, args: Any) -> str:
        self.network.identify()
        nodes = self.network.nodes
        sent = self.network.each(nodes, lambda n: self._inject(n, "query", args.ttl, PROBE_WORDS))
        guids = {
            name: str(a["guid"]) for name, a in sent.items() if not isinstance(a, ConsoleError)
        }
        self.sleep(args.wait if guids else 0)

        def read(node: Node) -> dict[str, list[Sighting]]:
            return {
                origin: sightings_in(node.name, self.gateway.get(node, _routes("query", guid)))
                for origin, guid in guids.items()
            }

        pages = self.network.each(nodes, read)
        spreads = {}
        for origin, guid in guids.items():
            found = {n: p[origin] for n, p in pages.items() if not isinstance(p, ConsoleError)}
            unread = {n: str(p) for n, p in pages.items() if isinstance(p, ConsoleError)}
            spreads[origin] = Spread.of(guid, "query", found, unread)
        lines = [pingall_text(spreads, [n.name for n in nodes if n.name in guids])]
        lines.extend(f"not sent: {a}" for a in sent.values() if isinstance(a, ConsoleError))
        return "\n".join(lines)

    def _follow(self, args: Any) -> str:
        self.network.identify()
        self._remember(args.guid)
        pages = self.network.each(
            self.network.nodes, lambda n: self.gateway.get(n, f"/routes?guid={args.guid}")
        )
        found = {n: sightings_in(n, p) for n, p in pages.items() if not isinstance(p, ConsoleError)}
        unread = {n: str(p) for n, p in pages.items() if isinstance(p, ConsoleError)}
        tables = sorted({s.table for node in found.values() for s in node}) or ["query"]
        spreads = [Spread.of(args.guid, table, found, unread) for table in tables]
        return follow_text(spreads, self.network.by_address())

    def _inject(self, node: Node, kind: str, ttl: int | None, text: str) -> dict[str, Any]:
        body: dict[str, object] = {"type": kind}
        if ttl is not None:
            body["ttl"] = ttl
        if kind == "query":
            body["text"] = text
        answer = _mapping(self.gateway.post(node, "/inject", body))
        if not isinstance(answer.get("guid"), str):
            raise ConsoleError(f"{node.name}: /inject answered no GUID")
        self._remember(str(answer["guid"]))
        return answer

    def _spread(self, guid: str, table: str) -> Spread:
        pages = self.network.each(
            self.network.nodes, lambda n: self.gateway.get(n, _routes(table, guid))
        )
        found = {n: sightings_in(n, p) for n, p in pages.items() if not isinstance(p, ConsoleError)}
        unread = {n: str(p) for n, p in pages.items() if isinstance(p, ConsoleError)}
        return Spread.of(guid, table, found, unread)

    def _remember(self, guid: str) -> None:
        if guid in self.guids:
            self.guids.remove(guid)
        self.guids.append(guid)

    # ------------------------------------------------------------------ changing

    def _link(self, args: Any) -> str:
        a, b = self.network.node(args.a), self.network.node(args.b)
        if a is b:
            raise ConsoleError(f"link: {a.name} and {b.name} are the same node")
        self.network.identify()
        for node in (a, b):
            if node.address is None:
                raise ConsoleError(f"link: the peer address of {node.name} is not known")
        assert a.address is not None
        assert b.address is not None
        if args.state == "down":
            closed = sum(
                int(
                    _mapping(self.gateway.post(x, "/peers/hold", {"address": y.address})).get(
                        "closed", 0
                    )
                )
                for x, y in ((a, b), (b, a))
            )
            return (
                f"link {a.name} -- {b.name} down: held at both ends, {closed} connection"
                f"{'s' * (closed != 1)} closed; `link {a.name} {b.name} up` brings it back"
            )
        for x, y in ((a, b), (b, a)):
            self.gateway.post(x, "/peers/release", {"address": y.address})
        dialer, listener = self._dialer(a, b)
        return f"link {a.name} -- {b.name} up: holds released; {self._dial(dialer, listener)}"

    def _node(self, args: Any) -> str:
        node = self.network.node(args.node)
        if args.state == "down":
            answer = _mapping(self.gateway.post(node, "/offline", {"offline": True}))
            closed = int(answer.get("closed", 0))
            return (
                f"{node.name} is offline: {closed} connection{'s' * (closed != 1)} closed; it "
                f"accepts and dials no peers until `node {node.name} up`"
            )
        self.gateway.post(node, "/offline", {"offline": False})
        self.network.identify()
        lines = [f"{node.name} is online; its catcher dials its peers again"]
        nodes = self.network.nodes
        for a, b in self.network.planned:
            if node.index in (a, b):
                try:
                    lines.append(self._dial(nodes[a], nodes[b]))
                except ConsoleError as exc:
                    lines.append(f"planned link not restored: {exc}")
        return "\n".join(lines)

    def _dialer(self, a: Node, b: Node) -> tuple[Node, Node]:
        """Who dials whom to bring a link up: the planned dialer, else ``a``."""
        if (b.index, a.index) in self.network.planned and (
            a.index,
            b.index,
        ) not in self.network.planned:
            return b, a
        return a, b

    def _dial(self, dialer: Node, listener: Node) -> str:
        """``dialer`` dials ``listener`` now, unless they are connected already."""
        if self._connected(dialer, listener):
            return f"{dialer.name} and {listener.name} are connected"
        try:
            answer = _mapping(
                self.gateway.post(dialer, "/peers/add", {"address": listener.address})
            )
        except ConsoleError:
            # Its catcher may have dialled in the meantime (and a router may refuse a
            # second connection to a peer it has): connected is what was wanted.
            if self._connected(dialer, listener):
                return f"{dialer.name} and {listener.name} are connected"
            raise
        return f"{dialer.name} dialled {listener.name} (connection {answer.get('connection')})"

    def _connected(self, dialer: Node, listener: Node) -> bool:
        connections, _ = self._connections_and_holds(dialer)
        return any(
            listener.address in (c.get("listen_address"), c.get("peer")) for c in connections
        )

    def _set(self, args: Any) -> str:
        node = self.network.node(args.node)
        if args.knob == "log-level":
            answer = _mapping(self.gateway.post(node, "/log-level", {"level": args.value}))
            return f"{node.name}: log level {answer.get('level')}"
        answer = _mapping(self.gateway.post(node, "/profiler", {"action": args.value}))
        if args.value == "start":
            started = answer.get("started")
            return f"{node.name}: profiler {'started' if started else 'was already running'}"
        written = ", ".join(str(p) for p in _list_of(answer.get("written")))
        if not answer.get("stopped"):
            return f"{node.name}: the profiler was not running"
        return f"{node.name}: profiler stopped; written: {written}"

    # ------------------------------------------------------------------ reading

    def _get(self, args: Any) -> str:
        node = self.network.node(args.node)
        path = [part for part in args.path.split(".") if part]
        if not path:
            return (
                f"{node.name}: parts to read: {', '.join(READABLE)} (get {node.name} PART.KEY...)"
            )
        if path[0] not in READABLE:
            raise ConsoleError(f"get: no part {path[0]!r}; the parts are {', '.join(READABLE)}")
        if path[0] == "holds":
            value: object = self.gateway.get(node, "/holds")
        else:
            value = _mapping(self.gateway.get(node, "/dump?limit=0")).get(path[0])
        for depth, key in enumerate(path[1:], start=1):
            value = _step(value, key, ".".join(path[:depth]))
        lines = _flatten(".".join(path), value)
        if len(lines) > MAX_GET_LINES:
            more = len(lines) - MAX_GET_LINES
            lines = [*lines[:MAX_GET_LINES], f"... {more} more (name a part of it)"]
        return "\n".join(lines)

    def _dump(self, args: Any) -> str:
        node = self.network.node(args.node)
        routes = args.view in ("routes", "all")
        path = view_path(
            args.view,
            table=args.table,
            guid=args.guid,
            limit=args.limit if routes else None,
            keyword=args.keyword,
        )
        if args.guid:
            self._remember(args.guid)
        return f"{node.name}:\n" + FORMATTERS[args.view](self.gateway.get(node, path))


def _routes(table: str, guid: str) -> str:
    return f"/routes?table={table}&guid={guid}"


def _mapping(value: object) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _list(value: object) -> list[dict[str, Any]]:
    return [dict(v) for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _list_of(value: object) -> Sequence[object]:
    return value if isinstance(value, list) else []


def _step(value: object, key: str, where: str) -> object:
    """``value[key]`` for ``get``'s dotted path (a list takes an index)."""
    if isinstance(value, Mapping) and key in value:
        return value[key]
    if isinstance(value, list) and key.isdigit() and int(key) < len(value):
        return value[int(key)]
    if isinstance(value, Mapping):
        keys = ", ".join(sorted(str(k) for k in value)[:30])
        raise ConsoleError(f"get: {where} has no {key!r}; it has {keys}")
    raise ConsoleError(f"get: {where} is {json.dumps(value)[:60]}, with no parts")


def _flatten(prefix: str, value: object) -> list[str]:
    """``prefix.key = value`` lines for every leaf of ``value``."""
    if isinstance(value, Mapping) and value:
        return [line for key, part in value.items() for line in _flatten(f"{prefix}.{key}", part)]
    if isinstance(value, list) and value and any(isinstance(v, Mapping | list) for v in value):
        return [line for i, part in enumerate(value) for line in _flatten(f"{prefix}.{i}", part)]
    return [f"{prefix} = {json.dumps(value)}"]
