"""Foreign servents in a test network: started from a command, linked in, reported; and
the ``--seed`` servents that run already.

A router is only half of an interop study: ``--servent 'COMMAND with {port} and
{dir}' --servents N`` starts N other servents (gtk-gnutella, or anything that speaks
Gnutella 0.6) as processes beside the routers (:class:`~.children.ServentNode`). Each is
linked with :data:`LINKS_PER_SERVENT` routers, drawn with the run's seed: those routers
get it as a catcher seed and one more outgoing connection to keep, so they dial it as
they dial any seed. A servent has no admin interface; what it did is read from the
routers' side, from their connections to it (its user agent, messages and bytes both
ways), and reported with it; and, when its wrapper offers them, from the servent's
own drop counters, read once before anything is stopped (:mod:`.servent_stats`).
"""

from __future__ import annotations

import contextlib
import random
import shlex
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from gnutella_router.config import parse_host_port
from gnutella_router.lab.testnet.children import ServentNode
from gnutella_router.lab.testnet.nodes import NetworkNode, NodeFailure
from gnutella_router.lab.testnet.servent_stats import drop_counters, stats_command
from gnutella_router.net.connection import format_address

LINKS_PER_SERVENT = 2
COUNTERS = ("messages_in", "messages_out", "bytes_in", "bytes_out")
LOOPBACK = "127.0.0.1"
STATS_SECONDS = 15.0
"""How long a wrapper's stats command may take."""
STATS_FILE = "stats-drop.txt"
"""Where a servent's folder keeps what its stats command printed."""


