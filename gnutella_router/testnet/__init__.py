"""A local test network in one command: routers, a GWebCache, load, a report.

:mod:`.network` plans a topology, starts the routers and a GWebCache on loopback, waits
for the planned links, drives the load client through them and writes the report.
"""
