"""Router child processes: started when they accept, stopped on every path, failures named."""

from __future__ import annotations

from pathlib import Path

import pytest

from gnutella_router.lab.testnet.process import RouterProcessError, start_router_process
from tests.support.processes import free_port


@pytest.mark.e2e
def test_a_router_process_runs_until_stopped(tmp_path: Path) -> None:
    port = free_port()
    with start_router_process(
        tmp_path / "state", ["--listen", f"127.0.0.1:{port}"], wait_for=(port,)
    ) as router:
        assert router.process.poll() is None
    assert router.process.returncode == 0  # SIGTERM: Bye, host cache saved, exit 0
    assert (tmp_path / "state" / "hosts.txt").exists()


@pytest.mark.e2e
def test_a_router_that_exits_at_once_is_named_with_its_status(tmp_path: Path) -> None:
    log = tmp_path / "router.log"
    with pytest.raises(RouterProcessError, match=r"exited with 2; see .*router\.log"):
        start_router_process(
            tmp_path / "state", ["--max-ttl", "99"], log_path=log, wait_for=(free_port(),)
        )
    assert "network.max_ttl = 99" in log.read_text()


@pytest.mark.e2e
def test_a_router_that_never_accepts_is_stopped_after_the_timeout(tmp_path: Path) -> None:
    listen, elsewhere = free_port(), free_port()
    with pytest.raises(RouterProcessError, match="did not accept within 3 s"):
        start_router_process(
            tmp_path / "state",
            ["--listen", f"127.0.0.1:{listen}"],
            wait_for=(elsewhere,),  # nothing will ever listen there
            timeout=3,
        )
