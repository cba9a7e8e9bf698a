"""Traffic tools that talk to a router over TCP: the load client, trace replay, a stand-in.

:mod:`.load` connects injecting and sinking peers, sends an open-loop schedule from
:mod:`traffic_models` and measures per-type latency and loss; :mod:`.replay` plays a
recorded trace into a router; :mod:`.echo` is a stand-in router with a known delay, to
calibrate the load client. The models themselves (mixes, arrivals, content, trace
format) are I/O-free and live in :mod:`traffic_models`.
"""
