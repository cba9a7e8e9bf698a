"""The socket layer: one :class:`~.connection.Connection` per handshaken peer.

A connection owns its stream, a reader task (inflate, frame, hand batches on with
backpressure) and its bounded outgoing queue (:mod:`.outqueue`, the two slow-peer
policies), which it drains straight into the socket, through a writer task only while
the socket takes less than it is given; the router hands it copies through the one
outbound port (:mod:`.outbox`). Nothing here decides where a message goes; that is
:mod:`gnutella_router.routing`'s job, run by the router stage
(:mod:`gnutella_router.stages.router`).
"""
