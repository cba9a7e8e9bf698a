"""What a running daemon looks like inside, as plain data for JSON.

Theory of operation
-------------------
Every function here reads a :class:`~gnutella_router.observe.view.RouterView` and
returns dicts, lists, strings, numbers, booleans and ``None``, nothing else, so that
``json.dumps`` takes the result as it is. Nothing here does I/O: the admin interface
(:mod:`gnutella_router.observe.admin`) serves these over HTTP, the SIGUSR1 handler
writes them to a file, and the ``dump`` command prints them as tables.

The functions run on the trio thread, between two router batches, so what they return
is one consistent instant. They are cheap enough for that, except for the route tables:
a table holds up to 100,000 entries, and formatting them all takes seconds. So route
entries are taken in two steps: :func:`snapshot_routes` copies the tables' entries
(a :class:`RoutesSnapshot`, cheap at any size), and the snapshot is formatted later,
either all at once (:meth:`RoutesSnapshot.data`, what :func:`dump_routes` and
:func:`full_dump` return) or a slice at a time between router batches, which is how
the admin interface and the SIGUSR1 file make theirs (:mod:`.dump_stream`).

Conversions, done by :func:`jsonable`: dataclasses become dicts, bytes become
lowercase hex, enums their name, tuples and sets lists, mapping keys strings, and a
float that is not finite (an idle time measured outside trio, say) ``None``.

A route entry names its next hop by the connection id and by ``next_hop``: the peer's
listening address when its handshake gave one (else the address it connected from),
kept after the connection closes, or ``"local"`` for a message this node originated
(id 0); ``connected`` says whether that connection is still up (replies on a route whose
connection has gone are dropped). Each entry also shows the TTL and hops its message
arrived with, how many replies came back through it (``hits``), and when it was recorded
as wall-clock time (Unix seconds and ISO 8601, UTC). GUIDs in the ping and query tables are message
GUIDs; those in the push table are servent GUIDs, learned from query hits.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import linecache
import math
import os
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from typing import NotRequired, TypedDict

import trio

from gnutella_router import __version__
from gnutella_router.config import config_as_dict
from gnutella_router.net.connection import Connection, format_address
from gnutella_router.net.connection_table import ConnectionTable
from gnutella_router.observe.view import RouterView
from gnutella_router.routing.replies import LOCAL
from gnutella_router.routing.route_table import (
    RouteEntry,
    RouteSnapshot,
    RouteTable,
    RouteTableStatistics,
)
from protocol.constants import message_type_name
from protocol.qrp import QrpReceiver, qrp_hashcode, query_words

__all__ = [
    "DEFAULT_ROUTE_LIMIT",
    "ROUTE_TABLES",
    "NextHops",
    "RoutesSnapshot",
    "TablePage",
    "dump_connections",
    "dump_routes",
    "dump_stages",
    "dump_stats",
    "full_dump",
    "full_dump_around",
    "jsonable",
    "snapshot_routes",
    "task_tree",
]

ROUTE_TABLES = ("ping", "query", "push")
"""The route tables, by the names dumps and the admin interface use."""
DEFAULT_ROUTE_LIMIT = 1000
"""Route entries shown per table unless asked otherwise."""
REDACTED = "(redacted)"
"""Stands in for secrets (the admin token) wherever the configuration is shown."""


def jsonable(value: object) -> object:
    """``value`` as data ``json.dumps`` accepts (see the module notes for the rules).

    Anything unforeseen becomes its ``str()`` rather than an error: a dump should
    survive a new kind of statistic it does not know about yet.
    """
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {_key(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    if isinstance(value, set | frozenset):
        return sorted((jsonable(item) for item in value), key=str)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def _key(key: object) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, enum.Enum):
        return key.name.lower()
    if isinstance(key, bytes):
        return key.hex()
    if isinstance(key, tuple):
        return ":".join(_key(part) for part in key)
    return str(key)


def _now(now: float | None) -> float:
    return trio.current_time() if now is None else now


def _seconds(value: float) -> float:
    return round(value, 3)


# --- routes ---------------------------------------------------------------------------


def _tables(daemon: RouterView) -> dict[str, RouteTable]:
    router = daemon.router
    return {"ping": router.ping_routes, "query": router.query_routes, "push": router.push_routes}


@dataclasses.dataclass(frozen=True, slots=True)
class TablePage:
    """One route table in a :class:`RoutesSnapshot`: its statistics and the entries
    of the page asked for, not yet formatted."""

    statistics: RouteTableStatistics
    shown: int
    """Entries in the page."""
    truncated: bool
    """More entries follow the page."""
    page: RouteSnapshot | tuple[RouteEntry, ...]
    """The page's entries, newest first (a GUID looked up gives at most one)."""

    def entries(self) -> Iterator[RouteEntry]:
        page = self.page
        return page.entries() if isinstance(page, RouteSnapshot) else iter(page)


