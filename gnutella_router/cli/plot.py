"""``gnutella-router plot-profile``: a profiler export drawn as PNGs (needs the plots extra)."""

from __future__ import annotations

import argparse
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
