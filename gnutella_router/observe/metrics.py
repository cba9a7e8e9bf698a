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
and drop reasons as the router names them (``duplicate``, ``no-route``...).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

import trio
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector

from gnutella_router import __version__
from gnutella_router.observe.view import RouterView
from gnutella_router.runtime.stage import StageStatistics

__all__ = ["CONTENT_TYPE", "DaemonCollector", "metrics_registry", "render_metrics"]

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
"""The classic text exposition format (``text/plain; version=0.0.4``), which
:func:`generate_latest` writes and every Prometheus server reads."""

MESSAGE_COUNTERS = ("received", "forwarded", "generated", "consumed")
"""The router's per-type counters, each exported as ``gnutella_messages_<name>_total``."""


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
        info = GaugeMetricFamily(
            "gnutella_router_info",
            "The node: version and servent GUID.",
            labels=["version", "guid"],
        )
        info.add_metric([__version__, daemon.guid.hex()], 1)
        yield info
        started = daemon.started_at
        if started is not None:
            yield GaugeMetricFamily(
                "gnutella_uptime_seconds",
                "Seconds since the daemon started.",
                value=trio.current_time() - started,
            )

    def _router(self, daemon: RouterView) -> Iterator[Metric]:
        stats = daemon.router.statistics()
        for name in MESSAGE_COUNTERS:
            family = CounterMetricFamily(
                f"gnutella_messages_{name}",
                f"Messages {name} by the router, by message type.",
                labels=["type"],
            )
            _by_label(family, getattr(stats, name))
            yield family
        dropped = CounterMetricFamily(
            "gnutella_messages_dropped",
            "Messages the router dropped, by message type and reason.",
            labels=["type", "reason"],
        )
        for reason, by_type in stats.dropped.items():
            for message_type, count in by_type.items():
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
        for name, table in stats.tables.items():
            entries.add_metric([name], table.size)
            capacity.add_metric([name], table.capacity)
            recorded.add_metric([name], table.recorded)
            expired.add_metric([name], table.expired)
            misses.add_metric([name], table.misses)
            early.add_metric([name], table.rotations_for_capacity)
        yield from (entries, capacity, recorded, expired, misses, early)
        yield GaugeMetricFamily(
            "gnutella_pong_cache_size", "Pongs cached for answering pings.", stats.pong_cache_size
        )

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
            "Connection attempts turned away or failed before the first message, by reason.",
            labels=["reason"],
        )
        _by_label(refused, stats.refused)
        yield refused
        yield CounterMetricFamily("gnutella_connections_closed", "Connections ended.", stats.closed)

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
            "busy": GaugeMetricFamily(
                "gnutella_stage_busy_workers", "Workers handling a batch now.", labels=["stage"]
            ),
            "events": CounterMetricFamily(
                "gnutella_stage_events", "Events handled by the stage.", labels=["stage"]
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
            families["busy"].add_metric([name], stats.busy_workers)
            families["events"].add_metric([name], stats.events)
        yield from families.values()

    def _outgoing(self, daemon: RouterView) -> Iterator[Metric]:
        now = trio.current_time()
        pending_bytes = pending_messages = flow_controlled = 0
        dropped: dict[str, int] = {}
        for connection in daemon.server.connections.snapshot():
            stats = connection.outgoing.statistics(now)
            pending_bytes += stats.pending_bytes
            pending_messages += stats.pending_messages
            flow_controlled += stats.flow_controlled
            for reason, count in stats.dropped.items():
                dropped[reason] = dropped.get(reason, 0) + count
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
        family = GaugeMetricFamily(
            "gnutella_outgoing_queue_dropped",
            "Messages lost by the live connections' outgoing queues, by reason (a gauge: "
            "it falls when a connection closes).",
            labels=["reason"],
        )
        _by_label(family, dropped)
        yield family

    def _catcher(self, daemon: RouterView) -> Iterator[Metric]:
        stats = daemon.catcher.statistics()
        yield GaugeMetricFamily("gnutella_host_cache_size", "Hosts known.", stats.hosts.size)
        yield CounterMetricFamily("gnutella_dials", "Outgoing connections tried.", stats.dials)
        yield CounterMetricFamily(
            "gnutella_dial_failures", "Outgoing connections that failed.", stats.dial_failures
        )


def _by_label(family: CounterMetricFamily | GaugeMetricFamily, counts: Mapping[str, int]) -> None:
    for label, count in counts.items():
        family.add_metric([label], count)


def metrics_registry(daemon: RouterView) -> CollectorRegistry:
    """A registry of its own holding ``daemon``'s collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DaemonCollector(daemon))
    return registry


def render_metrics(registry: CollectorRegistry) -> bytes:
    """The text exposition of ``registry``; call it on the trio thread."""
    return generate_latest(registry)
