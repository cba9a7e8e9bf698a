"""A local test network: routers on one machine, in this process or one process each.

Planning is :mod:`.topology`, the bootstrap cache :mod:`.cache`, the nodes themselves
:mod:`.nodes` (in this process) and :mod:`.children` (OS processes), the spread load
client :mod:`.spread_load`, and what is written and printed :mod:`.report`; this module
runs the network.

Theory of operation
-------------------
:func:`run_network` runs every step in one trio run:

1. **Plan.** :func:`plan_topology` turns the chosen topology into a set of directed
   links ``(dialer, listener)``; each unordered pair of nodes is linked at most once and
   no node links to itself; the planned network is connected.
2. **Start.** Each node is a router, either a :class:`~.nodes.LocalNode` in this trio
   run (cheap to start; every node shares this process's core) or a
   :class:`~.children.ChildNode`, ``gnutella-router run`` in an OS process of its own
   (each node on a core the system picks, and a node that crashes takes only itself
   down). ``mode="auto"`` uses processes above :data:`AUTO_PROCESSES_ABOVE` nodes. The
   controller reads every node only through its admin pages, in either mode.
3. **Bootstrap.** A small GWebCache (:class:`HostCacheService`) starts on loopback. Each
   node's ``catcher.gwebcache`` points at its own page, ``/node/<i>``, which lists
   exactly the nodes it should dial, and its ``catcher.min_connections`` is its
   out-degree (plus the ``--seed`` servents, which every node also gets as catcher
   seeds). The cache learns each node's address as soon as it listens and holds a
   page until the nodes it lists listen, so the catchers, left to do their usual job,
   build the planned topology and nothing more. Any other page lists every node, in the
   v2 format (``H|ip:port|age``), for servents outside the test network. Leaves
   (:mod:`.leaves`) join their ultrapeers before the cache answers, and search during
   the traffic.
4. **Formation.** The run waits, bounded, until every planned link is up (the dialer
   holds an outgoing connection to the listener's address); if one never comes up the
   error names it.
5. **Traffic.** The project's load client drives the chosen model through the network:
   its injector and one sink connect to node 0, and up to four more sinks to other
   nodes, the farthest first, so query copies are counted after several hops. Pings stop
   one hop from where they enter (routers announce ``Pong-Caching`` to each other and
   answer each other's pings from their pong caches, as gtk-gnutella does), so only the
   sinks on node 0 are owed copies of pings; the report's expected counts say so.
   Sinks are placed only within reach of a TTL 7 query. While the load runs, its
   per-second series (offered and delivered traffic, latency, every node's queues) are
   written as they come (:mod:`.timeseries`). With ``console`` there is no
   load: the console (``gnutella-router console``) gets the terminal instead, and the
   run goes on to collection when it is left. Once formed, the network is recorded in
   ``network.json`` (:mod:`.record`) until it stops, for consoles to find it.
6. **Collect and stop.** Per-node statistics and state go to the results folder, a
   summary is printed, and every node is stopped the daemon's own way (``Bye 200`` to
   its peers, host cache saved); a child that does not exit within the grace period is
   killed. Ctrl-C (or :meth:`LocalNetwork.request_stop`) ends the traffic or the idle
   wait early; collection and shutdown still happen. A second Ctrl-C stops at once, and
   still stops every child process.

A node process that dies during the run is reported with its exit status and the end of
its log; ``on_node_failure`` says whether the run stops (the default) or goes on
without it. A status line is printed about once a second: in place on a terminal, as
plain lines otherwise.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import trio

from gnutella_router import __version__
from gnutella_router.lab.testnet.cache import HostCacheService
from gnutella_router.lab.testnet.children import ServentNode, stop_children
from gnutella_router.lab.testnet.console import Console, run_console
from gnutella_router.lab.testnet.file_sd import TARGETS_FILE, target_groups, write_targets
from gnutella_router.lab.testnet.forks import ForkServer, ForkServerError, available
from gnutella_router.lab.testnet.formation import Formation, failure_message, formation
from gnutella_router.lab.testnet.launch import Launcher
from gnutella_router.lab.testnet.leaves import LeafPopulation, wait_for_tables
from gnutella_router.lab.testnet.measure import (
    LinkCounters,
    OverlayRecord,
    link_counters,
)
from gnutella_router.lab.testnet.namespaces import NamespaceError, NamespaceNetwork
from gnutella_router.lab.testnet.nodes import (
    NetworkNode,
    NodeError,
    NodeFailure,
)
from gnutella_router.lab.testnet.record import (
    RECORD_FILE,
    record_of,
    remove_network_record,
    write_network_record,
)
from gnutella_router.lab.testnet.report import (
    TABLE_ROWS,
    _owed_pings_only_at_node0,
    final_text,
    prepare_results,
)
from gnutella_router.lab.testnet.results import Collected, collect, summarize, write_results
from gnutella_router.lab.testnet.servents import ServentSet, resolve_seeds, unconnected_seeds
from gnutella_router.lab.testnet.settings import STOP_TIMEOUT, NetworkError, NetworkSettings
from gnutella_router.lab.testnet.spread_load import SpreadLoadRun
from gnutella_router.lab.testnet.status import READS_PER_SECOND, StatusLine
from gnutella_router.lab.testnet.timeseries import SeriesRecorder
from gnutella_router.lab.testnet.topology import sink_nodes
from gnutella_router.lab.traffic.load import LoadError, LoadSettings
from gnutella_router.logs import current_level, set_level
from gnutella_router.net.connection import format_address
from traffic_models.arrival_text import parse_arrivals
from traffic_models.arrivals import ArrivalProcess, ConstantRate
from traffic_models.generator import TrafficGenerator
from traffic_models.latency import LoadReport
from traffic_models.mix import mix_by_name_or_path

__all__ = ["LocalNetwork", "NetworkError", "NetworkOutcome", "run_network"]

LOOPBACK = "127.0.0.1"
SETTLE_SECONDS = 2.0
"""Longest wait, after the traffic, for the load client's connections to leave the
nodes, so that the collected state shows the network itself."""
SERVENT_LINK_SECONDS = 10.0
CHURN_IDLE_HORIZON = 24 * 3600.0
"""With ``duration=0`` (up until Ctrl-C), churn is scheduled this far ahead."""
POLL_SECONDS = {"in-process": 0.05, "processes": 1.0, "shared": 0.25}
"""How often formation and settling read the nodes' connection tables: for a router
process every read is an HTTP request the router answers and the controller parses, CPU
that 200 routers read four times a second would take from their own start-up and
handshakes; a shared router's is one small request to its host (:mod:`.shared`)."""
FORK_SERVER_LOG = "fork-server.log"


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
        self.console = Console(self.out)
        self.mode = settings.node_mode
        self.topology = settings.plan()
        self.cache = HostCacheService(self.topology)
        self.servents = (
            ServentSet(
                settings.servent, settings.servent_count, settings.nodes, settings.results,
                settings.seed,
            )
            if settings.servent
            else None
        )  # fmt: skip
        hosts = settings.nodes + settings.servent_count
        self.link_plan = settings.link_plan(self.topology)
        self.namespaces = (
            NamespaceNetwork(
                hosts,
                pairs=self.topology.host_pairs(
                    [] if self.servents is None else self.servents.links
                ),
                after_create=self.link_plan.shape_namespaces,
            )
            if settings.netns
            else None
        )
        self.failures: list[NodeFailure] = []
        self.forks = (
            ForkServer(settings.results / FORK_SERVER_LOG)
            if self.mode == "processes" and available()
            else None
        )
        """Where router processes are forked from (:mod:`.forks`), where that works."""
        self.launcher = Launcher(
            settings,
            self.topology,
            self.cache,
            forks=self.forks,
            namespaces=self.namespaces,
            servents=self.servents,
            failures=self.failures,
            on_failure=self._node_failed,
            note=self._note,
            link_plan=self.link_plan,
        )
        self.overlay = OverlayRecord(self.topology)
        self.leaves = (
            LeafPopulation(
                settings.leaves,
                settings.ultrapeers(self.topology),
                user_agent=f"gnutella-router-testnet-leaf/{__version__}",
            )
            if settings.leaves is not None
            else None
        )
        self._targets_written = False
        """Whether the Prometheus targets file was written (:mod:`.file_sd`)."""
        self.churn_log: list[dict[str, Any]] = []
        self.phase = "starting"
        self.load_run: SpreadLoadRun | None = None
        self.report: LoadReport | None = None
        self.load_counters: dict[str, Any] | None = None
        self.interrupted = False
        self.error: str | None = None
        self.formed_after: float | None = None
        self.started_after: float | None = None
        """Seconds from the run's start until every node had been started."""
        self.formation: Formation | None = None
        """The snapshot taken when formation ended, formed or not."""
        self.started = 0.0
        """When the run began, on trio's clock."""
        self._stop = trio.Event()
        self._work: trio.CancelScope | None = None
        self.status = StatusLine(self)
        """The one-line state printed about once a second (:mod:`.status`)."""

    @property
    def nodes(self) -> list[NetworkNode]:
        """The routers, in index order (empty until they are being started)."""
        return self.launcher.nodes

    # ------------------------------------------------------------------ control

    def request_stop(self) -> None:
        """End the traffic (or the idle wait) now; collection and shutdown still run."""
        self.interrupted = True
        self._end_work()

    def _end_work(self) -> None:
        self._stop.set()
        if self._work is not None:
            self._work.cancel()

    def _node_failed(self, failure: NodeFailure) -> None:
        """A node process died without being asked to: report it, and stop the run
        unless it should go on without the node."""
        self.failures.append(failure)
        if failure.kind == "node":
            self.cache.publish_node(failure.node, None)
        self._note(f"warning: {failure.describe()}")
        self._write_targets()
        if self.settings.on_node_failure == "stop" and self.error is None:
            self.error = f"{failure.name} {failure.reason} (--on-node-failure stop)"
            self._end_work()

    # ------------------------------------------------------------------ the run

    async def run(self, *, handle_signals: bool = False) -> NetworkOutcome:
        settings = self.settings
        self.started = trio.current_time()
        results = settings.results
        collected: Collected | None = None
        stopped_in: float | None = None
        try:
            if self.namespaces is not None:
                self.phase = "netns"
                try:
                    await trio.to_thread.run_sync(self.namespaces.create)
                except NamespaceError as exc:
                    self.error = f"network namespaces: {exc}"
                self.cache.host = self.namespaces.gateway if self.error is None else LOOPBACK
            if self.error is None:
                async with trio.open_nursery() as lifeline:
                    # The fork server outlives the run proper: a second Ctrl-C cancels
                    # that, and the server must still report the exits of the children
                    # stopped below.
                    try:
                        collected, stopped_in = await self._run_nodes(handle_signals, lifeline)
                    finally:
                        await stop_children(self.nodes, grace=STOP_TIMEOUT)
                        if self.forks is not None:
                            await self.forks.close()
                        lifeline.cancel_scope.cancel()
        finally:
            # Whatever happened above (a second Ctrl-C included), no child outlives us,
            # and no namespace either.
            await stop_children([*self.nodes, *self._servent_nodes()], grace=STOP_TIMEOUT)
            if self.launcher.shared is not None:
                await self.launcher.shared.stop()
            with contextlib.suppress(OSError):
                remove_network_record(results)
            self._write_targets()  # empty now: no router left to scrape
            if self.namespaces is not None:
                with trio.CancelScope(shield=True):
                    problems = await trio.to_thread.run_sync(self.namespaces.remove)
                for problem in problems:
                    self._note(f"warning: {problem}; `gnutella-router testnet --cleanup` retries")
        summary = summarize(self, collected, stopped_in)
        if settings.results.is_dir():
            write_results(self, summary, collected.states if collected is not None else [])
        outcome = NetworkOutcome(summary, self.report, self.error, self.interrupted, results)
        self._print_final(outcome)
        return outcome

    async def _run_nodes(
        self, handle_signals: bool, lifeline: trio.Nursery
    ) -> tuple[Collected | None, float | None]:
        """Start, form, drive, collect and stop: the run proper, once the network's
        addresses exist; what was collected and how long stopping took. The fork server
        runs in ``lifeline``."""
        collected: Collected | None = None
        stopped_in: float | None = None
        async with trio.open_nursery() as nursery:
            if handle_signals:
                nursery.start_soon(self._watch_signals, nursery.cancel_scope)
            await nursery.start(self.cache.serve)
            try:
                self.phase = "starting"
                self._prepare_results()
                nursery.start_soon(self.status.show)
                with trio.CancelScope() as self._work:
                    if self._stop.is_set():
                        self._work.cancel()
                    if self.forks is not None:
                        try:
                            await self.forks.start(lifeline)
                        except ForkServerError as exc:
                            raise NetworkError(str(exc)) from None
                    join = None if self.leaves is None else functools.partial(self._join, nursery)
                    await self.launcher.start_nodes(nursery, before_open=join)
                    self._write_targets()
                    self.started_after = trio.current_time() - self.started
                    self.phase = "forming"
                    await self._form()
                    self._write_record()
                    await self._drive(nursery)
            except NetworkError as exc:
                self.error = self.error or str(exc)
            finally:
                self.phase = "stopping"
                if self.leaves is not None:
                    await self.leaves.leave()
                if self.nodes:
                    # Not shielded: a second Ctrl-C cancels this too and stops at once.
                    with trio.move_on_after(SETTLE_SECONDS):
                        await self._poll_until(self._settled)
                    with trio.move_on_after(self.settings.collect_timeout):
                        collected = await collect(self)
                    stopped_in = await self._stop_nodes()
                self.console.end_status()
                nursery.cancel_scope.cancel()
        return collected, stopped_in

    def _prepare_results(self) -> None:
        try:
            prepare_results(self.settings.results, self.settings.nodes)
        except OSError as exc:
            raise NetworkError(f"cannot use results folder {self.settings.results}: {exc}") from exc

    def node_dir(self, index: int) -> Path:
        return self.launcher.node_dir(index)

    def _write_record(self) -> None:
        """``network.json``: the nodes, admin addresses and token, for the console."""
        record = record_of(self.nodes, self.topology.links, self.launcher.admin_token)
        try:
            write_network_record(self.settings.results, record)
        except OSError as exc:
            self._note(
                f"warning: {RECORD_FILE} not written ({exc}): no console can find the network"
            )

    def _write_targets(self) -> None:
        """Rewrite the Prometheus targets file (:mod:`.file_sd`) with the routers that
        run now; the first time, say where it is. Not before the routers have started."""
        if not self._targets_written and not self.nodes:
            return
        groups = target_groups(self.nodes, self.settings.results.name)
        try:
            path = write_targets(self.settings.results, groups)
        except OSError as exc:
            if not self._targets_written:
                self._note(f"warning: {TARGETS_FILE} not written: {exc}")
            return
        if not self._targets_written:
            self._targets_written = True
            self._note(f"Prometheus targets (file_sd, kept current): {path}")

    # ------------------------------------------------------------------ formation

    def _alive(self, index: int) -> bool:
        return self.nodes[index].running()

    def snapshot(self) -> Formation:
        """The network against its plan now, from the nodes' last views (:mod:`.formation`)."""
        return formation(trio.current_time() - self.started, self.topology, self.nodes)

    def missing_links(self) -> list[tuple[int, int]]:
        """Planned links that are not up, between nodes that are running."""
        return list(self.snapshot().missing)

    async def refresh(self, *, totals: bool = False, only: set[int] | None = None) -> None:
        """Read every running node's connections (and totals) again, all at once; or
        only those of the nodes in ``only``."""

        async def read(node: NetworkNode) -> None:
            # A node that cannot answer keeps its last view; its death is reported.
            with contextlib.suppress(NodeError):
                await node.refresh(totals=totals)

        async with trio.open_nursery() as nursery:
            for node in self.nodes:
                if node.running() and (only is None or node.index in only):
                    nursery.start_soon(read, node)

    async def _poll_until(self, done: Callable[[], bool], *, totals: bool = False) -> None:
        """Return once ``done()`` holds for freshly read views."""
        while True:
            await self.refresh(totals=totals)
            if done():
                return
            await trio.sleep(POLL_SECONDS[self.mode])

    async def _form(self) -> None:
        """Wait (bounded) until every planned link is up. Once every node has been read,
        only the nodes at either end of a missing link are read again: only their views
        can change the answer, and the others need their CPU."""
        timeout = self.settings.formation_timeout
        state = self.snapshot()
        with trio.move_on_after(timeout):
            await self.refresh()
            while not (state := self.snapshot()).formed:
                await trio.sleep(POLL_SECONDS[self.mode])
                await self.refresh(only={n for link in state.missing for n in link})
        self.formation = state = self.snapshot()
        if not state.formed:
            raise NetworkError(failure_message(state, self.nodes, timeout))
        self.formed_after = state.at
        if self.settings.seeds:
            await self._wait_for_seeds()
        if self.servents is not None:
            await self._wait_for_servents()

    async def _wait_for_seeds(self) -> None:
        """Give the outside servents a few seconds; a missing one is a warning only."""
        wanted = await resolve_seeds(self.settings.seeds)
        with trio.move_on_after(5.0):
            await self._poll_until(lambda: not unconnected_seeds(wanted, self.nodes))
        for seed in unconnected_seeds(wanted, self.nodes):
            self._note(f"warning: not every node is connected to seed {seed}")

    async def _wait_for_servents(self) -> None:
        """Give the routers a few seconds to link with the servents; a missing link is
        a warning only (a servent may refuse a router, as servents do)."""
        assert self.servents is not None

        servents = self.servents
        with trio.move_on_after(SERVENT_LINK_SECONDS):
            await self._poll_until(lambda: not servents.missing_links(self.nodes))
        for link in servents.missing_links(self.nodes):
            self._note(f"warning: servent link not up after {SERVENT_LINK_SECONDS:g} s: {link}")

    # ------------------------------------------------------------------ traffic

    async def _join(self, nursery: trio.Nursery, addresses: dict[int, tuple[str, int]]) -> None:
        """The leaves join their ultrapeers, and the run waits until their tables are in."""
        assert self.leaves is not None
        self.phase = "leaves"
        await self.leaves.join(addresses, nursery)
        for node in await wait_for_tables(self.nodes, self.leaves.tables_expected()):
            self._note(f"warning: node-{node} does not hold all its leaves' QRP tables")

    async def _drive(self, nursery: trio.Nursery) -> None:
        """The traffic (or the idle wait), with churn and the leaves' searches alongside."""
        async with trio.open_nursery() as churning:
            if self.settings.churn is not None:
                steady = {0, *sink_nodes(self.topology)} if self.settings.duration else {0}
                churning.start_soon(
                    self.launcher.churn,
                    self.settings.churn,
                    steady,
                    self.settings.duration or CHURN_IDLE_HORIZON,
                    self.started,
                    self.churn_log,
                    nursery,
                    self._write_targets,
                )
            async with trio.open_nursery() as searching:
                if self.leaves is not None and self.settings.duration:
                    searching.start_soon(self.leaves.search, self.settings.duration)
                await self._drive_traffic()
            churning.cancel_scope.cancel()

    async def _drive_traffic(self) -> None:
        settings = self.settings
        if settings.console:
            await self._open_console()
            return
        if settings.duration == 0:
            self.phase = "up"
            for node in self.nodes[:TABLE_ROWS]:
                admin = node.admin_address
                where = f" (admin {_format(admin)})" if admin else ""
                self._note(f"node-{node.index} {node.peer_name}{where}")
            self._note(
                f"`gnutella-router console --network {settings.results}` opens a console on it"
            )
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
        node0 = self._address(0)
        remote = [n for n in sink_nodes(self.topology) if self._alive(n)]
        targets = [(0, node0), (0, node0)] + [(n, self._address(n)) for n in remote]
        load_settings = LoadSettings(
            target=node0,
            peers=len(targets),
            injectors=1,
            duration=settings.duration,
            seed=settings.seed,
            late_threshold_ms=settings.late_threshold_ms,
            user_agent=f"gnutella-router-testnet/{__version__}",
            # Sinks answer some queries with hits, as servents do; not pings: their pongs
            # would put made-up addresses into the nodes' host caches.
            respond=True,
            respond_to_pings=False,
        )
        await self._read_link_counters(self.overlay.before)
        self.load_run = SpreadLoadRun(load_settings, traffic, targets, self._registered)
        series = SeriesRecorder(settings.results, ping_sinks=1, reads_per_second=READS_PER_SECOND)
        try:
            report = await self._load_with_series(self.load_run, series)
        except LoadError as exc:
            raise NetworkError(f"load client: {exc}") from exc
        finally:
            self.load_counters = self.load_run.counters()
            series.finish(self.load_run)
            if series.error is not None:
                self._note(f"warning: the time series stopped early: {series.error}")
        self.report = _owed_pings_only_at_node0(report, local_sinks=1)

    async def _load_with_series(self, load: SpreadLoadRun, series: SeriesRecorder) -> LoadReport:
        """The load run, with its per-second series taken alongside (:mod:`.timeseries`)."""
        failure: LoadError | None = None
        report: LoadReport | None = None
        async with trio.open_nursery() as sampling:
            sampling.start_soon(series.run, load, self.nodes)
            try:
                report = await load.run()
            except LoadError as exc:  # raised below, outside the nursery's group
                failure = exc
            finally:
                sampling.cancel_scope.cancel()
        if failure is not None:
            raise failure
        assert report is not None
        return report

    async def _open_console(self) -> None:
        """The console in a process of its own, on this terminal, until it is left."""
        self.phase = "console"
        level = current_level()
        if self.mode == "in-process":
            # The routers of this process would log onto the console's lines; errors
            # still show, and `set NODE log-level warning` brings the rest back.
            set_level("error")
        if self.settings.console_script is None:
            self._note("the network is up; the console opens (quit or Ctrl-D stops the network)")
        script = self.settings.console_script
        try:
            status = await run_console(self.settings.results / RECORD_FILE, script)
        finally:
            set_level(level)
        if status and script is not None:
            raise NetworkError(f"the console script failed (exit status {status})")

    def _address(self, index: int) -> tuple[str, int]:
        address = self.nodes[index].address
        if address is None or not self._alive(index):
            raise NetworkError(f"node-{index} is not running")
        return address

    async def _read_link_counters(self, into: dict[int, LinkCounters]) -> None:
        async def read(node: NetworkNode) -> None:
            with contextlib.suppress(NodeError):
                into[node.index] = link_counters(
                    trio.current_time(), await node.get("/connections")
                )

        async with trio.open_nursery() as nursery:
            for node in self.nodes:
                if node.running():
                    nursery.start_soon(read, node)

    async def _registered(self, node: int, address: tuple[str, int]) -> bool:
        try:
            view = await self.nodes[node].refresh(totals=False)
        except NodeError:
            return False
        return view.has_peer(_format(address))

    # ------------------------------------------------------------------ collection

    def _settled(self) -> bool:
        """No node holds more than its planned links (the load client's peers are gone)."""
        extra = len(self.settings.seeds)
        return all(
            len(n.view.open_connections()) <= self.topology.degree(n.index) + extra
            for n in self.nodes
            if n.running()
        )

    async def _stop_nodes(self) -> float:
        """Routers first (they say Bye to everyone, servents included), then servents."""
        started = trio.current_time()
        for group in (self.nodes, self._servent_nodes()):
            for node in group:
                node.request_stop()
            async with trio.open_nursery() as nursery:
                for node in group:
                    nursery.start_soon(node.wait_stopped, STOP_TIMEOUT)
        return trio.current_time() - started

    def _servent_nodes(self) -> list[ServentNode]:
        return [] if self.servents is None else self.servents.nodes

    # ------------------------------------------------------------------ output

    def _note(self, text: str) -> None:
        self.console.note(text)

    def _print_final(self, outcome: NetworkOutcome) -> None:
        text = final_text(outcome.summary, self.report, outcome.results)
        print("\n" + text, file=self.out, flush=True)

    async def _watch_signals(self, everything: trio.CancelScope) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGUSR1) as signals:
            async for signum in signals:
                if signum == signal.SIGUSR1:
                    await self._dump_nodes()
                    continue
                if self.phase == "console" and signum == signal.SIGINT:
                    continue  # Ctrl-C is the console's: it abandons the line being typed
                if self._stop.is_set():
                    everything.cancel()
                    return
                self._note("stopping: collecting results and saying Bye (again to force)")
                self.request_stop()

    async def _dump_nodes(self) -> None:
        """SIGUSR1: every running node writes its full dump into its own folder, as a
        single router does on SIGUSR1; the network carries on."""
        written = 0
        for node in self.nodes:
            if not node.running():
                continue
            try:
                await node.write_dump()
                written += 1
            except NodeError as exc:
                self._note(str(exc))
        self._note(f"SIGUSR1: {written} node(s) write a dump into their node-* folders")


async def run_network(
    settings: NetworkSettings, *, out: TextIO | None = None, handle_signals: bool = False
) -> NetworkOutcome:
    """Run a whole test network once (see the module docstring)."""
    return await LocalNetwork(settings, out=out).run(handle_signals=handle_signals)


# --------------------------------------------------------------------------- helpers


def _format(address: tuple[str, int]) -> str:
    return format_address(*address)
