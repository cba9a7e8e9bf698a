"""Where peers come from: the host cache and the GWebCache client.

:mod:`.host_cache` keeps the addresses learned from seeds, pongs, ``X-Try-Ultrapeers``
headers and the saved cache, bounded, with per-host backoff, and says which addresses
can ever be dialled (:func:`~.host_cache.classify_address`). :mod:`.gwebcache` asks a
GWebCache (v2, over h11) for more hosts when the cache runs short. The catcher stage
(:mod:`gnutella_router.stages.catcher`) decides when to use either.
"""
