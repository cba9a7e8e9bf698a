"""The Prometheus targets file: its shape, and a write that never leaves half a file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gnutella_router.lab.testnet.file_sd import TARGETS_FILE, target_groups, write_targets
from gnutella_router.lab.testnet.nodes import LocalNode


def test_only_running_routers_with_an_admin_interface_are_targets(tmp_path: Path) -> None:
    stopped = LocalNode(0, tmp_path / "node-0")
    stopped.admin_address = ("127.0.0.1", 6347)
    assert target_groups([stopped], "run-1") == []  # not running: nothing to scrape


def test_the_file_is_replaced_whole(tmp_path: Path) -> None:
    groups = [
        {"targets": ["127.0.0.1:6347"], "labels": {"node": "node-0", "role": "router", "run": "r"}}
    ]
    path = write_targets(tmp_path, groups)
    assert path == tmp_path / TARGETS_FILE
    assert json.loads(path.read_text()) == groups
    write_targets(tmp_path, [])
    assert json.loads(path.read_text()) == []
    assert [p.name for p in tmp_path.iterdir()] == [TARGETS_FILE]  # no temporary left


def test_a_file_that_cannot_be_written_leaves_no_temporary(tmp_path: Path) -> None:
    (tmp_path / TARGETS_FILE).mkdir()  # a rename cannot replace a folder
    with pytest.raises(IsADirectoryError):
        write_targets(tmp_path, [])
    assert [p.name for p in tmp_path.iterdir()] == [TARGETS_FILE]
