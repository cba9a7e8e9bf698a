"""The console's command language, without I/O: a line in, a :class:`Command` out.

Each command is declared once, as a :class:`Spec`: its argparse parser (which checks the
arguments and prints ``help COMMAND``) and, for tab completion, what each positional
argument names (a node, one of a few words, a GUID, free text). :func:`parse` turns a
typed line into a :class:`Command` or raises :class:`CommandError` with a sentence that
says what is wrong; :func:`completions` lists what may follow the text before the cursor.
Nothing here talks to a router or a terminal, so the language is tested on its own, and
the same parsing serves the terminal, ``--script`` files and the tests.

Nodes are named as the person sees them, ``node-2`` or just ``2`` (or an admin address);
resolving a name against the network is :mod:`.targets`' job, not the parser's.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
from collections.abc import Iterable, Sequence
from typing import NoReturn

from gnutella_router.logs import LOG_LEVELS

__all__ = [
    "COMMANDS",
    "PROBE_WORDS",
    "QUIT",
    "Command",
    "CommandError",
    "Spec",
    "completions",
    "general_help",
    "parse",
]

MAX_TTL = 15
MAX_WAIT = 60.0
PROBE_WORDS = "gnutella router console probe"
"""What a probe query searches for when no words are given."""
DEFAULT_WAIT = 1.0
"""Seconds ``reach`` and ``pingall`` wait after sending before reading the tables."""
VIEWS = ("routes", "connections", "qrp", "stats", "queues", "all")
TABLES = ("ping", "query", "push")
KNOBS = {"log-level": tuple(LOG_LEVELS), "profiler": ("start", "stop")}
"""What ``set`` changes, and the values each takes: what the admin interface allows."""
READABLE = ("node", "config", "stats", "stages", "connections", "holds")
"""The parts ``get`` reads (``/dump`` less its routes, and ``/holds``)."""
QUIT = frozenset({"quit", "exit", "EOF"})


class CommandError(Exception):
    """A line that is not a command the console understands; the message says why."""


class _Parser(argparse.ArgumentParser):
    """argparse for one console command: errors are raised, never exit the console."""

    def __init__(self, name: str, description: str) -> None:
        super().__init__(prog=name, description=description, add_help=False, exit_on_error=False)

    def error(self, message: str) -> NoReturn:
        raise CommandError(f"{self.prog}: {message} (help {self.prog})")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise CommandError(message or f"{self.prog}: cannot be parsed")


@dataclasses.dataclass(frozen=True, slots=True)
class Slot:
    """What one positional argument names, for completion."""

    kind: str
    """``node``, ``choice``, ``guid``, ``path``, ``knob-value``, ``command`` or ``text``."""
    choices: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Spec:
    """One command: its parser, one line for ``help``, and its arguments' kinds."""

    name: str
    summary: str
    parser: _Parser
    slots: tuple[Slot, ...] = ()
    value_options: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """Options that take a value, with the values to complete (none: any)."""

    @property
    def options(self) -> list[str]:
        return [o for action in self.parser._actions for o in action.option_strings]


@dataclasses.dataclass(frozen=True, slots=True)
class Command:
    """A parsed line: the command's name and its checked arguments."""

    name: str
    args: argparse.Namespace


