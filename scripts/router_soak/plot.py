"""The soak's figure: RSS, descriptors and load over time for each router. Apart
because it alone needs matplotlib (the ``plots`` extra), which it imports only when
called.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any


def plot(result: dict[str, Any], path: Path) -> Path:
    """RSS, open FDs and the load over time, with the two judged windows shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = [s for s in result["samples"] if s["phase"] == "load"]
    minutes = [s["at"] / 60 for s in samples]
    figure, (rss_axes, fd_axes, load_axes) = plt.subplots(
        3, 1, figsize=(9, 9), sharex=True, gridspec_kw={"height_ratios": [3, 2, 2]}
    )
    for index, router in enumerate(result["routers"]):
        rss = [
            (m, s["routers"][index]["rss"] / 2**20)
            for m, s in zip(minutes, samples, strict=True)
            if s["routers"][index]["rss"]
        ]
        fds = [
            (m, s["routers"][index]["fds"])
            for m, s in zip(minutes, samples, strict=True)
            if s["routers"][index]["fds"] is not None
        ]
        rss_axes.plot([m for m, _ in rss], [v for _, v in rss], label=router["name"])
        line = fd_axes.step(
            [m for m, _ in fds],
            [v for _, v in fds],
            where="post",
            label=router["name"],
            linestyle=("-", "--", ":")[index % 3],
        )[0]
        # Before the load client came and after it left: the router's own descriptors.
        for phase, marker in (("before", "o"), ("after", "s")):
            for s in result["samples"]:
                if s["phase"] == phase and s["routers"][index]["fds"] is not None:
                    fd_axes.plot(
                        s["at"] / 60, s["routers"][index]["fds"], marker=marker,
                        color=line.get_color(), linestyle="none",
                    )  # fmt: skip
    client = [
        (m, s["client_rss"] / 2**20)
        for m, s in zip(minutes, samples, strict=True)
        if s["client_rss"]
    ]
    rss_axes.plot(
        [m for m, _ in client], [v for _, v in client], color="grey", linestyle="--",
        label="load client",
    )  # fmt: skip
    ref, window, end = result["reference_seconds"], result["window_seconds"], result["end_seconds"]
    for axes in (rss_axes, fd_axes, load_axes):
        for start in (ref - window, end - window):
            axes.axvspan(start / 60, (start + window) / 60, color="tab:green", alpha=0.1)
        axes.grid(alpha=0.3)
    rss_axes.set_ylabel("RSS (MiB)")
    rss_axes.set_ylim(bottom=0)
    rss_axes.legend(loc="lower right", ncol=4)
    rss_axes.set_title(
        f"Soak {result['date'][:10]}: 3 routers, {result['settings']['rate']:,.0f} msgs/s, "
        f"verdict {result['verdict']} (shaded: the windows compared)"
    )
    fd_axes.set_ylabel("open FDs")
    fd_axes.set_title(
        "open FDs; circles: before the load client came, squares: after it left", fontsize=9
    )
    fd_axes.set_ylim(bottom=0, top=max(
        (s["routers"][i]["fds"] or 0 for s in samples for i in range(len(result["routers"]))),
        default=1,
    ) * 1.3 + 1)  # fmt: skip
    fd_axes.legend(loc="lower right", ncol=3)
    rates = [
        (b["at"] / 60, (b["sent"] - a["sent"]) / (b["at"] - a["at"]))
        for a, b in itertools.pairwise(samples)
        if b["at"] > a["at"]
    ]
    load_axes.plot([m for m, _ in rates], [r for _, r in rates], color="tab:blue")
    load_axes.set_ylabel("sent msgs/s", color="tab:blue")
    load_axes.set_ylim(bottom=0)
    average = load_axes.twinx()
    average.plot(minutes, [s["load_average"] for s in samples], color="tab:red", alpha=0.7)
    average.set_ylabel("1-min load average", color="tab:red")
    average.set_ylim(bottom=0)
    load_axes.set_xlabel("minutes since the first message")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path
