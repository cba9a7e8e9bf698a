"""``gnutella-router runs``: the kept runs, listed, and two compared side by side.

    gnutella-router runs                       every run under the runs folder
    gnutella-router runs compare A B           their summary figures side by side
    gnutella-router runs compare A B --all     every number in their summaries

A run is a folder made by :mod:`gnutella_router.run_folder` (its ``manifest.json``
says what ran, where and when; ``summary.json`` holds its figures). A and B are folder
paths, or names of folders under the runs folder. The figures compared by default are
the ones a reader looks at first for that kind of run (rates, late sends, losses,
latency percentiles, reach, duplicates, success); ``--all`` flattens every number in
the two summaries instead.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from gnutella_router.run_folder import MANIFEST, RUNS_ENVIRONMENT, SUMMARY, runs_root

Figure = float | int | str

_LOAD_COUNTS = ("offered_rate", "achieved_rate", "late", "late_share", "early")
_LATENCY_POINTS = ("p50", "p99")
_REPLAY_COUNTS = ("sent", "late", "dropped", "skipped", "duration", "untimed")


def add_runs_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    runs = commands.add_parser(
        "runs",
        help="list the kept runs (testnet, load, replay, experiments) and compare two",
        description="List the runs kept under the runs folder, or compare two runs' "
        "summary figures side by side. A run is a folder with a manifest.json (what "
        "ran, where, when) and a summary.json (its figures).",
    )
    runs.add_argument(
        "--root",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"the runs folder (default: ${RUNS_ENVIRONMENT}, else .gnutella-router/runs)",
    )
    actions = runs.add_subparsers(dest="action")
    actions.add_parser("list", help="list the runs, oldest first (what `runs` alone does)")
    compare = actions.add_parser("compare", help="two runs' figures side by side")
    compare.add_argument("first", metavar="A", help="a run folder, or its name under the root")
    compare.add_argument("second", metavar="B", help="the run to set beside A")
    compare.add_argument(
        "--all", action="store_true", help="every number in both summaries, not the headline"
    )
    runs.set_defaults(handler=cmd_runs)


def cmd_runs(args: argparse.Namespace) -> int:
    root = args.root if args.root is not None else runs_root()
    if args.action == "compare":
        try:
            first, second = (_resolve(text, root) for text in (args.first, args.second))
            print(compare_text(first, second, everything=args.all))
        except RunReadError as exc:
            print(f"gnutella-router runs: {exc}", file=sys.stderr)
            return 1
        return 0
    print(list_text(root))
    return 0


class RunReadError(Exception):
    """A run folder that cannot be read (a sentence for the user)."""


def _resolve(text: str, root: Path) -> Path:
    for candidate in (Path(text), root / text):
        if candidate.is_dir():
            return candidate
    raise RunReadError(f"{text}: no such run folder (here or under {root})")


def read_run(folder: Path) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A run's manifest (empty if it has none) and summary (None if it has none).

    Raises:
        RunReadError: a file is there but is not JSON.
    """
    manifest = _read_json(folder / MANIFEST) or {}
    return manifest, _read_json(folder / SUMMARY)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RunReadError(f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise RunReadError(f"{path}: not a JSON object")
    return data


# --------------------------------------------------------------------------- listing


def list_text(root: Path) -> str:
    """A line per run under ``root``, oldest first."""
    if not root.is_dir():
        return f"no runs yet under {root}"
    rows = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        try:
            manifest, summary = read_run(folder)
        except RunReadError as exc:
            rows.append((folder.name, "?", "unreadable", "", "", str(exc)))
            continue
        if not manifest and summary is None:
            continue
        rows.append(
            (
                folder.name,
                str(manifest.get("kind", "?")),
                str(manifest.get("status", "no manifest")),
                str(manifest.get("started", "")),
                _seconds(manifest.get("seconds")),
                _commit(manifest),
            )
        )
    if not rows:
        return f"no runs yet under {root}"
    header = ("run", "kind", "status", "started", "seconds", "commit")
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]
    lines = ["  ".join(f"{cell:<{w}}" for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in (header, *rows)]  # fmt: skip
    return "\n".join([*lines, f"({len(rows)} runs under {root})"])


def _seconds(value: object) -> str:
    return f"{value:.1f}" if isinstance(value, int | float) else ""


def _commit(manifest: Mapping[str, Any]) -> str:
    source = manifest.get("source")
    commit = source.get("commit") if isinstance(source, dict) else None
    if not isinstance(commit, str):
        return ""
    return commit[:10] + (" (changed)" if _mapping(source).get("changed") else "")


# --------------------------------------------------------------------------- comparing


def compare_text(first: Path, second: Path, *, everything: bool = False) -> str:
    """Two runs' manifests and figures side by side, with B / A for numbers."""
    runs = [read_run(first), read_run(second)]
    lines = []
    for label, folder, (manifest, _) in zip("AB", (first, second), runs, strict=True):
        load = (manifest.get("machine") or {}).get("load_average")
        lines.append(
            f"{label}: {folder} ({manifest.get('kind', '?')}, {manifest.get('status', '?')}, "
            f"started {manifest.get('started', '?')}, commit {_commit(manifest) or '?'}, "
            f"version {manifest.get('version', '?')}, load average {load or '?'})"
        )
        if manifest.get("command"):
            lines.append(f"   {manifest['command']}")
    figures = [
        _figures(manifest.get("kind", ""), summary or {}, everything) for manifest, summary in runs
    ]
    if not any(figures):
        return "\n".join([*lines, "no figures: neither run has a summary.json"])
    names = list(figures[0]) + [n for n in figures[1] if n not in figures[0]]
    width = max(len("figure"), *(len(n) for n in names))
    lines.append("")
    lines.append(f"{'figure':<{width}}  {'A':>14}  {'B':>14}  {'B/A':>7}")
    for name in names:
        a, b = figures[0].get(name), figures[1].get(name)
        lines.append(f"{name:<{width}}  {_show(a):>14}  {_show(b):>14}  {_ratio(a, b):>7}")
    return "\n".join(lines)


def _show(value: Figure | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return value[:14]


def _ratio(a: Figure | None, b: Figure | None) -> str:
    if not isinstance(a, int | float) or not isinstance(b, int | float) or not a:
        return ""
    ratio = b / a
    return f"{ratio:.2f}x" if math.isfinite(ratio) else ""


def _figures(kind: str, summary: Mapping[str, Any], everything: bool) -> dict[str, Figure]:
    """The figures of one summary: the headline ones for its kind, or all numbers."""
    if everything or kind not in ("testnet", "load", "replay"):
        return dict(_flatten(summary))
    out: dict[str, Figure] = {}
    if kind == "load":
        out.update(_load_figures(summary))
    elif kind == "replay":
        out.update(_replay_figures(summary))
    else:
        out.update(_testnet_figures(summary))
    return out


def _load_figures(report: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Figure]]:
    sent = report.get("sent")
    if isinstance(sent, dict):
        yield f"{prefix}sent", sum(v for v in sent.values() if isinstance(v, int))
    for name in _LOAD_COUNTS:
        value = report.get(name)
        if isinstance(value, int | float):
            yield f"{prefix}{name}", value
    for name, share in sorted(_mapping(report.get("loss")).items()):
        yield f"{prefix}not arrived {name}", share
    yield from _latency_figures(report.get("latency"), prefix)


def _latency_figures(latency: object, prefix: str) -> Iterator[tuple[str, Figure]]:
    for kind, by_type in sorted(_mapping(latency).items()):
        for name, summary in sorted(_mapping(by_type).items()):
            for point in _LATENCY_POINTS:
                value = _mapping(summary).get(point)
                if isinstance(value, int | float):
                    yield f"{prefix}{kind} {name} {point} (us)", value


def _replay_figures(summary: Mapping[str, Any]) -> Iterator[tuple[str, Figure]]:
    for name in _REPLAY_COUNTS:
        value = summary.get(name)
        if isinstance(value, int | float):
            yield name, value
    for name, count in sorted(_mapping(summary.get("copies")).items()):
        yield f"copies {name}", count
    yield from _latency_figures(summary.get("latency"), "")


def _testnet_figures(summary: Mapping[str, Any]) -> Iterator[tuple[str, Figure]]:
    settings = _mapping(summary.get("settings"))
    for name in ("nodes", "rate", "duration"):
        if isinstance(settings.get(name), int | float):
            yield name, settings[name]
    if isinstance(summary.get("formed_after_seconds"), int | float):
        yield "formed after (s)", summary["formed_after_seconds"]
    overlay = _mapping(summary.get("overlay"))
    reach = _mapping(overlay.get("reach"))
    if isinstance(reach.get("median"), int | float):
        yield "reach median (nodes)", reach["median"]
    for name in ("duplicates_per_query", "success_rate", "hits_per_query"):
        if isinstance(overlay.get(name), int | float):
            yield name.replace("_", " "), overlay[name]
    leaves = _mapping(summary.get("leaves"))
    if isinstance(leaves.get("success_rate"), int | float):
        yield "leaf success rate", leaves["success_rate"]
    load = summary.get("load")
    if isinstance(load, dict):
        yield from _load_figures(load, "load: ")


def _flatten(value: object, path: str = "") -> Iterator[tuple[str, Figure]]:
    """Every number (and short text) in ``value``, by its dotted path."""
    if isinstance(value, Mapping):
        for key in sorted(value, key=str):
            yield from _flatten(value[key], f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _flatten(item, f"{path}[{index}]")
    elif isinstance(value, bool):
        yield path, str(value).lower()
    elif isinstance(value, int | float):
        yield path, value


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
