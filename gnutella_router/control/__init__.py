"""SEDA's controllers: what keeps the stages well-conditioned under overload.

:mod:`.shedding` decides what a stage's queue refuses when it is full (backpressure,
drop-tail, RED, queries first, per-connection token buckets); the router stage consults
it at its door. :mod:`.response_time` is SEDA's response-time controller: it admits
queries at the rate that keeps the stage's 90th-percentile response time on target (the
``response-time`` shedding policy). :mod:`.governor` is the paper's thread governor: it
samples the router stage's meter and sizes its worker pool to the measured load.
:mod:`.batching` is the paper's batching controller: it keeps the router stage's batch
size at the smallest that sustains its throughput while saturated.
:mod:`.abuse` judges peers rather than load: it decides when a peer's offences end its
connection and keeps the bans. Controllers see stages only through the runtime
(:mod:`gnutella_router.runtime`), never through sockets.
"""
