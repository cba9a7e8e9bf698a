"""Prometheus metrics for one daemon, read from its statistics at each scrape.

Theory of operation
-------------------
Nothing on the routing path touches a Prometheus object. The router, the server and
the stages keep their own plain counters (they are what the dumps show too), and
:class:`DaemonCollector` turns a snapshot of them into metric families when
``/metrics`` is scraped. A scrape runs on the trio thread, like the dumps, so what it
reads is one consistent instant, and it costs the router nothing between scrapes.

Each daemon gets its own :class:`~prometheus_client.CollectorRegistry` from
:func:`metrics_registry`, never the process-wide default one, because several daemons
can share a process (the tests run many).

Every name starts with ``gnutella_``; counters end in ``_total`` in the exposition.
Message types are label values as the dumps spell them (``ping``, ``query_hit``...),
and drop reasons as the router names them (``duplicate``, ``no-route``...). Counters
only ever rise: totals over connections include the ones that have closed. Label series
of the known types and reasons exist from the first scrape, at zero, so that a rate()
over them is defined before their first event. The registry also holds
prometheus-client's process collector (``process_*``: CPU, memory, file descriptors,
start time); when several daemons share a process (tests), they report the same
process.

SEDA's key signal is per stage: ``gnutella_stage_queue_wait_seconds`` (how long the
oldest event of each batch waited in the queue) and ``gnutella_stage_service_seconds``
(how long the handler took for each batch), both Prometheus histograms observed once
per batch (:mod:`gnutella_router.runtime.histogram`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping

import trio
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector

from gnutella_router import __version__
from gnutella_router.control.batching import BatchingStatistics
from gnutella_router.control.response_time import ControllerState
from gnutella_router.observe.view import RouterView
from gnutella_router.routing.router_statistics import DROP_REASONS
from gnutella_router.runtime.histogram import HistogramSnapshot
from gnutella_router.runtime.stage import StageStatistics
from gnutella_router.stages.server_statistics import (
    DIAL_FAILURE_REASONS,
    INCOMING_REFUSAL_REASONS,
)
from protocol.constants import MessageType, message_type_name

__all__ = ["CONTENT_TYPE", "DaemonCollector", "metrics_registry", "render_metrics"]

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
"""The classic text exposition format (``text/plain; version=0.0.4``), which
:func:`generate_latest` writes and every Prometheus server reads."""

MESSAGE_COUNTERS = ("received", "forwarded", "generated", "consumed")
"""The router's per-type counters, each exported as ``gnutella_messages_<name>_total``."""
ROUTED_TYPES = tuple(
    message_type_name(t)
    for t in (
        MessageType.PING,
        MessageType.PONG,
        MessageType.PUSH,
        MessageType.QUERY,
        MessageType.QUERY_HIT,
    )
)
"""Types whose per-type and per-drop-reason series exist from the start, at zero."""


