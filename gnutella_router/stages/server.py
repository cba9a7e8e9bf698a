"""The GnutellaServer stage: accepting, dialing, handshaking, and the live connections.

Incoming sockets pass five gates before any Gnutella message is read: a per-IP rate
limit on connection attempts (a refused attempt costs one short write; addresses in
``network.trusted``, loopback by default, are exempt), a handshake under a deadline (a
peer silent mid-handshake is dropped), the ban list (a peer kicked for abuse lately is
answered ``403``), the operator's holds (a peer whose link is held down, or every peer
while the router is offline, is answered ``403``: :mod:`gnutella_router.control.holds`),
one address's share of the connections (``409 Already connected``)
and the slots (a full node answers ``503`` with ``X-Try-Ultrapeers``, so the peer has
somewhere else to go, unless the newcomer's network is so much rarer among the peers
that one of a crowd gives up its slot): :mod:`gnutella_router.control.slots`. Outgoing
connections, dialed for the catcher, go through the same handshake as the initiator. A
connection that completes its handshake is served by
:class:`~gnutella_router.net.connection.Connection` until it ends, with its frames handed
to the router stage's door, and closed if it falls silent or holds a message half-sent
(:mod:`gnutella_router.control.deadlines`); its end is logged in one summary line, and a
peer its connection kicked (:mod:`gnutella_router.control.abuse`) is counted and banned
for a while.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import ipaddress
import time
from collections.abc import Callable, Hashable
from typing import TypeVar, cast

import structlog
import trio

from gnutella_router.config import Config
from gnutella_router.control.abuse import (
    AbuseMeter,
    BanList,
    Kick,
    Offence,
    RateLimiter,
    ban_keys,
    configured_thresholds,
    in_networks,
)
from gnutella_router.control.deadlines import Deadline, ReadWatch, check_interval
from gnutella_router.control.holds import PeerHolds
from gnutella_router.control.slots import EVICTION_BYE_CODE, Occupant, SlotPolicy
from gnutella_router.logs import RateLimitedWarnings
from gnutella_router.net.connection import Connection, FrameTap, format_address
from gnutella_router.net.connection_table import ConnectionTable
from gnutella_router.net.handshaking import next_handshake_event
from gnutella_router.net.link_emulation import LinkEmulation, wrap_stream
from gnutella_router.net.listening import open_listeners
from gnutella_router.net.outbox import Outbox
from gnutella_router.net.outqueue import OutgoingQueue
from gnutella_router.net.slow_peers import make_outgoing_queue
from gnutella_router.net.streams import close_quietly, literal_ip, send_and_close, sockname
from gnutella_router.stages.router import GnutellaRouter
from gnutella_router.stages.server_statistics import ServerStatistics, TrafficTotals
from protocol.errors import HandshakeError, LocalProtocolError
from protocol.handshake import (
    Acceptor,
    Capabilities,
    ConnectRequest,
    HandshakeComplete,
    HandshakeRejected,
    HandshakeResponse,
    Initiator,
    busy_response_headers,
    format_refusal,
    router_headers,
)

SHARED_VALUES = 1_024
"""Most header values kept to be shared between connections' capabilities (see
:meth:`GnutellaServer._shared_capabilities`); once full, new values are simply not
shared, so peers announcing ever new ones cost only themselves."""

_Value = TypeVar("_Value", bound=Hashable)


class DialError(Exception):
    """An outgoing connection did not come up; the message says why."""


class AlreadyConnected(Exception):
    """A peer the operator asked to dial is connected already (or being dialled)."""

    def __init__(self, address: tuple[str, int], connection: int | None) -> None:
        host, port = address
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        held = f" (connection {connection})" if connection is not None else " (being dialled)"
        super().__init__(f"already connected to {where}{held}; nothing dialled")
        self.connection = connection


class GnutellaServer:
    """Owns the listener, every connection task, and the handshake policy."""

    def __init__(
        self,
        config: Config,
        *,
        router: GnutellaRouter,
        outbox: Outbox[Connection],
        connections: ConnectionTable,
        own_guid: bytes,
        try_hosts: Callable[[], list[tuple[str, int]]] | None = None,
        on_hosts_learned: Callable[[list[tuple[str, int]], str, str], None] | None = None,
        log: structlog.typing.FilteringBoundLogger | None = None,
    ) -> None:
        self.config = config
        self.router = router
        self._deliver = router.door.admit
        """The router stage's door, which every connection's reader hands its frames to
        (:mod:`gnutella_router.stages.admission`): one bound method for every
        connection, not one each."""
        self.own_guid = own_guid
        self.try_hosts = try_hosts
        self.on_hosts_learned = on_hosts_learned
        self.log = log or structlog.get_logger("server")
        self.connections = connections
        """The live connections: the registry ``outbox`` writes to."""
        self.listen_addresses: list[tuple[str, int]] = []
        self.rate_limiter = RateLimiter(config.network.connects_per_ip_per_minute)
        self.trusted_networks = config.network.trusted_networks
        self.slots = SlotPolicy(
            max_connections=config.network.max_connections,
            max_leaves=config.network.max_leaves,
            per_address=config.network.connections_per_address,
            trusted=self.trusted_networks,
        )
        self.live_since = time.time()
        """When this router started (wall clock), announced as ``X-Live-Since``."""
        self.bans = BanList()
        self.holds = PeerHolds()
        """Peers the operator holds down, and the offline switch (:mod:`.control.holds`)."""
        self.kicked: collections.Counter[str] = collections.Counter(
            {offence.value: 0 for offence in Offence}
        )
        self._new_abuse_meter: Callable[[], AbuseMeter] | None = (
            functools.partial(
                AbuseMeter, configured_thresholds(config.abuse), config.abuse.half_life
            )
            if config.abuse.enabled
            else None
        )
        """Makes a connection's abuse meter, at the peer's first offence (None: no kicks)."""
        self._shared_values: dict[object, object] = {}
        self.link_emulation = LinkEmulation.from_config(config.emulation, self.log)
        """Emulated link delay (test networks only); None when off."""
        self._nursery: trio.Nursery | None = None
        self._listeners: list[trio.SocketListener] = []
        self._handshaking = 0
        self._advertised: tuple[str, int] | None = None
        self._admitting: dict[Acceptor, str] = {}
        """Handshakes accepted but not yet connections, with the address of each."""
        self.accepted = 0
        self.closed = 0
        self.failed_connections = 0
        self.completed: collections.Counter[str] = collections.Counter()
        self.refused: collections.Counter[str] = collections.Counter()
        self.timed_out: collections.Counter[str] = collections.Counter(
            {deadline.value: 0 for deadline in Deadline}
        )
        self.evicted = 0
        self._watches: dict[int, ReadWatch] = {}
        """The read deadlines of each live connection, by id."""
        self.refusal_warnings = RateLimitedWarnings(self.log)
        """One warning line per kind of refusal every 10 s, with how many were held back."""
        self._traffic = TrafficTotals()
        self.recorder: FrameTap | None = None
        """Handed to every new connection; the daemon sets it when recording a trace."""
        self.deflate_pool = outbox.deflate_pool
        """Deflates a router batch's writes on several cores (None: one at a time); the
        outbox runs it at the end of each batch, the server closes it when it stops."""

    # ------------------------------------------------------------------ addresses

    def advertised_address(self) -> tuple[str, int]:
        """What we tell peers: the configured advertise address, else where we listen.

        Asked for every ping answered, so it is worked out once, when listening starts.
        """
        if self._advertised is None:
            advertise = self.config.node.advertise
            if advertise:
                host, _, port = advertise.rpartition(":")
                return host.strip("[]"), int(port)
            if self.listen_addresses:
                return self.listen_addresses[0]
            return self.config.node.listen_address
        return self._advertised

    def _headers(self, remote_ip: str | None) -> list[tuple[str, str]]:
        host, port = self.advertised_address()
        listen: tuple[str, int] | None = (host, port)
        try:
            ipaddress.ip_address(host)
        except ValueError:
            listen = None
        network = self.config.network
        return router_headers(
            user_agent=self.config.node.user_agent,
            listen=listen if port else None,
            remote_ip=remote_ip,
            max_ttl=network.max_ttl,
            guid=self.own_guid,
            deflate=network.deflate,
            live_since=self.live_since,
        )

    def _new_queue(self) -> OutgoingQueue:
        slow = self.config.slow_peer
        if slow.policy == "threshold":
            return make_outgoing_queue(
                "threshold",
                max_messages=slow.threshold_messages,
                max_bytes=slow.threshold_bytes,
                unbounded_experiment=slow.unbounded_experiment,
                grace=slow.threshold_grace,
            )
        return make_outgoing_queue(
            "flow-control",
            max_bytes=slow.queue_bytes,
            enter_ratio=slow.flow_control_enter,
            leave_ratio=slow.flow_control_leave,
            max_flow_control_seconds=slow.flow_control_timeout,
        )

    # ------------------------------------------------------------------ serving

    async def serve(
        self, *, task_status: trio.TaskStatus[list[tuple[str, int]]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen, accept and serve connections until cancelled."""
        host, port = self.config.node.listen_address
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._listeners = await open_listeners(
                    host or None, port, role="the node's listener, node.listen"
                )
                self.listen_addresses = [
                    sockname(listener.socket.getsockname()) for listener in self._listeners
                ]
                self._advertised = self.advertised_address()
                nursery.start_soon(self._housekeeping)
                for listener in self._listeners:
                    nursery.start_soon(self._accept_loop, listener)
                task_status.started(self.listen_addresses)
        finally:
            # Cancelled instead of stopped (a crash elsewhere, a test giving up): the
            # listening sockets must not outlive the server.
            if self.deflate_pool is not None:
                self.deflate_pool.close()
            await self.close_listeners()

    async def _accept_loop(self, listener: trio.SocketListener) -> None:
        assert self._nursery is not None
        while True:
            try:
                stream = await listener.accept()
            except trio.ClosedResourceError:
                return
            except OSError as exc:
                # Out of descriptors and the like: count, breathe, carry on.
                self.refused["accept-error"] += 1
                self.refusal_warnings.warn("accept-error", "accept failed", error=str(exc))
                await trio.sleep(0.1)
                continue
            self.accepted += 1
            self._nursery.start_soon(self._serve_connection, stream)

    async def close_listeners(self) -> None:
        for listener in self._listeners:
            with trio.CancelScope(shield=True):
                await listener.aclose()
        self._listeners = []

    async def _housekeeping(self) -> None:
        """Once a second (more often for read deadlines under 4 s): let outgoing queues
        apply their time limits, and close connections past a read deadline."""
        network = self.config.network
        interval = check_interval(network.idle_timeout, network.partial_message_timeout)
        while True:
            await trio.sleep(interval)
            now = trio.current_time()
            for connection in self.connections.snapshot():
                connection.check(now)
                watch = self._watches.get(connection.id)
                if watch is not None and not connection.closing:
                    self._check_deadlines(connection, watch, now)

    def _check_deadlines(self, connection: Connection, watch: ReadWatch, now: float) -> None:
        session = connection.session
        deadline = watch.check(
            now,
            bytes_in=session.bytes_in,
            messages_in=session.messages_in,
            partial_bytes=session.partial_bytes,
            unfinished=session.frames_unfinished,
        )
        if deadline is None:
            return
        self.timed_out[deadline.value] += 1
        kick = None
        if deadline is Deadline.IDLE:
            reason = f"activity timeout: nothing received for {watch.idle:g} s"
        else:
            detail = f"part of a message held for {watch.partial:g} s, none completed"
            reason = f"activity timeout: {detail}"
            if self.config.abuse.enabled:  # an offence: counted and banned as a kick
                kick = Kick(Offence.PARTIAL_MESSAGE, 1.0, detail)
                reason = kick.reason
        self.refusal_warnings.warn(
            deadline.value, "peer timed out", peer=connection.peer_text, reason=reason
        )
        if kick is not None:
            connection.kicked(kick)  # a Bye 405 (activity timeout), as below
        else:
            connection.close(reason, bye_code=405)

    def _shared_capabilities(self, capabilities: Capabilities) -> Capabilities:
        """``capabilities`` with the header values most peers share (user agent,
        protocol versions, feature list, our address as they see it) replaced by one
        copy each: about 600 bytes of a gtk-gnutella peer's 1 KB of capabilities, kept
        for as long as its connection lives."""
        share = self._share
        return dataclasses.replace(
            capabilities,
            user_agent=share(capabilities.user_agent),
            query_routing=share(capabilities.query_routing),
            ultrapeer_query_routing=share(capabilities.ultrapeer_query_routing),
            remote_ip=share(capabilities.remote_ip),
            features=share(capabilities.features),
        )

    def _share(self, value: _Value) -> _Value:
        if value is None:
            return value
        kept = self._shared_values.get(value)
        if kept is not None:
            return cast(_Value, kept)
        if len(self._shared_values) < SHARED_VALUES:
            self._shared_values[value] = value
        return value

    async def _serve_connection(
        self, stream: trio.SocketStream | None, *, dialled: Connection | None = None
    ) -> None:
        """A connection's task, for as long as it lives: an incoming one's gates and
        handshake (``stream``), or one we dialled (``dialled``, registered already), then
        serving it until it ends.

        One function, not one for each step awaiting the next: a frame the task waits
        in costs each idle connection its size (about 250 bytes) for its whole life.
        """
        if dialled is not None:
            connection = dialled
        else:
            assert stream is not None
            admitted = await self._admit(stream)
            if admitted is None:
                return
            connection = admitted
        self.completed[connection.role] += 1
        connection.log.debug("connected", user_agent=connection.capabilities.user_agent)
        now = trio.current_time()
        network = self.config.network
        if network.idle_timeout or network.partial_message_timeout:
            self._watches[connection.id] = ReadWatch(
                now, idle=network.idle_timeout, partial=network.partial_message_timeout
            )
        self.router.introduce(connection, now)
        try:
            await connection.run(self._deliver)
        except Exception:
            # A bug in this connection's tasks must cost this connection, not the node.
            self.failed_connections += 1
            connection.log.exception("connection task failed")
        finally:
            self.connections.remove(connection)
            self._watches.pop(connection.id, None)
            self.closed += 1
            now = trio.current_time()
            self._traffic.ended(connection.session, now)
            connection.log_summary(now)
            if connection.session.kick is not None:
                self._banish(connection, now)

    async def _admit(self, stream: trio.SocketStream) -> Connection | None:
        """The gates and the handshake of an incoming connection; the connection, now
        registered, if it got through.

        A separate frame from the one that serves the connection for its whole life, so
        that the handshake's state (the acceptor with both header blocks, about 10 KB
        for a gtk-gnutella peer, and its deadline's cancel scope) is freed when it
        returns instead of living as long as the connection.
        """
        try:
            peer = sockname(stream.socket.getpeername())
        except OSError:  # reset between accept() and here: nobody left to answer
            self.refused["accept-error"] += 1
            await close_quietly(stream)
            return None
        now = trio.current_time()
        trusted = in_networks(peer[0], self.trusted_networks)
        if not trusted and not self.rate_limiter.allow(peer[0], now):
            self.refused["rate-limited"] += 1
            self.refusal_warnings.warn(
                "rate-limited",
                "peer refused",
                peer=format_address(*peer),
                code=429,
                reason="too many connection attempts from its address",
            )
            await send_and_close(stream, format_refusal(429, "Too many connection attempts"))
            return None
        acceptor = Acceptor()
        self._handshaking += 1
        try:
            with trio.move_on_after(self.config.network.handshake_timeout) as scope:
                complete = await self._accept_handshake(stream, acceptor, peer)
            if scope.cancelled_caught:
                self.refused["handshake-timeout"] += 1
                self.refusal_warnings.warn(
                    "handshake-timeout",
                    "peer refused",
                    peer=format_address(*peer),
                    reason="no complete handshake in time",
                )
                await close_quietly(stream)
                return None
        except HandshakeError as exc:
            self.refused["handshake-error"] += 1
            self.refusal_warnings.warn(
                "handshake-error",
                "peer refused",
                peer=format_address(*peer),
                code=exc.status_code,
                reason=exc.reason,
            )
            try:
                refusal = format_refusal(exc.status_code, exc.reason)
            except LocalProtocolError:
                refusal = format_refusal(exc.status_code, "Bad handshake")
            await send_and_close(stream, refusal)
            return None
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.refused["handshake-io"] += 1
            await close_quietly(stream)
            return None
        finally:
            self._handshaking -= 1
            # No await between here and the connection's registration below.
            self._admitting.pop(acceptor, None)
        if complete is None:
            await close_quietly(stream)
            return None
        connection = self._connection(stream, peer, "incoming", complete)
        self.connections.add(connection)
        return connection

    async def _accept_handshake(
        self, stream: trio.SocketStream, acceptor: Acceptor, peer: tuple[str, int]
    ) -> HandshakeComplete | None:
        request = await next_handshake_event(stream, acceptor)
        assert isinstance(request, ConnectRequest)
        capabilities = request.capabilities
        reason = self._refusal_reason(capabilities, peer)
        if reason is not None:
            code, text = reason
            self.refused[text.lower().replace(" ", "-")] += 1
            self.refusal_warnings.warn(
                text, "peer refused", peer=format_address(*peer), code=code, reason=text
            )
            headers = busy_response_headers(self._try_hosts()) if code == 503 else []
            await stream.send_all(acceptor.reject(code, text, headers))
            return None
        self._admitting[acceptor] = peer[0]
        reply = acceptor.accept(self._headers(peer[0]), deflate=self.config.network.deflate)
        await stream.send_all(reply)
        while True:
            event = await next_handshake_event(stream, acceptor)
            if isinstance(event, HandshakeComplete):
                return event
            if isinstance(event, HandshakeRejected):
                self.refused["peer-declined"] += 1
                return None

    def _refusal_reason(
        self, capabilities: Capabilities, peer: tuple[str, int]
    ) -> tuple[int, str] | None:
        if capabilities.guid is not None and capabilities.guid == self.own_guid:
            return 409, "Connected to self"
        keys = self._ban_keys(peer[0], capabilities)
        if self.bans and self.bans.banned(keys, trio.current_time()):
            return 403, "Temporarily banned"
        if self.holds.offline:
            return 403, "Offline"
        if self.holds and self.holds.held(capabilities.listen_address, trio.current_time()):
            return 403, "Held by the operator"
        # Leaves have their own slots, so a crowd of leaves never keeps ultrapeers out,
        # or the reverse; handshakes accepted but not yet registered hold a slot too.
        admission = self.slots.admit(
            peer[0],
            leaf=capabilities.ultrapeer is False,
            occupants=[
                Occupant(
                    s.id,
                    s.peer[0],
                    leaf=s.capabilities.ultrapeer is False,
                    evictable=s.role == "incoming",
                    since=s.connected_at,
                )
                for s in (c.session for c in self.connections.snapshot())
                if not s.closing
            ],
            admitting=list(self._admitting.values()),
        )
        if admission.evict is not None:
            self._evict(admission.evict, peer)
        return None if admission.accepted else (admission.code, admission.reason)

    def _evict(self, occupant: Occupant, newcomer: tuple[str, int]) -> None:
        """Close a crowd's newest connection so that ``newcomer`` can have its slot."""
        connection = self.connections.get(occupant.id)
        if connection is None:
            return
        self.evicted += 1
        self.refusal_warnings.warn(
            "evicted",
            "peer evicted",
            peer=connection.peer_text,
            newcomer=format_address(*newcomer),
            reason="its network holds more slots than the newcomer's",
        )
        connection.close("making room for a peer from another network", bye_code=EVICTION_BYE_CODE)

    def _try_hosts(self) -> list[tuple[str, int]]:
        hosts = [c.listen_address for c in self.connections.snapshot() if c.listen_address]
        if self.try_hosts is not None:
            hosts.extend(self.try_hosts())
        return hosts[:10]

    async def dial(self, host: str, port: int, *, timeout: float) -> Connection:  # noqa: ASYNC109
        """Connect out and handshake as initiator; the connection is then served in the
        background. Raises :class:`DialError` with the reason on any failure."""
        if self._nursery is None:
            raise DialError("the server is not running")
        if self.holds.held((host, port), trio.current_time()):
            what = "the router is offline" if self.holds.offline else "held by the operator"
            raise DialError(f"{format_address(host, port)} is not dialled: {what}")
        self._handshaking += 1
        try:
            with trio.fail_after(timeout):
                stream = await trio.open_tcp_stream(host, port)
                try:
                    complete = await self._initiate_handshake(stream, host)
                    peer = sockname(stream.socket.getpeername())  # ENOTCONN if reset
                except BaseException:
                    await close_quietly(stream)
                    raise
        except trio.TooSlowError as exc:
            self.refused["dial-timeout"] += 1
            raise DialError(f"no handshake within {timeout} s") from exc
        except HandshakeError as exc:
            self.refused["dial-handshake-error"] += 1
            raise DialError(f"handshake failed: {exc.reason}") from exc
        except OSError as exc:
            self.refused["dial-failed"] += 1
            raise DialError(f"cannot connect: {exc.strerror or exc}") from exc
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self.refused["dial-failed"] += 1
            raise DialError("connection lost during the handshake") from exc
        finally:
            self._handshaking -= 1
        connection = self._connection(stream, peer, "outgoing", complete)
        self.connections.add(connection)
        self._nursery.start_soon(
            functools.partial(self._serve_connection, None, dialled=connection)
        )
        return connection

    async def _initiate_handshake(self, stream: trio.SocketStream, host: str) -> HandshakeComplete:
        initiator = Initiator()
        await stream.send_all(initiator.start(self._headers(literal_ip(host))))
        event = await next_handshake_event(stream, initiator)
        if isinstance(event, HandshakeRejected):
            if event.try_hosts and self.on_hosts_learned is not None:
                self.on_hosts_learned(list(event.try_hosts), "x-try", host)
            raise DialError(f"refused with {event.status_code} {event.reason}")
        assert isinstance(event, HandshakeResponse)
        if event.capabilities.guid == self.own_guid:
            await stream.send_all(initiator.decline(409, "Connected to self"))
            raise DialError("connected to ourselves")
        await stream.send_all(initiator.confirm(deflate=self.config.network.deflate))
        complete = await next_handshake_event(stream, initiator)
        assert isinstance(complete, HandshakeComplete)
        return complete

    def _connection(
        self,
        stream: trio.SocketStream,
        peer: tuple[str, int],
        role: str,
        complete: HandshakeComplete,
    ) -> Connection:
        if self.on_hosts_learned is not None:
            if complete.peer.try_hosts:
                self.on_hosts_learned(list(complete.peer.try_hosts), "x-try", peer[0])
            listen = complete.peer.listen_address
            if role == "incoming" and listen is not None:  # Listen-IP, X-My-Address, Node
                self.on_hosts_learned([listen], "listen-ip", peer[0])
        return Connection(
            stream=wrap_stream(
                self.link_emulation,
                stream,
                listen=complete.peer.listen_address if role == "incoming" else peer,
                peer=peer,
                nursery=self._nursery,
            ),
            peer=peer,
            role=role,
            capabilities=self._shared_capabilities(complete.peer),
            outgoing=self._new_queue(),
            compress_outgoing=complete.compress_outgoing,
            decompress_incoming=complete.decompress_incoming,
            trailing_data=complete.trailing_data,
            max_payload=self.config.network.max_payload,
            log=self.log,
            recorder=self.recorder,
            abuse=self._new_abuse_meter,
            deflate_pool=self.deflate_pool,
            deflate_level=self.config.network.deflate_level,
        )

    def _ban_keys(self, ip: str, capabilities: Capabilities) -> list[tuple[str, str]]:
        trusted = in_networks(ip, self.trusted_networks)
        return ban_keys(ip, capabilities.guid, capabilities.listen_address, trusted_ip=trusted)

    def _banish(self, connection: Connection, now: float) -> None:
        """Count a kicked peer and ban it for ``abuse.ban_seconds``."""
        kick = connection.session.kick
        assert kick is not None
        offence = kick.offence
        self.kicked[offence.value] += 1
        keys = self._ban_keys(connection.peer[0], connection.capabilities)
        seconds = self.config.abuse.ban_seconds
        if seconds > 0:
            self.bans.ban(keys, now + seconds)
        self.log.warning(
            "peer kicked",
            conn=connection.id,
            peer=connection.peer_text,
            offence=offence.value,
            bye_code=kick.bye_code,
            banned_for=seconds,
            banned_by=[kind for kind, _ in keys],
        )

    async def say_goodbye(self, grace: float) -> None:
        """Bye 200 to every peer that takes Bye, then wait (at most ``grace``) for them."""
        for connection in self.connections.snapshot():
            connection.close("shutting down", bye_code=200)
        with trio.move_on_after(grace):
            await self.connections.wait_empty()

    def statistics(self) -> ServerStatistics:
        return ServerStatistics(
            listening=tuple(format_address(*a) for a in self.listen_addresses),
            connections=len(self.connections),
            incoming=self.connections.count("incoming"),
            outgoing=self.connections.count("outgoing"),
            handshakes_in_progress=self._handshaking,
            accepted=self.accepted,
            completed=dict(self.completed),
            refused=dict(self.refused),
            closed=self.closed,
            failed_connections=self.failed_connections,
            kicked=dict(self.kicked),
            timed_out=dict(self.timed_out),
            evicted=self.evicted,
            bans=len(self.bans),
            deflate_parallel_writes=(
                0 if self.deflate_pool is None else self.deflate_pool.jobs_parallel
            ),
            **self._traffic.with_live(
                (c.session for c in self.connections.snapshot()), trio.current_time()
            ),
        )
