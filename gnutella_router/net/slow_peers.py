"""The configured slow-peer policy, as an outgoing queue for each new connection."""

from __future__ import annotations

from typing import Any

from gnutella_router.net.flow_control_queue import FlowControlQueue
from gnutella_router.net.outqueue import POLICIES, OutgoingQueue
from gnutella_router.net.threshold_queue import ThresholdQueue

__all__ = ["make_outgoing_queue"]


def make_outgoing_queue(policy: str, **settings: Any) -> OutgoingQueue:
    """Build a queue from the config file's policy name and its settings table.

    Raises:
        ValueError: unknown policy (the message lists the allowed ones) or bad settings.
        TypeError: a setting the chosen policy does not have.
    """
    if policy == "threshold":
        return ThresholdQueue(**settings)
    if policy == "flow-control":
        return FlowControlQueue(**settings)
    allowed = ", ".join(repr(name) for name in POLICIES)
    raise ValueError(f"unknown outgoing queue policy {policy!r}; expected one of {allowed}")
