"""Routing, sans-IO: what the router decides for every message, fed ``now``.

Nothing here opens a socket, starts a task or reads a clock: the router stage
(:mod:`gnutella_router.stages.router`) holds these parts, hands them frames and the time,
and they answer with copies offered to the one outbound port (:class:`.link.Outbox`),
counters and table entries. Each rule is written once:

* :mod:`.rules`: the TTL and hops limits, the shapes of pings and queries, the clamp to
  our maximum TTL, the admission controller's cut, the last hop, as pure functions;
* :mod:`.flood`: the one routing path, a run of one link's frames routed as a run;
* :mod:`.reply_runs` and :mod:`.replies`: pongs, hits and pushes back along their
  routes, and the messages that stop here;
* :mod:`.route_table` (with :mod:`.route_entry`): the reverse routes and the duplicate
  check, bounded, with each peer's share;
* :mod:`.broadcasts` and :mod:`.destinations`: a batch's copies, and what one
  destination of them may get;
* :mod:`.query_routing` (QRP tables), :mod:`.dynamic_query` (leaves' queries),
  :mod:`.pongs` (our pong, the pong cache), :mod:`.vendor_messages`,
  :mod:`.network_settings` (the settings they all read) and :mod:`.router_statistics`.

The router sees connections only as a :class:`.link.Link` and writes only through the
:class:`.link.Outbox`.
"""
