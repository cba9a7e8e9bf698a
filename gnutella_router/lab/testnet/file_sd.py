"""The test network's routers as Prometheus targets: a ``file_sd`` file, kept current.

Every router serves Prometheus's text format at ``/metrics`` on its admin interface
(open without the admin token by default, ``admin.open_pages``). Prometheus finds
targets that come and go through file-based service discovery (``file_sd_configs``): a
JSON file holding a list of target groups, each ``{"targets": ["HOST:PORT"], "labels":
{...}}``, which it reads again whenever the file changes. The testnet writes
:data:`TARGETS_FILE` into its results folder: one group per running router, its admin
interface's address as the target, labelled ``node`` (``node-3``), ``role``
(``router``: the routers are the only nodes with an admin interface; servents and
leaves have none) and ``run`` (the results folder's name, so that several runs scraped
by one Prometheus stay apart). It is written once the routers have started, again
whenever one leaves or comes back (churn, possibly at a new admin port) or dies, and a
last time, empty, when the run has stopped its routers: a scraper then drops them
instead of scraping dead ports.

Prometheus may read the file at any moment, so it is never written in place: the new
list goes to a temporary file beside it, which is then renamed over it (a rename within
a folder is atomic), as ``file_sd``'s documentation asks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gnutella_router.lab.testnet.nodes import NetworkNode
from gnutella_router.net.connection import format_address

__all__ = ["TARGETS_FILE", "target_groups", "write_targets"]

TARGETS_FILE = "prometheus-targets.json"


def target_groups(nodes: Iterable[NetworkNode], run: str) -> list[dict[str, Any]]:
    """One target group per running node with an admin interface, in node order."""
    return [
        {
            "targets": [format_address(*node.admin_address)],
            "labels": {"node": f"{node.label}-{node.index}", "role": "router", "run": run},
        }
        for node in nodes
        if node.running() and node.admin_address is not None
    ]


def write_targets(results: Path, groups: list[dict[str, Any]]) -> Path:
    """Replace ``results/prometheus-targets.json`` with ``groups``, whole; the path.

    Raises:
        OSError: it cannot be written.
    """
    path = results / TARGETS_FILE
    temporary = path.with_name(f".{TARGETS_FILE}.{os.getpid()}")
    try:
        temporary.write_text(json.dumps(groups, indent=2) + "\n")
        temporary.replace(path)
    except OSError:
        temporary.unlink(missing_ok=True)
        raise
    return path
