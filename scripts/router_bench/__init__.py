"""The loopback benchmarks' parts, from the wire up: peers and floods (:mod:`.peers`,
:mod:`.replies`), the servers as the benchmarks judge them (:mod:`.servers`; the
processes themselves are :mod:`scripts.runner`'s), timed runs (:mod:`.runs`,
:mod:`.interleaved`), the report (:mod:`.report`), other versions of the router
(:mod:`.trees`), a router's tables filled and dumped (:mod:`.dumps`) and the idle
peers of the memory benchmark (:mod:`.idle_peers`). The ``bench_*.py`` scripts read
their flags and run them."""
