"""Fig. 14's figures: latency against offered load (a, b), the router queue and pool over
time (c), and the pool and queue of each governor rule compared (d)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from scripts.benchdocs import save_figure
from scripts.fig14.runs import COMPARED


def plot_latency(results: list[dict[str, Any]], governor: bool, path: Path) -> Path:
    rows = sorted((r for r in results if r["governor"] == governor), key=lambda r: r["rate"])
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for kind, color in (("ping", "tab:blue"), ("query", "tab:orange")):
        rates = [r["rate"] for r in rows if r["steady"][kind]]
        means = [r["steady"][kind]["mean_ms"] for r in rows if r["steady"][kind]]
        p99s = [r["steady"][kind]["p99_ms"] for r in rows if r["steady"][kind]]
        axes.plot(rates, means, marker="o", color=color, label=f"{kind} mean")
        axes.plot(rates, p99s, marker="x", color=color, linestyle="--", label=f"{kind} p99")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xticks([r["rate"] for r in rows], [str(r["rate"]) for r in rows])
    axes.set_xlabel("offered load (messages/s)")
    axes.set_ylabel("latency, steady state (ms)")
    state = "with the thread governor" if governor else "one thread, governor off"
    axes.set_title(f"Fig. 14({'b' if governor else 'a'}): 20 ms per query, {state}")
    axes.grid(alpha=0.3, which="both")
    axes.legend()
    return save_figure(figure, path)


def plot_queue(profile: dict[str, Any], rate: int, path: Path, governor_on: bool = True) -> Path:
    samples = profile["samples"]
    times = [s["at"] for s in samples]
    figure, axes = plt.subplots(figsize=(8, 4.5))
    axes.plot(times, [s["queues"].get("router", 0) for s in samples], label="router queue")
    axes.set_xlabel("time (s)")
    axes.set_ylabel("router queue length (events)")
    pool_axes = axes.twinx()
    pool_axes.step(
        times, [s["pool_size"] for s in samples], where="post", color="tab:green", label="pool"
    )
    pool_axes.set_ylabel("router threads", color="tab:green")
    pool_axes.set_ylim(0, max(s["pool_size"] for s in samples) + 2)
    pool_axes.yaxis.set_major_locator(MaxNLocator(integer=True))  # threads come whole
    governor = profile.get("governor") or {"samples": []}
    for index, s in enumerate(g for g in governor["samples"] if g["action"] == "added"):
        axes.axvline(
            s["at"], color="tab:red", alpha=0.5, label="thread added" if index == 0 else None
        )
    lines = axes.get_legend_handles_labels()
    more = pool_axes.get_legend_handles_labels()
    axes.legend(lines[0] + more[0], lines[1] + more[1], loc="upper right")
    axes.set_title(
        f"Fig. 14(c): router queue at {rate} messages/s with the governor"
        if governor_on
        else f"Router queue at {rate} messages/s, governor off (one thread)"
    )
    axes.grid(alpha=0.3)
    return save_figure(figure, path)


def plot_rules(out: Path, rate: int, path: Path) -> Path | None:
    """Pool and router queue over time, first run of each governor rule."""
    profiles = {}
    for key, *_ in COMPARED[:2]:
        profile_path = out / f"profile-{key}-{rate}-r1.json"
        if profile_path.exists():
            profiles[key] = json.loads(profile_path.read_text())
    if not profiles:
        return None
    figure, (pool_axes, queue_axes) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for (key, profile), color in zip(profiles.items(), ("tab:green", "tab:purple"), strict=False):
        samples = profile["samples"]
        times = [s["at"] for s in samples]
        pool_axes.step(
            times, [s["pool_size"] for s in samples], where="post", color=color, label=key
        )
        queue_axes.plot(
            times, [s["queues"].get("router", 0) for s in samples], color=color, label=key
        )
    pool_axes.set_ylabel("router threads")
    pool_axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    pool_axes.set_ylim(0, None)
    pool_axes.axhline(3, color="grey", linestyle=":", label="paper: 3")
    pool_axes.legend(loc="lower right")
    pool_axes.grid(alpha=0.3)
    queue_axes.set_ylabel("router queue (events)")
    queue_axes.set_xlabel("time (s)")
    queue_axes.legend(loc="upper right")
    queue_axes.grid(alpha=0.3)
    pool_axes.set_title(f"The governor's rules at {rate} messages/s, 20 ms per query (first run)")
    return save_figure(figure, path)
