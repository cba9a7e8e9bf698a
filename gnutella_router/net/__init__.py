"""The socket layer: one :class:`~.connection.Connection` per handshaken peer.

A connection owns its stream, a reader task (inflate, frame, hand batches on with
backpressure) and its bounded outgoing queue (:mod:`.outqueue`, the two slow-peer
policies), which it drains straight into the socket, through a writer task only while
the socket takes less than it is given. Route tables (:mod:`.route_table`) map
GUIDs to the connection a message came from, by connection id, so that replies can
travel the reverse path. Nothing here decides where a message goes; that is the router
stage's job (:mod:`gnutella_router.stages.router`).
"""
