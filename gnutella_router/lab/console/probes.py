"""What the routers' route tables say of one GUID: who saw it, when, from whom, how far.

A router records the first copy of every ping and query it routes (and every servent
GUID it learns from a query hit) in a route table: where it came from (the previous
node, by its listening address), the TTL and hops it arrived with, when (to the
millisecond, as wall-clock time), and how many replies went back through it. Those
tables are bounded and expire on their own (:mod:`gnutella_router.routing.route_table`), so
they are the routers' own record of recent GUIDs, and the console needs no other: read
every node's entry for a GUID (``/routes?guid=``) and the GUID's spread is known.

This module turns those entries, as JSON, into a :class:`Spread` per route table and
into text: ``reach``'s table, ``pingall``'s summary and ``follow``'s tree. The hops shown
are the distance from the node that sent it (a message arrives at a neighbour with hops
0), times are milliseconds after the origin recorded it. No I/O here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from gnutella_router.observe.admin_text import format_table

__all__ = ["Sighting", "Spread", "follow_text", "pingall_text", "reach_text", "sightings_in"]

LOCAL = "local"
"""How a route entry names the node itself: the message is its own."""


@dataclasses.dataclass(frozen=True, slots=True)
class Sighting:
    """One node's route entry for a GUID."""

    node: str
    table: str
    hops: int
    """Hops the first copy arrived with (0 from a neighbour of the sender)."""
    ttl: int
    """TTL it arrived with (the TTL sent, at the origin)."""
    at: float
    """When it was recorded: Unix time, to the millisecond."""
    came_from: str
    """The previous hop's listening address, or ``local`` at the origin."""
    replies: int
    """Replies routed back through this entry."""

    @property
    def origin(self) -> bool:
        return self.came_from == LOCAL

    @property
    def distance(self) -> int:
        """Hops from the node that sent it: 0 there, 1 at its neighbours."""
        return 0 if self.origin else self.hops + 1


def sightings_in(node: str, page: object) -> list[Sighting]:
    """The entries of a ``/routes?guid=`` answer from ``node``, one per table holding
    the GUID; malformed entries are left out."""
    tables = page.get("tables") if isinstance(page, Mapping) else None
    found: list[Sighting] = []
    if not isinstance(tables, Mapping):
        return found
    for table, content in tables.items():
        entries = content.get("entries") if isinstance(content, Mapping) else None
        for entry in entries if isinstance(entries, list) else ():
            try:
                found.append(
                    Sighting(
                        node=node,
                        table=str(table),
                        hops=int(entry["hops"]),
                        ttl=int(entry["ttl"]),
                        at=float(entry["recorded_at"]),
                        came_from=str(entry["next_hop"]),
                        replies=int(entry.get("hits") or 0),
                    )
                )
            except (KeyError, TypeError, ValueError):
                continue
    return found


@dataclasses.dataclass(frozen=True, slots=True)
class Spread:
    """Where one GUID went in one route table, over the nodes that were read."""

    guid: str
    table: str
    sightings: tuple[Sighting, ...]
    """One per node that holds it, earliest first."""
    missing: tuple[str, ...]
    """Nodes read that do not hold it."""
    unread: tuple[tuple[str, str], ...] = ()
    """Nodes that could not be read, and why."""

    @classmethod
    def of(
        cls,
        guid: str,
        table: str,
        found: Mapping[str, Sequence[Sighting]],
        unread: Mapping[str, str] | None = None,
    ) -> Spread:
        """From every read node's sightings (``found``: node -> its sightings, empty
        for a node that does not hold the GUID)."""
        sightings = [s for node in found.values() for s in node if s.table == table]
        sightings.sort(key=lambda s: (s.at, s.distance, s.node))
        holding = {s.node for s in sightings}
        return cls(
            guid,
            table,
            tuple(sightings),
            tuple(node for node in found if node not in holding),
            tuple((unread or {}).items()),
        )

    @property
    def origin(self) -> Sighting | None:
        return next((s for s in self.sightings if s.origin), None)

    @property
    def start(self) -> float:
        """When it left its origin (or, from outside, reached the first node)."""
        origin = self.origin
        return origin.at if origin is not None else min((s.at for s in self.sightings), default=0)

    def milliseconds(self, sighting: Sighting) -> int:
        return round((sighting.at - self.start) * 1000)

    def reached(self) -> list[Sighting]:
        """The sightings of nodes other than the origin."""
        return [s for s in self.sightings if not s.origin]


def _node_of(sighting: Sighting, names: Mapping[str, str]) -> str:
    if sighting.origin:
        return "-"
    return names.get(sighting.came_from, f"{sighting.came_from} (not a node)")