class NextHops:
    """Names the next hop of each connection id a route entry holds, once per id.

    Whether a connection is up is decided by the set of live connections given (taken
    with the snapshot). Peer names are read from the connection table the first time
    an id is met, which may be a little after the snapshot: a name never changes once
    given, it can only be forgotten (the table keeps the most recent ones).
    """

    __slots__ = ("_connections", "_known", "_live")

    def __init__(self, connections: ConnectionTable) -> None:
        self._connections = connections
        self._live = frozenset(c.id for c in connections.snapshot())
        self._known: dict[int, tuple[str, bool]] = {LOCAL: ("local", True)}

    def __call__(self, connection_id: int) -> tuple[str, bool]:
        """``(next_hop, connected)`` for ``connection_id``."""
        known = self._known.get(connection_id)
        if known is None:
            label = self._connections.label(connection_id) or f"connection {connection_id}"
            known = self._known[connection_id] = (label, connection_id in self._live)
        return known


@dataclasses.dataclass(frozen=True, slots=True)
class RoutesSnapshot:
    """The route tables at one instant, their entries not yet turned into data.

    :func:`snapshot_routes` takes one on the trio thread in a few milliseconds at most;
    :meth:`data` (all at once) or :mod:`.dump_stream` (in slices) format it later.
    """

    limit: int | None
    offset: int
    guid: bytes | None
    tables: dict[str, TablePage]
    hops: NextHops
    wall: float
    """Add to a trio clock reading to get Unix time."""

    def rows(self, table: TablePage) -> Iterator[dict[str, object]]:
        """``table``'s entries as the dumps show them, newest first."""
        hops, wall = self.hops, self.wall
        last_at, last_iso = math.nan, ""
        for entry in table.entries():
            recorded_at = wall + entry.recorded_at
            if recorded_at != last_at:  # a batch of entries shares one time
                last_at, last_iso = recorded_at, _iso(recorded_at)
            next_hop, connected = hops(entry.value)
            yield {
                "guid": entry.guid.hex(),
                "connection": entry.value,
                "next_hop": next_hop,
                "connected": connected,
                "ttl": entry.ttl,
                "hops": entry.hops,
                "hits": entry.hits,
                "age": _seconds(entry.age),
                "recorded_at": round(recorded_at, 3),
                "recorded_at_iso": last_iso,
                "generation": entry.generation,
            }

    def data(self, entries: Callable[[TablePage], object] | None = None) -> dict[str, object]:
        """The ``/routes`` answer (see :func:`dump_routes`); ``entries`` gives the value
        that stands for each table's entries, instead of the list of them."""
        tables: dict[str, object] = {
            name: {
                "statistics": jsonable(table.statistics),
                "total": table.statistics.size,
                "shown": table.shown,
                "truncated": table.truncated,
                "entries": list(self.rows(table)) if entries is None else entries(table),
            }
            for name, table in self.tables.items()
        }
        return {
            "limit": self.limit,
            "offset": self.offset,
            "guid": None if self.guid is None else self.guid.hex(),
            "tables": tables,
        }


def snapshot_routes(
    daemon: RouterView,
    *,
    table: str | None = None,
    guid: bytes | None = None,
    limit: int | None = DEFAULT_ROUTE_LIMIT,
    offset: int = 0,
    now: float | None = None,
) -> RoutesSnapshot:
    """The route tables as :func:`dump_routes` shows them, taken now and formatted later.

    Cheap at any size: the tables' entries are copied (see
    :meth:`~gnutella_router.routing.route_table.RouteTable.snapshot`), not decoded.

    Raises:
        ValueError: an unknown table name, or a negative limit or offset.
    """
    if table is not None and table not in ROUTE_TABLES:
        raise ValueError(f"unknown route table {table!r}; tables are {', '.join(ROUTE_TABLES)}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must not be negative, not {limit}")
    if offset < 0:
        raise ValueError(f"offset must not be negative, not {offset}")
    moment = _now(now)
    pages: dict[str, TablePage] = {}
    for name, routes in _tables(daemon).items():
        if table is not None and name != table:
            continue
        statistics = routes.statistics(moment)
        if guid is None:
            page: RouteSnapshot | tuple[RouteEntry, ...] = routes.snapshot(moment, limit, offset)
            shown = len(page)
            truncated = offset + shown < statistics.size
        else:
            found = routes.entry(guid, moment)
            page = () if found is None or limit == 0 else (found,)
            shown, truncated = len(page), False
        pages[name] = TablePage(statistics, shown, truncated, page)
    return RoutesSnapshot(
        limit=limit,
        offset=offset,
        guid=guid,
        tables=pages,
        hops=NextHops(daemon.server.connections),
        wall=time.time() - moment,  # wall-clock time = trio time + this
    )