def _ttl(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_TTL:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a TTL from 1 to {MAX_TTL}")
    return int(text)


def _wait(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= MAX_WAIT:
        raise argparse.ArgumentTypeError(f"{text!r}: expected seconds from 0 to {MAX_WAIT:g}")
    return value


def _limit(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or int(text) > 100_000:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number from 0 to 100000")
    return int(text)


def _guid(text: str) -> str:
    try:
        if len(bytes.fromhex(text)) == 16:
            return text.lower()
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"{text!r}: expected a GUID, 32 hex digits")


def _probe_options(parser: _Parser) -> None:
    parser.add_argument(
        "--ttl", type=_ttl, default=None, help="the probe's TTL (default: the node's max_ttl)"
    )
    parser.add_argument(
        "--wait",
        type=_wait,
        default=DEFAULT_WAIT,
        help=f"seconds to let it travel before the tables are read (default {DEFAULT_WAIT:g})",
    )


def _specs() -> dict[str, Spec]:
    specs: list[Spec] = []

    def spec(
        name: str,
        summary: str,
        description: str,
        slots: Sequence[Slot] = (),
        value_options: dict[str, tuple[str, ...]] | None = None,
    ) -> _Parser:
        parser = _Parser(name, f"{summary}. {description}".strip())
        specs.append(Spec(name, summary, parser, tuple(slots), value_options or {}))
        return parser

    spec(
        "nodes",
        "list the nodes: peer and admin addresses, GUID, state, connections",
        "A node is online, offline (taken down with `node N down`) or unreachable "
        "(its admin interface does not answer).",
    )
    spec(
        "links",
        "list the links between nodes: up or down, planned or not, held",
        "A link is up when one of its two nodes holds a connection to the other. With a "
        "test network's record, planned links that are down are listed too. Connections "
        "to peers that are not nodes (load clients, leaves, servents) are counted per node.",
    )
    reach = spec(
        "reach",
        "send a probe query (or ping) from NODE and show which nodes got it",
        "The node sends it to its neighbours as its own (the admin interface's POST "
        "/inject); after --wait seconds every node's route table is read for its GUID: "
        "who got it, by how many hops (1: a neighbour of NODE), how many milliseconds "
        "after it left (to the millisecond, on one clock: routers on one machine), from "
        "which node, and how many replies were routed back through each. A node counts a "
        "GUID once, however many copies reach it. Pings go no further than NODE's "
        "neighbours: routers answer them from their pong caches.",
        [Slot("node"), Slot("text")],
    )
    reach.add_argument("node", help="where the probe starts")
    reach.add_argument("text", nargs="*", help=f"the query's words (default: {PROBE_WORDS!r})")
    reach.add_argument("--ping", action="store_true", help="send a ping, not a query")
    _probe_options(reach)
    pingall = spec(
        "pingall",
        "send a probe query from every node; which nodes reach which",
        "As `reach` from each node in turn (all probes sent first, then the tables read "
        "once), summed up as Mininet's pingall is: the share of node pairs not reached.",
    )
    _probe_options(pingall)
    follow = spec(
        "follow",
        "follow one GUID through the network: every node's route entry, as a tree",
        "Reads every node's ping, query and push route tables for the GUID (from `reach`, "
        "`dump NODE routes`, a trace) and draws the path its first copies took: each node "
        "under the node it got the GUID from.",
        [Slot("guid")],
    )
    follow.add_argument("guid", type=_guid, help="32 hex digits")
    link = spec(
        "link",
        "take the link between two nodes down, or bring it up",
        "down: each node closes its connections to the other and neither dials nor "
        "accepts it until `link A B up` (POST /peers/hold at both ends). up: the holds "
        "are released and the planned dialer (else A) dials the other now.",
        [Slot("node"), Slot("node"), Slot("choice", ("down", "up"))],
    )
    link.add_argument("a", metavar="A", help="one node")
    link.add_argument("b", metavar="B", help="the other")
    link.add_argument("state", choices=("down", "up"), help="down or up")
    node = spec(
        "node",
        "take a node offline, or bring it back",
        "down: the node closes every connection, refuses every handshake and dials "
        "nobody; its process and admin interface keep running. up: it is online again, "
        "its catcher dials its peers, and with a test network's record its planned links "
        "are dialled now.",
        [Slot("node"), Slot("choice", ("down", "up"))],
    )
    node.add_argument("node", help="the node")
    node.add_argument("state", choices=("down", "up"), help="down or up")
    get = spec(
        "get",
        "read a node's identity, configuration, counters or holds",
        "PATH is dotted: `get 0 config.network.max_ttl`, `get 0 stats.router.received`, "
        "`get 0 node.uptime_seconds`, `get 0 holds`. Without PATH, the parts there are: "
        + ", ".join(READABLE)
        + ".",
        [Slot("node"), Slot("path", READABLE)],
    )
    get.add_argument("node", help="the node")
    get.add_argument("path", nargs="?", default="", help="what to read (dotted)")
    set_ = spec(
        "set",
        "change what a node's admin interface lets change: log level, profiler",
        "`set 0 log-level debug` (" + ", ".join(KNOBS["log-level"]) + "), `set 0 profiler "
        "start` (or stop, which writes the profile into the node's state folder). The log "
        "level is a process's: in a test network of one process, every node's.",
        [Slot("node"), Slot("choice", tuple(KNOBS)), Slot("knob-value")],
    )
    set_.add_argument("node", help="the node")
    set_.add_argument("knob", choices=tuple(KNOBS), help="what to change")
    set_.add_argument("value", help="its new value")
    dump = spec(
        "dump",
        "print one of a node's tables: routes, connections, qrp, stats, queues, all",
        "The tables of `gnutella-router dump`, for any node of the network.",
        [Slot("node"), Slot("choice", VIEWS)],
        {"--table": TABLES, "--limit": (), "--guid": (), "--keyword": ()},
    )
    dump.add_argument("node", help="the node")
    dump.add_argument("view", choices=VIEWS, help="which table")
    dump.add_argument("--table", choices=TABLES, help="routes: one route table")
    dump.add_argument("--limit", type=_limit, default=20, help="routes: entries per table")
    dump.add_argument("--guid", type=_guid, help="routes: only this GUID's entries")
    dump.add_argument("--keyword", help="qrp: which peers a query for this word reaches")
    helps = spec("help", "list the commands, or explain one", "", [Slot("command")])
    helps.add_argument("command", nargs="?", help="the command to explain")
    spec("quit", "leave the console (so do exit and Ctrl-D)", "")
    for parser_spec in specs:
        if parser_spec.name in ("reach", "pingall"):
            parser_spec.value_options.update({"--ttl": (), "--wait": ()})
    return {s.name: s for s in specs}


COMMANDS = _specs()
"""Every command, by name, in the order ``help`` lists them."""
_ALIASES = {"exit": "quit", "EOF": "quit", "?": "help"}


def parse(line: str) -> Command | None:
    """The command on ``line``; None for a blank line or a comment (``# ...``).

    Raises:
        CommandError: an unknown command, unbalanced quotes, or arguments the command
            does not take (the message names the command and says why).
    """
    try:
        words = shlex.split(line, comments=True)
    except ValueError as exc:
        raise CommandError(f"cannot split the line: {exc}") from None
    if not words:
        return None
    name = _ALIASES.get(words[0], words[0])
    spec = COMMANDS.get(name)
    if spec is None:
        raise CommandError(f"unknown command {words[0]!r}; `help` lists the commands")
    try:
        args = spec.parser.parse_intermixed_args(words[1:])
    except argparse.ArgumentError as exc:
        raise CommandError(f"{name}: {exc} (help {name})") from None
    if name == "set" and args.value not in KNOBS[args.knob]:
        raise CommandError(
            f"set: {args.knob} takes one of {', '.join(KNOBS[args.knob])}, not {args.value!r}"
        )
    if name == "help" and args.command is not None:
        args.command = _ALIASES.get(args.command, args.command)
        if args.command not in COMMANDS:
            raise CommandError(f"help: no command {args.command!r}; `help` lists them")
    return Command(name, args)


def general_help() -> str:
    """``help``: every command and what it does, one line each."""
    width = max(len(name) for name in COMMANDS)
    lines = [f"  {name.ljust(width)}  {spec.summary}" for name, spec in COMMANDS.items()]
    return "\n".join(
        [
            "commands (help COMMAND for its arguments; Tab completes, Up recalls):",
            *lines,
            "nodes are named node-N or N (or by their admin address)",
        ]
    )


def command_help(name: str) -> str:
    """``help NAME``: the command's usage, what it does and its options."""
    return COMMANDS[name].parser.format_help().rstrip()


def completions(line: str, *, nodes: Iterable[str] = (), guids: Iterable[str] = ()) -> list[str]:
    """What may complete the last word of ``line`` (the text before the cursor), given
    the network's node names and the GUIDs seen so far; sorted, without duplicates."""
    words = line.split()
    current = "" if not words or line[-1:].isspace() else words.pop()
    if not words:
        return _matching(current, [*COMMANDS, "exit"])
    spec = COMMANDS.get(_ALIASES.get(words[0], words[0]))
    if spec is None:
        return []
    previous = words[-1] if len(words) > 1 else ""
    if previous in spec.value_options:
        return _matching(current, spec.value_options[previous])
    if current.startswith("-"):
        return _matching(current, spec.options)
    positionals = _positionals(words[1:], spec)
    if len(positionals) >= len(spec.slots):
        return []
    slot = spec.slots[len(positionals)]
    if slot.kind == "node":
        return _matching(current, nodes)
    if slot.kind == "guid":
        return _matching(current, guids)
    if slot.kind == "command":
        return _matching(current, COMMANDS)
    if slot.kind == "knob-value":
        return _matching(current, KNOBS.get(positionals[-1], ()))
    if slot.kind in ("choice", "path"):
        return _matching(current, slot.choices)
    return []


def _positionals(words: Sequence[str], spec: Spec) -> list[str]:
    """The positional words among ``words`` (options and their values left out)."""
    positionals: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word.startswith("-"):
            skip = word in spec.value_options
        else:
            positionals.append(word)
    return positionals


def _matching(prefix: str, candidates: Iterable[str]) -> list[str]:
    return sorted({c for c in candidates if c.startswith(prefix)})
