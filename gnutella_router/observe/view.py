"""What the observers read of a running router: :class:`RouterView`.

The admin interface, the dumps, the metrics and the profiler look at a running daemon,
and the daemon starts them. If they named the daemon's class, each would import the
module that imports them. Instead they name this protocol: the parts of a router they
read (its stages, their statistics, its configuration and identity), and
:class:`gnutella_router.daemon.Daemon` satisfies it structurally. Observers therefore
sit one floor above the stages and one below the daemon, and a test can hand them any
object with these attributes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import structlog

from gnutella_router.config import Config
from gnutella_router.config.live import ReloadPlan
from gnutella_router.control.batching import BatchingController
from gnutella_router.control.governor import ThreadGovernor
from gnutella_router.observe.recorder import Recorder
from gnutella_router.runtime.stage import StageRegistry
from gnutella_router.stages.catcher import GnutellaCatcher
from gnutella_router.stages.router import GnutellaRouter
from gnutella_router.stages.server import GnutellaServer
from protocol.messages import Message

__all__ = ["ProfileSource", "RouterControl", "RouterView"]


class ProfileSource(Protocol):
    """A profiler, as the admin interface serves it (the profiler itself reads a
    :class:`RouterView`, so naming its class here would tie the two modules in a knot)."""

    def to_json(self) -> str: ...

    def to_csv(self) -> str: ...


class RouterView(Protocol):
    """The read-only face of a running router that observers depend on."""

    @property
    def config(self) -> Config: ...

    @property
    def guid(self) -> bytes: ...

    @property
    def log(self) -> structlog.typing.FilteringBoundLogger: ...

    @property
    def registry(self) -> StageRegistry: ...

    @property
    def server(self) -> GnutellaServer: ...

    @property
    def router(self) -> GnutellaRouter: ...

    @property
    def catcher(self) -> GnutellaCatcher: ...

    @property
    def governor(self) -> ThreadGovernor | None: ...

    @property
    def batching(self) -> BatchingController | None: ...

    @property
    def profiler(self) -> ProfileSource | None: ...

    @property
    def recorder(self) -> Recorder | None:
        """The trace recorder while one runs."""
        ...

    @property
    def started_at(self) -> float | None:
        """trio's clock when the router began running, for uptime; None before."""
        ...

    @property
    def admin_address(self) -> tuple[str, int] | None:
        """Where the admin interface listens, once it does."""
        ...


class RouterControl(RouterView, Protocol):
    """A running router as the operator may change it (the admin interface's POSTs)."""

    async def add_peer(self, host: str, port: int) -> int:
        """Dial a peer now; the new connection's id (DialError when it fails)."""
        ...

    def drop_peer(self, connection_id: int) -> bool:
        """Close a connection with Bye; False when there is no such open connection."""
        ...

    def hold_peer(self, host: str, port: int, seconds: float = ...) -> int:
        """Close the connections to the peer listening there and neither dial nor
        accept it for ``seconds`` (until released by default); how many were closed."""
        ...

    def release_peer(self, host: str, port: int) -> bool:
        """End a hold; whether there was one."""
        ...

    def set_offline(self, offline: bool) -> int:
        """Go offline (close everything, accept and dial nothing) or back online; how
        many connections were closed."""
        ...

    def inject(self, message: Message) -> int:
        """Send a ping or query of the operator's to the neighbours as our own; how many
        it was sent to."""
        ...

    def set_log_level(self, level: str) -> None: ...

    async def reload(self, *, by: str = ...) -> ReloadPlan:
        """Read the configuration again and apply what can change live
        (:mod:`gnutella_router.config.live`); ReloadError when it cannot."""
        ...

    async def start_profiler(self) -> bool:
        """Start sampling; False when it already runs."""
        ...

    def stop_profiler(self) -> tuple[Path, Path] | None:
        """Stop sampling and write the export; None when it was not running."""
        ...
