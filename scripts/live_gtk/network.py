"""The live check's processes: the router and the gtk-gnutella servents, started and
always stopped, and what is read of them (the router's admin JSON, gtk-gnutella's shell
and log).

A gtk-gnutella node runs under its wrapper (``WRAPPER PORT DIR``, in the foreground,
stopping the servent cleanly on SIGTERM), as its own user, in a folder of its own, with
the configuration the wrapper writes (``GTK_GNUTELLA_MODE``: a leaf's or an
ultrapeer's). gtk-gnutella's drop statistics are global, so the drops the router is to
answer for are read from its log instead (``log_dropped_gnutella``), where each drop
names the peer the message came from.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pwd
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from gnutella_router.lab.testnet.servent_stats import drop_counters

ROOT = Path(__file__).resolve().parents[2]
OTHER_WORDS = ("quokka", "interop", "live", "checked")
"""The shared file's name: gtkcheck, a random word, and these; searches name the random
word and one or two of these, each search another set, since gtk-gnutella drops a
leaf's query whose text it has seen from it lately ("Message throttle")."""
ROUTER_AGENT = "gnutella-router/"
"""How the router's user agent begins (our scripted searchers' does not)."""
EXPECTED_DROPS = {"Unusable Pong"}
"""gtk-gnutella's drop reasons for what the router sends that are loopback's doing: a
pong for 127.0.0.1 is never usable to it (not routable), whoever sends it."""


class CheckFailed(Exception):
    """The router did not do what a check asked (the message says what)."""


@dataclasses.dataclass
class Servent:
    """One gtk-gnutella node: its name, role, port, folder and wrapper process."""

    name: str
    role: str
    port: int
    dir: Path
    process: subprocess.Popen[bytes] | None = None


@dataclasses.dataclass
class Settings:
    wrapper: Path
    binary: Path
    user: str
    duration: float
    keep: bool
    write: bool
    work: Path


# --- processes --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_port_pair() -> int:
    """A port P with P + 1 free too (the router and its admin interface)."""
    for _ in range(100):
        port = free_port()
        with contextlib.suppress(OSError), socket.socket() as s:
            s.bind(("127.0.0.1", port + 1))
            return port
    raise RuntimeError("no two free ports in a row")


