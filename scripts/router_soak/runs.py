"""One soak: its settings (the command line's flags) and :class:`Soak`, which starts
the network, waits for it to form, runs the load while sampling and stops it all on every
path. The figures are made from what it kept by :mod:`router_soak.figures`.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import os
import signal
import time
from pathlib import Path
from typing import Any

import trio

from gnutella_router.lab.testnet.spread_load import SpreadLoadRun
from gnutella_router.lab.traffic.load import LoadError, LoadSettings
from gnutella_router.observe.admin_client import FetchError
from scripts.router_soak.probes import (
    admin_get,
    connection_count,
    load_average,
    outgoing_link_up,
    proc_status,
)
from scripts.router_soak.processes import (
    FORM_TIMEOUT,
    INJECTOR_ROUTERS,
    ROUTERS,
    SETTLE_TIMEOUT,
    SINK_ROUTERS,
    TOPOLOGIES,
    WINDOW_SECONDS,
    Router,
    SoakError,
    log_tail,
    start_router,
    stop_routers,
)
from scripts.router_soak.samples import OtherProcesses, Sample, SoakLoad, take_sample
from scripts.runner import free_ports
from traffic_models.arrivals import ConstantRate
from traffic_models.generator import TrafficGenerator
from traffic_models.latency import LoadReport
from traffic_models.mix import PAPER_MIX


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    """What a soak does and the bounds it is judged by (the command line's flags)."""

    minutes: float = 30.0
    """Length of the load: long enough that a slow leak outgrows the noise."""
    rate: float = 5000.0
    """Offered msgs/s in all, shared by the two injectors."""
    sample_seconds: float = 10.0
    seed: int = 1
    """Seed of the traffic model: the same messages in the same order on every run."""
    topology: str = "line"
    reference_minutes: float = 5.0
    """When the steady state is taken to start: the tables have filled by then."""
    max_drift: float = 5.0
    """Largest RSS growth from the reference to the end, in percent."""
    fd_slack: int = 2
    """Descriptors a router may gain: a save of its host cache may hold a file open."""
    max_loss: float = 0.1
    """Largest share of owed copies that may not arrive, in percent."""

    @property
    def duration(self) -> float:
        return self.minutes * 60.0

    @property
    def reference(self) -> float:
        """Seconds into the load of the "minute 5" point; half time in a short run."""
        return min(self.reference_minutes * 60.0, self.duration / 2)

    @property
    def window(self) -> float:
        """Span of the samples whose median stands for one point in time."""
        return min(WINDOW_SECONDS, max(self.reference / 3, self.sample_seconds))


class Soak:
    """One soak: network, load, samples, then :func:`analyse` makes the figures."""

    def __init__(self, settings: Settings, workdir: Path) -> None:
        self.settings = settings
        self.workdir = workdir
        ports = free_ports(2 * ROUTERS)
        seeds = TOPOLOGIES[settings.topology]
        self.routers = [
            Router(
                name=f"R{i}",
                port=ports[2 * i],
                admin_port=ports[2 * i + 1],
                seeds=seeds[i],
                state_dir=workdir / f"R{i}-state",
                log_path=workdir / f"R{i}.log",
            )
            for i in range(ROUTERS)
        ]
        self.samples: list[Sample] = []
        self.stats_before: list[Any] = []
        self.stats_after: list[Any] = []
        self.peak_rss: list[int | None] = [None] * ROUTERS
        self.load: SoakLoad | None = None
        self.report: LoadReport | None = None
        self.load_error: str | None = None
        self.interrupted = False
        self.aborted = False
        self.started_at = datetime.datetime.now(datetime.UTC)
        self.load_average_start = load_average()
        self.t0: float | None = None
        self.others = OtherProcesses()

    # ------------------------------------------------------------------ network

    def links(self) -> list[tuple[Router, Router]]:
        return [(r, self.routers[s]) for r in self.routers for s in r.seeds]

    def degree(self, router: Router) -> int:
        return sum(router in link for link in self.links())

    def start_network(self) -> None:
        for router in self.routers:
            start_router(router, [self.routers[s] for s in router.seeds], self.workdir)
            print(
                f"{router.name}: pid {router.pid}, 127.0.0.1:{router.port} "
                f"(admin {router.admin_port})"
                + (
                    f", dials {', '.join(self.routers[s].name for s in router.seeds)}"
                    if router.seeds
                    else ""
                ),
                flush=True,
            )
        deadline = time.monotonic() + FORM_TIMEOUT
        while missing := [(a, b) for a, b in self.links() if not outgoing_link_up(a, b)]:
            for router in self.routers:
                if not router.alive():
                    raise SoakError(f"{router.name} exited{log_tail(router.log_path)}")
            if time.monotonic() > deadline:
                names = ", ".join(f"{a.name} -> {b.name}" for a, b in missing)
                raise SoakError(f"the network did not form within {FORM_TIMEOUT:g} s: {names}")
            time.sleep(0.1)
        print(
            f"network formed ({self.settings.topology}: "
            + ", ".join(f"{a.name} -> {b.name}" for a, b in self.links())
            + ")",
            flush=True,
        )

    def read_stats(self) -> list[Any]:
        out = []
        for router in self.routers:
            try:
                out.append(admin_get(router, "/stats"))
            except FetchError as exc:
                out.append({"error": str(exc)})
        return out

    def settle(self) -> None:
        """Wait (bounded) until the load client's peers have left every router."""
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while time.monotonic() < deadline:
            counts = [connection_count(r) for r in self.routers]
            if all(
                c is None or c <= self.degree(r) for r, c in zip(self.routers, counts, strict=True)
            ):
                return
            time.sleep(0.1)

    # ------------------------------------------------------------------ load

    async def registered(self, index: int, address: tuple[str, int]) -> bool:
        """Has router ``index`` registered the load client's peer at ``address``?"""
        try:
            connections = await trio.to_thread.run_sync(
                admin_get, self.routers[index], "/connections"
            )
        except FetchError:
            return False
        wanted = f"{address[0]}:{address[1]}"
        return any(c.get("peer") == wanted and not c.get("closing") for c in connections)

    def make_load(self) -> SoakLoad:
        settings = self.settings
        targets = [(i, self.routers[i].address) for i in INJECTOR_ROUTERS]
        targets += [(i, self.routers[i].address) for i in SINK_ROUTERS]
        load_settings = LoadSettings(
            target=self.routers[0].address,
            peers=len(targets),
            injectors=len(INJECTOR_ROUTERS),
            duration=settings.duration,
            seed=settings.seed,
            respond=True,
            admin=None,  # three routers: reconciled here, from each one's counters
            user_agent="gnutella-router-soak",
        )
        traffic = TrafficGenerator(
            mix=PAPER_MIX, arrivals=ConstantRate(settings.rate), seed=settings.seed
        )
        return SoakLoad(load_settings, traffic, targets, self.registered)

    async def drive(self) -> None:
        """The load, the sampler and the signal watcher, until the load has ended."""
        load = self.load = self.make_load()
        done = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_signals, nursery.cancel_scope, load)
            sampler_done = trio.Event()
            nursery.start_soon(self._sample_during_load, load, done, sampler_done)
            try:
                self.report = owe_each_ping_once(await load.run())
            except LoadError as exc:
                self.load_error = str(exc)
            finally:
                done.set()
            await sampler_done.wait()
            nursery.cancel_scope.cancel()

    async def _watch_signals(self, scope: trio.CancelScope, load: SpreadLoadRun) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                if not self.interrupted:
                    self.interrupted = True
                    print(
                        f"\n{signal.Signals(signum).name}: ending the load early "
                        "(again to stop at once)",
                        flush=True,
                    )
                    load.request_stop()
                else:
                    self.aborted = True
                    scope.cancel()
                    return

    async def _sample_during_load(
        self, load: SoakLoad, done: trio.Event, sampler_done: trio.Event
    ) -> None:
        try:
            async with trio.open_nursery() as first:
                # Whichever comes first: the first message, or the end of a load that
                # never sent one (it could not connect, or was interrupted).
                for event in (load.sending, done):
                    first.start_soon(_set_then_cancel, event, first.cancel_scope)
            if not load.started_ns:
                return
            self.t0 = t0 = load.started_ns / 1e9
            interval = self.settings.sample_seconds
            tick = 0
            while True:
                delay = t0 + tick * interval - time.perf_counter()
                with trio.move_on_after(max(0.0, delay)):
                    await done.wait()
                if done.is_set():
                    return
                # Samples due after the last message (the load client is draining) are
                # kept apart: the figures "at the end" are those of the load itself.
                phase = "load" if tick * interval <= self.settings.duration + 1e-9 else "drain"
                sample = await trio.to_thread.run_sync(self._sample, phase, load)
                self.samples.append(sample)
                self.print_status(sample)
                # A slow sample skips the ticks it overran instead of bunching up.
                tick = max(tick + 1, math.floor((time.perf_counter() - t0) / interval) + 1)
        finally:
            sampler_done.set()

    def _sample(self, phase: str, load: SoakLoad) -> Sample:
        sample = take_sample(self.routers, phase, load)
        if phase == "load":
            self.others.scan({os.getpid(), *(r.pid for r in self.routers if r.process)})
        return sample

    def print_status(self, sample: Sample) -> None:
        assert self.t0 is not None
        at = sample.clock - self.t0
        rss = "/".join(f"{r.rss / 2**20:.1f}" if r.rss else "-" for r in sample.routers)
        fds = "/".join(str(r.fds) if r.fds is not None else "-" for r in sample.routers)
        rate = f"{sample.sent / at:,.0f}/s" if at >= 1 else "-"
        print(
            f"[{int(at) // 60:3d}:{int(at) % 60:02d}] sent {sample.sent:>10,} ({rate}) "
            f"copies {sample.copies:>10,} late {sample.late:>9,} | RSS MiB {rss} | FDs {fds} "
            f"| client {(sample.client_rss or 0) / 2**20:.1f} MiB | load {sample.load_average:.2f}",
            flush=True,
        )

    # ------------------------------------------------------------------ the run

    def run(self) -> None:
        """Start, load, sample, stop. Routers are stopped on every path out."""
        try:
            self.start_network()
            time.sleep(0.2)  # the routers close the sockets of our last admin requests
            self.samples.append(take_sample(self.routers, "before", None))
            self.stats_before = self.read_stats()
            trio.run(self.drive)
            if self.aborted:
                return
            self.settle()
            self.stats_after = self.read_stats()
            time.sleep(0.2)
            self.samples.append(take_sample(self.routers, "after", None))
            self.peak_rss = [
                proc_status(r.pid).get("VmHWM") if r.alive() else None for r in self.routers
            ]
        finally:
            stop_routers(self.routers)
        if self.t0 is not None:
            for sample in self.samples:
                sample.at = sample.clock - self.t0
        if self.load_error is not None:
            raise SoakError(f"load client: {self.load_error}")


async def _set_then_cancel(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


def owe_each_ping_once(report: LoadReport) -> LoadReport:
    """Expected copies as the network delivers them: a ping is owed to one sink only.

    The load client owes every broadcast to every sink, but a router answers another
    router's pings from its pong cache instead of passing them on, so a ping reaches the
    sink beside its injector only; there is one such sink per injector.
    """
    per_sink = report.expected.get("ping", 0) // max(report.sinks, 1)
    if not per_sink:
        return report
    return dataclasses.replace(report, expected={**report.expected, "ping": per_sink})
