"""Foreign servents in a test network: started from a template, linked in, reported."""

from __future__ import annotations

import io
import shlex
import sys
from pathlib import Path

import pytest
import trio

from gnutella_router.lab.testnet.children import ServentNode
from gnutella_router.lab.testnet.network import run_network
from gnutella_router.lab.testnet.nodes import NodeError
from gnutella_router.lab.testnet.servents import LINKS_PER_SERVENT, attachments
from gnutella_router.lab.testnet.settings import NetworkSettings

# Any servent that speaks 0.6 will do; a router of our own is one that is always here.
ROUTER_AS_SERVENT = (
    f"{shlex.quote(sys.executable)} -m gnutella_router run --listen 127.0.0.1:{{port}} "
    "--state-dir {dir} --min-connections 0"
)

SAMPLE = Path(__file__).resolve().parents[3] / "fixtures" / "gtk-gnutella-1.2.3-stats-drop.txt"
WITH_STATS = "sh -c " + shlex.quote(
    f'echo "ready: a router as a servent; stats: cat {SAMPLE}"; exec {ROUTER_AS_SERVENT}'
)
"""A wrapper that offers drop counters (gtk-gnutella's, recorded) in its ready line."""


def test_each_servent_is_linked_with_distinct_routers_drawn_from_the_seed() -> None:
    links = attachments(5, 8, seed=1)
    assert len(links) == 5
    assert all(len(set(r)) == LINKS_PER_SERVENT and set(r) <= set(range(8)) for r in links)
    assert attachments(5, 8, seed=1) == links
    assert attachments(2, 1, seed=1) == [[0], [0]]  # fewer routers than links: all of them


def test_the_template_takes_port_dir_and_host_only(tmp_path: Path) -> None:
    servent = ServentNode(0, tmp_path, "serve --port {port} --dir {dir}", ("127.0.0.1", 7))
    assert servent.argv() == ["serve", "--port", "7", "--dir", str(tmp_path)]
    odd = ServentNode(0, tmp_path, "serve {nonsense}", ("127.0.0.1", 7))
    with pytest.raises(NodeError, match=r"only \{port\}, \{dir\} and \{host\}"):
        odd.argv()


@pytest.mark.parametrize(
    ("servent", "servents", "error"),
    [
        (None, 2, "--servents needs --servent"),
        ("serve", 1, "must take {port}"),
        ("x {port}", 99, "from 0 to"),
    ],
)
def test_servent_settings_are_checked(servent: str | None, servents: int, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        NetworkSettings(servent=servent, servents=servents)


@pytest.mark.e2e
async def test_servents_are_dialled_and_reported_from_the_routers_side(tmp_path: Path) -> None:
    out = io.StringIO()
    settings = NetworkSettings(
        nodes=3, topology="ring", duration=1.0, rate=50.0, results=tmp_path,
        servent=WITH_STATS, servents=2, mode="processes",
    )  # fmt: skip
    with trio.fail_after(120):
        outcome = await run_network(settings, out=out)
    assert outcome.ok, out.getvalue()
    rows = outcome.summary["servents"]
    assert [r["servent"] for r in rows] == [0, 1]
    for row in rows:
        assert row["connected_routers"] == row["linked_with"]
        assert all(c["user_agent"].startswith("gnutella-router/") for c in row["connections"])
        assert sum(c["messages_out"] for c in row["connections"]) > 0
        assert row["exit_status"] == 0  # stopped with SIGTERM after the routers' Bye
        assert (tmp_path / f"servent-{row['servent']}").is_dir()
        assert row["drops"]["by_reason"] == {
            "throttle": 2978,
            "duplicate": 524,
            "query_too_short": 17,
        }
    assert "servent-0 127.0.0.1:" in out.getvalue()
    assert "its own drop counters: 3,519 dropped: throttle 2,978, duplicate 524" in out.getvalue()


@pytest.mark.e2e
async def test_a_servent_that_does_not_start_is_named(tmp_path: Path) -> None:
    settings = NetworkSettings(
        nodes=2, duration=1.0, results=tmp_path, mode="in-process",
        servent="sh -c 'echo no such servent on {port}; exit 3'",
    )  # fmt: skip
    with trio.fail_after(60):
        outcome = await run_network(settings, out=io.StringIO())
    assert outcome.error is not None
    assert outcome.error.startswith("servent-0 exited with status 3 before it listened")
    assert "no such servent on" in outcome.error  # the end of its log, quoted
    assert outcome.summary["nodes"] == []  # no router was started for nothing


@pytest.mark.e2e
async def test_a_servent_that_never_listens_is_stopped_with_what_it_started(
    tmp_path: Path,
) -> None:
    """A wrapper that starts its servent and never listens (or hangs) is given
    --servent-timeout, not the formation timeout, and then everything in its process
    group goes: the servent it started too, not only the wrapper's pid."""
    orphan = tmp_path / "servent.pid"
    wrapper = f"sh -c 'sleep 300 & echo $! > {orphan}; wait' {{port}}"
    settings = NetworkSettings(
        nodes=2, duration=1.0, results=tmp_path, mode="in-process", servent=wrapper,
        servent_timeout=1.0, form_timeout=120,
    )  # fmt: skip
    started = trio.current_time()
    with trio.fail_after(60):
        outcome = await run_network(settings, out=io.StringIO())
    assert trio.current_time() - started < 30  # the servent's 1 s, not the 120 s
    assert outcome.error is not None
    assert "servent-0 did not listen" in outcome.error
    assert "within 1 s" in outcome.error
    pid = int(orphan.read_text())
    with trio.fail_after(5):
        while _alive(pid):
            await trio.sleep(0.05)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_the_servent_timeout_is_checked() -> None:
    with pytest.raises(ValueError, match="--servent-timeout"):
        NetworkSettings(servent="x {port}", servent_timeout=0)


def test_a_router_port_comes_with_the_next_port_free(monkeypatch: pytest.MonkeyPatch) -> None:
    """A router puts its admin interface on the next port by default: a candidate whose
    next port is taken is passed over."""
    import socket

    from gnutella_router.lab.testnet import servents

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = int(taken.getsockname()[1])
        real = servents.free_port
        candidates = iter([busy - 1])  # the first answer: its next port is taken

        def candidate(host: str) -> int:
            return next(candidates, None) or real(host)

        monkeypatch.setattr(servents, "free_port", candidate)
        port = servents.free_router_port()
        assert port != busy - 1
        for each in (port, port + 1):
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", each))