def dump_routes(
    daemon: RouterView,
    *,
    table: str | None = None,
    guid: bytes | None = None,
    limit: int | None = DEFAULT_ROUTE_LIMIT,
    offset: int = 0,
    now: float | None = None,
) -> dict[str, object]:
    """The route tables: their statistics and their newest entries, a page at a time.

    All at once, for a page of modest size: the admin interface and the SIGUSR1 dump
    format a :func:`snapshot_routes` in slices instead (:mod:`.dump_stream`), into the
    same text.

    Args:
        daemon: a running daemon.
        table: ``"ping"``, ``"query"`` or ``"push"`` for one table; ``None`` for all.
        guid: show only this GUID's entry (if the table holds it) instead of the newest.
        limit: most entries shown per table, newest first; ``None`` for all of them.
        offset: entries skipped first, per table (the next page starts at
            ``offset + shown``).
        now: the trio clock reading to date entries by; the current time by default.

    Returns:
        ``{"limit": ..., "offset": ..., "tables": {name: {"statistics": {...},
        "total": n, "shown": n, "truncated": bool, "entries": [{"guid", "connection",
        "next_hop", "connected", "ttl", "hops", "hits", "age", "recorded_at",
        "recorded_at_iso", "generation"}, ...]}}}``; ``truncated`` means more entries
        follow this page.

    Raises:
        ValueError: an unknown table name, or a negative limit.
    """
    snapshot = snapshot_routes(daemon, table=table, guid=guid, limit=limit, offset=offset, now=now)
    return snapshot.data()


def _iso(unix: float) -> str:
    return datetime.datetime.fromtimestamp(unix, datetime.UTC).isoformat(timespec="milliseconds")


# --- connections ----------------------------------------------------------------------


def dump_connections(daemon: RouterView, *, now: float | None = None) -> list[dict[str, object]]:
    """Every live connection (closing ones included, marked so), oldest first."""
    moment = _now(now)
    return [
        _connection(c, moment, daemon.router.qrp_receiver(c.id))
        for c in sorted(daemon.server.connections.snapshot(), key=lambda c: c.id)
    ]


def _qrp(receiver: QrpReceiver | None) -> dict[str, object] | None:
    """A leaf's QRP table as dumps show it: size, fill, how many tables it sent."""
    if receiver is None:
        return None
    table = receiver.table
    return {
        "tables_received": receiver.tables_received,
        "slots": None if table is None else table.slots,
        "filled": None if table is None else table.filled,
        "fill_ratio": None if table is None else round(table.filled / table.slots, 4),
    }


def _last_hop_sent(daemon: RouterView, link_id: int, now: float) -> dict[str, object] | None:
    """Our leaves' table as last sent to an ultrapeer: how long ago, and whether it is
    still what our leaves share; None if it was never sent one (it did not announce
    ``X-Ultrapeer-Query-Routing``, or not yet)."""
    sent = daemon.router.query_routing.last_hop_sent(link_id)
    if sent is None:
        return None
    current, sent_at = sent
    return {"seconds_ago": _seconds(now - sent_at), "current": current}


