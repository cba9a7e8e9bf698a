"""The router's three stages, as in the SEDA paper's Gnutella router: the shells that
own tasks, queues and sockets, around the sans-IO routing of :mod:`gnutella_router.routing`.

* :mod:`.server` (GnutellaServer) accepts and dials peers, runs the 0.6 handshake in
  both roles, and turns each handshaken stream into a
  :class:`~gnutella_router.net.connection.Connection` whose reader feeds the router
  stage's door.
* :mod:`.router` (GnutellaRouter) is the routing stage: a bounded queue with its door
  (:mod:`.admission`) and a worker pool (:mod:`gnutella_router.runtime`) whose handler
  routes each batch with the parts of :mod:`gnutella_router.routing` it holds, into
  each destination connection's outgoing queue through the outbox
  (:mod:`gnutella_router.net.outbox`), which then has each destination's socket writer
  write it.
* :mod:`.catcher` (GnutellaCatcher) keeps enough outgoing connections, from seeds, the
  host cache and GWebCaches (:mod:`gnutella_router.discovery`).

A message's path (the README's map of the code counts it): socket -> ``net.connection``
reader (inflate, ``protocol.framing``) -> the door, ``stages.admission`` (into the
router queue) -> a ``runtime.stage`` worker -> ``stages.router`` handler ->
``routing.flood`` (``routing.rules``, ``routing.route_table``, copies into
``routing.broadcasts``) and back -> the router's fan-out -> ``net.outbox`` (into the
destination's ``net.outqueue``) -> its ``net.socket_writer`` -> socket.
"""
