"""The daemon: three stages wired together, signals, and a graceful shutdown.

The stages are the paper's: :class:`~gnutella_router.stages.server.GnutellaServer` (sockets,
handshakes, framing), :class:`~gnutella_router.stages.router.GnutellaRouter` (the routing
stage, with its bounded queue and worker pool) and
:class:`~gnutella_router.stages.catcher.GnutellaCatcher` (bootstrap). Each is registered by
name so that tools can list them and read their statistics.

Shutdown, on SIGTERM, SIGINT or :meth:`Daemon.request_stop`: the listeners close, every
peer that announced ``Bye-Packet`` gets ``Bye 200``, the connections get up to two
seconds to flush, the host cache is saved, and everything else is cancelled; the
process is out well within five seconds. A second SIGTERM or SIGINT cancels at once.

SIGHUP reloads the configuration (:meth:`Daemon.reload`, :mod:`.config.live`), as
daemons under systemd do (``ExecReload=/bin/kill -HUP $MAINPID``), unless it is a
hangup: the router's parent is gone (it was reparented since it started: the kernel's
parent-death signal, which a test network asks for its nodes) or the terminal it
started on has hung up. A hangup stops the router gracefully, and a second hangup
never hurries the stop (the kernel may send the parent-death signal more than once).

Under systemd (``Type=notify``; :mod:`gnutella_router.systemd`) the daemon says
``READY=1`` once its listeners and admin interface are up, ``RELOADING=1`` and
``READY=1`` around a reload, ``STOPPING=1`` when it begins to stop, a ``STATUS=`` line
at each of those and every :data:`STATUS_INTERVAL` seconds, and, with ``WatchdogSec=``,
``WATCHDOG=1`` every half of it as long as its stages make progress
(:mod:`.runtime.progress`): a router whose stages are wedged stops sending it and is
restarted.

Once it listens, the daemon writes ``state_dir/ready.json`` with its pid and addresses
(:mod:`gnutella_router.ready_file`), so that a program that started it on port 0 learns
its ports; the file goes when the daemon stops.

SIGUSR1 writes a full dump with the trio task tree to ``state_dir/dump-*.json`` and the
daemon carries on; the same views are served live by the admin interface
(:mod:`gnutella_router.observe.admin`), which starts with the stages.
"""

from __future__ import annotations

import contextlib
import gc
import ipaddress
import math
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Literal, Self

import msgspec
import structlog
import trio

from gnutella_router import native
from gnutella_router.config import Config, ConfigError
from gnutella_router.config.live import ReloadError, ReloadPlan, plan_reload
from gnutella_router.control.abuse import in_networks
from gnutella_router.control.batching import BatchingController
from gnutella_router.control.governor import ThreadGovernor
from gnutella_router.discovery.host_cache import OPERATOR, SEED
from gnutella_router.logs import RateLimitedWarnings, set_level
from gnutella_router.net.connection import Connection, format_address
from gnutella_router.net.connection_table import ConnectionTable
from gnutella_router.net.deflate_pool import DeflatePool
from gnutella_router.net.outbox import Outbox
from gnutella_router.observe.admin import serve_admin
from gnutella_router.observe.dump_files import write_dump_logged
from gnutella_router.observe.profiler import Profiler
from gnutella_router.observe.recorder import Recorder
from gnutella_router.ready_file import remove_ready_file, write_ready_file
from gnutella_router.runtime.progress import ProgressCheck, samples
from gnutella_router.runtime.stage import StageRegistry
from gnutella_router.stages.catcher import GnutellaCatcher
from gnutella_router.stages.router import GnutellaRouter
from gnutella_router.stages.server import AlreadyConnected, GnutellaServer
from gnutella_router.state_lock import lock_state_directory
from gnutella_router.systemd import Notifier
from protocol.messages import Message, random_guid

