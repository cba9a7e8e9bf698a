"""The router process under test: its generated configuration, reading its log for
fatal lines and watching its resident set while it runs (the process itself is
:func:`scripts.runner.router_started`'s).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import trio

from gnutella_router.config.sections import NetworkConfig
from gnutella_router.observe.profiler import read_rss_bytes
from scripts.router_fuzz.report import mib
from scripts.router_fuzz.settings import (
    ATTEMPTS_PER_IP_PER_MINUTE,
    RSS_SAMPLE_SECONDS,
    TRUSTED_NETWORKS,
    Figures,
    Settings,
)
from scripts.runner import Router


def router_has_trusted_networks() -> bool:
    """Whether this router has ``network.trusted`` (addresses exempt from the attempt
    limit and from IP bans); older ones refuse the key."""
    return "trusted" in NetworkConfig.__struct_fields__


def router_config(settings: Settings, admin_port: int) -> str:
    trusted = ", ".join(f'"{network}"' for network in TRUSTED_NETWORKS)
    text = (
        "# Written by scripts/fuzz_router.py for one run.\n"
        "[network]\n"
        f"max_connections = {settings.max_connections}\n"
        f"connects_per_ip_per_minute = {ATTEMPTS_PER_IP_PER_MINUTE}\n"
        + (f"trusted = [{trusted}]\n" if router_has_trusted_networks() else "")
        + "\n[catcher]\n"
        "min_connections = 0   # never dial: fuzzed pongs and headers name arbitrary hosts\n"
        "\n[admin]\n"
        f'listen = "127.0.0.1:{admin_port}"\n'
        "\n[log]\n"
        'format = "json"\n'
        'level = "info"\n'
    )
    return text


FATAL_LOG_TEXT = ("Traceback", "connection task failed", "stage handler failed")


def scan_log(path: Path) -> dict[str, list[str]]:
    """Lines of the router's log that hold each of :data:`FATAL_LOG_TEXT`."""
    found: dict[str, list[str]] = {text: [] for text in FATAL_LOG_TEXT}
    with contextlib.suppress(OSError), path.open(errors="replace") as log:
        for line in log:
            for text in FATAL_LOG_TEXT:
                if text in line:
                    found[text].append(line.strip()[:2000])
    return found


def error_lines(path: Path) -> list[str]:
    """The router's error-level log lines: what it says when it dies ("cannot start",
    even mid-run) or cannot write a dump, a profile or a trace."""
    with contextlib.suppress(OSError), path.open(errors="replace") as log:
        return [line.strip() for line in log if '"level": "error"' in line]
    return []


class RssWatch:
    """Samples the router's resident set and whether it is alive."""

    def __init__(self, router: Router, settings: Settings, figures: Figures) -> None:
        self.router = router
        self.limit = settings.rss_limit_mb * 2**20
        self.figures = figures
        self.died = trio.Event()

    def sample(self) -> int:
        rss = read_rss_bytes(self.router.pid)
        figures = self.figures
        figures.rss_samples += 1
        figures.rss_peak_sampled = max(figures.rss_peak_sampled, rss)
        if rss > self.limit:
            figures.problem(
                f"the router's RSS reached {mib(rss)}, over the bound of {mib(self.limit)}"
            )
        return rss

    async def run(self) -> None:
        while True:
            status = self.router.process.poll()
            if status is not None:
                self.figures.problem(f"the router exited during the run with status {status}")
                self.died.set()
                return
            self.sample()
            await trio.sleep(RSS_SAMPLE_SECONDS)
