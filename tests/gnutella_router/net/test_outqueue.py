"""Outgoing queues as the connection builds them: the factory, one queue per policy.
Each policy's own tests are in test_threshold_queue.py and test_flow_control_queue.py."""

from __future__ import annotations

import pytest

from gnutella_router.net.flow_control_queue import FlowControlQueue
from gnutella_router.net.outqueue import POLICIES
from gnutella_router.net.slow_peers import make_outgoing_queue
from gnutella_router.net.threshold_queue import ThresholdQueue


def test_factory_builds_each_policy() -> None:
    threshold = make_outgoing_queue("threshold", max_messages=7)
    assert isinstance(threshold, ThresholdQueue)
    assert threshold.statistics(0.0).capacity == 7
    flow = make_outgoing_queue("flow-control", max_bytes=4096, enter_ratio=0.75)
    assert isinstance(flow, FlowControlQueue)
    assert flow.statistics(0.0).capacity == 4096
    assert {type(make_outgoing_queue(p)).policy for p in POLICIES} == set(POLICIES)


def test_factory_names_the_allowed_policies() -> None:
    with pytest.raises(ValueError, match="'threshold', 'flow-control'"):
        make_outgoing_queue("lossy")
    with pytest.raises(TypeError):
        make_outgoing_queue("threshold", enter_ratio=0.5)
