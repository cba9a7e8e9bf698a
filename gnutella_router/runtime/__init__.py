"""The stage runtime the daemon is built on: SEDA's bounded event queue and worker pool.

Everything above this floor is made of stages in the paper's sense. A stage
(:mod:`.stage`) is a bounded queue with an explicit admission decision in front of it
and a resizable pool of workers behind it that take events in batches. Controllers
(:mod:`gnutella_router.control`) watch and steer stages only through what this module
offers: the queue's length and threshold, admission verdicts, the pool's size and its
statistics, and the meters they sample (:mod:`.meters`). Nothing here knows about
Gnutella.
"""
