"""Draw a profiler export (``profile.json``) as PNGs: queues, pool size and RSS over time.

    gnutella-router plot-profile STATE_DIR/profile.json --out DIR

Writes ``queues.png`` (every stage's queue length and the outgoing queues' total
messages), ``pool.png`` (the router's pool size and busy workers, with the governor's
additions and removals marked) and ``rss.png`` (resident set size, MiB). Headless
(matplotlib's Agg backend), so it runs on a server or in CI. matplotlib is the
``plots`` extra (``pip install 'gnutella-router[plots]'``), imported only here and only
when drawing, so a router installed without it runs all the same.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class PlotUnavailableError(RuntimeError):
    """matplotlib is not installed."""


def pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailableError(
            "drawing needs matplotlib: pip install 'gnutella-router[plots]'"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_profile(profile: dict[str, Any], out: Path) -> list[Path]:
    """All three figures of ``profile`` into the folder ``out``."""
    return [
        plot_queues(profile, out / "queues.png"),
        plot_pool(profile, out / "pool.png"),
        plot_rss(profile, out / "rss.png"),
    ]


def load_profile(path: Path) -> dict[str, Any]:
    """Read a profiler export; ValueError when it is not one, OSError when unreadable."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict) or "samples" not in data:
        raise ValueError(f"{path}: not a profiler export (no samples)")
    return data


def governor_marks(profile: dict[str, Any], action: str) -> list[float]:
    governor = profile.get("governor") or {}
    return [s["at"] for s in governor.get("samples", []) if s["action"] == action]


def plot_queues(profile: dict[str, Any], path: Path, title: str = "") -> Path:
    plt = pyplot()
    samples = profile["samples"]
    times = [s["at"] for s in samples]
    stages = sorted({name for s in samples for name in s["queues"]})
    figure, axes = plt.subplots(figsize=(8, 4))
    for name in stages:
        axes.plot(times, [s["queues"].get(name, 0) for s in samples], label=f"{name} queue")
    axes.plot(
        times,
        [s["outgoing_messages"] for s in samples],
        label="outgoing queues (all peers)",
        linestyle=":",
    )
    for at in governor_marks(profile, "added"):
        axes.axvline(at, color="tab:red", alpha=0.4, linewidth=1)
    axes.set_xlabel("time (s)")
    axes.set_ylabel("events waiting")
    axes.set_title(title or "Queue lengths (red lines: governor added a thread)")
    axes.legend(loc="upper right")
    axes.grid(alpha=0.3)
    return _save(figure, path)


def plot_pool(profile: dict[str, Any], path: Path, title: str = "") -> Path:
    plt = pyplot()
    samples = profile["samples"]
    times = [s["at"] for s in samples]
    figure, axes = plt.subplots(figsize=(8, 4))
    axes.step(times, [s["pool_size"] for s in samples], where="post", label="pool size")
    axes.plot(
        times, [s["blocking"] for s in samples], alpha=0.5, label="workers in the query delay"
    )
    for action, marker, color in (("added", "^", "tab:red"), ("removed", "v", "tab:green")):
        marks = governor_marks(profile, action)
        if marks:
            pools = [
                s["pool_size"]
                for s in (profile.get("governor") or {}).get("samples", [])
                if s["action"] == action
            ]
            axes.scatter(marks, pools, marker=marker, color=color, zorder=3, label=action)
    axes.set_xlabel("time (s)")
    axes.set_ylabel("threads")
    axes.set_title(title or "Router pool size")
    axes.legend(loc="upper right")
    axes.grid(alpha=0.3)
    return _save(figure, path)


def plot_rss(profile: dict[str, Any], path: Path, title: str = "") -> Path:
    plt = pyplot()
    samples = profile["samples"]
    figure, axes = plt.subplots(figsize=(8, 4))
    axes.plot([s["at"] for s in samples], [s["rss_bytes"] / 2**20 for s in samples])
    axes.set_xlabel("time (s)")
    axes.set_ylabel("resident set (MiB)")
    axes.set_ylim(bottom=0)
    axes.set_title(title or "Router memory (VmRSS)")
    axes.grid(alpha=0.3)
    return _save(figure, path)


def _save(figure: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot().close(figure)
    return path
