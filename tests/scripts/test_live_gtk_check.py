"""The live gtk-gnutella check: skipped without a servent, and what it reads of
gtk-gnutella's shell and log (the lines are gtk-gnutella 1.2.3's own, from a live run).

The live run itself needs a gtk-gnutella build and root; it is not part of the suite.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from scripts.live_gtk.network import drops_from_router, parse_drop_stats, router_flags

RunScript = Callable[..., subprocess.CompletedProcess[str]]
"""The ``run_script`` fixture (tests/scripts/conftest.py)."""


ROUTER_PONG = (
    "26-11-25 08:36:36.091 (DEBUG): DROP Pong (31 bytes) #00343102acd9aa30ff6907418cd68f03 "
    "[hops=0, TTL=1]: from ultra node 127.0.0.1:50805 <gnutella-router/0.1.0>: Unusable Pong"
)
OTHER_QUERY = (
    "26-11-25 08:36:40.001 (DEBUG): DROP Query (40 bytes) #11343102acd9aa30ff6907418cd68f03 "
    "[hops=0, TTL=4]: from leaf node 127.0.0.1:41000 <gnutella-router-live-check/0.1.0>: "
    "Message throttle"
)
ROUTER_QUERY = (
    "26-11-25 08:36:41.001 (DEBUG): DROP Query (40 bytes) #21343102acd9aa30ff6907418cd68f03 "
    "[hops=1, TTL=3]: from ultra node 127.0.0.1:50805 <gnutella-router/0.1.0>: Duplicate message"
)


@pytest.mark.e2e
def test_without_a_servent_it_is_skipped_and_exits_0(run_script: RunScript) -> None:
    env = {"PATH": "/usr/bin:/bin"}
    done = run_script("live_gtk_check.py", "--duration", "1", env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("skipped: no gtk-gnutella given")


@pytest.mark.e2e
def test_a_servent_that_is_not_there_is_skipped_too(tmp_path: Path, run_script: RunScript) -> None:
    done = run_script("live_gtk_check.py", "--gtk", str(tmp_path / "x"), timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("skipped: not executable")


def test_drop_statistics_keep_the_nonzero_counters() -> None:
    text = "bad_size 0\nttl0 0\npong_unusable 28\nthrottle 3\nnot a counter\n"
    assert parse_drop_stats(text) == {"pong_unusable": 28, "throttle": 3}


def test_only_drops_of_what_the_router_sent_are_held_against_it(tmp_path: Path) -> None:
    log = tmp_path / "stderr.log"
    log.write_text("\n".join([ROUTER_PONG, OTHER_QUERY, ROUTER_PONG, ROUTER_QUERY, "noise"]))
    assert drops_from_router(log) == {"Unusable Pong": 2, "Duplicate message": 1}
    assert drops_from_router(tmp_path / "missing.log") == {}


def test_the_router_lines_of_nodes_give_their_flags() -> None:
    nodes = (
        "100~ \n"
        "Node                  Flags       CC Since  Uptime User-Agent\n"
        "127.0.0.1:50805       UOrwQXZ---- ??     5s    18s gnutella-router/0.1.0\n"
        "127.0.0.1:41000       LIrw--Z---- ??     5s    18s gnutella-router-live-check/0.1.0\n"
        ".\n"
    )
    assert router_flags(nodes) == ["UOrwQXZ----"]


def test_a_failed_check_inside_trio_keeps_its_verdict_and_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """trio hands a check's failure out of its nursery as an ExceptionGroup: the verdict
    must still be reported (FAILED, with the reason) and the run's folder kept."""
    from scripts import live_gtk_check
    from scripts.live_gtk.network import CheckFailed

    stopped: list[bool] = []

    class Network:
        router_port = 1
        file_name = "x"

        def __init__(self, *args: object) -> None:
            self.servents: dict[str, object] = {}

        def start(self) -> None:
            pass

        def stop(self) -> None:
            stopped.append(True)

    async def failing_checks(*args: object) -> None:
        raise ExceptionGroup("checks", [CheckFailed("the leaf connected: not within 60 s")])

    wrapper = tmp_path / "wrapper"
    wrapper.write_text("#!/bin/sh\n")
    wrapper.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setattr(live_gtk_check, "Network", Network)
    monkeypatch.setattr(live_gtk_check, "run_checks", failing_checks)
    monkeypatch.setattr("scripts.live_gtk_check.os.geteuid", lambda: 0)
    monkeypatch.setattr("scripts.live_gtk_check.tempfile.mkdtemp", lambda prefix: str(work))
    status = live_gtk_check.main(["--gtk", str(wrapper), "--gtk-binary", str(wrapper)])
    out = capsys.readouterr().out
    assert status == 1
    assert stopped == [True]
    assert "| run | FAILED | the leaf connected: not within 60 s |" in out
    assert "Overall: FAILED" in out
    assert f"run folder kept: {work}" in out
    assert work.is_dir()


def test_how_a_run_ended_is_read_through_exception_groups() -> None:
    import trio

    from scripts.live_gtk.checks import Interrupted
    from scripts.live_gtk.network import CheckFailed
    from scripts.live_gtk_check import why_it_ended

    nested = ExceptionGroup("outer", [ExceptionGroup("inner", [CheckFailed("no hit")])])
    assert why_it_ended(nested) == (False, "no hit")
    assert why_it_ended(BaseExceptionGroup("x", [KeyboardInterrupt()])) == (True, "")
    assert why_it_ended(Interrupted()) == (True, "")
    assert why_it_ended(trio.TooSlowError()) == (False, "the run took too long")
    interrupted, failure = why_it_ended(ExceptionGroup("x", [KeyError("peers")]))
    assert not interrupted
    assert failure == "the check itself failed: KeyError: 'peers'"
