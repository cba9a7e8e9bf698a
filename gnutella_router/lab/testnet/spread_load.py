"""The load client spread over the network: one injector at node 0, sinks further out.

:class:`SpreadLoadRun` is the load client whose sinks connect to several nodes (the
farthest a query can still reach first), so that copies are timed across hops, not
only through the router the injector talks to. Its latency book also keeps a window of
the copies' latencies, and :attr:`SpreadLoadRun.sending` tells when its clock starts,
for the per-second series of :mod:`.timeseries`.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

from gnutella_router.lab.traffic.load import (
    ClientPeer,
    LoadError,
    LoadRun,
    LoadSettings,
    Traffic,
    open_client_peer,
)
from protocol.codec import encode_message
from protocol.constants import counts_by_type_name
from protocol.messages import Message, Ping
from traffic_models.latency import WindowedLatencyBook, hop_kind, stamp_guid

PROBE_TIMEOUT = 10.0


class SpreadLoadRun(LoadRun):
    """A load run whose peers connect to different nodes of the network.

    ``targets[i]`` is ``(node index, address)`` for peer i (peers 0..injectors-1 are the
    injectors). Readiness: sinks on node 0 must see a probe ping (as in the plain run);
    a sink elsewhere must be registered by its node (pings do not travel that far, and
    the mesh is known to be up).
    """

    def __init__(
        self,
        settings: LoadSettings,
        traffic: Traffic,
        targets: Sequence[tuple[int, tuple[str, int]]],
        registered: Callable[[int, tuple[str, int]], Awaitable[bool]],
    ) -> None:
        super().__init__(settings, traffic)
        self.targets = list(targets)
        self.registered = registered
        self.node_of: dict[str, int] = {}
        self.book: WindowedLatencyBook = WindowedLatencyBook()
        self.sending = trio.Event()
        """Set when the first message is about to go: the run's second 0."""

    def copy_kind(self, hops: int) -> str:
        """Sinks sit on several nodes, so a copy's row names the hops it travelled
        (``three-hop query``), not ``one-hop``."""
        return hop_kind(hops)

    async def _connect_into(self, peers: list[ClientPeer], index: int) -> None:
        name = f"peer{index:03d}"
        node, address = self.targets[index]
        self.node_of[name] = node
        peer = await open_client_peer(
            address, name, legacy=self.settings.legacy, user_agent=self.settings.user_agent
        )
        peers.append(peer)

    async def _send(self, injectors: Sequence[ClientPeer], sinks: int) -> None:
        # Waiters run only at this task's next checkpoint, which is inside the parent's
        # ``_send`` after it has set ``started_ns``: they always see the start time.
        self.sending.set()
        await super()._send(injectors, sinks)

    async def _probe(self, injector: ClientPeer, sinks: Sequence[ClientPeer]) -> None:
        local = {s.name for s in sinks if self.node_of[s.name] == 0}
        remote = [
            (self.node_of[s.name], _local_address(s.stream))
            for s in sinks
            if self.node_of[s.name] != 0
        ]
        counter = itertools.count(1)
        with trio.move_on_after(PROBE_TIMEOUT):
            while not (local <= self.probe_seen and await self._all_registered(remote)):
                # A fresh GUID per probe: a lost one must not make the rest duplicates.
                guid = stamp_guid(0, self.run_id, next(counter))
                await injector.send(encode_message(Message(guid, 2, 0, Ping())))
                await trio.sleep(0.05)
            return
        raise LoadError(f"the sinks were not all reachable within {PROBE_TIMEOUT:g} s")

    async def _all_registered(self, remote: Sequence[tuple[int, tuple[str, int]]]) -> bool:
        for node, address in remote:
            if not await self.registered(node, address):
                return False
        return True

    def counters(self) -> dict[str, Any]:
        """What the run has done so far (for the status line and an interrupted run)."""
        return {
            "sent": sum(self.sent),
            "copies": sum(self.received),
            "late": self.late,
            "sent_by_type": counts_by_type_name(self.sent),
            "copies_by_type": counts_by_type_name(self.received),
        }


def _local_address(stream: trio.SocketStream) -> tuple[str, int]:
    name = stream.socket.getsockname()
    return str(name[0]), int(name[1])
