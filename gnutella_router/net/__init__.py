"""The socket layer: one :class:`~.connection.Connection` per handshaken peer.

What a link knows and decides (counters, Bye, Hops Flow, the peer's vendor lists, abuse
kicks, the inflater, framer and deflater, the outgoing queue's verdicts) is its
:class:`~.session.PeerSession`, which does no I/O. The connection is the trio adapter
around it: it owns the stream, a reader task (feeds the session, hands its frames on
with backpressure) and the writes of the bounded outgoing queue (:mod:`.outqueue`, the
two slow-peer policies), made straight into the socket, through a writer task only
while the socket takes less than it is given; the router hands it copies through the
one outbound port (:mod:`.outbox`). Nothing here decides where a message goes; that is
:mod:`gnutella_router.routing`'s job, run by the router stage
(:mod:`gnutella_router.stages.router`).
"""
