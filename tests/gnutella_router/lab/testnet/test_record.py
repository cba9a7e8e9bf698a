"""The record of a running test network, network.json: what consoles find it by."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gnutella_router.lab.testnet.record import (
    RECORD_FILE,
    NetworkRecord,
    NodeRecord,
    RecordError,
    find_network_record,
    read_network_record,
    remove_network_record,
    write_network_record,
)


def record(tmp_path: Path, pid: int | None = None) -> NetworkRecord:
    return NetworkRecord(
        nodes=(
            NodeRecord("node-0", "127.0.0.1:6346", "127.0.0.1:7000", "aa" * 16, str(tmp_path)),
            NodeRecord("node-1", "127.0.0.1:6348", "127.0.0.1:7001"),
        ),
        links=((1, 0),),
        token="secret",
        pid=os.getpid() if pid is None else pid,
    )


def test_a_record_reads_back_as_written_and_only_its_owner_reads_it(tmp_path: Path) -> None:
    written = write_network_record(tmp_path, record(tmp_path))
    assert written == tmp_path / RECORD_FILE
    assert stat.S_IMODE(written.stat().st_mode) == 0o600, "it holds the admin token"
    assert read_network_record(written) == record(tmp_path)
    remove_network_record(tmp_path)
    remove_network_record(tmp_path)  # gone already: nothing to do
    assert not written.exists()


def test_a_restarted_nodes_ready_file_names_its_admin_interface_now(tmp_path: Path) -> None:
    node = record(tmp_path).nodes[0]
    assert node.current_admin() == "127.0.0.1:7000"
    (tmp_path / "ready.json").write_text(json.dumps({"pid": 1, "admin": "127.0.0.1:7777"}))
    assert node.current_admin() == "127.0.0.1:7777"


def test_the_record_of_a_stopped_network_is_refused(tmp_path: Path) -> None:
    finished = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    write_network_record(tmp_path, record(tmp_path, pid=int(finished.stdout)))
    with pytest.raises(RecordError, match=r"has stopped"):
        read_network_record(tmp_path / RECORD_FILE)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("not json", "not JSON"),
        ('{"format": 99}', "not a test network record"),
        ('{"format": 1, "nodes": [{"address": "x"}]}', "a malformed node"),
        ('{"format": 1, "nodes": [{"name": "node-0"}], "links": [[0, 3]]}', "not in the record"),
    ],
)
def test_a_broken_record_is_refused_with_a_reason(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / RECORD_FILE
    path.write_text(text)
    with pytest.raises(RecordError, match=says):
        read_network_record(path)


def test_a_folder_of_runs_gives_its_newest_record(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="no running test network recorded"):
        find_network_record(tmp_path)
    with pytest.raises(RecordError, match="no such file or folder"):
        find_network_record(tmp_path / "nowhere")
    for index, run in enumerate(("run-1", "run-2")):
        (tmp_path / run).mkdir()
        path = write_network_record(tmp_path / run, record(tmp_path))
        os.utime(path, (1000 + index, 1000 + index))
    assert find_network_record(tmp_path) == tmp_path / "run-2" / RECORD_FILE
    write_network_record(tmp_path, record(tmp_path))
    assert find_network_record(tmp_path) == tmp_path / RECORD_FILE
    assert find_network_record(tmp_path / RECORD_FILE) == tmp_path / RECORD_FILE
