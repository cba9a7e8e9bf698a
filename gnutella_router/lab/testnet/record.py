"""The record of a running test network: its nodes, their admin interfaces and token.

Tools that join a test network while it runs (the console, ``gnutella-router console``)
need what only the testnet knows: which routers make it up, where each one's admin
interface listens, the run's admin token (control needs it), and the planned links.
Once the network has formed, the testnet writes all of that to ``network.json`` in its
results folder, readable by its owner only (it holds the token), and removes it when the
run ends, so the file's presence, with a live ``pid``, means the network is up.

A node that is restarted (churn) comes back at its old peer address but may get a new
admin port; the record names each node's state folder, where the router's own ready file
(:mod:`gnutella_router.ready_file`) says where its admin interface listens now, and
:meth:`NodeRecord.current_admin` prefers it.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
from pathlib import Path
from typing import Any

from gnutella_router.lab.testnet.nodes import NetworkNode
from gnutella_router.net.connection import format_address
from gnutella_router.ready_file import read_ready_file

__all__ = [
    "RECORD_FILE",
    "NetworkRecord",
    "NodeRecord",
    "RecordError",
    "find_network_record",
    "read_network_record",
    "record_of",
    "remove_network_record",
    "write_network_record",
]

RECORD_FILE = "network.json"
FORMAT = 1


class RecordError(Exception):
    """No usable network record; the message says where it looked and why."""


@dataclasses.dataclass(frozen=True, slots=True)
class NodeRecord:
    """One router of the network as the record names it."""

    name: str
    """``node-3``."""
    address: str | None = None
    """``HOST:PORT`` where its peers dial it."""
    admin: str | None = None
    """``HOST:PORT`` of its admin interface when the record was written."""
    guid: str | None = None
    state_dir: str | None = None
    """Its state folder, whose ready file names its admin interface now."""

    def current_admin(self) -> str | None:
        """Where its admin interface listens now: its ready file's word, else the
        record's."""
        if self.state_dir is not None:
            ready = read_ready_file(Path(self.state_dir))
            if ready is not None and isinstance(ready.get("admin"), str):
                return str(ready["admin"])
        return self.admin


@dataclasses.dataclass(frozen=True, slots=True)
class NetworkRecord:
    """A running test network, as ``network.json`` holds it."""

    nodes: tuple[NodeRecord, ...]
    links: tuple[tuple[int, int], ...] = ()
    """The planned links, ``(dialer, listener)`` by node index."""
    token: str = ""
    pid: int | None = None
    """The testnet's process."""

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "pid": self.pid,
            "written_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "token": self.token,
            "nodes": [dataclasses.asdict(node) for node in self.nodes],
            "links": [list(link) for link in self.links],
        }


def write_network_record(results: Path, record: NetworkRecord) -> Path:
    """Write ``results/network.json`` whole (a temporary file renamed over it), readable
    by its owner only; the path written.

    Raises:
        OSError: it cannot be written.
    """
    path = results / RECORD_FILE
    temporary = path.with_name(f".{RECORD_FILE}.{os.getpid()}")
    text = json.dumps(record.to_json(), indent=2) + "\n"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
    temporary.replace(path)
    return path


def remove_network_record(results: Path) -> None:
    """Remove ``results/network.json`` if it is there."""
    (results / RECORD_FILE).unlink(missing_ok=True)


def find_network_record(where: Path) -> Path:
    """The record at ``where``: the file itself, ``where/network.json``, or else the
    newest ``where/*/network.json`` (a folder that holds one folder per run).

    Raises:
        RecordError: there is none.
    """
    if where.is_file():
        return where
    if not where.is_dir():
        raise RecordError(f"{where}: no such file or folder")
    direct = where / RECORD_FILE
    if direct.is_file():
        return direct
    candidates = [p for p in where.glob(f"*/{RECORD_FILE}") if p.is_file()]
    if not candidates:
        raise RecordError(
            f"no running test network recorded in {where} (no {RECORD_FILE}): start one "
            "with `gnutella-router testnet --duration 0` or name routers with --admin"
        )
    return max(candidates, key=lambda p: p.stat().st_mtime)


def read_network_record(path: Path) -> NetworkRecord:
    """Read a record written by :func:`write_network_record`.

    Raises:
        RecordError: it cannot be read, is not such a record, or its testnet is no
            longer running.
    """
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise RecordError(f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise RecordError(f"{path}: not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise RecordError(f"{path}: not a test network record (format {FORMAT})")
    pid = data.get("pid")
    if isinstance(pid, int) and not _process_alive(pid):
        raise RecordError(f"{path}: the test network that wrote it (pid {pid}) has stopped")
    try:
        nodes = tuple(
            NodeRecord(
                name=str(node["name"]),
                address=_text(node.get("address")),
                admin=_text(node.get("admin")),
                guid=_text(node.get("guid")),
                state_dir=_text(node.get("state_dir")),
            )
            for node in data["nodes"]
        )
        links = tuple((int(a), int(b)) for a, b in data.get("links", ()))
    except (KeyError, TypeError, ValueError) as exc:
        raise RecordError(f"{path}: a malformed node or link ({exc})") from None
    if any(not (0 <= a < len(nodes) and 0 <= b < len(nodes)) for a, b in links):
        raise RecordError(f"{path}: a link names a node that is not in the record")
    token = data.get("token", "")
    return NetworkRecord(
        nodes, links, token if isinstance(token, str) else "", pid if isinstance(pid, int) else None
    )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's: alive all the same
    return True


def record_of(
    nodes: list[NetworkNode], links: tuple[tuple[int, int], ...], token: str
) -> NetworkRecord:
    """The record of a network of ``nodes`` (started), planned ``links`` and admin
    ``token``, written by this process."""
    return NetworkRecord(
        nodes=tuple(
            NodeRecord(
                name=f"{node.label}-{node.index}",
                address=node.peer_name or None,
                admin=None if node.admin_address is None else format_address(*node.admin_address),
                guid=node.guid,
                state_dir=str(node.state_dir.resolve()),
            )
            for node in nodes
        ),
        links=links,
        token=token,
        pid=os.getpid(),
    )
