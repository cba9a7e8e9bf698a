"""Latency bookkeeping for the load client: stamped GUIDs and HDR histograms.

Theory of operation
-------------------
A message the load client sends carries its *scheduled* send time in its GUID: bytes
0-7 hold ``perf_counter_ns`` big-endian, byte 8 is 0xFF (the modern-servent mark),
bytes 9-10 identify the run, bytes 11-14 count messages, byte 15 is 0. Wherever a copy
of it arrives (a broadcast at a sink, or a reply routed back, which keeps the request's
GUID), its latency is the arrival time minus that stamp. No table of outstanding
messages is needed, however high the rate.

The stamp is the *later* of the scheduled time and the moment the message is handed to
the socket. Measuring from the scheduled time is what keeps the figures honest under
overload (the "coordinated omission" problem): when the sender falls behind because the
target stopped reading, the delay is charged to the latency of every message that
waited, instead of quietly disappearing from the record. Measuring from the moment of
sending, for a message that goes out *before* its scheduled time, is what keeps them
honest at light load: the sender's timer wakes in whole milliseconds, so it sends what
is due within the next millisecond at once, and a stamp in the future would subtract
up to a millisecond from every such message (which is how a one-hop ping through a
Python router once read 1 microsecond).

A latency below zero can then only be an error of the instrument (a clock that went
backwards, a GUID that is not really ours): such samples are counted, reported and
kept out of the histograms, never clamped into them. Latencies above
``HIGHEST_TRACKABLE_US`` are recorded at that ceiling and counted too.

Histograms are HDR (hdrhistogram), in microseconds, one per message type and direction.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from collections.abc import Iterator, Mapping
from typing import Any

from hdrh.histogram import HdrHistogram

from protocol.constants import message_type_name

_STAMP = struct.Struct(">QBHIB")  # time ns, 0xFF, run, counter, 0
_SUB_BUCKET_BITS = 11
_SUB_BUCKETS = 1 << _SUB_BUCKET_BITS
"""An HDR histogram with 3 significant digits resolves 2,048 steps per power of two."""
HIGHEST_TRACKABLE_US = 60_000_000
BEHIND_SHARE = 0.05
"""A load run whose sends were late more often than this says that it fell behind: its
offered load was then set by the machine (or the target), not by its schedule."""
"""Latencies above a minute are clamped: they mean the run is meaningless anyway."""


def stamp_guid(scheduled_ns: int, run: int, counter: int) -> bytes:
    """A GUID that says when its message was due and which run sent it."""
    return _STAMP.pack(
        scheduled_ns & 0xFFFF_FFFF_FFFF_FFFF, 0xFF, run & 0xFFFF, counter & 0xFFFF_FFFF, 0
    )


def run_marker(run: int) -> bytes:
    """Bytes 8-10 of every GUID run ``run`` stamps: the modern mark and the run id."""
    return b"\xff" + (run & 0xFFFF).to_bytes(2, "big")


def stamp_counter(guid: bytes) -> int:
    """The message's number within its run (read from a GUID :func:`read_stamp` took)."""
    return int.from_bytes(guid[11:15], "big")


def read_stamp(guid: bytes, run: int, marker: bytes | None = None) -> int | None:
    """The scheduled time stamped into ``guid`` by run ``run``, or None if it is not ours.

    Called for every frame a load client receives: pass ``run_marker(run)`` as
    ``marker`` to skip recomputing it.
    """
    if len(guid) != 16 or guid[15] != 0 or guid[8:11] != (marker or run_marker(run)):
        return None
    return int.from_bytes(guid[:8], "big")


@dataclasses.dataclass(frozen=True, slots=True)
class LatencySummary:
    """Percentiles of one histogram, in microseconds."""

    count: int
    min: int
    p50: int
    p90: int
    p99: int
    p999: int
    max: int
    mean: float

    @classmethod
    def of(cls, histogram: HdrHistogram) -> LatencySummary:
        return cls(
            count=int(histogram.get_total_count()),
            min=int(histogram.get_min_value()),
            p50=int(histogram.get_value_at_percentile(50.0)),
            p90=int(histogram.get_value_at_percentile(90.0)),
            p99=int(histogram.get_value_at_percentile(99.0)),
            p999=int(histogram.get_value_at_percentile(99.9)),
            max=int(histogram.get_max_value()),
            mean=float(histogram.get_mean_value()),
        )