def stop_process(process: subprocess.Popen[bytes] | None, name: str, grace: float) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds; never raises."""
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        print(f"{name} did not stop within {grace:.0f} s: SIGKILL", file=sys.stderr)
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)


class Network:
    """The router and the servents: started in order, and every one of them stopped."""

    def __init__(self, settings: Settings, word: str) -> None:
        self.settings = settings
        self.word = word
        self.file_name = f"gtkcheck {word} {' '.join(OTHER_WORDS)}.txt"
        self.router_port = free_port_pair()
        self.admin = f"http://127.0.0.1:{self.router_port + 1}"
        self.router: subprocess.Popen[bytes] | None = None
        self.servents = {
            "leaf": Servent("leaf", "leaf", free_port(), settings.work / "leaf"),
            "up1": Servent("up1", "ultra", free_port(), settings.work / "up1"),
            "up2": Servent("up2", "ultra", free_port(), settings.work / "up2"),
        }

    # .. starting

    def start_router(self) -> None:
        work = self.settings.work
        config = work / "router.toml"
        config.write_text(
            "[node]\n"
            f'listen = "127.0.0.1:{self.router_port}"\n'
            f'state_dir = "{work / "router-state"}"\n'
            "[catcher]\n"
            f'seeds = ["127.0.0.1:{self.servents["up2"].port}"]\n'
            "min_connections = 1\n"
            "[log]\n"
            'format = "json"\n'
            "[trace]\n"
            f'record = "{work / "router.trace"}"\n'
        )
        command = [
            str(ROOT / ".venv" / "bin" / "gnutella-router"),
            "run",
            "--config",
            str(config),
        ]
        log = (work / "router.log").open("wb")
        self.router = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()

    def start_servent(self, servent: Servent, share: Path) -> None:
        user = pwd.getpwnam(self.settings.user)
        share.mkdir(parents=True, exist_ok=True)
        os.chown(share, user.pw_uid, user.pw_gid)
        log = (self.settings.work / f"{servent.name}.wrapper.log").open("wb")
        servent.process = subprocess.Popen(
            [str(self.settings.wrapper), str(servent.port), str(servent.dir)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={
                **os.environ,
                "SHARE": str(share),
                "GTK_GNUTELLA_BINARY": str(self.settings.binary),
                "GTK_GNUTELLA_USER": self.settings.user,
                # The wrapper writes the servent's loopback-only configuration, a leaf's
                # or an ultrapeer's: one configuration, written in one place.
                "GTK_GNUTELLA_MODE": "leaf" if servent.role == "leaf" else "ultra",
            },
            start_new_session=True,
        )
        log.close()

    def start(self) -> None:
        """The servents first (they take seconds to start), then the router."""
        leaf_share = self.settings.work / "leaf-share"
        leaf_share.mkdir()
        (leaf_share / self.file_name).write_text(f"a file for the live check {self.word}\n")
        for name, servent in self.servents.items():
            share = leaf_share if name == "leaf" else self.settings.work / f"{name}-share"
            self.start_servent(servent, share)
        self.start_router()

    # .. stopping

    def stop(self) -> None:
        """Every process started, router first (its Bye is part of a clean goodbye)."""
        stop_process(self.router, "router", 15)
        for servent in self.servents.values():
            stop_process(servent.process, servent.name, 75)

    def alive(self) -> list[str]:
        """Names of the processes that have gone (they should not)."""
        gone = [] if self.router and self.router.poll() is None else ["router"]
        gone += [
            s.name for s in self.servents.values() if not s.process or s.process.poll() is not None
        ]
        return gone

    # .. talking to them

    def shell(self, name: str, *commands: str, timeout: float = 20) -> str:
        """gtk-gnutella's shell commands, as its user, in the node's folder."""
        folder = self.servents[name].dir
        result = subprocess.run(
            [
                "runuser",
                "-u",
                self.settings.user,
                "--",
                "env",
                "-i",
                f"HOME={folder}",
                "PATH=/usr/bin:/bin",
                "LANG=C",
                f"GTK_GNUTELLA_DIR={folder}",
                str(self.settings.binary),
                "--shell",
            ],
            input="".join(f"{c}\n" for c in commands).encode(),
            capture_output=True,
            timeout=timeout,
            check=False,
        )
        return result.stdout.decode("utf-8", "replace")

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.admin + path, timeout=10) as answer:
            return json.load(answer)


# --- reading what they say -------------------------------------------------------------


def parse_drop_stats(text: str) -> dict[str, int]:
    """``stats drop``'s counters (the test network's parser of them), the nonzero ones."""
    try:
        counters = drop_counters(text)
    except ValueError:
        return {}
    return {reason: count for reason, count in counters.items() if count}


_DROP_LINE = re.compile(r"DROP .* from (?P<peer>.*?): (?P<reason>[^:]+)$")


def drops_from_router(log: Path) -> dict[str, int]:
    """Reasons of the drops gtk-gnutella logged for messages that came from the router
    (``log_dropped_gnutella``: ``DROP <message> from <peer>: <reason>``)."""
    counts: dict[str, int] = {}
    if not log.exists():
        return counts
    for line in log.read_text("utf-8", "replace").splitlines():
        match = _DROP_LINE.search(line)
        if match and ROUTER_AGENT in match["peer"]:
            counts[match["reason"].strip()] = counts.get(match["reason"].strip(), 0) + 1
    return counts


def router_flags(nodes_text: str) -> list[str]:
    """The flags column of the router's lines in gtk-gnutella's ``nodes``."""
    return [
        line.split()[1]
        for line in nodes_text.splitlines()
        if ROUTER_AGENT in line and len(line.split()) > 2
    ]


def drop_total(stats: dict[str, Any], reason: str) -> int:
    dropped = stats["router"]["dropped"].get(reason, {})
    return sum(dropped.values()) if isinstance(dropped, dict) else int(dropped)


def router_peers(network: Network) -> dict[str, int]:
    """Which connection id each servent has at the router, by listening port."""
    ports = {s.port: name for name, s in network.servents.items()}
    found: dict[str, int] = {}
    for connection in network.get("/connections"):
        address = connection.get("listen_address") or ""
        port = int(address.rsplit(":", 1)[1]) if ":" in address else -1
        if port in ports:
            found[ports[port]] = connection["id"]
    return found
