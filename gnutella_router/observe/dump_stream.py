"""Large dumps without stalling the router: a snapshot at once, JSON text in slices.

Theory of operation
-------------------
Routing, the admin interface and the SIGUSR1 handler share one thread, the trio
thread. The route tables hold up to 100,000 entries each, and turning one entry into
JSON costs several microseconds of Python, so a dump of full tables made at once held
that thread for seconds, with nothing routed meanwhile, and built the whole answer in
memory (docs/robustness.md, "Routing during dumps", has the figures). So a dump is made
in two steps.

1. **The snapshot**, on the trio thread, in one go: the route tables' statistics and
   their entries as they hold them (shallow copies of their dicts, made in C; see
   :meth:`~gnutella_router.routing.route_table.RouteTable.snapshot`), and the rest of the
   dump (identity, configuration, counters, connections) as plain data, which is
   small. No entry is decoded yet. This is the one instant the dump shows, and it takes
   a few milliseconds with 150,000 entries.
2. **The text**, still on the trio thread, but a slice at a time: :func:`write_json`
   turns :data:`SLICE_ENTRIES` entries into JSON, then checkpoints
   (``trio.lowlevel.checkpoint()``), so that every other task (the readers, the
   router's workers, the writers) runs between two slices. The text leaves in chunks
   of about ``chunk_bytes`` as it is made: down the HTTP connection, or into the dump
   file (written by a worker thread). What is held meanwhile is the snapshot (tens of
   bytes per entry) and one chunk, and all of it is dropped when the dump ends, however
   it ends.

The text is not made in a worker thread because making it is Python work, which holds
the GIL. The trio thread gives the GIL up at every system call (every socket read and
write), and each time it wants it back it waits for the worker to let go, up to
``sys.getswitchinterval()`` (5 ms). In a quick test, a ping echoed through a trio loop
while a thread encoded JSON took up to 10 ms, and the loop went round a third as often
as with the same work done in slices on the loop. On the loop, the wait is bounded by
one slice instead.

The text is byte for byte what ``json.dumps`` of the whole dump gives (with the same
options). The plain part is encoded by :class:`json.JSONEncoder`'s incremental encoder,
with a stand-in string where each table's entry list goes (see :class:`JsonDocument`).
When the encoder yields a stand-in, the entries are encoded in its place, a slice at a
time, by the C encoder.
"""

from __future__ import annotations

import enum
import json
import secrets
from collections.abc import Awaitable, Callable, Iterator
from itertools import islice

import trio

from gnutella_router.observe.dumps import (
    DEFAULT_ROUTE_LIMIT,
    RoutesSnapshot,
    TablePage,
    full_dump_around,
    snapshot_routes,
)
from gnutella_router.observe.view import RouterView

__all__ = [
    "CHUNK_BYTES",
    "SLICE_ENTRIES",
    "JsonDocument",
    "JsonStyle",
    "full_dump_document",
    "routes_document",
    "write_json",
]

SLICE_ENTRIES = 256
"""Route entries formatted between two checkpoints: 1 to 2 ms of work on the machine
the figures in docs/robustness.md come from."""
SLICE_PIECES = 2048
"""Pieces of the plain part encoded between two checkpoints: well under a millisecond
(the plain part is a few thousand pieces unless hundreds of peers are connected)."""
CHUNK_BYTES = 64 * 1024
"""Text gathered before it is written: one HTTP chunk."""

Rows = Callable[[], Iterator[dict[str, object]]]
"""What stands behind a stand-in: a call that gives the list's items, one by one."""
Write = Callable[[bytes], Awaitable[object]]
"""Where the text goes: an async call per chunk."""


class JsonStyle(enum.Enum):
    """The two ways the dumps are written, each as ``json.dumps`` would write them."""

    COMPACT = "compact"
    """The admin interface: ``json.dumps(data, allow_nan=False, separators=(",", ":"))``
    and a newline."""
    INDENTED = "indented"
    """The SIGUSR1 file: ``json.dumps(data, indent=1, default=str)``."""

    def encoder(self) -> json.JSONEncoder:
        """The encoder for the plain part, as ``json.dumps`` sets it up."""
        if self is JsonStyle.COMPACT:
            return json.JSONEncoder(allow_nan=False, separators=(",", ":"))
        return json.JSONEncoder(indent=1, default=str)

    @property
    def ending(self) -> str:
        return "\n" if self is JsonStyle.COMPACT else ""