class LatencyBook:
    """Histograms by (kind, message type): "one-hop" copies at sinks, "round-trip" replies.

    A load client records tens of thousands of latencies a second, and a histogram
    insertion costs over a microsecond in Python. Values are therefore first counted in
    a plain dict (exact microseconds, a fraction of the cost) and handed to the HDR
    histogram with their counts when it is read or the dict grows large: the same
    histogram, for much less work on the receiving path.
    """

    FLUSH_AT = 20_000
    """Distinct pending values that trigger a flush, bounding the dict's size."""

    def __init__(self) -> None:
        self._histograms: dict[tuple[str, int], HdrHistogram] = {}
        self._pending: dict[tuple[str, int], dict[int, int]] = {}
        self.clamped = 0
        """Samples above ``HIGHEST_TRACKABLE_US``, recorded at that ceiling."""
        self.negative = 0
        """Samples below zero: errors of the instrument, not recorded."""

    def record(self, kind: str, message_type: int, latency_ns: int) -> None:
        if latency_ns < 0:
            self.negative += 1
            return
        micros = latency_ns // 1000
        if micros < 1:
            micros = 1  # the histogram's floor: 0-999 ns reads as 1 us
        elif micros > HIGHEST_TRACKABLE_US:
            micros = HIGHEST_TRACKABLE_US
            self.clamped += 1
        if micros >= _SUB_BUCKETS:
            # Fold to the lowest value of its HDR sub-bucket, as the histogram itself
            # would: the same histogram, with a few thousand distinct keys at most.
            shift = micros.bit_length() - _SUB_BUCKET_BITS
            micros = (micros >> shift) << shift
        key = (kind, message_type)
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = {}
        pending[micros] = pending.get(micros, 0) + 1
        if len(pending) >= self.FLUSH_AT:
            self._flush(key)

    def _flush(self, key: tuple[str, int]) -> HdrHistogram:
        histogram = self._histograms.get(key)
        if histogram is None:
            histogram = self._histograms[key] = HdrHistogram(1, HIGHEST_TRACKABLE_US, 3)
        pending = self._pending.pop(key, None)
        if pending:
            for micros, count in pending.items():
                histogram.record_value(micros, count)
        return histogram

    def _all(self) -> dict[tuple[str, int], HdrHistogram]:
        for key in list(self._pending):
            self._flush(key)
        return self._histograms

    def summaries(self) -> dict[str, dict[str, LatencySummary]]:
        """kind -> type name -> summary; copies by their hops first (``one-hop``,
        ``two-hop``...), then replies."""
        out: dict[str, dict[str, LatencySummary]] = {}
        ordered = sorted(self._all().items(), key=lambda item: (_kind_order(item[0][0]), item[0]))
        for (kind, message_type), histogram in ordered:
            out.setdefault(kind, {})[message_type_name(message_type)] = LatencySummary.of(histogram)
        return out

    def recorded(self) -> Iterator[tuple[str, str, int, int]]:
        """Every histogram's recorded values, ordered as :meth:`summaries`: ``(kind,
        type name, microseconds, count)``, each value the highest its HDR bucket holds
        (as the percentiles read). A few thousand rows per histogram at most: the
        whole distribution, for a CDF, in bounded room."""
        ordered = sorted(self._all().items(), key=lambda item: (_kind_order(item[0][0]), item[0]))
        for (kind, message_type), histogram in ordered:
            name = message_type_name(message_type)
            for step in histogram.get_recorded_iterator():
                value, count = step.value_iterated_to, step.count_added_in_this_iter_step
                yield kind, name, int(value), int(count)

    def percentile_us(self, kind: str, message_type: int, percentile: float) -> int | None:
        key = (kind, message_type)
        if key not in self._pending and key not in self._histograms:
            return None
        histogram = self._flush(key)
        if not histogram.get_total_count():
            return None
        return int(histogram.get_value_at_percentile(percentile))