class DaemonCollector(Collector):
    """Builds the metric families of one daemon from its statistics, at each collect."""

    def __init__(self, daemon: RouterView) -> None:
        self.daemon = daemon

    def describe(self) -> Iterable[Metric]:
        # Nothing up front: describing would mean collecting, and registration may
        # happen before the daemon runs.
        return ()

    def collect(self) -> Iterator[Metric]:
        daemon = self.daemon
        yield from self._router(daemon)
        yield from self._server(daemon)
        yield from self._stages(daemon)
        yield from self._outgoing(daemon)
        yield from self._catcher(daemon)
        if daemon.batching is not None:
            yield from _batching(daemon.batching.statistics())
        info = GaugeMetricFamily(
            "gnutella_router_info",
            "The node: version and servent GUID.",
            labels=["version", "guid"],
        )
        info.add_metric([__version__, daemon.guid.hex()], 1)
        yield info
        started = daemon.started_at
        if started is not None:
            uptime = trio.current_time() - started
            yield GaugeMetricFamily(
                "gnutella_uptime_seconds", "Seconds since the daemon started.", value=uptime
            )
            yield GaugeMetricFamily(
                "gnutella_start_time_seconds",
                "When the daemon started, in seconds since the Unix epoch.",
                value=time.time() - uptime,
            )

    def _router(self, daemon: RouterView) -> Iterator[Metric]:
        stats = daemon.router.statistics()
        for name in MESSAGE_COUNTERS:
            family = CounterMetricFamily(
                f"gnutella_messages_{name}",
                f"Messages {name} by the router, by message type.",
                labels=["type"],
            )
            _by_label(family, {**dict.fromkeys(ROUTED_TYPES, 0), **getattr(stats, name)})
            yield family
        dropped = CounterMetricFamily(
            "gnutella_messages_dropped",
            "Messages the router dropped, by message type and reason.",
            labels=["type", "reason"],
        )
        counts = {(t, reason): 0 for reason in DROP_REASONS for t in ROUTED_TYPES}
        for reason, by_type in stats.dropped.items():
            for message_type, count in by_type.items():
                counts[message_type, reason] = count
        for (message_type, reason), count in counts.items():
            dropped.add_metric([message_type, reason], count)
        yield dropped
        entries = GaugeMetricFamily(
            "gnutella_route_table_entries", "Routes held, both generations.", labels=["table"]
        )
        capacity = GaugeMetricFamily(
            "gnutella_route_table_capacity",
            "Entries per generation; a table holds at most twice this.",
            labels=["table"],
        )
        recorded = CounterMetricFamily(
            "gnutella_route_table_recorded", "Routes recorded.", labels=["table"]
        )
        expired = CounterMetricFamily(
            "gnutella_route_table_expired", "Routes dropped by rotations.", labels=["table"]
        )
        misses = CounterMetricFamily(
            "gnutella_route_table_misses",
            "Lookups that found no route (expired or never recorded).",
            labels=["table"],
        )
        early = CounterMetricFamily(
            "gnutella_route_table_rotations_for_capacity",
            "Rotations made early because a generation was full (routes live shorter).",
            labels=["table"],
        )
        evicted = CounterMetricFamily(
            "gnutella_route_table_evicted",
            "Routes dropped to keep one connection within its share of a full generation "
            "(a peer spraying unique GUIDs loses its own oldest routes).",
            labels=["table"],
        )
        for name, table in stats.tables.items():
            evicted.add_metric([name], table.evicted)
            entries.add_metric([name], table.size)
            capacity.add_metric([name], table.capacity)
            recorded.add_metric([name], table.recorded)
            expired.add_metric([name], table.expired)
            misses.add_metric([name], table.misses)
            early.add_metric([name], table.rotations_for_capacity)
        yield from (entries, capacity, recorded, expired, misses, early, evicted)
        yield GaugeMetricFamily(
            "gnutella_pong_cache_size", "Pongs cached for answering pings.", stats.pong_cache_size
        )
        trimmed = CounterMetricFamily(
            "gnutella_messages_ttl_trimmed",
            "Broadcast copies sent with a lower TTL to respect a peer's X-Max-TTL, by type.",
            labels=["type"],
        )
        _by_label(trimmed, {"ping": 0, "query": 0, **stats.ttl_trimmed})
        yield trimmed
        yield CounterMetricFamily(
            "gnutella_queries_degraded",
            "Queries forwarded with less TTL because the admission controller degrades.",
            stats.degraded_queries,
        )
        routing = daemon.router.query_routing
        tables = GaugeMetricFamily(
            "gnutella_qrp_tables",
            "Complete QRP tables held: leaves' tables and ultrapeers' last-hop tables.",
            labels=["kind"],
        )
        for kind, receivers in (("leaf", routing.leaves), ("ultrapeer", routing.ultrapeers)):
            tables.add_metric([kind], sum(r.table is not None for r in receivers.values()))
        yield tables
        yield GaugeMetricFamily(
            "gnutella_qrp_leaves_table_filled",
            "Slots filled in the table of our leaves' keywords sent to ultrapeers.",
            routing.leaves_table().filled,
        )
        shedder = daemon.router.shedder
        if shedder is not None and shedder.controller is not None:
            yield from _admission(shedder.controller.state())
        dynamic = dict(stats.dynamic_queries)
        yield GaugeMetricFamily(
            "gnutella_dynamic_queries_active",
            "Leaf queries being widened by dynamic querying.",
            dynamic.pop("active"),
        )
        yield CounterMetricFamily(
            "gnutella_dynamic_query_copies",
            "Copies of leaf queries sent to ultrapeers by dynamic querying.",
            dynamic.pop("copies"),
        )
        yield CounterMetricFamily(
            "gnutella_dynamic_query_status_requests",
            "Query Status requests sent to leaves whose queries are being widened.",
            dynamic.pop("status-requests"),
        )
        ended = CounterMetricFamily(
            "gnutella_dynamic_queries_ended",
            "Leaf queries whose dynamic querying ended, by how.",
            labels=["outcome"],
        )
        _by_label(ended, dynamic)
        yield ended

    def _server(self, daemon: RouterView) -> Iterator[Metric]:
        stats = daemon.server.statistics()
        connections = GaugeMetricFamily(
            "gnutella_connections", "Live peer connections, by role.", labels=["role"]
        )
        connections.add_metric(["incoming"], stats.incoming)
        connections.add_metric(["outgoing"], stats.outgoing)
        yield connections
        yield GaugeMetricFamily(
            "gnutella_handshakes_in_progress",
            "Handshakes under way, both roles.",
            stats.handshakes_in_progress,
        )
        yield CounterMetricFamily(
            "gnutella_connections_accepted", "TCP connections accepted.", stats.accepted
        )
        completed = CounterMetricFamily(
            "gnutella_handshakes_completed", "Handshakes completed, by role.", labels=["role"]
        )
        _by_label(completed, stats.completed)
        yield completed
        refused = CounterMetricFamily(
            "gnutella_connections_refused",
            "Incoming connections turned away before the first message, by reason.",
            labels=["reason"],
        )
        dial_failures = CounterMetricFamily(
            "gnutella_dial_failures",
            "Outgoing connections that did not come up, by reason.",
            labels=["reason"],
        )
        refusals = dict.fromkeys(INCOMING_REFUSAL_REASONS, 0)
        failures = dict.fromkeys(DIAL_FAILURE_REASONS, 0)
        for reason, count in stats.refused.items():
            (failures if reason in failures else refusals)[reason] = count
        _by_label(refused, refusals)
        _by_label(dial_failures, failures)
        yield refused
        yield dial_failures
        yield CounterMetricFamily("gnutella_connections_closed", "Connections ended.", stats.closed)
        for direction, sent in (("received", "in"), ("sent", "out")):
            yield CounterMetricFamily(
                f"gnutella_bytes_{direction}",
                f"Bytes {direction} on peer connections (on the wire, compressed where "
                "deflate is on), closed connections included.",
                getattr(stats, f"bytes_{sent}"),
            )
            yield CounterMetricFamily(
                f"gnutella_connection_messages_{direction}",
                f"Messages {direction} on peer connections, closed connections included.",
                getattr(stats, f"messages_{sent}"),
            )
        dropped = CounterMetricFamily(
            "gnutella_outgoing_queue_dropped",
            "Messages the connections' outgoing queues dropped, by reason, closed "
            "connections included.",
            labels=["reason"],
        )
        _by_label(dropped, stats.outgoing_dropped)
        yield dropped
        kicked = CounterMetricFamily(
            "gnutella_peers_kicked",
            "Peers disconnected for abuse (and banned for a while), by offence.",
            labels=["offence"],
        )
        _by_label(kicked, stats.kicked)
        yield kicked
        timed_out = CounterMetricFamily(
            "gnutella_connections_timed_out",
            "Connections closed by a read deadline: idle (network.idle_timeout) or a "
            "message left half-sent (network.partial_message_timeout).",
            labels=["deadline"],
        )
        _by_label(timed_out, stats.timed_out)
        yield timed_out
        yield CounterMetricFamily(
            "gnutella_connections_evicted",
            "Connections closed (Bye 202) to give their slot to a peer from a network "
            "with fewer slots.",
            stats.evicted,
        )
        yield GaugeMetricFamily(
            "gnutella_bans", "Temporary bans of kicked peers held in the ban list.", stats.bans
        )
        yield CounterMetricFamily(
            "gnutella_deflate_parallel_writes",
            "Writes deflated side by side with others of their batch, on several cores.",
            stats.deflate_parallel_writes,
        )

    def _stages(self, daemon: RouterView) -> Iterator[Metric]:
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {
            "length": GaugeMetricFamily(
                "gnutella_stage_queue_length",
                "Events waiting in the stage queue.",
                labels=["stage"],
            ),
            "threshold": GaugeMetricFamily(
                "gnutella_stage_queue_threshold",
                "The stage queue's admission bound.",
                labels=["stage"],
            ),
            "peak": GaugeMetricFamily(
                "gnutella_stage_queue_peak", "Longest the queue has been.", labels=["stage"]
            ),
            "admitted": CounterMetricFamily(
                "gnutella_stage_queue_admitted", "Events admitted to the queue.", labels=["stage"]
            ),
            "refused": CounterMetricFamily(
                "gnutella_stage_queue_refused",
                "Events the full queue refused (then shed or waited for).",
                labels=["stage"],
            ),
            "pool": GaugeMetricFamily(
                "gnutella_stage_pool_size", "Workers the stage is set to run.", labels=["stage"]
            ),
            "batch": GaugeMetricFamily(
                "gnutella_stage_batch_size",
                "Most events a worker takes per batch (fixed, or the batching controller's).",
                labels=["stage"],
            ),
            "busy": GaugeMetricFamily(
                "gnutella_stage_busy_workers", "Workers handling a batch now.", labels=["stage"]
            ),
            "events": CounterMetricFamily(
                "gnutella_stage_events", "Events handled by the stage.", labels=["stage"]
            ),
            "batches": CounterMetricFamily(
                "gnutella_stage_batches", "Batches handled by the stage.", labels=["stage"]
            ),
            "back_to_back": CounterMetricFamily(
                "gnutella_stage_batches_back_to_back",
                "Batches taken right after the one before, without letting the other tasks "
                "run first (under a flood, while every write went straight to its socket).",
                labels=["stage"],
            ),
        }
        histograms = {
            "queue_wait": HistogramMetricFamily(
                "gnutella_stage_queue_wait_seconds",
                "Per batch: how long its oldest event waited in the stage queue.",
                labels=["stage"],
            ),
            "service_time": HistogramMetricFamily(
                "gnutella_stage_service_seconds",
                "Per batch: how long the stage's handler took, blocking work included.",
                labels=["stage"],
            ),
        }
        for name, stats in daemon.registry.statistics().items():
            if not isinstance(stats, StageStatistics):
                continue
            queue = stats.queue
            families["length"].add_metric([name], queue.length)
            families["threshold"].add_metric([name], queue.threshold)
            families["peak"].add_metric([name], queue.peak)
            families["admitted"].add_metric([name], queue.admitted)
            families["refused"].add_metric([name], queue.refused)
            families["pool"].add_metric([name], stats.pool_size)
            families["batch"].add_metric([name], stats.batch_size)
            families["busy"].add_metric([name], stats.busy_workers)
            families["events"].add_metric([name], stats.events)
            families["batches"].add_metric([name], stats.batches)
            families["back_to_back"].add_metric([name], stats.batches_back_to_back)
            for key, family in histograms.items():
                _histogram(family, name, getattr(stats, key))
        yield from families.values()
        yield from histograms.values()

    def _outgoing(self, daemon: RouterView) -> Iterator[Metric]:
        now = trio.current_time()
        pending_bytes = pending_messages = flow_controlled = 0
        for connection in daemon.server.connections.snapshot():
            stats = connection.outgoing.statistics(now)
            pending_bytes += stats.pending_bytes
            pending_messages += stats.pending_messages
            flow_controlled += stats.flow_controlled
        yield GaugeMetricFamily(
            "gnutella_outgoing_queue_bytes",
            "Bytes waiting in every connection's outgoing queue.",
            pending_bytes,
        )
        yield GaugeMetricFamily(
            "gnutella_outgoing_queue_messages",
            "Messages waiting in every connection's outgoing queue.",
            pending_messages,
        )
        yield GaugeMetricFamily(
            "gnutella_flow_controlled_connections",
            "Connections in flow control now.",
            flow_controlled,
        )

    def _catcher(self, daemon: RouterView) -> Iterator[Metric]:
        stats = daemon.catcher.statistics()
        hosts = stats.hosts
        yield GaugeMetricFamily("gnutella_host_cache_size", "Hosts known.", hosts.size)
        yield GaugeMetricFamily(
            "gnutella_host_cache_largest_teller",
            "Most hosts in the host cache that one teller (a peer's network, a GWebCache) "
            "named; at most its share of the capacity.",
            hosts.largest_teller,
        )
        refused = CounterMetricFamily(
            "gnutella_host_cache_refused",
            "Hosts the host cache refused, by reason (a range, or a limit: ports-per-address, "
            "group-full).",
            labels=["reason"],
        )
        _by_label(refused, hosts.rejected)
        yield refused
        yield CounterMetricFamily(
            "gnutella_host_cache_evicted",
            "Hosts dropped to make room in a full cache.",
            hosts.evicted,
        )
        yield CounterMetricFamily(
            "gnutella_host_cache_replaced",
            "Hosts dropped because their teller, at its share, named a newer one.",
            hosts.replaced,
        )
        yield CounterMetricFamily("gnutella_dials", "Outgoing connections tried.", stats.dials)
        by_range = CounterMetricFamily(
            "gnutella_dials_by_range",
            "Outgoing connections tried, by the kind of address: public, or why it is not.",
            labels=["range"],
        )
        _by_label(by_range, stats.dials_by_range)
        yield by_range