class JsonDocument:
    """Plain data for JSON in which some values stand in for long lists of items.

    :meth:`stand_in` gives a string to put in the data, as the value of a dict key,
    where a list goes; :func:`write_json` writes the items in its place. The string has
    a random part, so no other text in the data can be taken for it.
    """

    __slots__ = ("_lists", "_token", "_used", "data")

    def __init__(self) -> None:
        self.data: object = None
        self._token = secrets.token_hex(8)
        self._lists: dict[str, Rows] = {}
        self._used = 0

    def stand_in(self, name: str, rows: Rows) -> str:
        """The value to put where the list ``rows`` gives goes; ``name`` is for the
        reader of a stray stand-in (there should be none)."""
        marker = f"<list {name} {self._token} {len(self._lists)}>"
        self._lists[json.dumps(marker)] = rows
        return marker

    def rows(self, encoded: str) -> Rows | None:
        """The list behind a stand-in, given as the encoder wrote it; None for any
        other piece of text."""
        rows = self._lists.get(encoded)
        if rows is not None:
            self._used += 1
        return rows

    def check_used(self) -> None:
        """Raise unless every stand-in was met once as a piece of its own: one put
        anywhere but as a dict's value would be written as the string it is."""
        if self._used != len(self._lists):
            raise RuntimeError(
                f"{len(self._lists)} lists stood in for, {self._used} written in their place"
            )


def routes_document(snapshot: RoutesSnapshot) -> JsonDocument:
    """The ``/routes`` answer of ``snapshot``, its entries to be formatted as written."""
    document = JsonDocument()
    document.data = snapshot.data(_stand_in(document, snapshot))
    return document


def full_dump_document(
    daemon: RouterView,
    *,
    limit: int | None = DEFAULT_ROUTE_LIMIT,
    now: float | None = None,
    extra: dict[str, object] | None = None,
) -> JsonDocument:
    """:func:`~.dumps.full_dump` taken now (on the trio thread), with ``extra`` keys
    after its own, its route entries to be formatted as written."""
    moment = trio.current_time() if now is None else now
    snapshot = snapshot_routes(daemon, limit=limit, now=moment)
    document = JsonDocument()
    data = full_dump_around(daemon, snapshot.data(_stand_in(document, snapshot)), moment)
    data.update(extra or {})
    document.data = data
    return document


def _stand_in(document: JsonDocument, snapshot: RoutesSnapshot) -> Callable[[TablePage], str]:
    def stand_in(table: TablePage) -> str:
        return document.stand_in(table.statistics.name, lambda: snapshot.rows(table))

    return stand_in


async def write_json(
    document: JsonDocument,
    style: JsonStyle,
    write: Write,
    *,
    chunk_bytes: int = CHUNK_BYTES,
) -> int:
    """Write ``document`` as JSON text in ``style``, in chunks, with checkpoints.

    Runs on the trio thread and lets the other tasks run between slices (see the module
    notes). Whatever ``write`` raises (a client gone, a disk full) ends the writing.

    Returns:
        The bytes written.
    """
    out = _Chunks(write, chunk_bytes)
    indent = 0  # spaces at the start of the line being written (INDENTED only)
    pieces = 0
    for piece in style.encoder().iterencode(document.data):
        rows = document.rows(piece)
        if rows is not None:
            await _write_list(rows(), style, indent, out)
            continue
        newline = piece.rfind("\n")  # a newline is always a separator's: strings escape it
        if newline >= 0:
            indent = len(piece) - newline - 1
        out.add(piece)
        pieces += 1
        if pieces % SLICE_PIECES == 0:
            await out.rest()
    document.check_used()
    out.add(style.ending)
    await out.flush()
    return out.written


async def _write_list(
    rows: Iterator[dict[str, object]], style: JsonStyle, indent: int, out: _Chunks
) -> None:
    """The list ``rows`` gives, as the encoder would write it at this point: the
    opening bracket follows a key on a line indented by ``indent`` spaces."""
    batches = iter(lambda: list(islice(rows, SLICE_ENTRIES)), [])
    first = True
    if style is JsonStyle.COMPACT:
        compact = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
        for batch in batches:
            out.add(("[" if first else ",") + compact.encode(batch)[1:-1])
            first = False
            await out.rest()
        out.add("[]" if first else "]")
        return
    item = " " * (indent + 1)
    key = item + " "
    # The C encoder with indent=1's separators at this depth: one key to a line.
    indented = json.JSONEncoder(separators=(",\n" + key, ": "), default=str)
    for batch in batches:
        text = ",\n".join(f"{item}{{\n{key}{indented.encode(row)[1:-1]}\n{item}}}" for row in batch)
        out.add(("[\n" if first else ",\n") + text)
        first = False
        await out.rest()
    out.add("[]" if first else "\n" + " " * indent + "]")


class _Chunks:
    """Text gathered into chunks of about ``size`` bytes for ``write``."""

    __slots__ = ("_held", "_pieces", "_size", "_write", "written")

    def __init__(self, write: Write, size: int) -> None:
        self._write = write
        self._size = size
        self._pieces: list[str] = []
        self._held = 0
        self.written = 0

    def add(self, text: str) -> None:
        self._pieces.append(text)
        self._held += len(text)

    async def rest(self) -> None:
        """The end of a slice: write a full chunk, then let the other tasks run."""
        if self._held >= self._size:
            await self.flush()
        await trio.lowlevel.checkpoint()

    async def flush(self) -> None:
        data = "".join(self._pieces).encode()
        self._pieces.clear()
        self._held = 0
        if data:
            await self._write(data)
            self.written += len(data)
