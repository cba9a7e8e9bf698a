"""What a trace holds: counts by type, rates over time, TTL and hops histograms, a plot.

:func:`summarize` makes one pass over any records (a file, a model's output) and keeps
only counters, so a trace of any length fits in memory: per type, per (time bucket,
type), per TTL and per hops value. Buckets are ``bucket`` seconds long and counted from
the trace's start (offset 0), as the SEDA proposal's Fig. 13 counts packets per
interval. :func:`format_summary` prints readable tables; :func:`plot_summary` draws a
PNG with matplotlib's Agg canvas (no display needed): packets per bucket over time by
type, plus the TTL and hops histograms. A trace with more buckets than fit a table or a
plot is shown in coarser buckets (a whole multiple of ``bucket``), and says so.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from protocol.constants import HEADER_SIZE, MessageType, message_type_name

from .trace import (
    TraceFormatError,
    TraceProblem,
    TraceRecord,
    read_header,
    read_trace,
    trace_files,
)

__all__ = [
    "PlotUnavailableError",
    "TraceSummary",
    "format_summary",
    "plot_summary",
    "summarize",
    "summarize_trace",
    "type_label",
]

ROUTED_TYPES: tuple[int, ...] = (
    MessageType.PONG,
    MessageType.PING,
    MessageType.QUERY,
    MessageType.QUERY_HIT,
    MessageType.PUSH,
)
"""The five types of the proposal's Fig. 13, in its legend's order; the rest is "other"."""
OTHER = -1
"""Column key for every type outside :data:`ROUTED_TYPES`."""
MAX_TABLE_ROWS = 40
MAX_PLOT_POINTS = 2000


class PlotUnavailableError(RuntimeError):
    """matplotlib is not installed."""


def type_label(message_type: int) -> str:
    if message_type == OTHER:
        return "other"
    return message_type_name(message_type).upper()


@dataclasses.dataclass(frozen=True, slots=True)
class TraceSummary:
    records: int
    bytes: int
    """Wire bytes: headers and payloads."""
    connections: int
    first: float | None
    """Earliest offset (seconds); None for an empty trace."""
    last: float | None
    """Latest offset."""
    counts: Mapping[int, int]
    """Messages per payload type."""
    bucket: float
    per_bucket: Mapping[int, Mapping[int, int]]
    """Bucket index (``floor(at / bucket)``) -> payload type -> messages."""
    ttl: Mapping[int, int]
    hops: Mapping[int, int]
    start_time: float | None = None
    """Unix time of offset 0, from the file header."""
    files: int = 1
    problems: tuple[str, ...] = ()

    @property
    def duration(self) -> float:
        """Seconds from the first record to the last."""
        if self.first is None or self.last is None:
            return 0.0
        return self.last - self.first

    def bucket_series(self, factor: int = 1) -> tuple[list[float], dict[int, list[int]]]:
        """Bucket start times and, per column (routed types, then :data:`OTHER` if any),
        messages per bucket of ``factor * bucket`` seconds, empty buckets included."""
        if not self.per_bucket:
            return [], {}
        low = min(self.per_bucket) // factor
        high = max(self.per_bucket) // factor
        size = high - low + 1
        columns = _columns(self.counts)
        series = {column: [0] * size for column in columns}
        for index, by_type in self.per_bucket.items():
            slot = index // factor - low
            for message_type, count in by_type.items():
                column = message_type if message_type in ROUTED_TYPES else OTHER
                series[column][slot] += count
        times = [(low + i) * factor * self.bucket for i in range(size)]
        return times, series


def _columns(counts: Mapping[int, int]) -> list[int]:
    columns = [t for t in ROUTED_TYPES if counts.get(t)]
    if any(t not in ROUTED_TYPES for t in counts):
        columns.append(OTHER)
    return columns


def summarize(
    records: Iterable[TraceRecord],
    *,
    bucket: float = 1.0,
    start_time: float | None = None,
    files: int = 1,
    problems: Iterable[str] = (),
) -> TraceSummary:
    """Count ``records`` (one pass, constant memory per distinct bucket and value)."""
    if not (math.isfinite(bucket) and bucket > 0):
        raise ValueError(f"bucket {bucket}: expected a positive number of seconds")
    counts: collections.Counter[int] = collections.Counter()
    per_bucket: dict[int, collections.Counter[int]] = {}
    ttl: collections.Counter[int] = collections.Counter()
    hops: collections.Counter[int] = collections.Counter()
    connections: set[int] = set()
    total = size = 0
    first: float | None = None
    last: float | None = None
    for record in records:
        at = record.at
        if first is None or last is None:
            first = last = at
        elif at < first:
            first = at
        elif at > last:
            last = at
        total += 1
        size += HEADER_SIZE + len(record.payload)
        counts[record.payload_type] += 1
        index = math.floor(record.at / bucket)
        by_type = per_bucket.get(index)
        if by_type is None:
            by_type = per_bucket[index] = collections.Counter()
        by_type[record.payload_type] += 1
        ttl[record.ttl] += 1
        hops[record.hops] += 1
        connections.add(record.connection)
    return TraceSummary(
        records=total,
        bytes=size,
        connections=len(connections),
        first=first,
        last=last,
        counts=dict(counts),
        bucket=bucket,
        per_bucket={index: dict(by_type) for index, by_type in per_bucket.items()},
        ttl=dict(ttl),
        hops=dict(hops),
        start_time=start_time,
        files=files,
        problems=tuple(problems),
    )


def summarize_trace(
    path: Path,
    *,
    bucket: float = 1.0,
    on_problem: Callable[[TraceProblem], None] | None = None,
) -> TraceSummary:
    """:func:`summarize` a trace file (or rotated set); skipped parts are listed in
    ``problems`` and also passed to ``on_problem``.

    Raises:
        TraceFormatError: not a trace.
        OSError: unreadable.
    """
    problems: list[str] = []

    def note(problem: TraceProblem) -> None:
        problems.append(str(problem))
        if on_problem is not None:
            on_problem(problem)

    files = trace_files(path)
    start_time = None
    for file in reversed(files):  # every file of a set has the trace's start time
        try:
            start_time = read_header(file).start_time
            break
        except TraceFormatError:
            continue  # a damaged or stray file: read_trace reports or refuses it
    summary = summarize(read_trace(path, on_problem=note), bucket=bucket, start_time=start_time)
    return dataclasses.replace(summary, files=len(files), problems=tuple(problems))


# ---------------------------------------------------------------------------------------
# Tables


def _coarsening(summary: TraceSummary, limit: int) -> int:
    """The smallest whole factor that brings the bucket count within ``limit``."""
    if not summary.per_bucket:
        return 1
    span = max(summary.per_bucket) - min(summary.per_bucket) + 1
    return max(1, math.ceil(span / limit))


def _table(header: list[str], rows: list[list[str]], *, left: tuple[int, ...] = (0,)) -> list[str]:
    """Aligned columns: those in ``left`` to the left, numbers to the right."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(
            cell.ljust(width) if i in left else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return lines