def _by_label(family: CounterMetricFamily | GaugeMetricFamily, counts: Mapping[str, int]) -> None:
    for label, count in counts.items():
        family.add_metric([label], count)


def _histogram(family: HistogramMetricFamily, stage: str, snapshot: HistogramSnapshot) -> None:
    buckets = [
        ("+Inf" if bound == float("inf") else repr(bound), count)
        for bound, count in snapshot.buckets
    ]
    family.add_metric([stage], buckets, snapshot.sum)


def metrics_registry(daemon: RouterView) -> CollectorRegistry:
    """A registry of its own holding ``daemon``'s collector and the process collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DaemonCollector(daemon))
    ProcessCollector(registry=registry)
    return registry


def render_metrics(registry: CollectorRegistry) -> bytes:
    """The text exposition of ``registry``; call it on the trio thread."""
    return generate_latest(registry)


def _batching(stats: BatchingStatistics) -> Iterator[Metric]:
    """The batching controller's state (when it is on)."""
    yield GaugeMetricFamily(
        "gnutella_batching_rate",
        "The router's output rate, events/s, moving average of the batching controller.",
        value=stats.rate,
    )
    yield GaugeMetricFamily(
        "gnutella_batching_reference_rate",
        "Best output rate measured at a larger batch since the last reset, events/s.",
        value=stats.reference_rate,
    )
    decisions = CounterMetricFamily(
        "gnutella_batching_changes",
        "Changes of the router's batch size by the batching controller, by action.",
        labels=["action"],
    )
    _by_label(
        decisions,
        {"decreased": stats.decreased, "increased": stats.increased, "reset": stats.resets},
    )
    yield decisions


