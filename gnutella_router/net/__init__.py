"""The socket layer: one :class:`~.connection.Connection` per handshaken peer.

What a link knows and decides (counters, Bye, Hops Flow, the peer's vendor lists, abuse
kicks, the inflater, framer and deflater, the outgoing queue's verdicts) is its
:class:`~.session.PeerSession`, which does no I/O. The connection is the trio adapter
around it: it owns the stream and a reader task (feeds the session, hands its frames on
with backpressure), and holds its :class:`~.socket_writer.SocketWriter`, which makes the
writes of the bounded outgoing queue (:mod:`.outqueue`, the two slow-peer policies)
straight into the socket, through a writer task only while the socket takes less than
it is given. The router hands copies to the one outbound port (:mod:`.outbox`), which
queues them and drives each peer's socket writer. Nothing here decides where a message
goes; that is :mod:`gnutella_router.routing`'s job, run by the router stage
(:mod:`gnutella_router.stages.router`).
"""
