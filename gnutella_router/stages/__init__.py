"""The router's three stages, as in the SEDA paper's Gnutella router: the shells that
own tasks, queues and sockets, around the sans-IO routing of :mod:`gnutella_router.routing`.

* :mod:`.server` (GnutellaServer) accepts and dials peers, runs the 0.6 handshake in
  both roles, and turns each handshaken stream into a
  :class:`~gnutella_router.net.connection.Connection` whose reader feeds the router.
* :mod:`.router` (GnutellaRouter) is the routing stage: a bounded queue with its door
  (:mod:`.admission`) and a worker pool (:mod:`gnutella_router.runtime`) whose handler
  routes each batch with the parts of :mod:`gnutella_router.routing` it holds, into
  each destination connection's outgoing queue through the outbox
  (:mod:`gnutella_router.net.outbox`).
* :mod:`.catcher` (GnutellaCatcher) keeps enough outgoing connections, from seeds, the
  host cache and GWebCaches (:mod:`gnutella_router.discovery`).

A message's path: socket -> ``net.connection`` reader (inflate, ``protocol.framing``)
-> router queue (``stages.admission``) -> ``stages.router`` handler -> ``routing.flood``
(``routing.rules``, ``routing.route_table``) -> ``net.outbox`` -> destination's
``net.outqueue`` -> its ``net.connection`` writer -> socket.
"""
