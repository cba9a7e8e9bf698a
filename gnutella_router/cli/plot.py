"""``gnutella-router plot-profile``: a profiler export drawn as PNGs; ``gnutella-router
plot``: a test network run's pictures drawn again from its folder (both need the plots
extra)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gnutella_router.cli.arguments import DefaultsHelpFormatter


def add_plot_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    plot = commands.add_parser(
        "plot-profile",
        help="draw a profiler export (profile.json) as PNGs: queues, pool size, RSS",
        description="Draw queues.png, pool.png and rss.png from a profile.json written by "
        "`run --profile` (or fetched from the admin interface's /profile). Needs "
        "matplotlib: pip install 'gnutella-router[plots]'.",
        formatter_class=DefaultsHelpFormatter,
    )
    plot.add_argument("profile", type=Path, help="profiler export (profile.json)")
    plot.add_argument("--out", type=Path, default=Path("."), help="folder for the PNGs")
    plot.set_defaults(handler=cmd_plot_profile)
    run = commands.add_parser(
        "plot",
        help="draw a test network run's pictures again from its folder",
        description="Draw a testnet run's pictures again from what its folder holds "
        "(summary.json and the CSV files), into that folder: overlay.png, and reach.png, "
        "connectivity.png, latency.png and throughput.png where the run has their data. "
        "For a run made without matplotlib, or drawn by an older version. Needs "
        "matplotlib: pip install 'gnutella-router[plots]'.",
        formatter_class=DefaultsHelpFormatter,
    )
    run.add_argument(
        "run", metavar="RUN", help="a testnet run folder, or its name under the runs folder"
    )
    run.set_defaults(handler=cmd_plot_run)


def cmd_plot_profile(args: argparse.Namespace) -> int:
    from gnutella_router.observe.profile_plot import (
        PlotUnavailableError,
        load_profile,
        plot_profile,
    )

    try:
        profile = load_profile(args.profile)
        paths = plot_profile(profile, args.out)
    except (OSError, ValueError, PlotUnavailableError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        print(f"gnutella-router plot-profile: {reason}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0


def cmd_plot_run(args: argparse.Namespace) -> int:
    from gnutella_router.observe.profile_plot import PlotUnavailableError
    from gnutella_router.run_folder import SUMMARY, runs_root

    folder = next(
        (c for c in (Path(args.run), runs_root() / args.run) if (c / SUMMARY).is_file()), None
    )
    if folder is None:
        print(f"gnutella-router plot: {args.run}: no run folder with a {SUMMARY}", file=sys.stderr)
        return 1
    try:
        summary = json.loads((folder / SUMMARY).read_text())
    except (OSError, ValueError) as exc:
        print(f"gnutella-router plot: {folder / SUMMARY}: {exc}", file=sys.stderr)
        return 1
    if not isinstance(summary, dict) or "topology" not in summary or "nodes" not in summary:
        print(f"gnutella-router plot: {folder}: not a testnet run", file=sys.stderr)
        return 1
    from gnutella_router.lab.testnet.plots import draw_run

    try:
        paths = draw_run(folder, summary)
    except (OSError, PlotUnavailableError) as exc:
        print(f"gnutella-router plot: {exc}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0
