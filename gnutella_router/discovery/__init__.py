"""Where peers come from: the host cache, address ranges, and the GWebCache.

:mod:`.host_cache` keeps the addresses learned from seeds, pongs, ``X-Try-Ultrapeers``
headers and the saved cache, bounded, shared out per teller, network and address (so
that no one peer fills it), with per-host backoff, and chooses whom to dial across
tellers and networks. :mod:`.ranges` says which addresses are public, non-public or
never dialable (:func:`~.ranges.classify_address`) and which network an address counts
as. :mod:`.gwebcache` asks a GWebCache (v2, over h11) for more hosts when the cache
runs short; :mod:`.gwebcache_service` and :mod:`.gwebcache_server` are the cache itself,
as a service. The catcher stage (:mod:`gnutella_router.stages.catcher`) decides when to
use either.
"""