REPLY_KINDS = frozenset({"round-trip", "target-reply"})
"""Latency kinds of replies at the injectors; every other kind is a copy at a sink."""


class LatencyWindow:
    """The latencies of the copies recorded since the window was last taken: a time
    series' per-interval distribution beside the run's whole one.

    Values are kept as :class:`LatencyBook` keeps its pending ones (whole microseconds,
    folded to the lowest value of their HDR sub-bucket), so a window holds a few
    thousand distinct values at most, however many copies arrive in it.
    """

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}

    def record(self, latency_ns: int) -> None:
        """One latency; a negative one (an instrument error, which the book counts) is
        left out."""
        if latency_ns < 0:
            return
        micros = min(max(latency_ns // 1000, 1), HIGHEST_TRACKABLE_US)
        if micros >= _SUB_BUCKETS:
            shift = micros.bit_length() - _SUB_BUCKET_BITS
            micros = (micros >> shift) << shift
        self._counts[micros] = self._counts.get(micros, 0) + 1

    def take(self) -> dict[int, int]:
        """Microseconds -> copies since the last take; the window starts empty again."""
        counts, self._counts = self._counts, {}
        return counts


def window_summary(
    counts: Mapping[int, int], percentiles: tuple[float, ...] = (50.0, 90.0, 99.0)
) -> tuple[int, list[int], int] | None:
    """``(samples, [value at each percentile], max)`` in microseconds, read through an
    HDR histogram as the run's own percentiles are; None for an empty window."""
    if not counts:
        return None
    histogram = HdrHistogram(1, HIGHEST_TRACKABLE_US, 3)
    for micros, count in counts.items():
        histogram.record_value(micros, count)
    return (
        int(histogram.get_total_count()),
        [int(histogram.get_value_at_percentile(p)) for p in percentiles],
        int(histogram.get_max_value()),
    )


class WindowedLatencyBook(LatencyBook):
    """A latency book that also puts every copy at a sink (not the replies) into
    :attr:`window`, for a caller that takes it once an interval."""

    def __init__(self) -> None:
        super().__init__()
        self.window = LatencyWindow()

    def record(self, kind: str, message_type: int, latency_ns: int) -> None:
        super().record(kind, message_type, latency_ns)
        if kind not in REPLY_KINDS:
            self.window.record(latency_ns)


@dataclasses.dataclass(frozen=True, slots=True)
class RouterCounts:
    """The router's own counters over a load run (read from its admin interface), set
    beside the client's, so that a loss can be told apart from a drop or a copy in
    flight. The router counts every peer it has: on a router with other peers than the
    load client's, its figures include theirs."""

    admin: str
    """Where the counters were read."""
    note: str | None = None
    """Why there are no counters, when there are none."""
    received: dict[str, int] = dataclasses.field(default_factory=dict)
    """Messages the router read during the run, by type."""
    forwarded: dict[str, int] = dataclasses.field(default_factory=dict)
    """Copies it queued for its peers, by type: broadcasts it passed on, and replies it
    routed back one hop (not its own pongs, which are ``generated``)."""
    dropped: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    """What it dropped, by reason and type."""
    copies_at_our_peers: dict[str, int] = dataclasses.field(default_factory=dict)
    """What of ``forwarded`` reached the client's peers, by type: every copy of our
    broadcasts at a sink or another injector (repeats included, since the router
    counts each copy it queues), and every reply it routed back to an injector (hops 1
    or more; its own pongs, hops 0, are left out as they are out of ``forwarded``)."""
    generated: dict[str, int] = dataclasses.field(default_factory=dict)
    """Messages of its own (its pongs answering pings, its keep-alive pings), by type."""

    def lines(self, sent: Mapping[str, int]) -> list[str]:
        if self.note is not None:
            return [f"router counters ({self.admin}): not available: {self.note}"]
        out = [f"router counters ({self.admin}), during the run:"]
        for name in sorted(sent):
            got = self.received.get(name, 0)
            # What a shedding policy refused at the door was read, but never routed.
            shed = sum(
                by_type.get(name, 0)
                for reason, by_type in self.dropped.items()
                if reason.startswith("shed-")
            )
            unread = sent[name] - got - shed
            out.append(
                f"  {name}: sent {sent[name]:,}, the router routed {got:,}"
                + (f" and shed {shed:,} at its door" if shed else "")
                + (f" ({unread:,} not read when the client stopped)" if unread > 0 else "")
            )
        if self.dropped:
            for reason, by_type in sorted(self.dropped.items()):
                out.append(f"  dropped by the router, {reason}: {_counts(by_type)}")
        else:
            out.append("  dropped by the router: none")
        for name in sorted(set(self.forwarded) | set(self.copies_at_our_peers)):
            forwarded = self.forwarded.get(name, 0)
            arrived = self.copies_at_our_peers.get(name, 0)
            line = f"  {name}: the router forwarded {forwarded:,}, our peers received {arrived:,}"
            if forwarded > arrived:
                line += (
                    f" ({forwarded - arrived:,} not at our peers when the client stopped: "
                    "still in flight, or sent to peers of the router other than ours)"
                )
            elif arrived > forwarded:
                line += f" ({arrived - forwarded:,} more than it counted: from another sender)"
            out.append(line)
        if self.generated:
            out.append(f"  the router's own messages (not forwarded): {_counts(self.generated)}")
        return out


@dataclasses.dataclass(frozen=True, slots=True)
class LoadReport:
    """Everything a load run measured; what the JSON output holds."""

    target: str
    duration: float
    peers: int
    injectors: int
    sinks: int
    offered_rate: float
    """Messages per second the schedule asked for."""
    sent: dict[str, int]
    """Messages sent, by type."""
    late: int
    """Messages sent more than ``late_threshold_ms`` after their scheduled time."""
    late_threshold_ms: float
    early: int
    """Messages written before their scheduled time (the sender's timer slack); their
    latency is measured from the moment they were written, never from the future."""
    achieved_rate: float
    """Messages per second actually written."""
    received: dict[str, int]
    """Copies of our broadcasts that reached sinks, by type."""
    expected: dict[str, int]
    """Copies that should have reached sinks (each sink once per broadcast with TTL >= 2)."""
    replies: dict[str, int]
    """Replies (pongs, query hits) to our messages that came back to the injectors."""
    latency: dict[str, dict[str, LatencySummary]]
    disconnected: list[str]
    """Peers the target closed during the run, with the reason when it said one."""
    negative_samples: int = 0
    """Latency samples below zero: errors of the instrument, left out of the histograms.
    Anything but 0 means the figures above cannot be trusted."""
    clamped_samples: int = 0
    """Latency samples above a minute, recorded at that ceiling."""
    interrupted: bool = False
    """The run was stopped early (Ctrl-C): every figure covers only what was measured."""
    router: RouterCounts | None = None
    """The router's own counters for the run, when its admin interface was given."""
    duplicates: dict[str, int] = dataclasses.field(default_factory=dict)
    """Copies a sink got again (the network relayed one of our broadcasts to it twice,
    as routers do with a copy that comes back with a higher TTL): counted here, not as
    arrivals, and not timed."""

    @property
    def late_share(self) -> float:
        """The share of sends that went out late (0 when nothing was sent)."""
        sent = sum(self.sent.values())
        return self.late / sent if sent else 0.0

    @property
    def behind(self) -> bool:
        """Whether the client fell behind its schedule often enough to say so."""
        return self.late_share > BEHIND_SHARE

    @property
    def loss(self) -> dict[str, float]:
        """Fraction of expected sink copies that never arrived, by type."""
        return {
            name: 1.0 - self.received.get(name, 0) / expected
            for name, expected in self.expected.items()
            if expected
        }

    def to_json(self) -> str:
        data: dict[str, Any] = dataclasses.asdict(self)
        data["loss"] = self.loss
        data["late_share"] = round(self.late_share, 4)
        return json.dumps(data, indent=2, sort_keys=True)

    def to_text(self) -> str:
        lines = [
            f"target {self.target}: {self.duration:.1f} s, {self.injectors} injecting and "
            f"{self.sinks} sinking peers"
            + (" (INTERRUPTED: partial figures)" if self.interrupted else ""),
            f"offered {self.offered_rate:,.0f} msgs/s; sent {sum(self.sent.values()):,} "
            f"({_counts(self.sent)}) at {self.achieved_rate:,.0f} msgs/s; "
            f"late (> {self.late_threshold_ms:g} ms): {self.late:,}; "
            f"early (timed from their send): {self.early:,}",
        ]
        if self.behind:
            lines.append(behind_warning(self.late_share, self.late_threshold_ms))
        for name, expected in sorted(self.expected.items()):
            got = self.received.get(name, 0)
            lines.append(
                f"{name}: {got:,} of {expected:,} copies reached the sinks by the end of the "
                f"drain (not arrived {self.loss.get(name, 0.0):.2%})"
            )
        if self.duplicates:
            lines.append(
                f"copies a sink got again (not counted above, not timed): "
                f"{_counts(self.duplicates)}"
            )
        if self.replies:
            lines.append(f"replies back at the injectors: {_counts(self.replies)}")
        if self.router is not None:
            lines.extend(self.router.lines(self.sent))
        lines.extend(latency_lines(self.latency))
        if self.negative_samples:
            lines.append(
                f"INSTRUMENT ERROR: {self.negative_samples:,} latency samples below zero "
                "(left out of the figures above, which cannot be trusted)"
            )
        if self.clamped_samples:
            lines.append(f"{self.clamped_samples:,} latency samples above 60 s, recorded at 60 s")
        lines.extend(f"disconnected: {reason}" for reason in self.disconnected)
        return "\n".join(lines)


def latency_lines(latency: Mapping[str, Mapping[str, LatencySummary]]) -> list[str]:
    """The latency table: a row per kind and message type, in microseconds."""
    columns = ("count", "min", "p50", "p90", "p99", "p99.9")
    lines = [f"{'latency (us)':<26}" + "".join(f"{c:>10}" for c in columns) + f"{'max':>11}"]
    for kind, by_type in latency.items():
        for name, s in by_type.items():
            lines.append(
                f"{kind + ' ' + name:<26}{s.count:>10,}{s.min:>10,}{s.p50:>10,}{s.p90:>10,}"
                f"{s.p99:>10,}{s.p999:>10,}{s.max:>11,}"
            )
    return lines


def behind_warning(share: float, threshold_ms: float) -> str:
    """The line that says the load client fell behind its own schedule."""
    return (
        f"WARNING: the load client fell behind: {share:.0%} of its sends went out more "
        f"than {threshold_ms:g} ms late, so the load offered was not the schedule's. "
        "Either this machine is too busy to send on time (other work, or the client's own "
        "core is full: try fewer msgs/s or a quieter machine), or the target stopped "
        "reading (backpressure, expected under overload). Latency is still measured from "
        "the schedule, so the wait shows in it."
    )


def hop_kind(hops: int) -> str:
    """The latency row of a copy that travelled ``hops`` hops: ``one-hop``, ``two-hop``...

    A copy at a sink is named by the hops it arrived with (each router it crossed added
    one), so rows in a network say how far their copies came."""
    if 0 <= hops < len(_HOP_WORDS):
        return f"{_HOP_WORDS[hops]}-hop"
    return f"{hops}-hop"


def _kind_order(kind: str) -> int:
    """Where a latency row's kind goes: hop rows by their hops, then everything else."""
    word = kind.removesuffix("-hop")
    if word == kind:
        return 1_000
    if word in _HOP_WORDS:
        return _HOP_WORDS.index(word)
    return int(word) if word.isdigit() else 1_000


_HOP_WORDS = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen",
)  # fmt: skip


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {count:,}" for name, count in sorted(counts.items())) or "none"
