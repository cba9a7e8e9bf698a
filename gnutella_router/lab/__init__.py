"""The lab around the router: everything a researcher runs against routers, never the
router itself.

* :mod:`.testnet`: local test networks (processes, namespaces, forks, foreign servents,
  churn), their traffic, measurements, kept runs and pictures;
* :mod:`.traffic`: clients that talk to a router over TCP: the load client, trace
  replay, the echo stand-in, leaves;
* :mod:`.console`: a shell on a running test network (reach, pingall, down/up).

The daemon's own packages never import this one; the command line
(:mod:`gnutella_router.cli`) and the scripts do.
"""