def _admission(state: ControllerState) -> Iterator[Metric]:
    """The response-time controller's state (only under that shedding policy)."""
    yield GaugeMetricFamily(
        "gnutella_admission_rate", "Queries per second the controller admits now.", state.rate
    )
    yield GaugeMetricFamily(
        "gnutella_admission_target_seconds",
        "The 90th-percentile response time the controller aims at.",
        state.target_seconds,
    )
    yield GaugeMetricFamily(
        "gnutella_admission_p90_seconds",
        "The 90th percentile of the response times of its last update (NaN before one).",
        float("nan") if state.p90_seconds is None else state.p90_seconds,
    )
    yield CounterMetricFamily(
        "gnutella_admission_refused", "Messages the controller refused at the door.", state.refused
    )
    yield GaugeMetricFamily(
        "gnutella_admission_ttl_cut",
        "Hops taken off forwarded queries now (degradation; 0 at full quality).",
        state.ttl_cut,
    )
    if len(state.classes) > 1:
        rate = GaugeMetricFamily(
            "gnutella_admission_class_rate",
            "Messages per second each admission class is admitted at now.",
            labels=["class"],
        )
        refused = CounterMetricFamily(
            "gnutella_admission_class_refused",
            "Messages of each admission class refused at the door.",
            labels=["class"],
        )
        for klass in state.classes:
            rate.add_metric([klass.name], klass.rate)
            refused.add_metric([klass.name], klass.refused)
        yield rate
        yield refused
