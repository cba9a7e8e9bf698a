"""Looking inside a running router, without touching its hot path.

:mod:`.admin` serves JSON views, Prometheus ``/metrics`` (:mod:`.metrics`) and the
profiler's samples over HTTP; :mod:`.dumps` turns route tables, connections, stages and
counters into plain data for the admin interface, the ``dump`` command and SIGUSR1;
:mod:`.profiler` samples queues, pools, RSS and rates into a bounded ring;
:mod:`.recorder` writes every message peers send into a trace file; :mod:`.describe`
prints a message in one line. Observers read the daemon only through
:class:`~.view.RouterView`, so the daemon can start them without a circle of imports.
"""