BYE_GRACE_SECONDS = 2.0
YOUNG_COLLECTION_THRESHOLD = 10_000
"""Allocations between young collections (CPython's default is 700)."""
STATUS_INTERVAL = 10.0
"""Seconds between two status lines to systemd."""
SEED_RESOLVE_SECONDS = 10.0
"""How long a reload waits for a seed's name to resolve."""


class Daemon:
    """One router: construct it, then ``await nursery.start(daemon.run)``."""

    def __init__(
        self,
        config: Config,
        *,
        log: structlog.typing.FilteringBoundLogger | None = None,
        config_source: Callable[[], Config] | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.config = config
        """The configuration in force (a reload replaces it)."""
        self.config_source = config_source
        """Reads the configuration again as the router was started (its file and flags),
        for a reload; None: the router was not started from one, and cannot reload."""
        self.notifier = notifier
        """systemd's notification socket (:mod:`gnutella_router.systemd`); None outside
        a ``Type=notify`` unit."""
        self.reloads = 0
        """Reloads carried out (a refused one is not counted)."""
        self._reloading = trio.Lock()
        self.guid = bytes.fromhex(config.node.guid) if config.node.guid else random_guid()
        self.log = log or structlog.get_logger("gnutella-router")
        self.registry = StageRegistry()
        connections = ConnectionTable()
        threads = config.network.deflate_threads
        level = config.network.deflate_level
        self.outbox = Outbox(connections, DeflatePool(threads, level) if threads else None)
        """The router's one way out to the connections (:mod:`.net.outbox`)."""
        self.router = GnutellaRouter(
            config.router,
            outbox=self.outbox,
            own_address=self._own_address,
            own_guid=self.guid,
            max_ttl=config.network.max_ttl,
            hard_ttl_limit=config.network.hard_ttl_limit,
            allow_private=config.network.allow_private_addresses,
            local_networks=config.network.local_networks_parsed,
            shedding=config.shedding,
            trusted=self._link_trusted,
            on_host_learned=self._learn,
            log=self.log.bind(stage="router"),
        )
        self.server = GnutellaServer(
            config,
            router=self.router,
            outbox=self.outbox,
            connections=connections,
            own_guid=self.guid,
            try_hosts=self._try_hosts,
            on_hosts_learned=self._learn_many,
            log=self.log.bind(stage="server"),
        )
        self.catcher = GnutellaCatcher(
            config, server=self.server, router=self.router, log=self.log.bind(stage="catcher")
        )
        self.registry.register("server", self.server)
        self.registry.register("router", self.router.stage)
        self.registry.register("catcher", self.catcher.stage)
        self.governor = (
            ThreadGovernor(self.router.stage, config.governor, log=self.log.bind(stage="governor"))
            if config.governor.enabled
            else None
        )
        """Resizes the router's pool from its queue; None when the configuration has it off."""
        self.batching = (
            BatchingController(
                self.router.stage, config.batching, log=self.log.bind(stage="batching")
            )
            if config.batching.enabled
            else None
        )
        """Adapts the router's batch size; None when off (then router.batch_size is fixed)."""
        self.profiler = Profiler(self, config.profiler) if config.profiler.enabled else None
        """Samples queues, pool, RSS and rates; None unless enabled.

        See :mod:`gnutella_router.observe.profiler`."""
        self.recorder: Recorder | None = None
        """The trace recorder while ``trace.record`` is set.

        See :mod:`gnutella_router.observe.recorder`."""
        self.admin_address: tuple[str, int] | None = None
        """Where the admin interface listens, once running (:mod:`.observe.admin`)."""
        self.started_at: float | None = None
        """trio's clock when :meth:`run` began, for uptime."""
        self._stop = trio.Event()
        self.stopped = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._dumping = False
        self._profiler_scope: trio.CancelScope | None = None
        """Cancels the running profiler; None while none runs."""

    # Late-bound callbacks: the stages reference each other through the daemon.
    def _link_trusted(self, connection_id: int) -> bool:
        """Whether a connection's peer is in the trusted networks (its queries are then
        not rate-limited)."""
        connection = self.server.connections.get(connection_id)
        return connection is not None and in_networks(
            connection.peer[0], self.server.trusted_networks
        )

    def _own_address(self) -> tuple[str, int]:
        return self.server.advertised_address()

    def _learn(self, host: str, port: int, source: str, connection_id: int) -> None:
        """A host a peer told the router of (a pong): the catcher keeps a share per teller."""
        connection = self.server.connections.get(connection_id)
        self.catcher.learn(host, port, source, connection.peer[0] if connection else None)

    def _learn_many(self, hosts: list[tuple[str, int]], source: str, teller: str) -> None:
        self.catcher.learn_many(hosts, source, teller)

    def _try_hosts(self) -> list[tuple[str, int]]:
        return self.catcher.try_hosts()

    @property
    def address(self) -> tuple[str, int]:
        """Where the daemon listens (the first address, if several)."""
        return self.server.listen_addresses[0]

    def request_stop(self) -> None:
        self._stop.set()

    # ------------------------------------------------------------------ operator actions
    # What the admin interface's POST endpoints (and `gnutella-router ctl`) do.

    async def add_peer(self, host: str, port: int) -> int:
        """Dial ``host:port`` now and keep it in the host cache; the new connection's id.
        A hold from an earlier drop is lifted.

        Raises:
            AlreadyConnected: a connection to that address is open, or being dialled: a
                second one would only be refused by the peer, or carry everything twice.
            DialError: the peer could not be reached or refused the handshake.
        """
        for open_connection in self.server.connections.snapshot():
            if not open_connection.closing and (host, port) in (
                open_connection.peer,
                open_connection.listen_address,
            ):
                raise AlreadyConnected((host, port), open_connection.id)
        if self.catcher.is_dialling(host, port):
            raise AlreadyConnected((host, port), None)
        self.catcher.release(host, port)
        connection = await self.server.dial(host, port, timeout=self.config.catcher.dial_timeout)
        self.catcher.learn(host, port, OPERATOR)
        self.log.info("peer added by the operator", peer=connection.peer_text, conn=connection.id)
        return connection.id

    def drop_peer(self, connection_id: int) -> bool:
        """Close one connection, with Bye 200 if the peer takes Bye; False if unknown.
        Its addresses are not dialled again for ``catcher.drop_hold`` seconds."""
        connection = self.server.connections.get(connection_id)
        if connection is None or connection.closing:
            return False
        addresses = [connection.peer]
        if connection.listen_address is not None:
            addresses.append(connection.listen_address)
        self.catcher.hold_back(addresses, trio.current_time())
        self.log.info(
            "peer dropped by the operator",
            peer=connection.peer_text,
            not_dialled_for=self.config.catcher.drop_hold,
        )
        connection.close("dropped by the operator", bye_code=200)
        return True

    def hold_peer(self, host: str, port: int, seconds: float = math.inf) -> int:
        """Take the link to the peer listening at ``host:port`` down and keep it down:
        its connections are closed (Bye 200), and it is neither dialled nor accepted for
        ``seconds`` (until :meth:`release_peer` by default). How many connections were
        closed.

        Raises:
            ValueError: ``seconds`` is out of range (see :mod:`.control.holds`).
        """
        self.server.holds.hold((host, port), trio.current_time(), seconds)
        closed = self._close_where(
            lambda c: (host, port) in (c.peer, c.listen_address), "held down by the operator"
        )
        self.log.info(
            "peer held down by the operator", peer=format_address(host, port), closed=closed
        )
        return closed

    def release_peer(self, host: str, port: int) -> bool:
        """End the hold on ``host:port``; whether there was one. The catcher may dial it
        again when it needs peers; the operator's ``peers add`` dials it now."""
        released = self.server.holds.release((host, port))
        if released:
            self.log.info("peer released by the operator", peer=format_address(host, port))
        return released

    def set_offline(self, offline: bool) -> int:
        """Go offline (every connection closed with Bye 200, no handshake accepted,
        nothing dialled; the admin interface stays up) or back online, when the catcher
        dials again. How many connections were closed."""
        self.server.holds.offline = offline
        closed = self._close_where(lambda c: True, "offline") if offline else 0
        self.log.info("offline" if offline else "online", by="the operator", closed=closed)
        return closed

    def _close_where(self, chosen: Callable[[Connection], bool], reason: str) -> int:
        closed = 0
        for connection in self.server.connections.snapshot():
            if not connection.closing and chosen(connection):
                connection.close(reason, bye_code=200)
                closed += 1
        return closed

    def inject(self, message: Message) -> int:
        """Send ``message`` (a ping or a query) to our neighbours as one of our own; how
        many it was sent to (see :meth:`GnutellaRouter.inject`)."""
        sent = self.router.inject(message, trio.current_time())
        self.log.info(
            "message injected by the operator",
            guid=message.guid.hex(),
            type=type(message.payload).__name__.lower(),
            ttl=message.ttl,
            sent_to=sent,
        )
        return sent

    async def reload(self, *, by: str = "the operator") -> ReloadPlan:
        """Read the configuration again and apply what can change while running.

        The settings of :data:`~.config.live.LIVE_SETTINGS` that changed take their new
        values at once; any other that changed is named as needing a restart, and keeps
        its value. One line in the log says which were applied and which need a restart.

        Raises:
            ReloadError: the router was not started from a configuration it can read
                again, or what was read is not valid (a bad file): then nothing changes,
                and the error is logged.
        """
        if self.config_source is None:
            raise ReloadError("this router was not started from a configuration it can reload")
        async with self._reloading:
            self._notify("reloading", "reloading the configuration")
            try:
                try:
                    plan = plan_reload(self.config, self.config_source())
                except ConfigError as exc:
                    self.log.error(
                        "configuration not reloaded: still running on the old one",
                        error=str(exc),
                        by=by,
                    )
                    raise ReloadError(f"configuration error: {exc}") from None
                await self._apply(plan)
            finally:
                self._notify("ready", self._status_line())
        self.reloads += 1
        self.log.info(
            "configuration reloaded",
            by=by,
            applied={key: list(change) for key, change in plan.applied.items()},
            needs_restart=list(plan.needs_restart),
        )
        if plan.needs_restart:
            self.log.warning(
                "changed settings need a restart", settings=list(plan.needs_restart), by=by
            )
        return plan

    async def _apply(self, plan: ReloadPlan) -> None:
        """Hand the live settings' new values to the parts that hold them (each one
        named in :data:`~.config.live.LIVE_SETTINGS` is set here)."""
        before, config = self.config, plan.effective
        if plan.changed("log.level"):
            set_level(config.log.level)
        network = config.network
        slots = self.server.slots
        slots.max_connections = network.max_connections
        slots.max_leaves = network.max_leaves
        slots.per_address = network.connections_per_address
        self.server.rate_limiter.limit = network.connects_per_ip_per_minute
        self.router.query_rate.rate = config.router.peer_query_rate
        self.router.query_rate.burst = config.router.peer_query_burst
        # Read afresh at every use: handshake_timeout, catcher.*, abuse.ban_seconds.
        self.config = self.server.config = self.catcher.config = config
        self.catcher.settings = config.catcher
        if plan.changed("catcher.seeds"):
            await self._reseed(before.catcher.seed_addresses, config.catcher.seed_addresses)

    async def _reseed(
        self, before: tuple[tuple[str, int], ...], after: tuple[tuple[str, int], ...]
    ) -> None:
        """Put added seeds into the host cache as seeds, and take removed ones out,
        unless a seed still listed stands for the same address, or a peer or cache
        named the host too (then it is no longer only a seed, and stays)."""
        hosts = self.catcher.hosts
        kept: set[tuple[str, int]] = set()
        for host, port in dict.fromkeys(after):
            for address in await self._resolve_seed(host, port):
                kept.add((address, port))
                if (host, port) not in before:
                    hosts.add(address, port, SEED, trio.current_time())
        for host, port in dict.fromkeys(before):
            if (host, port) not in after:
                for address in await self._resolve_seed(host, port):
                    if (address, port) not in kept and hosts.source_of(address, port) == SEED:
                        hosts.remove(address, port)

    async def _resolve_seed(self, host: str, port: int) -> list[str]:
        """A seed's addresses (itself, if it is one); none, logged, if it does not resolve."""
        try:
            ipaddress.ip_address(host)
        except ValueError:
            pass
        else:
            return [host]
        try:
            with trio.fail_after(SEED_RESOLVE_SECONDS):
                infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
        except (OSError, trio.TooSlowError) as exc:
            self.log.warning("seed does not resolve", seed=f"{host}:{port}", error=str(exc))
            return []
        return list(dict.fromkeys(str(info[4][0]) for info in infos))

    def set_log_level(self, level: str) -> None:
        """Change the log level of the whole process now (ValueError for an unknown one)."""
        set_level(level)
        self.log.warning("log level changed by the operator", level=level)

    async def start_profiler(self) -> bool:
        """Start sampling (a fresh ring); False if it is already running."""
        if self._profiler_scope is not None or self._nursery is None:
            return False
        settings = msgspec.structs.replace(self.config.profiler, enabled=True)
        self.profiler = Profiler(self, settings)
        await self._nursery.start(self._run_profiler, self.profiler)
        self.log.info("profiler started by the operator")
        return True

    def stop_profiler(self) -> tuple[Path, Path] | None:
        """Stop sampling and write the export; its paths, or None if it was not running.

        The samples stay readable at ``/profile`` until the profiler is started again.
        """
        if self._profiler_scope is None or self.profiler is None:
            return None
        self._profiler_scope.cancel()
        self._profiler_scope = None
        return self.profiler.write(self.config.state_path)

    async def _run_profiler(
        self, profiler: Profiler, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        with trio.CancelScope() as scope:
            self._profiler_scope = scope
            await profiler.serve(task_status=task_status)

    async def run(
        self,
        *,
        handle_signals: bool = False,
        task_status: trio.TaskStatus[Self] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run until asked to stop, then shut down gracefully.

        Raises:
            StateDirectoryBusy: another router uses this state directory.
        """
        self.started_at = trio.current_time()
        lock = lock_state_directory(self.config.state_path)
        try:
            async with trio.open_nursery() as nursery:
                if handle_signals:
                    # Before anything listens: a SIGTERM that arrives as soon as the port
                    # accepts must still mean a graceful stop, not the default kill.
                    await nursery.start(self._watch_signals, nursery.cancel_scope)
                if self.config.trace_path is not None:
                    await self._start_recording(nursery, self.config.trace_path)
                await nursery.start(self.router.stage.serve)
                await nursery.start(self.router.run_timers)
                if self.governor is not None:
                    await nursery.start(self.governor.serve)
                if self.batching is not None:
                    await nursery.start(self.batching.serve)
                self._nursery = nursery
                if self.profiler is not None:
                    await nursery.start(self._run_profiler, self.profiler)
                await nursery.start(self.server.serve)
                await nursery.start(self.catcher.serve)
                self.admin_address = await nursery.start(serve_admin, self)
                hot_modules = native.native_modules()
                self.log.info(
                    "router started",
                    listening=[format_address(*a) for a in self.server.listen_addresses],
                    guid=self.guid.hex(),
                    admin=format_address(*self.admin_address),
                    slow_peer_policy=self.config.slow_peer.policy,
                    max_ttl=self.config.network.max_ttl,
                    hot_path=native.describe(hot_modules),
                )
                if stale := native.stale_modules(hot_modules):
                    self.log.warning(
                        "compiled modules older than their sources run in their place; "
                        "rebuild with scripts/venv.sh",
                        modules=stale,
                    )
                self._announce_ready()
                if self.notifier is not None:
                    self._notify("ready", self._status_line())
                    nursery.start_soon(self._tell_systemd, self.notifier)
                # Everything alive now (modules, stages, tables) lives as long as the
                # process: moved out of the collector's sight, a full collection no
                # longer walks it, which keeps its pauses short under load.
                gc.freeze()
                # Nearly every object a router makes (frames, encoded messages) dies
                # young, freed by reference counting; fewer young collections means
                # less total collector work at no cost in memory.
                gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, *gc.get_threshold()[1:])
                task_status.started(self)
                await self._stop.wait()
                self._notify(
                    "stopping", f"stopping: saying Bye to {len(self.server.connections)} peers"
                )
                await self._shutdown()
                nursery.cancel_scope.cancel()
        finally:
            remove_ready_file(self.config.state_path)
            lock.release()
            self.stopped.set()

    def _announce_ready(self) -> None:
        """Write the ready file (:mod:`gnutella_router.ready_file`) for whoever started us."""
        try:
            write_ready_file(
                self.config.state_path,
                guid=self.guid.hex(),
                listening=[format_address(*a) for a in self.server.listen_addresses],
                advertised=format_address(*self.server.advertised_address()),
                admin=None if self.admin_address is None else format_address(*self.admin_address),
            )
        except OSError as exc:
            self.log.error("ready file not written", error=str(exc))

    def _notify(self, what: Literal["ready", "reloading", "stopping"], status: str) -> None:
        """Send systemd ``READY=1``, ``RELOADING=1`` or ``STOPPING=1`` with a status
        line, when it listens. The first message that cannot be sent is logged (the
        notifier counts the others: systemd gone, the router is on its own)."""
        notifier = self.notifier
        if notifier is None:
            return
        send = {
            "ready": notifier.ready,
            "reloading": notifier.reloading,
            "stopping": notifier.stopping,
        }[what]
        if not send(status) and notifier.failed == 1:
            self.log.warning(
                "systemd notification not sent", error=notifier.last_error, message=what
            )

    def _status_line(self) -> str:
        """What ``systemctl status`` shows of the router."""
        listening = ", ".join(format_address(*a) for a in self.server.listen_addresses)
        connections = self.server.connections.snapshot()
        peers = len(connections)
        leaves = sum(1 for c in connections if c.capabilities.ultrapeer is False)
        return (
            f"{peers} peers ({leaves} leaves) on {listening}; "
            f"{sum(self.router.received)} messages received, "
            f"{self.router.total_dropped()} dropped"
        )

    async def _tell_systemd(self, notifier: Notifier) -> None:
        """A status line every :data:`STATUS_INTERVAL` seconds and, under systemd's
        watchdog, a keep-alive every half of its timeout while the stages make progress
        (:mod:`.runtime.progress`); a stall is logged at most every 10 s."""
        interval = notifier.watchdog_interval
        check = ProgressCheck()
        stalls = RateLimitedWarnings(self.log)
        now = trio.current_time()
        next_status = now + STATUS_INTERVAL
        next_ping = now if interval is not None else math.inf
        while True:
            await trio.sleep_until(min(next_status, next_ping))
            now = trio.current_time()
            if now >= next_ping and interval is not None:
                next_ping = now + interval
                stalled = check.stalled(samples(self.registry))
                if not stalled:
                    notifier.watchdog()
                else:
                    stage = stalled[0]
                    stalls.warn(
                        "watchdog",
                        "watchdog keep-alive withheld: a stage makes no progress",
                        stage=stage.name,
                        waiting=stage.waiting,
                        seconds=interval,
                    )
                    notifier.status(
                        f"stalled: stage {stage.name} has held {stage.waiting} events "
                        f"for {interval:g} s without taking one"
                    )
            if now >= next_status:
                next_status = now + STATUS_INTERVAL
                notifier.status(self._status_line())

    async def _shutdown(self) -> None:
        started = trio.current_time()
        await self.server.close_listeners()
        peers = len(self.server.connections)
        await self.server.say_goodbye(BYE_GRACE_SECONDS)
        with trio.CancelScope(shield=True), trio.move_on_after(2.0):
            await self.catcher.save()
        if self.recorder is not None:
            await self.recorder.aclose()
        if self.profiler is not None and self._profiler_scope is not None:
            self._write_profile(self.profiler)
        self.log.info(
            "router stopped",
            peers_said_goodbye=peers,
            seconds=round(trio.current_time() - started, 3),
            received=sum(self.router.received),
            dropped=self.router.total_dropped(),
        )

    def _write_profile(self, profiler: Profiler) -> None:
        try:
            json_path, dot_path = profiler.write(self.config.state_path)
        except OSError as exc:
            self.log.error("profile not written", error=str(exc))
            return
        self.log.info("profile written", path=str(json_path), graph=str(dot_path))

    async def _start_recording(self, nursery: trio.Nursery, path: Path) -> None:
        trace = self.config.trace
        # Opening is a few small file operations, once: done on the loop, before peers.
        self.recorder = Recorder.open(
            path,
            max_bytes=trace.max_bytes,
            max_files=trace.max_files,
            buffer_bytes=trace.buffer_bytes,
            log=self.log.bind(stage="recorder"),
        )
        self.server.recorder = self.recorder
        await nursery.start(self.recorder.run)

    async def _watch_signals(
        self,
        cancel_scope: trio.CancelScope,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        watched = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)
        parent, on_terminal = os.getppid(), on_a_terminal()
        with trio.open_signal_receiver(*watched) as signals:
            task_status.started()
            async with trio.open_nursery() as chores:  # dumps and reloads
                async for signum in signals:
                    if signum == signal.SIGUSR1:
                        self._start_dump(chores)
                        continue
                    if signum == signal.SIGHUP and self._stop.is_set():
                        # A hangup never hurries a stop: the kernel sends a parent-death
                        # SIGHUP once per thread, so several come at once.
                        continue
                    if signum == signal.SIGHUP and not is_hangup(parent, on_terminal):
                        chores.start_soon(self._reload_on_signal)
                        continue
                    if self._stop.is_set():
                        self.log.warning("second signal: stopping at once", signal=signum)
                        cancel_scope.cancel()
                        return
                    self.log.info("stopping", signal=signal.Signals(signum).name)
                    self.request_stop()

    async def _reload_on_signal(self) -> None:
        """SIGHUP's reload; a refused one was logged already, and the router runs on."""
        with contextlib.suppress(ReloadError):
            await self.reload(by="SIGHUP")

    def _start_dump(self, nursery: trio.Nursery) -> None:
        """The SIGUSR1 dump (full dump and task tree), in a task of its own: it is made
        a slice at a time between router batches and takes a second or two with full
        route tables, and a SIGTERM meanwhile must not wait for it. One at a time."""
        if self._dumping:
            self.log.info("SIGUSR1 ignored: a dump is being written already")
            return
        self._dumping = True

        async def dump() -> None:
            try:
                await write_dump_logged(self)
            finally:
                self._dumping = False

        nursery.start_soon(dump, name="sigusr1-dump")


def on_a_terminal() -> bool:
    """Whether a standard stream of this process is a terminal (one hung up is not)."""
    return any(os.isatty(descriptor) for descriptor in (0, 1, 2))


def is_hangup(parent: int, on_terminal: bool) -> bool:
    """Whether a SIGHUP means the router lost what started it: it has been reparented
    since ``parent`` started it (the kernel's parent-death signal), or it started on a
    terminal (``on_terminal``) and none is left (the terminal hung up). Otherwise it is
    a request to reload."""
    return os.getppid() != parent or (on_terminal and not on_a_terminal())