def _histogram(title: str, values: Mapping[int, int], total: int) -> list[str]:
    if not values:
        return []
    peak = max(values.values())
    rows = [
        [
            str(value),
            str(count),
            f"{100 * count / total:.1f}%",
            "#" * max(1, round(30 * count / peak)),
        ]
        for value, count in sorted(values.items())
    ]
    return [f"{title} histogram", *_table([title, "messages", "share", ""], rows, left=(0, 3))]


def format_summary(summary: TraceSummary, *, max_rows: int = MAX_TABLE_ROWS) -> str:
    """The summary as plain-text tables, for a terminal."""
    lines: list[str] = []
    if summary.start_time is not None:
        started = datetime.datetime.fromtimestamp(summary.start_time, datetime.UTC)
        files = f" in {summary.files} files" if summary.files > 1 else ""
        lines.append(f"trace started {started:%Y-%m-%d %H:%M:%S} UTC{files}")
    if not summary.records:
        lines.append("no messages")
        lines += [f"problem: {problem}" for problem in summary.problems]
        return "\n".join(lines)
    duration = summary.duration
    rate = f", {summary.records / duration:,.1f} msgs/s" if duration > 0 else ""
    lines.append(
        f"{summary.records} messages, {summary.bytes} bytes, {summary.connections} "
        f"connection{'s' * (summary.connections != 1)}, "
        f"{duration:.3f} s from the first to the last{rate}"
    )
    lines.append("")
    rows = [
        [
            type_label(message_type),
            str(count),
            f"{100 * count / summary.records:.1f}%",
            f"{count / duration:,.2f}" if duration > 0 else "-",
        ]
        for message_type, count in sorted(summary.counts.items(), key=lambda item: -item[1])
    ]
    total_rate = f"{summary.records / duration:,.2f}" if duration > 0 else "-"
    rows.append(["total", str(summary.records), "100.0%", total_rate])
    lines += _table(["type", "messages", "share", "msgs/s"], rows)

    factor = _coarsening(summary, max_rows)
    width = factor * summary.bucket
    times, series = summary.bucket_series(factor)
    columns = list(series)
    lines.append("")
    note = f" (coarsened from {summary.bucket:g} s to fit {max_rows} rows)" if factor > 1 else ""
    lines.append(f"rates per {width:g} s bucket, msgs/s{note}")
    rows = []
    for slot, start in enumerate(times):
        cells = [series[column][slot] for column in columns]
        rows.append(
            [f"{start:g}"]
            + [f"{count / width:,.1f}" for count in cells]
            + [f"{sum(cells) / width:,.1f}"]
        )
    lines += _table(["from s", *(type_label(c) for c in columns), "total"], rows)
    for title, values in (("TTL", summary.ttl), ("hops", summary.hops)):
        lines.append("")
        lines += _histogram(title, values, summary.records)
    if summary.problems:
        lines.append("")
        lines += [f"problem: {problem}" for problem in summary.problems]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# The plot


