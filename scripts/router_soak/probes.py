"""What the soak reads of a running router from outside: its memory, descriptors
and CPU time from ``/proc``, and its links and counters from its admin interface. Apart
from the processes because it only reads, and is read by the samples and the figures.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from gnutella_router.observe.admin_client import FetchError, fetch
from scripts.router_soak.processes import ADMIN_TIMEOUT, LOOPBACK, Router


def proc_status(pid: int | str) -> dict[str, int]:
    """VmRSS and VmHWM in bytes (empty when the process is gone)."""
    out: dict[str, int] = {}
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":", 1)[0]] = int(line.split()[1]) * 1024
    return out


def open_fds(pid: int | str) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def cpu_seconds(pid: int | str) -> float | None:
    """User plus system CPU time of a process (all its threads), from /proc/PID/stat."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU seconds all cores have spent busy since boot, from /proc/stat."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def load_average() -> float:
    return os.getloadavg()[0]


# --------------------------------------------------------------------------- admin


def admin_get(router: Router, path: str) -> Any:
    """One admin GET; FetchError when the router does not answer."""
    return fetch(router.admin, path, timeout=ADMIN_TIMEOUT)


def outgoing_link_up(dialer: Router, listener: Router) -> bool:
    try:
        connections = admin_get(dialer, "/connections")
    except FetchError:
        return False
    wanted = f"{LOOPBACK}:{listener.port}"
    return any(
        c.get("role") == "outgoing" and not c.get("closing") and c.get("peer") == wanted
        for c in connections
    )


def connection_count(router: Router) -> int | None:
    try:
        stats = admin_get(router, "/stats")
    except FetchError:
        return None
    value = stats.get("server", {}).get("connections")
    return value if isinstance(value, int) else None


def counter_total(value: object) -> int:
    """Total of a counter mapping, nested mappings included."""
    if isinstance(value, dict):
        return sum(counter_total(v) for v in value.values())
    return value if isinstance(value, int) else 0


def counter_increase(after: object, before: object) -> Any:
    """Increase of (nested) integer counters; keys that did not move are left out."""
    if isinstance(after, dict):
        before_map = before if isinstance(before, dict) else {}
        out = {}
        for key, value in after.items():
            change = counter_increase(value, before_map.get(key, 0))
            if change:
                out[key] = change
        return out
    if isinstance(after, int):
        return after - (before if isinstance(before, int) else 0)
    return 0
