"""The test network's status line: one line about once a second, and the reads behind it.

Once the network has formed, every node's connections and counters are read about once a
second (a large network less often, at most :data:`READS_PER_SECOND` nodes a second, so
that being watched does not take the routers' CPU); the line shows the nodes running,
the links against the plan, connections, messages routed (and the rate between the last
two full reads), drops and, during traffic, what the load client sent.
"""

from __future__ import annotations

from typing import Protocol

import trio

from gnutella_router.lab.testnet.console import Console
from gnutella_router.lab.testnet.formation import Formation
from gnutella_router.lab.testnet.measure import OverlayRecord
from gnutella_router.lab.testnet.nodes import NetworkNode
from gnutella_router.lab.testnet.settings import NetworkSettings
from gnutella_router.lab.testnet.spread_load import SpreadLoadRun

STATUS_INTERVAL = 1.0
READS_PER_SECOND = 50
"""Nodes whose counters the status line reads per second at most: a network larger than
that is read in full every ``nodes / READS_PER_SECOND`` seconds instead of every one."""


class WatchedRun(Protocol):
    """What the status line reads of a running test network."""

    started: float
    phase: str
    settings: NetworkSettings
    console: Console
    overlay: OverlayRecord
    load_run: SpreadLoadRun | None

    @property
    def nodes(self) -> list[NetworkNode]: ...

    def snapshot(self) -> Formation: ...

    async def refresh(self, *, totals: bool = False, only: set[int] | None = None) -> None: ...


class StatusLine:
    """The line, and the reads that keep it current (see the module)."""

    def __init__(self, run: WatchedRun) -> None:
        self.run = run
        self._read_totals: tuple[float, int] | None = None
        """When the routers' totals were last read in full, and the messages routed then."""
        self._routed_rate = 0.0
        """Messages routed per second between the last two full reads."""

    def line(self, state: Formation | None = None) -> str:
        """The one-line state of the run; ``state`` is the snapshot to count links from
        (taken now when not given)."""
        now = trio.current_time()
        run = self.run
        elapsed = now - run.started
        if state is None:
            state = run.snapshot()
        running = [n for n in run.nodes if n.running()]
        connections = sum(len(n.view.open_connections()) for n in running)
        routed = sum(n.view.received for n in run.nodes)
        dropped = sum(n.view.dropped for n in run.nodes)
        rate = self._routed_rate
        line = (
            f"[{elapsed:6.1f} s] {run.phase:<8} nodes {len(running)}/{run.settings.nodes}  "
            f"{state.counts()}  conns {connections}  "
            f"routed {routed:,} ({rate:,.0f}/s)  dropped {dropped:,}"
        )
        if run.load_run is not None and run.phase == "traffic":
            counters = run.load_run.counters()
            line += (
                f"  | sent {counters['sent']:,}  copies {counters['copies']:,}  "
                f"late {counters['late']:,}"
            )
        return line

    async def show(self) -> None:
        """The status line and a connectivity sample about once a second, from the
        nodes' last views (read by the formation poll, then by :meth:`_read_views`)."""
        run = self.run
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._read_views)
            while True:
                await trio.sleep(STATUS_INTERVAL)
                state = run.overlay.sample(trio.current_time() - run.started, run.nodes)
                if run.phase != "console":  # the console has the terminal
                    run.console.status(self.line(state))

    async def _read_views(self) -> None:
        """Once the network has formed, read every node's connections and counters
        about once a second; a large network less often (at most
        :data:`READS_PER_SECOND` nodes a second), so the reads do not take the routers'
        CPU. A read that is slow delays the next, never the status line."""
        run = self.run
        every = max(STATUS_INTERVAL, run.settings.nodes / READS_PER_SECOND)
        while True:
            began = trio.current_time()
            if run.phase not in ("starting", "netns", "leaves", "forming"):
                await run.refresh(totals=True)
                self._note_routed(trio.current_time())
            await trio.sleep_until(began + every)

    def _note_routed(self, now: float) -> None:
        """Keep the routed rate between this full read of the totals and the last."""
        routed = sum(n.view.received for n in self.run.nodes)
        if self._read_totals is not None and now > self._read_totals[0]:
            then, before = self._read_totals
            self._routed_rate = max(0, routed - before) / (now - then)
        self._read_totals = (now, routed)