def plot_summary(summary: TraceSummary, path: Path, *, title: str | None = None) -> None:
    """Write a PNG: packets per bucket over time by type, and TTL and hops histograms.

    Raises:
        PlotUnavailableError: matplotlib is not installed.
        OSError: the file cannot be written.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise PlotUnavailableError(
            "drawing a plot needs matplotlib: pip install 'gnutella-router[plots]'"
        ) from exc

    figure = Figure(figsize=(10, 7.5), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    grid = figure.add_gridspec(2, 2, height_ratios=(3, 2))
    over_time = figure.add_subplot(grid[0, :])
    factor = _coarsening(summary, MAX_PLOT_POINTS)
    width = factor * summary.bucket
    times, series = summary.bucket_series(factor)
    for column, counts in series.items():
        over_time.plot(times, counts, label=_PLOT_LABELS.get(column, type_label(column)))
    over_time.set_xlabel(f"time since the trace's start (s), {width:g} s intervals")
    over_time.set_ylabel(f"packets per {width:g} s")
    over_time.set_title(title or f"{summary.records} packets by type")
    if series:
        over_time.legend(loc="upper right")
    over_time.set_ylim(bottom=0)
    for position, name, values in ((0, "TTL", summary.ttl), (1, "hops", summary.hops)):
        axes = figure.add_subplot(grid[1, position])
        keys = sorted(values)
        axes.bar(keys, [values[k] for k in keys], color="tab:gray")
        axes.set_xlabel(name)
        axes.set_ylabel("packets")
        axes.set_title(f"{name} histogram")
        if keys:
            axes.set_xticks(range(min(keys), max(keys) + 1))
    figure.savefig(Path(path), format="png")


_PLOT_LABELS = {
    MessageType.PONG: "Pongs",
    MessageType.PING: "Pings",
    MessageType.QUERY: "Queries",
    MessageType.QUERY_HIT: "Query hits",
    MessageType.PUSH: "Pushes",
    OTHER: "Other",
}
