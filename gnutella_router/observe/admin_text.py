"""The admin interface's JSON views as aligned text tables, for people.

``gnutella-router dump`` prints them and the console (:mod:`gnutella_router.lab.console`)
shows them for any node of a network: each formatter takes one page's decoded JSON
(``/routes``, ``/connections``, ``/qrp``, ``/stats``, ``/stages``, ``/dump``) and
reads it defensively, so a field an older router lacks shows as ``-`` rather than
failing. :func:`view_path` names the page (and query) that serves each view.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence

# --- fetching ---------------------------------------------------------------------------


def view_path(
    view: str,
    *,
    table: str | None = None,
    guid: str | None = None,
    limit: int | None = None,
    offset: int = 0,
    keyword: str | None = None,
) -> str:
    """The admin interface path (and query) that serves ``view``."""
    params: dict[str, str] = {}
    if limit is not None:
        params["limit"] = str(limit)
    if view == "routes":
        if table:
            params["table"] = table
        if guid:
            params["guid"] = guid
        if offset:
            params["offset"] = str(offset)
        path = "/routes"
    elif view == "qrp":
        if keyword:
            params["keyword"] = keyword
        path = "/qrp"
    else:
        path = {"connections": "/connections", "stats": "/stats", "queues": "/stages"}.get(
            view, "/dump"
        )
    return path + ("?" + urllib.parse.urlencode(params) if params else "")


# --- tables -----------------------------------------------------------------------------


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Rows under headers in aligned columns; numbers are right-aligned."""
    cells = [[_cell(value) for value in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for index, text in enumerate(row):
            widths[index] = max(widths[index], len(text))
    numeric = [
        bool(rows) and all(isinstance(row[i], int | float) or row[i] is None for row in rows)
        for i in range(len(headers))
    ]

    def line(texts: Sequence[str]) -> str:
        parts = [
            text.rjust(width) if right else text.ljust(width)
            for text, width, right in zip(texts, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), *(line(row) for row in cells)])


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value else "0"
    return str(value)


def _pairs(title: str, values: Mapping[str, object]) -> str:
    width = max((len(k) for k in values), default=0)
    lines = [title]
    lines.extend(f"  {key.ljust(width)}  {_cell(value)}" for key, value in values.items())
    return "\n".join(lines)


def _mapping(value: object) -> dict[str, object]:
    return dict(value) if isinstance(value, Mapping) else {}


def _list(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else []


def _number(value: object) -> int:
    return value if isinstance(value, int) else 0


def _count_text(counts: object) -> str:
    pairs = [f"{k}={v}" for k, v in _mapping(counts).items() if v]
    return ", ".join(pairs) or "-"


def format_routes(data: object) -> str:
    """The ``/routes`` answer as one table per route table."""
    blocks = []
    for name, table in _mapping(_mapping(data).get("tables")).items():
        t = _mapping(table)
        s = _mapping(t.get("statistics"))
        entries = [_mapping(e) for e in _list(t.get("entries"))]
        first = _number(_mapping(data).get("offset")) + 1
        shown = (
            f"{first}-{first + len(entries) - 1} of {s.get('size')}"
            if entries
            else f"none of {s.get('size')}"
        )
        more = " (more: --offset)" if t.get("truncated") else ""
        title = (
            f"{name} routes: {shown}{more}"
            f" (capacity {s.get('capacity')} per generation of {_cell(s.get('generation_seconds'))}"
            f" s; recorded {s.get('recorded')}, lookups {s.get('lookups')},"
            f" misses {s.get('misses')})"
        )
        rows = [
            [
                e.get("guid"),
                e.get("next_hop"),
                e.get("connection")
                if e.get("connected", True)
                else f"{e.get('connection')} (gone)",
                e.get("ttl"),
                e.get("hops"),
                e.get("hits"),
                e.get("age"),
                e.get("recorded_at_iso"),
                e.get("generation"),
            ]
            for e in entries
        ]
        headers = ["GUID", "NEXT HOP", "CONN", "TTL", "HOPS", "HITS", "AGE S", "RECORDED (UTC)"]
        table_text = format_table([*headers, "GENERATION"], rows) if rows else "  (no entries)"
        blocks.append(f"{title}\n{table_text}")
    return "\n\n".join(blocks)


def _connection_cell(entry: Mapping[str, object]) -> object:
    connection = entry.get("connection")
    return connection if entry.get("connected", True) else f"{connection} (gone)"


def _capabilities(caps: Mapping[str, object]) -> str:
    flags = []
    if caps.get("ultrapeer"):
        flags.append("ultrapeer")
    elif caps.get("ultrapeer") is False:
        flags.append("leaf")
    for key, label in (
        ("bye_packet", "bye"),
        ("pong_caching", "pong-caching"),
        ("ggep", "ggep"),
        ("vendor_messages", "vendor"),
        ("deflate_in", "deflate-in"),
        ("deflate_out", "deflate-out"),
    ):
        if caps.get(key):
            flags.append(label)
    return ",".join(flags) or "-"


def format_connections(data: object) -> str:
    """The ``/connections`` answer as one table."""
    connections = [_mapping(c) for c in _list(data)]
    rows = []
    for c in connections:
        queue = _mapping(c.get("outgoing"))
        flow = _mapping(c.get("flow_control"))
        rows.append(
            [
                c.get("id"),
                c.get("peer"),
                c.get("role"),
                c.get("user_agent"),
                _capabilities(_mapping(c.get("capabilities"))),
                queue.get("pending_messages"),
                queue.get("pending_bytes"),
                f"yes {_cell(flow.get('seconds'))}s" if flow.get("active") else "no",
                c.get("messages_in"),
                c.get("bytes_in"),
                c.get("messages_out"),
                c.get("bytes_out"),
                _count_text(queue.get("dropped")),
                c.get("age_seconds"),
            ]
        )
    title = f"connections: {len(connections)}"
    if not rows:
        return f"{title}\n  (none)"
    headers = [
        "ID",
        "PEER",
        "ROLE",
        "USER AGENT",
        "CAPABILITIES",
        "QUEUED",
        "QUEUED B",
        "FLOW CTL",
        "MSGS IN",
        "BYTES IN",
        "MSGS OUT",
        "BYTES OUT",
        "DROPPED OUT",
        "AGE S",
    ]
    return f"{title}\n{format_table(headers, rows)}"


def format_stats(data: object) -> str:
    """The ``/stats`` answer: messages by type, drops by reason, server, catcher."""
    stats = _mapping(data)
    router = _mapping(stats.get("router"))
    kinds = ("received", "forwarded", "generated", "consumed")
    columns = {kind: _mapping(router.get(kind)) for kind in kinds}
    dropped = {
        reason: _mapping(by_type) for reason, by_type in _mapping(router.get("dropped")).items()
    }
    types: list[str] = []
    for counts in [*columns.values(), *dropped.values()]:
        types.extend(t for t in counts if t not in types)
    rows = [
        [
            t,
            *(columns[k].get(t, 0) for k in kinds),
            sum(_number(d.get(t)) for d in dropped.values()),
        ]
        for t in types
    ]
    blocks = [
        "messages by type\n"
        + (
            format_table(
                ["TYPE", "RECEIVED", "FORWARDED", "GENERATED", "CONSUMED", "DROPPED"], rows
            )
            if rows
            else "  (none yet)"
        )
    ]
    drop_rows = [
        [reason, t, count] for reason, by_type in dropped.items() for t, count in by_type.items()
    ]
    if drop_rows:
        blocks.append("drops by reason\n" + format_table(["REASON", "TYPE", "COUNT"], drop_rows))
    server = _mapping(stats.get("server"))
    blocks.append(
        _pairs(
            "server",
            {
                "listening": ", ".join(str(a) for a in _list(server.get("listening"))),
                "connections": server.get("connections"),
                "incoming": server.get("incoming"),
                "outgoing": server.get("outgoing"),
                "handshakes in progress": server.get("handshakes_in_progress"),
                "accepted": server.get("accepted"),
                "completed": _count_text(server.get("completed")),
                "refused": _count_text(server.get("refused")),
                "timed out": _count_text(server.get("timed_out")),
                "evicted": server.get("evicted"),
                "closed": server.get("closed"),
            },
        )
    )
    catcher = _mapping(stats.get("catcher"))
    hosts = _mapping(catcher.get("hosts"))
    blocks.append(
        _pairs(
            "catcher",
            {
                "outgoing / target": f"{catcher.get('outgoing')} / {catcher.get('target')}",
                "dialing": catcher.get("dialing"),
                "dials": catcher.get("dials"),
                "dial failures": catcher.get("dial_failures"),
                "host cache": f"{hosts.get('size')} of {hosts.get('capacity')}",
                "gwebcache requests": catcher.get("gwebcache_requests"),
                "host cache saves": catcher.get("saves"),
            },
        )
    )
    blocks.append(
        _pairs(
            "router tables",
            {
                "pong cache": router.get("pong_cache_size"),
                "pongs not cached": _count_text(router.get("pongs_not_cached")),
            },
        )
    )
    return "\n\n".join(blocks)


def format_queues(data: object) -> str:
    """The ``/stages`` answer: a row per stage, then the governor."""
    stages = _mapping(_mapping(data).get("stages"))
    rows = []
    for name, value in stages.items():
        stage = _mapping(value)
        queue = _mapping(stage.get("queue"))
        if not queue:
            continue  # registered parts that are not stages (the server, the admin)
        rows.append(
            [
                name,
                queue.get("length"),
                queue.get("threshold"),
                queue.get("peak"),
                queue.get("refused"),
                stage.get("pool_size"),
                stage.get("workers"),
                stage.get("busy_workers"),
                stage.get("events"),
                stage.get("handler_errors"),
            ]
        )
    headers = [
        "STAGE",
        "QUEUE",
        "THRESHOLD",
        "PEAK",
        "REFUSED",
        "POOL",
        "WORKERS",
        "BUSY",
        "EVENTS",
        "ERRORS",
    ]
    blocks = ["stages\n" + (format_table(headers, rows) if rows else "  (none)")]
    governor = _mapping(data).get("governor")
    if isinstance(governor, Mapping):
        shown = {k: v for k, v in governor.items() if not isinstance(v, list | dict)}
        blocks.append(_pairs("governor", shown))
    else:
        blocks.append("governor: off")
    return "\n\n".join(blocks)


def format_all(data: object) -> str:
    """The ``/dump`` answer: identity, then every other view."""
    dump = _mapping(data)
    node = _mapping(dump.get("node"))
    identity = {
        key: (", ".join(str(v) for v in value) if isinstance(value, list) else value)
        for key, value in node.items()
    }
    return "\n\n".join(
        [
            _pairs("node", identity),
            format_stats(dump.get("stats")),
            format_queues(dump.get("stages")),
            format_connections(dump.get("connections")),
            format_routes(dump.get("routes")),
        ]
    )


def format_qrp(data: object) -> str:
    """The ``/qrp`` answer: one row per peer, leaves and ultrapeers, with its table."""
    answer = _mapping(data)
    keyword = answer.get("keyword")
    peers = [_mapping(p) for p in _list(answer.get("peers"))]
    headers = ["ID", "PEER", "KIND", "TABLES", "SLOTS", "FILLED"]
    if keyword is not None:
        headers.append("GETS IT")
    rows = []
    for peer in peers:
        row: list[object] = [
            peer.get("id"),
            peer.get("peer"),
            "leaf" if peer.get("leaf") else "ultrapeer",
            peer.get("tables_received"),
            peer.get("slots"),
            peer.get("filled"),
        ]
        if keyword is not None:
            row.append("yes" if peer.get("would_receive") else "no")
        rows.append(row)
    words = ", ".join(str(w) for w in _list(answer.get("words")))
    title = f"qrp: our leaves' table has {_cell(answer.get('leaves_table_filled'))} slots filled"
    if keyword is not None:
        title += f"; keyword {keyword!r} hashes as the words: {words or '(none of 3+ letters)'}"
    if not rows:
        return f"{title}\n  (no peers)"
    return f"{title}\n{format_table(headers, rows)}"


FORMATTERS = {
    "routes": format_routes,
    "connections": format_connections,
    "qrp": format_qrp,
    "stats": format_stats,
    "queues": format_queues,
    "all": format_all,
}