def reach_text(spread: Spread, names: Mapping[str, str], *, kind: str, origin: str) -> str:
    """``reach``'s answer: a heading, then a row per node that got it.

    Args:
        spread: the probe's spread in its table.
        names: node name by listening address, to name the previous hops.
        kind: ``query`` or ``ping``.
        origin: the node that sent it.
    """
    reached = spread.reached()
    everyone = {s.node for s in spread.sightings} | set(spread.missing)
    others = len((everyone | {node for node, _ in spread.unread}) - {origin})
    sent = spread.origin
    heading = f"{kind} {spread.guid} from {origin}"
    if sent is not None:
        heading += f", TTL {sent.ttl}"
    heading += f": reached {len(reached)} of {others} other node{'s' * (others != 1)}"
    if reached:
        farthest = max(s.distance for s in reached)
        last = max(spread.milliseconds(s) for s in reached)
        heading += f", farthest {farthest} hop{'s' * (farthest != 1)}, last {last} ms after it left"
    if sent is not None and sent.replies:
        heading += f"; {sent.replies} repl{'ies' if sent.replies != 1 else 'y'} came back"
    rows = [
        [
            s.node,
            s.distance,
            spread.milliseconds(s),
            _node_of(s, names),
            s.ttl,
            s.replies,
        ]
        for s in spread.sightings
    ]
    lines = [heading]
    if rows:
        lines.append(format_table(["NODE", "HOPS", "AFTER MS", "FROM", "TTL IN", "REPLIES"], rows))
    lines.extend(_shortfalls(spread, exclude=origin))
    return "\n".join(lines)


def _shortfalls(spread: Spread, *, exclude: str = "", missing_as: str = "not reached") -> list[str]:
    lines = []
    missing = [node for node in spread.missing if node != exclude]
    if missing:
        lines.append(f"{missing_as}: " + " ".join(missing))
    lines.extend(f"not read: {node}: {why}" for node, why in spread.unread)
    return lines


def pingall_text(spreads: Mapping[str, Spread], nodes: Sequence[str]) -> str:
    """``pingall``'s answer: for every origin the nodes its probe reached (``X`` for
    each it did not), then the share of pairs not reached."""
    lines = []
    pairs = reached_pairs = 0
    for origin in nodes:
        spread = spreads.get(origin)
        holding = set() if spread is None else {s.node for s in spread.sightings}
        cells = []
        for other in nodes:
            if other == origin:
                continue
            pairs += 1
            if other in holding:
                reached_pairs += 1
                cells.append(other)
            else:
                cells.append("X")
        lines.append(f"{origin} -> {' '.join(cells) or '(no other node)'}")
        if spread is not None:
            lines.extend(f"  not read: {node}: {why}" for node, why in spread.unread)
    missed = pairs - reached_pairs
    share = round(100 * missed / pairs) if pairs else 0
    lines.append(f"*** not reached: {share}% ({reached_pairs}/{pairs} pairs reached)")
    return "\n".join(lines)


def follow_text(spreads: Sequence[Spread], names: Mapping[str, str]) -> str:
    """``follow``'s answer: per route table holding the GUID, its path as a tree (each
    node under the node it got the GUID from, with hops and milliseconds)."""
    if not spreads or not any(s.sightings for s in spreads):
        guid = spreads[0].guid if spreads else "?"
        lines = [f"{guid}: in no node's route tables (never seen, or expired)"]
        if spreads:
            lines.extend(_shortfalls(spreads[0], missing_as="not held by"))
        return "\n".join(lines)
    blocks = []
    for spread in spreads:
        if not spread.sightings:
            continue
        title = f"{spread.table} {spread.guid}: held by {len(spread.sightings)} node"
        title += "s" * (len(spread.sightings) != 1)
        shortfalls = _shortfalls(spread, missing_as="not held by")
        blocks.append("\n".join([title, *_tree(spread, names), *shortfalls]))
    return "\n\n".join(blocks)


def _tree(spread: Spread, names: Mapping[str, str]) -> list[str]:
    holders = {s.node: s for s in spread.sightings}
    children: dict[str, list[Sighting]] = {}
    roots: list[Sighting] = []
    for sighting in spread.sightings:
        parent = None if sighting.origin else names.get(sighting.came_from)
        if parent is None or parent not in holders or parent == sighting.node:
            roots.append(sighting)
        else:
            children.setdefault(parent, []).append(sighting)
    lines: list[str] = []
    shown: set[str] = set()

    def label(s: Sighting) -> str:
        if s.origin:
            return f"{s.node}  (sent it, TTL {s.ttl}; {s.replies} replies back)"
        where = "" if s.came_from in names else f"  from {s.came_from}, not a node"
        return (
            f"{s.node}  hops {s.distance}  +{spread.milliseconds(s)} ms  TTL in {s.ttl}"
            f"  replies {s.replies}{where}"
        )

    def draw(s: Sighting, prefix: str, last: bool, top: bool) -> None:
        shown.add(s.node)
        lines.append(label(s) if top else f"{prefix}{'`-- ' if last else '|-- '}{label(s)}")
        below = [c for c in children.get(s.node, []) if c.node not in shown]
        inner = "" if top else prefix + ("    " if last else "|   ")
        for index, child in enumerate(below):
            draw(child, inner, index == len(below) - 1, False)

    for root in roots:
        draw(root, "", True, True)
    # A loop in the recorded path (an entry replaced after expiry) leaves nodes unshown.
    lines.extend(label(s) for s in spread.sightings if s.node not in shown)
    return lines