def free_port(host: str = LOOPBACK) -> int:
    """A port nothing listens on now (the servent binds it a moment later; a clash is
    reported as that servent not starting)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def free_router_port(host: str = LOOPBACK) -> int:
    """A port nothing uses now whose next port is free too: a router started there with
    no ``admin.listen`` puts its admin interface on the next port, and exits if it cannot
    (for scripts and tests that start routers on a free port)."""
    for _ in range(100):
        port = free_port(host)
        if port >= 65535:
            continue
        with socket.socket() as probe:
            try:
                probe.bind((host, port + 1))
            except OSError:
                continue
        return port
    raise OSError(f"no two free ports side by side on {host}")


def attachments(servents: int, routers: int, seed: int) -> list[list[int]]:
    """For each servent, the routers that dial it: :data:`LINKS_PER_SERVENT` of them
    (all, when there are fewer), drawn with ``seed``."""
    rng = random.Random(f"servents:{seed}")
    return [
        sorted(rng.sample(range(routers), min(LINKS_PER_SERVENT, routers))) for _ in range(servents)
    ]


class ServentSet:
    """The run's foreign servents, and which routers they are linked with."""

    def __init__(self, command: str, count: int, routers: int, results: Path, seed: int) -> None:
        self.command = command
        self.links = attachments(count, routers, seed)
        self.results = results
        self.nodes: list[ServentNode] = []
        self.drops: dict[int, dict[str, int]] = {}
        """Each servent's own drop counters, by servent, once read (:meth:`read_drops`)."""
        self.drop_errors: dict[int, str] = {}
        """Why a servent's counters could not be read, where its wrapper offers them."""

    def folder(self, index: int) -> Path:
        return self.results / f"servent-{index}"

    def create(
        self,
        addresses: Sequence[tuple[str, int]],
        *,
        prefixes: Sequence[Sequence[str]] = (),
        on_failure: Any = None,
        start_timeout: float,
    ) -> list[ServentNode]:
        self.nodes = [
            ServentNode(
                index,
                self.folder(index),
                self.command,
                address,
                prefix=prefixes[index] if prefixes else (),
                on_failure=on_failure,
                start_timeout=start_timeout,
            )
            for index, address in enumerate(addresses)
        ]
        return self.nodes

    def seeds_for(self, router: int) -> list[str]:
        """``HOST:PORT`` of the running servents ``router`` dials."""
        return [
            format_address(*servent.listen)
            for servent, routers in zip(self.nodes, self.links, strict=True)
            if router in routers and servent.running()
        ]

    def missing_links(self, routers: Sequence[NetworkNode]) -> list[str]:
        """Planned router-to-servent links that are not up (between running ends)."""
        return [
            f"node-{router} -> servent-{servent.index} ({servent.peer_name})"
            for servent, linked in zip(self.nodes, self.links, strict=True)
            if servent.running()
            for router in linked
            if routers[router].running() and not routers[router].view.has_peer(servent.peer_name)
        ]

    async def read_drops(self) -> None:
        """Read the drop counters of every running servent whose wrapper offers them
        (its ``ready:`` line names a stats command), all at once."""
        async with trio.open_nursery() as nursery:
            for servent in self.nodes:
                if servent.running():
                    nursery.start_soon(self.read_servent_drops, servent)

    async def read_servent_drops(self, servent: ServentNode) -> None:
        """Read one servent's drop counters with the command its wrapper's ``ready:``
        line offers (none offered: nothing read); a failure is kept for the report, and
        what the command printed goes into the servent's folder."""
        try:
            output = servent.log_path.read_text("utf-8", "replace")
        except OSError:
            return
        command = stats_command(output)
        if command is None:
            return
        where = f"`{shlex.join(command)}`"
        try:
            with trio.fail_after(STATS_SECONDS):
                done = await trio.run_process(
                    command, stdin=b"", capture_stdout=True, capture_stderr=True, check=False
                )
        except OSError as exc:
            self.drop_errors[servent.index] = f"{where}: {exc.strerror or exc}"
            return
        except trio.TooSlowError:
            self.drop_errors[servent.index] = f"{where} took over {STATS_SECONDS:g} s"
            return
        text = done.stdout.decode("utf-8", "replace")
        with contextlib.suppress(OSError):
            (servent.state_dir / STATS_FILE).write_text(text)
        if done.returncode != 0:
            said = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
            self.drop_errors[servent.index] = (
                f"{where} exited with {done.returncode}{': ' + said[0] if said else ''}"
            )
            return
        try:
            self.drops[servent.index] = drop_counters(text)
        except ValueError as exc:
            self.drop_errors[servent.index] = f"{where}: {exc}"

    def report(self, pages: Sequence[Any], failures: Sequence[NodeFailure]) -> list[dict[str, Any]]:
        """Each servent as the routers saw it, from their ``/connections`` pages."""
        rows = []
        failed = {f.node: f.describe() for f in failures if f.kind == "servent"}
        for index, servent in enumerate(self.nodes):
            name = format_address(*servent.listen)
            seen = [
                {
                    "router": router,
                    "role": connection.get("role"),
                    "user_agent": connection.get("user_agent"),
                    **{key: connection.get(key) for key in COUNTERS},
                }
                for router, page in enumerate(pages)
                for connection in (page if isinstance(page, list) else [])
                if isinstance(connection, dict)
                and name in (connection.get("peer"), connection.get("listen_address"))
            ]
            rows.append(
                {
                    "servent": index,
                    "address": name,
                    "command": servent.argv() if servent.process is not None else None,
                    "pid": servent.pid,
                    "exit_status": servent.exit_status,
                    "linked_with": self.links[index],
                    "connected_routers": sorted({int(str(s["router"])) for s in seen}),
                    "connections": seen,
                    "failure": failed.get(index),
                    "drops": _drops(self.drops.get(index)),
                    "drops_error": self.drop_errors.get(index),
                }
            )
        return rows


def _drops(counters: dict[str, int] | None) -> dict[str, Any] | None:
    """A servent's drop counters for the summary: the total and the reasons that count."""
    if counters is None:
        return None
    return {
        "total": sum(counters.values()),
        "by_reason": {reason: count for reason, count in counters.items() if count},
        "reasons": len(counters),
    }


async def resolve_seeds(seeds: Sequence[str]) -> dict[str, set[str]]:
    """Each ``--seed`` (a servent already running) and the ``HOST:PORT`` texts a
    node's connection to it may show."""
    wanted: dict[str, set[str]] = {}
    for seed in seeds:
        host, port = parse_host_port(seed, key="--seed", allow_port_zero=False)
        addresses = {format_address(host, port)}
        try:
            with trio.fail_after(5):
                infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
            addresses.update(format_address(str(info[4][0]), port) for info in infos)
        except (OSError, trio.TooSlowError):
            pass
        wanted[seed] = addresses
    return wanted


def unconnected_seeds(wanted: dict[str, set[str]], nodes: Sequence[NetworkNode]) -> list[str]:
    """The seeds some running node holds no connection to."""
    return [
        seed
        for seed, addresses in wanted.items()
        if any(
            node.running() and not any(node.view.has_peer(a) for a in addresses) for node in nodes
        )
    ]