def _connection(
    connection: Connection, now: float, qrp: QrpReceiver | None = None
) -> dict[str, object]:
    s = connection.statistics(now)
    caps = connection.capabilities
    queue = s.outgoing
    return {
        "id": s.id,
        "peer": s.peer,
        "role": s.role,
        "user_agent": s.user_agent,
        "age_seconds": _seconds(s.age_seconds),
        "listen_address": s.listen_address,
        "capabilities": {
            "ultrapeer": s.ultrapeer,
            "bye_packet": s.bye_packet,
            "pong_caching": s.pong_caching,
            "ggep": s.ggep,
            "vendor_messages": caps.vendor_messages,
            "query_routing": caps.query_routing,
            "dynamic_querying": caps.dynamic_querying,
            "max_ttl": caps.max_ttl,
            "degree": caps.degree,
            "deflate_in": s.deflate_in,
            "deflate_out": s.deflate_out,
            "guid": None if caps.guid is None else caps.guid.hex(),
            "features": jsonable(dict(caps.features)),
        },
        "messages_in": s.messages_in,
        "bytes_in": s.bytes_in,
        "messages_out": s.messages_out,
        "bytes_out": s.bytes_out,
        "malformed_in": s.malformed_in,
        "vendor": {
            "messages_supported": None if s.vendor_messages is None else list(s.vendor_messages),
            "features_supported": None if s.features is None else list(s.features),
            "hops_flow": s.hops_flow,
        },
        "leaf": caps.ultrapeer is False,
        "qrp": _qrp(qrp),
        "outgoing": {
            "policy": queue.policy,
            "pending_messages": queue.pending_messages,
            "pending_bytes": queue.pending_bytes,
            "capacity": queue.capacity,
            "peak_messages": queue.peak_messages,
            "peak_bytes": queue.peak_bytes,
            "queued_total": queue.queued_total,
            "sent_total": queue.sent_total,
            "dropped": dict(queue.dropped),
            "dropped_by_type": {message_type_name(t): n for t, n in queue.dropped_by_type.items()},
        },
        "flow_control": {
            "active": queue.flow_controlled,
            "entries": queue.flow_control_entries,
            "seconds": _seconds(queue.seconds_in_flow_control),
        },
        "closing": s.closing,
        "close_reason": s.close_reason,
    }


# --- query routing tables ---------------------------------------------------------------


def dump_qrp(daemon: RouterView, *, keyword: str | None = None) -> dict[str, object]:
    """Every QRP table the router holds: each leaf's, and each ultrapeer's last-hop
    table, with its size and fill; given ``keyword``, also whether a query with that
    word would be sent to each (leaves: always by their table; ultrapeers: at a
    query's last hop only; a peer without a table: leaves get nothing, ultrapeers all)."""
    words = query_words(keyword) if keyword else []
    codes = [qrp_hashcode(word) for word in words]
    now = _now(None)
    peers: list[dict[str, object]] = []
    for connection in sorted(daemon.server.connections.snapshot(), key=lambda c: c.id):
        leaf = connection.capabilities.ultrapeer is False
        receiver = daemon.router.qrp_receiver(connection.id)
        table = None if receiver is None else receiver.table
        entry: dict[str, object] = {
            "id": connection.id,
            "peer": connection.peer_text,
            "leaf": leaf,
            **(_qrp(receiver) or {"tables_received": 0, "slots": None, "filled": None}),
        }
        if not leaf:
            entry["last_hop_table_sent"] = _last_hop_sent(daemon, connection.id, now)
        if keyword is not None:
            matches = table.matches_hashcodes(codes) if table is not None else not leaf
            entry["would_receive"] = bool(codes) and matches
        peers.append(entry)
    return {
        "keyword": keyword,
        "words": words,
        "leaves_table_filled": daemon.router.query_routing.leaves_table().filled,
        "peers": peers,
    }


# --- stages and statistics ------------------------------------------------------------


def dump_stages(daemon: RouterView) -> dict[str, object]:
    """Every registered part's statistics (stage queues, pools, workers) and the governor.

    ``stages`` maps each name in the daemon's registry to its statistics; the stages
    proper (``router``, ``catcher``) have a ``queue`` with its length and threshold,
    and ``pool_size``/``batch_size``/``busy_workers``. ``governor`` is ``None`` when it is
    off, ``batching`` (the batching controller's batch size, rates and samples) too, and
    ``admission`` (the response-time controller's rate, p90 and samples) unless the
    shedding policy is ``response-time``.
    """
    governor = daemon.governor
    batching = daemon.batching
    shedder = daemon.router.shedder
    controller = None if shedder is None else shedder.controller
    return {
        "stages": jsonable(daemon.registry.statistics()),
        "governor": None if governor is None else jsonable(governor.statistics()),
        "batching": None if batching is None else jsonable(batching.statistics()),
        "admission": None if controller is None else jsonable(controller.state()),
    }


