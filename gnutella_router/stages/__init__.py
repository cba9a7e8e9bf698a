"""The router's three stages, as in the SEDA paper's Gnutella router.

* :mod:`.server` (GnutellaServer) accepts and dials peers, runs the 0.6 handshake in
  both roles, and turns each handshaken stream into a
  :class:`~gnutella_router.net.connection.Connection` whose reader feeds the router.
* :mod:`.router` (GnutellaRouter) is the routing stage: a bounded queue and a worker
  pool (:mod:`gnutella_router.runtime`) whose handler drops duplicates, enforces TTL
  rules, records reverse routes, broadcasts pings and queries and routes pongs, hits
  and pushes back, into each destination connection's outgoing queue.
* :mod:`.catcher` (GnutellaCatcher) keeps enough outgoing connections, from seeds, the
  host cache and GWebCaches (:mod:`gnutella_router.discovery`).

The router stage's parts, each a module of its own: :mod:`.admission` (its door),
:mod:`.destinations` (what one destination of a broadcast may get), :mod:`.pongs`,
:mod:`.query_routing` (QRP tables), :mod:`.dynamic_query` (leaf queries),
:mod:`.flood` (the one routing path for runs of a link's frames), :mod:`.replies`
(an object the router holds: pongs, hits and pushes back along their routes, the
messages that stop here), :mod:`.reply_runs` (runs of replies routed in bulk),
:mod:`.network_settings` (the settings they all read, in one place),
:mod:`.vendor_messages` and :mod:`.router_statistics`. It sees connections only as a
:class:`~.link.Link`.

A message's path: socket -> ``net.connection`` reader (inflate, ``protocol.framing``)
-> router queue -> ``stages.router`` handler (``net.route_table``) -> destination's
``net.outqueue`` -> its ``net.connection`` writer -> socket.
"""
