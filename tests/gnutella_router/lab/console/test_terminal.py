"""The console driven as a person drives it, through a pseudo-terminal, and as a script,
against small test networks of in-process routers on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest

from gnutella_router.lab.testnet.record import RECORD_FILE

pytestmark = pytest.mark.e2e

PROMPT = "gnutella> "
START_TIMEOUT = 40
"""Seconds for a test network to start and form on a busy machine."""


def command(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "gnutella_router", *arguments]


def spawn(tmp_path: Path, *arguments: str) -> pexpect.spawn[str]:
    environment = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "TERM": "dumb"}
    argv = command(*arguments)
    child = pexpect.spawn(
        argv[0], argv[1:], env=environment, encoding="utf-8", timeout=15, dimensions=(50, 200)
    )
    return child


def test_an_interactive_session_on_a_testnet(tmp_path: Path) -> None:
    results = tmp_path / "results"
    child = spawn(
        tmp_path, "testnet", "--nodes", "3", "--topology", "ring", "--console",
        "--results", str(results),
    )  # fmt: skip
    try:
        child.expect("3 nodes \\(node-0 node-1 node-2\\)", timeout=START_TIMEOUT)
        child.expect(PROMPT)
        assert (results / RECORD_FILE).is_file(), "the running network is recorded"
        # Tab completes commands and node names.
        child.send("rea\t")
        child.expect("reach ")
        child.send("no\t")  # node-0, node-1, node-2: completed as far as they agree
        child.expect("de-")
        child.send("1 --ttl 2\r")
        child.expect("query [0-9a-f]{32} from node-1, TTL 2: reached 2 of 2 other nodes")
        child.expect(PROMPT)
        child.sendline("nodes")
        child.expect("NODE +PEER ADDRESS")
        child.expect(PROMPT)
        child.sendline("nodez")
        child.expect("error: unknown command 'nodez'")
        child.expect(PROMPT)
        # Ctrl-P recalls the previous line ("nodez" was kept too), twice: "nodes".
        child.send("\x10\x10\r")
        child.expect("NODE +PEER ADDRESS")
        child.expect(PROMPT)
        # Ctrl-C abandons a command that would wait 30 s, and the network stays up.
        started = time.monotonic()
        child.sendline("reach 0 --wait 30")
        time.sleep(0.5)
        child.sendintr()
        child.expect(PROMPT)
        assert time.monotonic() - started < 20
        child.sendline("help link")
        child.expect("usage: link")
        child.expect(PROMPT)
        child.sendline("quit")
        child.expect("3 nodes stopped", timeout=START_TIMEOUT)
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    history = (tmp_path / "state" / "gnutella-router" / "console_history").read_text()
    assert history.splitlines()[:3] == ["reach node-1 --ttl 2", "nodes", "nodez"]
    assert not (results / RECORD_FILE).exists(), "the record goes with the network"


def test_a_scripted_session_takes_links_and_nodes_down_and_up(tmp_path: Path) -> None:
    script = tmp_path / "session.txt"
    script.write_text(
        "# a ring of three: node-0 reaches node-1 directly, until that link is down\n"
        "reach 0 --wait 0.5\n"
        "link node-0 node-1 down\n"
        "links\n"
        "reach 0 --wait 0.5\n"
        "link node-0 node-1 up\n"
        "node 2 down\n"
        "reach 0 --wait 0.5\n"
        "node 2 up\n"
        "links\n"
    )
    results = tmp_path / "results"
    run = subprocess.run(
        command(
            "testnet", "--nodes", "3", "--topology", "ring", "--console-script", str(script),
            "--results", str(results),
        ),
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    out = run.stdout
    reaches = out.split(f"{PROMPT}reach 0 --wait 0.5\n")[1:]
    assert "farthest 1 hop," in reaches[0]
    assert "node-1     1" in reaches[0]
    assert "node-0 -> node-1  down   yes      node-0, node-1" in out
    assert "farthest 2 hops" in reaches[1], "round the ring the other way"
    assert "node-1     2" in reaches[1]
    assert "link node-0 -- node-1 up: holds released" in out
    assert "node-2 is offline: 2 connections closed" in out
    assert "not reached: node-2" in reaches[2]
    assert "node-2 is online" in out
    assert "3 nodes stopped (Bye sent)" in out.split(f"{PROMPT}node 2 up")[1], "then the report"
    assert "3 of 3 planned links up" in out.split(f"{PROMPT}node 2 up")[1]


def test_a_console_joins_a_running_network_by_its_record_or_admin_addresses(
    tmp_path: Path,
) -> None:
    results = tmp_path / "results"
    testnet = subprocess.Popen(
        command("testnet", "--nodes", "2", "--duration", "0", "--results", str(results)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not (results / RECORD_FILE).is_file():
            assert time.monotonic() < deadline, "the network did not come up"
            assert testnet.poll() is None, "the testnet ended early"
            time.sleep(0.1)
        record = json.loads((results / RECORD_FILE).read_text())
        good = tmp_path / "good.txt"
        good.write_text("pingall --wait 0.5\nget node-1 config.network.max_ttl\n")
        run = subprocess.run(
            command("console", "--network", str(results), "--script", str(good)),
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert "*** not reached: 0% (2/2 pairs reached)" in run.stdout
        assert "config.network.max_ttl = 7" in run.stdout
        # Named by admin address; changes need the token, which the record holds.
        admins = [a for node in record["nodes"] for a in ("--admin", node["admin"])]
        bad = "set node-0 log-level info\nnodes\n"
        run = subprocess.run(
            command("console", *admins, "--token", "wrong"),
            input=bad, capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert run.returncode == 1
        assert "stdin:1: node-0: the admin interface at" in run.stderr
        assert "401" in run.stderr
        assert f"{PROMPT}nodes" not in run.stdout, "a script stops at its first failure"
        run = subprocess.run(
            command("console", *admins, "--token", record["token"]),
            input=bad, capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert "node-0: log level info" in run.stdout
        assert "online" in run.stdout
    finally:
        testnet.send_signal(signal.SIGINT)
        try:
            testnet.wait(timeout=30)
        finally:
            if testnet.poll() is None:
                testnet.kill()
                testnet.wait()
    run = subprocess.run(
        command("console", "--network", str(results), "--script", "-"),
        input="nodes\n", capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert run.returncode == 1
    assert "no running test network recorded" in run.stderr
