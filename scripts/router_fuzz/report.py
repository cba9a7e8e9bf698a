"""The verdict and the report: the figures summed up as JSON, printed, and written as
the "Fuzzing" section of a Markdown file with the command that reruns them.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scripts.benchdocs import machine, replace_section
from scripts.router_fuzz.settings import SECTION, Figures, Settings


def late_lines(checks: dict[str, Any]) -> list[str]:
    """A line on the failed checks whose hit did come back, later, if there were any."""
    late = checks["failed_but_back_later"]
    if not late:
        return []
    return ["", f"Failed checks whose hit came back after the deadline: {'; '.join(late)}."]


def inline(counts: dict[str, int] | None) -> str:
    """``200: 4,402, 403: 366`` for a table cell or a sentence; "n/a" when unknown."""
    if counts is None:
        return "n/a"
    return ", ".join(f"{name}: {n:,}" for name, n in counts.items()) or "none"


def number_or_na(n: int | None) -> str:
    return "n/a" if n is None else f"{n:,}"


def mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


def peak_rss(rss: dict[str, int]) -> int:
    """The higher of our samples' peak and the kernel's high-water mark (VmHWM)."""
    return max(rss["peak_sampled"], rss["peak_kernel_vmhwm"])


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)] if ordered else 0.0


def summary(
    figures: Figures,
    settings: Settings,
    counters: dict[str, Any],
    exit_status: int | None,
    log: dict[str, list[str]],
    config: str,
) -> dict[str, Any]:
    trips = figures.check_round_trips
    return {
        "verdict": "pass" if not figures.problems else "fail",
        "problems": figures.problems,
        "seed": settings.seed,
        "frames_target": settings.frames,
        "frames_sent": figures.frames_sent,
        "bytes_sent": figures.bytes_sent,
        "fuzz_seconds": round(figures.fuzz_seconds, 1),
        "ended_by": figures.ended_by,
        "frames_by_type": dict(figures.frames_by_type.most_common()),
        "frames_by_mutation": dict(figures.frames_by_mutation.most_common()),
        "session_endings": dict(figures.endings.most_common()),
        "sessions": dict(figures.sessions.most_common()),
        "handshake_fuzzing": dict(sorted(figures.handshakes.items())),
        "connections_opened": figures.connections_opened,
        "handshake_answers": {str(k): v for k, v in sorted(figures.answers_from_router.items())},
        "refused_by_router": figures.refused_by_router,
        "closed_by_router": figures.connections_closed_by_router,
        "byes_from_router": {str(k): v for k, v in sorted(figures.byes_from_router.items())},
        "slowloris_held_seconds": {
            "count": len(figures.slowloris_hold_seconds),
            "median": round(statistics.median(figures.slowloris_hold_seconds), 1)
            if figures.slowloris_hold_seconds
            else None,
            "max": round(max(figures.slowloris_hold_seconds), 1)
            if figures.slowloris_hold_seconds
            else None,
        },
        "routing_checks": {
            "passed": figures.checks_passed,
            "failed": figures.checks_failed,
            "deadline_s": settings.check_deadline,
            "failed_but_back_later": figures.late_round_trips,
            "round_trip_p50_ms": round(percentile(trips, 0.5) * 1000, 1),
            "round_trip_p99_ms": round(percentile(trips, 0.99) * 1000, 1),
            "round_trip_max_ms": round(max(trips, default=0.0) * 1000, 1),
        },
        "good_peer_frames_received": figures.good_peer_frames,
        "rss": {
            "before": figures.rss_before,
            "peak_sampled": figures.rss_peak_sampled,
            "peak_kernel_vmhwm": figures.rss_peak_kernel,
            "after": figures.rss_after,
            "bound": settings.rss_limit_mb * 2**20,
            "samples": figures.rss_samples,
        },
        "router_exit_status_after_sigterm": exit_status,
        "router_log": {text: len(lines) for text, lines in log.items()},
        "router_counters": counters,
        "router_config": config,
        "settings": dataclasses.asdict(settings),
    }


def table(counter: dict[str, int]) -> list[str]:
    return [f"| {name} | {count:,} |" for name, count in counter.items()]


def report_lines(result: dict[str, Any], command: str) -> list[str]:
    """The Fuzzing section of docs/robustness.md (also printed)."""
    rss = result["rss"]
    checks = result["routing_checks"]
    counters = result["router_counters"]
    held = result["slowloris_held_seconds"]
    lines = [
        "## Fuzzing",
        "",
        f"`scripts/fuzz_router.py` against a `gnutella-router run` process on loopback, "
        f"{datetime.date.today().isoformat()}, on {machine()}.",
        "",
        f"Verdict: **{result['verdict']}**"
        + ("" if not result["problems"] else ": " + "; ".join(result["problems"])),
        "",
        "| figure | value |",
        "|---|---:|",
        f"| seed | {result['seed']} |",
        f"| frames sent | {result['frames_sent']:,} of {result['frames_target']:,} "
        f"({result['bytes_sent'] / 2**20:,.0f} MiB), ended by {result['ended_by']} |",
        f"| fuzzing time | {result['fuzz_seconds']:.0f} s |",
        "| messages the router read, from every peer (its own count) | "
        f"{number_or_na(counters.get('messages_in'))} |",
        "| ... dropped unread because their connection was being closed | "
        f"{number_or_na(counters.get('dropped_by_reason', {}).get('connection-closing'))} |",
        f"| connections opened by the fuzzer | {result['connections_opened']:,} |",
        f"| handshakes refused by the router (non-200 answers) | {result['refused_by_router']:,} |",
        f"| connections closed by the router | {result['closed_by_router']:,} |",
        f"| routing checks (query there, hit back, within {checks['deadline_s']:g} s) | "
        f"{checks['passed']:,} passed, "
        f"{checks['failed']:,} failed; round trip p50 {checks['round_trip_p50_ms']} ms, "
        f"p99 {checks['round_trip_p99_ms']} ms, max {checks['round_trip_max_ms']} ms |",
        f"| router RSS before / peak / after (bound) | {mib(rss['before'])} / "
        f"{mib(peak_rss(rss))} / {mib(rss['after'])} "
        f"({mib(rss['bound'])}) |",
        f"| router exit status after SIGTERM | {result['router_exit_status_after_sigterm']} |",
        "| log lines with Traceback / connection task failed / stage handler failed | "
        + " / ".join(str(n) for n in result["router_log"].values())
        + " |",
        "| failed connection tasks (router's counter) | "
        f"{counters.get('failed_connections', 'n/a')} |",
        *late_lines(checks),
        "",
        "The router is kept saturated: the fuzzing connections send as fast as it reads, so "
        "its backpressure holds every reader, the good peers' included, and a probe's round "
        "trip is mostly its wait for a turn. Frames that arrive after the router has decided "
        "to close their connection (a kick for abuse, a length beyond 64 KiB, a corrupt "
        "deflate stream) are dropped unread, and those still in socket buffers when a "
        "connection is reset are never read at all: hence fewer messages read than sent.",
        "",
        "Frames by kind (each with a fresh GUID, TTL and hops; each session draws the share "
        "of its frames that are hostile, 5 %, 20 %, 50 % or all, and only those are "
        "mutated):",
        "",
        "| kind | frames |",
        "|---|---:|",
        *table(result["frames_by_type"]),
        "",
        "| mutation | frames |",
        "|---|---:|",
        *table(result["frames_by_mutation"]),
        "",
        "How frame-fuzzing sessions ended (what we sent last):",
        "",
        "| ending | sessions |",
        "|---|---:|",
        *table(result["session_endings"]),
        "",
        "What the router did with them:",
        "",
        "| session outcome | count |",
        "|---|---:|",
        *table(result["sessions"]),
        "",
        "Handshake fuzzing (scenario: outcome):",
        "",
        "| scenario: outcome | connections |",
        "|---|---:|",
        *table(result["handshake_fuzzing"]),
        "",
        f"Handshake answers over every connection, by status: "
        f"{inline(result['handshake_answers'])}. Byes from the router that ended a "
        f"connection, by code: {inline(result['byes_from_router'])}. "
        f"Slowloris handshakes dropped by the router: {held['count']:,}, held a median "
        f"{held['median']} s (max {held['max']} s; its handshake_timeout is 10 s).",
        "",
        "The router's own counters at the end of the run:",
        "",
        "| counter | value |",
        "|---|---|",
        f"| connections accepted | {number_or_na(counters.get('accepted'))} |",
        f"| handshakes completed | {inline(counters.get('completed'))} |",
        f"| connections refused, by reason | {inline(counters.get('refused'))} |",
        f"| peers kicked, by offence | {inline(counters.get('kicked'))} |",
        f"| messages read | {number_or_na(counters.get('messages_in'))} |",
        f"| messages dropped, by reason | {inline(counters.get('dropped_by_reason'))} |",
        "",
        "The router's configuration for the run (everything else at its defaults):",
        "",
        "```toml",
        *result["router_config"].strip().splitlines(),
        "```",
        "",
        "To run it again (the default sends 1,000,000 frames):",
        "",
        "```sh",
        command,
        "```",
    ]
    return lines


def write_output(path: Path, lines: list[str]) -> None:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "# Robustness\n\n"
            "How gnutella-router holds up against peers that send it garbage, break the\n"
            "protocol on purpose or hold on to it: what was thrown at it, what it did, and\n"
            "whether it kept routing for the well-behaved peers meanwhile.\n"
        )
    replace_section(SECTION, lines, path)


def print_result(result: dict[str, Any]) -> None:
    print()
    print(
        "frames by kind:    " + ", ".join(f"{k} {v:,}" for k, v in result["frames_by_type"].items())
    )
    print(
        "frames by mutation: "
        + ", ".join(f"{k} {v:,}" for k, v in result["frames_by_mutation"].items())
    )
    print(
        "session endings:   "
        + ", ".join(f"{k} {v:,}" for k, v in result["session_endings"].items())
    )
    print("session outcomes:  " + ", ".join(f"{k} {v:,}" for k, v in result["sessions"].items()))
    print(
        "handshake fuzzing: "
        + ", ".join(f"{k} {v:,}" for k, v in result["handshake_fuzzing"].items())
    )
    print(
        f"handshake answers: {result['handshake_answers']}; "
        f"Byes from the router: {result['byes_from_router']}"
    )
    checks = result["routing_checks"]
    rss = result["rss"]
    print(
        f"seed {result['seed']}: {result['frames_sent']:,} frames "
        f"({result['bytes_sent'] / 2**20:,.0f} MiB) "
        f"in {result['fuzz_seconds']:.0f} s, ended by {result['ended_by']}"
    )
    print(
        f"connections: {result['connections_opened']:,} opened, "
        f"{result['refused_by_router']:,} refused "
        f"by the router, {result['closed_by_router']:,} closed by the router"
    )
    print(
        f"routing checks: {checks['passed']} passed, {checks['failed']} failed "
        f"(round trip p50 {checks['round_trip_p50_ms']} ms, max {checks['round_trip_max_ms']} ms)"
    )
    print(
        f"router RSS: before {mib(rss['before'])}, peak {mib(peak_rss(rss))}, "
        f"after {mib(rss['after'])} (bound {mib(rss['bound'])})"
    )
    print(f"router exit status after SIGTERM: {result['router_exit_status_after_sigterm']}")
    print(f"router log: {result['router_log']}")
    print(f"router counters: {result['router_counters']}")
    print(f"VERDICT: {result['verdict'].upper()}")
    for problem in result["problems"]:
        print(f"  - {problem}")


def rerun_command(settings: Settings, args: argparse.Namespace) -> str:
    parts = [".venv/bin/python scripts/fuzz_router.py", f"--seed {settings.seed}"]
    if settings.quick:
        parts.append("--quick")
    if settings.frames != 1_000_000:
        parts.append(f"--frames {settings.frames}")
    if args.output is not None:
        parts.append(f"--output {args.output}")
    return " ".join(parts)
