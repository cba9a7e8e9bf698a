"""A local test network: several routers on loopback in one process, loaded and watched.

Planning is :mod:`.topology`, the bootstrap cache :mod:`.cache`, the spread load client
:mod:`.spread_load`, and what is written and printed :mod:`.report`; this module runs
the network.

Theory of operation
-------------------
:func:`run_network` runs every step in one trio run:

1. **Plan.** :func:`plan_topology` turns ``ring``, ``star`` or ``random`` into a set of
   directed links ``(dialer, listener)``; each unordered pair of nodes is linked at most
   once and no node links to itself. ``random`` is seeded and always contains the ring,
   so the network is connected whatever the draw.
2. **Bootstrap.** A small GWebCache (:class:`HostCacheService`) starts on loopback. Each
   node's ``catcher.gwebcache`` points at its own page, ``/node/<i>``, which lists
   exactly the nodes it should dial, and its ``catcher.min_connections`` is its
   out-degree (plus the ``--seed`` servents, which every node also gets as catcher
   seeds). The cache holds its answers until every node listens, so the first dial
   succeeds and the catchers, left to do their usual job, build the planned topology
   and nothing more. Any other page lists every node, in the v2 format
   (``H|ip:port|age``), for servents outside the test network.
3. **Formation.** The run waits, bounded, until every planned link is up (the dialer
   holds an outgoing connection to the listener's address); if one never comes up the
   error names it.
4. **Traffic.** The project's load client drives the chosen model through the network:
   its injector and one sink connect to node 0, and up to four more sinks to other
   nodes, the farthest first, so query copies are counted after several hops. Pings stop
   one hop from where they enter (routers announce ``Pong-Caching`` to each other and
   answer each other's pings from their pong caches, as gtk-gnutella does), so only the
   sinks on node 0 are owed copies of pings; the report's expected counts say so.
   Sinks are placed only within reach of a TTL 7 query.
5. **Collect and stop.** Per-node statistics and state go to the results folder, a
   summary is printed, and every node is stopped the daemon's own way (``Bye 200`` to
   its peers, host cache saved). Ctrl-C (or :meth:`LocalNetwork.request_stop`) ends the
   traffic or the idle wait early; collection and shutdown still happen. A second
   Ctrl-C stops at once.

A status line is printed about once a second: in place on a terminal, as plain lines
otherwise.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import trio

from gnutella_router import __version__
from gnutella_router.config import Config, load_config
from gnutella_router.daemon import Daemon
from gnutella_router.net.connection import format_address
from gnutella_router.observe.admin import write_dump_file
from gnutella_router.testnet.cache import HostCacheService
from gnutella_router.testnet.report import (
    TABLE_ROWS,
    _full_dump_function,
    _node_table,
    _owed_pings_only_at_node0,
    _own_dump,
    _write_json,
)
from gnutella_router.testnet.spread_load import SpreadLoadRun
from gnutella_router.testnet.topology import (
    MAX_REMOTE_SINKS,
    TOPOLOGIES,
    plan_topology,
    sink_nodes,
)
from gnutella_router.traffic.load import (
    LoadError,
    LoadSettings,
)
from traffic_models.arrivals import ArrivalProcess, ConstantRate, parse_arrivals
from traffic_models.generator import TrafficGenerator
from traffic_models.latency import LoadReport
from traffic_models.mix import mix_by_name_or_path

__all__ = [
    "DEFAULT_RESULTS",
    "LocalNetwork",
    "NetworkError",
    "NetworkOutcome",
    "NetworkSettings",
    "run_network",
]

DEFAULT_RESULTS = Path(".gnutella-router") / "testnet"
LOOPBACK = "127.0.0.1"
STOP_TIMEOUT = 10.0
SETTLE_SECONDS = 2.0
"""Longest wait, after the traffic, for the load client's connections to leave the
nodes, so that the collected state shows the network itself."""
STATUS_INTERVAL = 1.0
MIN_MAX_CONNECTIONS = 32


# --------------------------------------------------------------------------- the network


@dataclasses.dataclass(frozen=True, slots=True)
class NetworkSettings:
    nodes: int = 5
    topology: str = "random"
    degree: int = 1
    traffic: str = "paper"
    """A mix name (``paper``, ``trace``, ...) or a mix file."""
    rate: float = 200.0
    arrivals: str | None = None
    """An arrival process (``poisson:500``, ...) instead of a constant ``rate``."""
    duration: float = 20.0
    """Seconds of traffic; 0 forms the network and waits for Ctrl-C."""
    seeds: tuple[str, ...] = ()
    """Servents outside the test network that every node also dials."""
    results: Path = DEFAULT_RESULTS
    base_port: int | None = None
    """Node i listens on ``base_port + i``; ``None`` lets the system pick."""
    seed: int = 1
    form_timeout: float = 20.0
    late_threshold_ms: float = 1.0

    def __post_init__(self) -> None:
        if not 1 <= self.nodes <= 200:
            raise ValueError("--nodes must be from 1 to 200")
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"--topology must be one of {', '.join(TOPOLOGIES)}")
        if self.degree < 0:
            raise ValueError("--degree must be 0 or more")
        if not (math.isfinite(self.duration) and self.duration >= 0):
            raise ValueError("--duration must be 0 or more seconds")
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise ValueError("--rate must be a positive number of messages/s")
        if self.base_port is not None and not (
            self.base_port >= 1 and self.base_port + self.nodes - 1 <= 65535
        ):
            raise ValueError(f"--base-port: ports {self.base_port}..+{self.nodes - 1} do not fit")
        if self.form_timeout <= 0:
            raise ValueError("the formation timeout must be positive")
        # The mix and the arrival process are checked here, before any router starts,
        # so a typo is refused in a second rather than after the network has formed.
        try:
            mix_by_name_or_path(self.traffic)
        except (OSError, ValueError) as exc:
            raise ValueError(f"--traffic {self.traffic}: {exc}") from None
        if self.arrivals is not None:
            try:
                parse_arrivals(self.arrivals, seed=self.seed)
            except ValueError as exc:
                raise ValueError(f"--arrivals: {exc}") from None


class NetworkError(Exception):
    """The network could not be started or did not form."""


@dataclasses.dataclass(slots=True)
class NetworkOutcome:
    """What a run did; ``summary`` is what ``summary.json`` holds."""

    summary: dict[str, Any]
    report: LoadReport | None
    error: str | None
    interrupted: bool
    results: Path

    @property
    def ok(self) -> bool:
        return self.error is None


class LocalNetwork:
    """One test network run; see the module docstring."""

    def __init__(self, settings: NetworkSettings, *, out: TextIO | None = None) -> None:
        self.settings = settings
        self.out = out if out is not None else sys.stdout
        self.tty = _isatty(self.out)
        self.topology = plan_topology(
            settings.topology, settings.nodes, degree=settings.degree, seed=settings.seed
        )
        self.cache = HostCacheService(self.topology)
        self.daemons: list[Daemon] = []
        self.phase = "starting"
        self.load_run: SpreadLoadRun | None = None
        self.report: LoadReport | None = None
        self.load_counters: dict[str, Any] | None = None
        self.interrupted = False
        self.formed_after: float | None = None
        self._started = 0.0
        self._stop = trio.Event()
        self._work: trio.CancelScope | None = None
        self._last_routed = 0
        self._last_at = 0.0
        self._status_shown = False

    # ------------------------------------------------------------------ control

    def request_stop(self) -> None:
        """End the traffic (or the idle wait) now; collection and shutdown still run."""
        self.interrupted = True
        self._stop.set()
        if self._work is not None:
            self._work.cancel()

    # ------------------------------------------------------------------ the run

    async def run(self, *, handle_signals: bool = False) -> NetworkOutcome:
        settings = self.settings
        self._started = trio.current_time()
        results = settings.results
        error: str | None = None
        collected: tuple[dict[str, Any], list[dict[str, Any]]] | None = None
        stopped_in: float | None = None
        async with trio.open_nursery() as nursery:
            if handle_signals:
                nursery.start_soon(self._watch_signals, nursery.cancel_scope)
            await nursery.start(self.cache.serve)
            try:
                self._prepare_results()
                await self._start_nodes(nursery)
                nursery.start_soon(self._show_status)
                with trio.CancelScope() as self._work:
                    if self._stop.is_set():
                        self._work.cancel()
                    await self._form()
                    await self._drive()
            except NetworkError as exc:
                error = str(exc)
            finally:
                self.phase = "stopping"
                if self.daemons:
                    # Not shielded: a second Ctrl-C cancels this too and stops at once.
                    with trio.move_on_after(SETTLE_SECONDS):
                        await _poll_until(self._settled, 0.02)
                    collected = self._collect()
                    stopped_in = await self._stop_nodes()
                self._end_status()
                nursery.cancel_scope.cancel()
        summary = self._summary(collected, error, stopped_in)
        if settings.results.is_dir():
            self._write(summary, collected[1] if collected is not None else [])
        outcome = NetworkOutcome(summary, self.report, error, self.interrupted, results)
        self._print_final(outcome)
        return outcome

    def _prepare_results(self) -> None:
        """A results folder holding this run only: what an earlier run left in it (its
        ``node-*`` folders and ``summary.json``; nothing else) is removed, and said."""
        results = self.settings.results
        try:
            earlier = sorted(results.glob("node-*")) + sorted(results.glob("summary.json"))
            for old in earlier:
                if old.is_dir() and not old.is_symlink():
                    shutil.rmtree(old)
                else:
                    old.unlink()
            if earlier:
                self._note(f"results: removed an earlier run's results from {results}")
            results.mkdir(parents=True, exist_ok=True)
            for index in range(self.settings.nodes):
                state = self.node_dir(index)
                state.mkdir(exist_ok=True)
                # A host cache saved by an earlier run would make the catchers dial
                # yesterday's ports; each run starts from the planned topology.
                (state / Config().catcher.host_cache_file).unlink(missing_ok=True)
        except OSError as exc:
            raise NetworkError(f"cannot use results folder {self.settings.results}: {exc}") from exc

    def node_dir(self, index: int) -> Path:
        return self.settings.results / f"node-{index}"

    def node_config(self, index: int) -> Config:
        settings = self.settings
        port = 0 if settings.base_port is None else settings.base_port + index
        out_degree = len(self.topology.out_neighbours(index))
        wanted = out_degree + len(settings.seeds)
        extra: dict[str, object] = {}
        if hasattr(Config(), "admin"):
            # Its default, the node's port + 1, is the next node's port.
            extra["admin.listen"] = f"{LOOPBACK}:0"
        return load_config(
            None,
            {
                **extra,
                "node.listen": f"{LOOPBACK}:{port}",
                "node.state_dir": str(self.node_dir(index)),
                "log.level": "warning",
                "catcher.gwebcache": self.cache.url(index),
                "catcher.seeds": list(settings.seeds),
                "catcher.min_connections": wanted,
                "network.max_connections": max(
                    MIN_MAX_CONNECTIONS,
                    self.topology.degree(index) + len(settings.seeds) + MAX_REMOTE_SINKS + 8,
                ),
                # Every peer of a test network comes from 127.0.0.1: the per-address
                # limit on connection attempts must allow the whole network and more.
                "network.connects_per_ip_per_minute": max(
                    Config().network.connects_per_ip_per_minute, 4 * settings.nodes + 64
                ),
            },
        )

    async def _start_nodes(self, nursery: trio.Nursery) -> None:
        for index in range(self.settings.nodes):
            config = self.node_config(index)
            daemon = Daemon(config)
            failure: BaseException | None = None
            try:
                await nursery.start(daemon.run)
            except* OSError as group:
                # Binding the listener is what fails in practice (a --base-port in use).
                failure = _first_leaf(group)
            if failure is not None:
                raise NetworkError(f"cannot start node-{index} on {config.node.listen}: {failure}")
            self.daemons.append(daemon)
        self.cache.publish([d.address for d in self.daemons])
        self.phase = "forming"

    # ------------------------------------------------------------------ formation

    def link_up(self, dialer: int, listener: int) -> bool:
        target = self.daemons[listener].address
        return any(
            c.role == "outgoing" and not c.closing and c.peer == target
            for c in self.daemons[dialer].server.connections.snapshot()
        )

    def missing_links(self) -> list[tuple[int, int]]:
        return [(a, b) for a, b in self.topology.links if not self.link_up(a, b)]

    async def _form(self) -> None:
        timeout = self.settings.form_timeout
        with trio.move_on_after(timeout):
            await _poll_until(lambda: not self.missing_links(), 0.05)
        missing = self.missing_links()
        if missing:
            names = ", ".join(
                f"node-{a} -> node-{b} ({format_address(*self.daemons[b].address)})"
                for a, b in missing
            )
            raise NetworkError(
                f"the network did not form within {timeout:g} s: "
                f"{len(missing)} of {len(self.topology.links)} links missing: {names}"
            )
        self.formed_after = trio.current_time() - self._started
        if self.settings.seeds:
            await self._wait_for_seeds()

    async def _wait_for_seeds(self) -> None:
        """Give the outside servents a few seconds; a missing one is a warning only."""
        wanted = await _resolve_seeds(self.settings.seeds)
        with trio.move_on_after(5.0):
            await _poll_until(lambda: not self._unconnected_seeds(wanted), 0.1)
        for seed in self._unconnected_seeds(wanted):
            self._note(f"warning: not every node is connected to seed {seed}")

    def _unconnected_seeds(self, wanted: dict[str, set[tuple[str, int]]]) -> list[str]:
        missing = []
        for seed, addresses in wanted.items():
            for daemon in self.daemons:
                known = daemon.server.connections.addresses()
                if not known & addresses:
                    missing.append(seed)
                    break
        return missing

    # ------------------------------------------------------------------ traffic

    async def _drive(self) -> None:
        settings = self.settings
        if settings.duration == 0:
            self.phase = "up"
            for index, daemon in enumerate(self.daemons[:TABLE_ROWS]):
                admin = _admin_address(daemon)
                where = f" (admin {format_address(*admin)})" if admin else ""
                self._note(f"node-{index} {format_address(*daemon.address)}{where}")
            self._note("the network is up; Ctrl-C stops it")
            await self._stop.wait()
            return
        self.phase = "traffic"
        try:
            mix = mix_by_name_or_path(settings.traffic)
            arrivals: ArrivalProcess = (
                parse_arrivals(settings.arrivals, seed=settings.seed)
                if settings.arrivals
                else ConstantRate(settings.rate)
            )
        except ValueError as exc:
            raise NetworkError(str(exc)) from exc
        traffic = TrafficGenerator(mix=mix, arrivals=arrivals, seed=settings.seed)
        node0 = self.daemons[0].address
        remote = sink_nodes(self.topology)
        targets = [(0, node0), (0, node0)] + [(n, self.daemons[n].address) for n in remote]
        load_settings = LoadSettings(
            target=node0,
            peers=len(targets),
            injectors=1,
            duration=settings.duration,
            seed=settings.seed,
            late_threshold_ms=settings.late_threshold_ms,
            user_agent=f"gnutella-router-testnet/{__version__}",
        )
        self.load_run = SpreadLoadRun(load_settings, traffic, targets, self._registered)
        try:
            report = await self.load_run.run()
        except LoadError as exc:
            raise NetworkError(f"load client: {exc}") from exc
        finally:
            self.load_counters = self.load_run.counters()
        self.report = _owed_pings_only_at_node0(report, local_sinks=1)

    def _registered(self, node: int, address: tuple[str, int]) -> bool:
        return any(
            c.peer == address and not c.closing
            for c in self.daemons[node].server.connections.snapshot()
        )

    # ------------------------------------------------------------------ collection

    def _settled(self) -> bool:
        """No node holds more than its planned links (the load client's peers are gone)."""
        extra = len(self.settings.seeds)
        return all(
            len(d.server.connections) <= self.topology.degree(i) + extra
            for i, d in enumerate(self.daemons)
        )

    def _collect(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Per-node summaries and full states, taken while the nodes still run."""
        dump = _full_dump_function()
        nodes = []
        states = []
        for index, daemon in enumerate(self.daemons):
            nodes.append(self._node_summary(index, daemon))
            try:
                state = dump(daemon) if dump is not None else _own_dump(daemon)
            except Exception as exc:  # a broken dump must not lose the rest
                state = {"error": f"{exc.__class__.__name__}: {exc}"}
            states.append(state)
        return {"nodes": nodes}, states

    def _node_summary(self, index: int, daemon: Daemon) -> dict[str, Any]:
        server = daemon.server.statistics()
        router = daemon.router.statistics()
        return {
            "node": index,
            "address": format_address(*daemon.address),
            "admin": format_address(*admin) if (admin := _admin_address(daemon)) else None,
            "guid": daemon.guid.hex(),
            "planned_out": self.topology.out_neighbours(index),
            "connections": server.connections,
            "incoming": server.incoming,
            "outgoing": server.outgoing,
            "received": router.received,
            "forwarded": router.forwarded,
            "generated": router.generated,
            "dropped": router.dropped,
            "received_total": sum(router.received.values()),
            "forwarded_total": sum(router.forwarded.values()),
            "dropped_total": daemon.router.total_dropped(),
            "route_tables": {name: table.size for name, table in router.tables.items()},
        }

    async def _stop_nodes(self) -> float:
        started = trio.current_time()
        for daemon in self.daemons:
            daemon.request_stop()
        with trio.move_on_after(STOP_TIMEOUT):
            for daemon in self.daemons:
                await daemon.stopped.wait()
        return trio.current_time() - started

    def _summary(
        self,
        collected: tuple[dict[str, Any], list[dict[str, Any]]] | None,
        error: str | None,
        stopped_in: float | None,
    ) -> dict[str, Any]:
        settings = self.settings
        load: dict[str, Any] | None = None
        if self.report is not None:
            load = json.loads(self.report.to_json())
        elif self.load_counters is not None:
            load = {"interrupted": True, **self.load_counters}
        return {
            "settings": {
                "nodes": settings.nodes,
                "topology": settings.topology,
                "degree": settings.degree,
                "traffic": settings.traffic,
                "rate": settings.rate,
                "arrivals": settings.arrivals,
                "duration": settings.duration,
                "seeds": list(settings.seeds),
                "base_port": settings.base_port,
                "seed": settings.seed,
            },
            "topology": {
                "kind": self.topology.kind,
                "links": [list(link) for link in self.topology.links],
                "sinks_on": [0, *sink_nodes(self.topology)] if settings.duration else [],
            },
            "formed_after_seconds": _rounded(self.formed_after),
            "nodes": collected[0]["nodes"] if collected else [],
            "load": load,
            "interrupted": self.interrupted,
            "error": error,
            "stopped": all(d.stopped.is_set() for d in self.daemons),
            "stop_seconds": _rounded(stopped_in),
        }

    def _write(self, summary: dict[str, Any], states: list[dict[str, Any]]) -> None:
        try:
            for index, state in enumerate(states):
                _write_json(self.node_dir(index) / "state.json", state)
            _write_json(self.settings.results / "summary.json", summary)
        except (OSError, TypeError, ValueError) as exc:
            self._note(f"warning: results not written: {exc}")

    # ------------------------------------------------------------------ output

    def _note(self, text: str) -> None:
        self._end_status()
        print(text, file=self.out, flush=True)

    def status_line(self) -> str:
        now = trio.current_time()
        elapsed = now - self._started
        up = sum(1 for d in self.daemons if not d.stopped.is_set())
        links = len(self.topology.links) - len(self.missing_links()) if self.daemons else 0
        connections = sum(len(d.server.connections) for d in self.daemons)
        routed = sum(sum(d.router.received) for d in self.daemons)
        dropped = sum(d.router.total_dropped() for d in self.daemons)
        span = now - self._last_at
        rate = (routed - self._last_routed) / span if self._last_at and span > 0 else 0.0
        self._last_routed, self._last_at = routed, now
        line = (
            f"[{elapsed:6.1f} s] {self.phase:<8} nodes {up}/{self.settings.nodes}  "
            f"links {links}/{len(self.topology.links)}  conns {connections}  "
            f"routed {routed:,} ({rate:,.0f}/s)  dropped {dropped:,}"
        )
        if self.load_run is not None and self.phase == "traffic":
            counters = self.load_run.counters()
            line += (
                f"  | sent {counters['sent']:,}  copies {counters['copies']:,}  "
                f"late {counters['late']:,}"
            )
        return line

    async def _show_status(self) -> None:
        while True:
            await trio.sleep(STATUS_INTERVAL)
            line = self.status_line()
            if self.tty:
                # Rewritten in place, so it must fit on one terminal line.
                width = shutil.get_terminal_size().columns - 1
                print(f"\r{line[:width]}\x1b[K", end="", file=self.out, flush=True)
                self._status_shown = True
            else:
                print(line, file=self.out, flush=True)

    def _end_status(self) -> None:
        if self._status_shown:
            print(file=self.out, flush=True)
            self._status_shown = False

    def _print_final(self, outcome: NetworkOutcome) -> None:
        summary = outcome.summary
        out = self.out
        print(file=out)
        topology = self.topology
        formed = summary["formed_after_seconds"]
        print(
            f"test network: {_count(topology.nodes, 'node')}, {topology.kind} topology, "
            f"{_count(len(topology.links), 'link')}"
            + (f", formed in {formed:.1f} s" if formed is not None else ""),
            file=out,
        )
        if self.report is not None:
            print(self.report.to_text(), file=out)
            print(
                "(sinks on nodes "
                + ", ".join(str(n) for n in summary["topology"]["sinks_on"])
                + ": latency is from the scheduled send to a sink, one or more hops)",
                file=out,
            )
        elif isinstance(summary["load"], dict):
            load = summary["load"]
            print(
                f"traffic interrupted: sent {load['sent']:,}, "
                f"{load['copies']:,} copies reached the sinks",
                file=out,
            )
        if summary["nodes"]:
            print(file=out)
            print(_node_table(summary["nodes"]), file=out)
        if outcome.error is not None:
            print(f"\nerror: {outcome.error}", file=out)
        stop = summary["stop_seconds"]
        if stop is not None:
            state = "stopped" if summary["stopped"] else "NOT all stopped"
            nodes = _count(len(self.daemons), "node")
            print(f"\n{nodes} {state} (Bye sent) in {stop:.2f} s", file=out)
        print(f"results: {outcome.results}", file=out, flush=True)

    async def _watch_signals(self, everything: trio.CancelScope) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGUSR1) as signals:
            async for signum in signals:
                if signum == signal.SIGUSR1:
                    await self._dump_nodes()
                    continue
                if self._stop.is_set():
                    everything.cancel()
                    return
                self._note("stopping: collecting results and saying Bye (again to force)")
                self.request_stop()

    async def _dump_nodes(self) -> None:
        """SIGUSR1: every running node writes its full dump into its own folder, as a
        single router does on SIGUSR1; the network carries on."""
        written = 0
        for index, daemon in enumerate(self.daemons):
            try:
                await write_dump_file(daemon, self.node_dir(index))
                written += 1
            except OSError as exc:
                self._note(f"node-{index}: dump not written: {exc}")
        self._note(f"SIGUSR1: wrote a dump for {written} node(s) into their node-* folders")


async def run_network(
    settings: NetworkSettings, *, out: TextIO | None = None, handle_signals: bool = False
) -> NetworkOutcome:
    """Run a whole test network once (see the module docstring)."""
    return await LocalNetwork(settings, out=out).run(handle_signals=handle_signals)


# --------------------------------------------------------------------------- helpers


async def _poll_until(done: Callable[[], bool], interval: float) -> None:
    """Return once ``done()`` holds; connection tables have no event to wait on."""
    while True:
        if done():
            return
        await trio.sleep(interval)


def _admin_address(daemon: Daemon) -> tuple[str, int] | None:
    """Where the node's admin interface listens, if it has one."""
    address = getattr(daemon, "admin_address", None)
    return (str(address[0]), int(address[1])) if address else None


def _first_leaf(error: BaseException) -> BaseException:
    """The first exception that is not a group, however deeply nested."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


async def _resolve_seeds(seeds: Sequence[str]) -> dict[str, set[tuple[str, int]]]:
    """Each seed and the literal addresses a connection to it may show."""
    from gnutella_router.config import parse_host_port

    wanted: dict[str, set[tuple[str, int]]] = {}
    for seed in seeds:
        host, port = parse_host_port(seed, key="--seed", allow_port_zero=False)
        addresses = {(host, port)}
        try:
            with trio.fail_after(5):
                infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
            addresses.update((str(info[4][0]), port) for info in infos)
        except (OSError, trio.TooSlowError):
            pass
        wanted[seed] = addresses
    return wanted