def dump_stats(daemon: RouterView) -> dict[str, object]:
    """The counters: the router's by message type and drop reason, the server's, the
    catcher's, the trace recorder's when one runs, and the link emulation's when it is
    on (its writes are held on purpose: :mod:`gnutella_router.net.link_emulation`)."""
    recorder = daemon.recorder
    emulation = daemon.server.link_emulation
    return {
        "router": jsonable(daemon.router.statistics()),
        "server": jsonable(daemon.server.statistics()),
        "catcher": jsonable(daemon.catcher.statistics()),
        "recorder": None if recorder is None else jsonable(recorder.statistics()),
        "link_emulation": None if emulation is None else jsonable(emulation.statistics()),
    }


def node_identity(daemon: RouterView, *, now: float | None = None) -> dict[str, object]:
    """Who and where the node is, and for how long it has been up."""
    moment = _now(now)
    started = daemon.started_at
    admin = daemon.admin_address
    return {
        "guid": daemon.guid.hex(),
        "version": __version__,
        "user_agent": daemon.config.node.user_agent,
        "pid": os.getpid(),
        "listening": [format_address(*a) for a in daemon.server.listen_addresses],
        "advertised": format_address(*daemon.server.advertised_address()),
        "admin": None if admin is None else format_address(*admin),
        "uptime_seconds": None if started is None else _seconds(moment - started),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def redacted_config(daemon: RouterView) -> dict[str, dict[str, object]]:
    """The configuration as plain data, secrets replaced by a marker."""
    config = config_as_dict(daemon.config)
    admin = config.get("admin")
    if admin is not None and admin.get("token"):
        admin["token"] = REDACTED
    return config


def full_dump(
    daemon: RouterView, *, limit: int | None = DEFAULT_ROUTE_LIMIT, now: float | None = None
) -> dict[str, object]:
    """Everything at once: identity, configuration, counters, stages, connections and
    routes (``limit`` entries per table; ``None``: every entry, as the SIGUSR1 file
    holds them)."""
    moment = _now(now)
    return full_dump_around(daemon, snapshot_routes(daemon, limit=limit, now=moment).data(), moment)


def full_dump_around(daemon: RouterView, routes: object, now: float) -> dict[str, object]:
    """:func:`full_dump` with ``routes`` as its routes part (the streamed dumps put a
    :class:`RoutesSnapshot`'s data there, with stand-ins for the entries)."""
    return {
        "node": node_identity(daemon, now=now),
        "config": redacted_config(daemon),
        "stats": dump_stats(daemon),
        "stages": dump_stages(daemon),
        "connections": dump_connections(daemon, now=now),
        "routes": routes,
    }


# --- the task tree --------------------------------------------------------------------


class TaskFrame(TypedDict):
    """One frame of a task's current await."""

    file: str
    line: int | None
    function: str
    source: NotRequired[str | None]
    """The source line, once :func:`add_source_lines` has read it."""


class TaskNode(TypedDict):
    """One trio task and the nurseries it runs."""

    name: str
    frames: list[TaskFrame]
    """Where the task is waiting, outermost frame first."""
    nurseries: list[list[TaskNode]]


def task_tree(root: trio.lowlevel.Task | None = None) -> TaskNode:
    """The trio task tree from ``root`` (the run's root task by default), for SIGUSR1.

    Each task is a :class:`TaskNode`: its name, the frames of its current await, and
    its nurseries' child tasks. Source lines are not read here (that is disk I/O):
    :func:`add_source_lines` does it later, off the trio thread.
    """
    task = trio.lowlevel.current_root_task() if root is None else root
    if task is None:  # pragma: no cover - only outside a trio run
        raise RuntimeError("no trio run is active")
    return _task(task)


def _task(task: trio.lowlevel.Task) -> TaskNode:
    frames = traceback.StackSummary.extract(task.iter_await_frames(), lookup_lines=False)
    return {
        "name": task.name,
        "frames": [
            {"file": frame.filename, "line": frame.lineno, "function": frame.name}
            for frame in frames
        ],
        "nurseries": [
            [_task(child) for child in nursery.child_tasks] for nursery in task.child_nurseries
        ],
    }


def add_source_lines(tree: TaskNode) -> None:
    """Fill in each frame's source line (reads files: call it from a worker thread)."""
    stack = [tree]
    while stack:
        task = stack.pop()
        for frame in task["frames"]:
            line = linecache.getline(frame["file"], frame["line"] or 0).strip()
            frame["source"] = line or None
        for nursery in task["nurseries"]:
            stack.extend(nursery)


def count_tasks(tree: TaskNode) -> int:
    """How many tasks a :func:`task_tree` holds."""
    return 1 + sum(count_tasks(child) for nursery in tree["nurseries"] for child in nursery)
