"""A local test network in one command: routers, a GWebCache, load, a report.

:mod:`.topology` plans which node dials which; :mod:`.cache` is the GWebCache the nodes
bootstrap from, one page per node, so the catchers build exactly the planned links;
:mod:`.network` starts the routers, waits for the links, drives the load client
(:mod:`.spread_load`: an injector at node 0, sinks spread over the nodes) and writes
the results (:mod:`.report`).
"""
