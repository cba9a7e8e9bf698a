"""The soak's report: its Markdown lines, and the block between the soak markers
of a document that they replace (atomically, and only that block).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scripts.router_soak.probes import counter_total
from scripts.router_soak.runs import Settings

BEGIN = "<!-- soak:begin -->"
END = "<!-- soak:end -->"
CACHES = (("pong_cache", "cached pongs"), ("host_cache", "cached hosts"))


# --------------------------------------------------------------------------- output


def fmt_mib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.1f} MiB"


def fmt_percent(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:+.{digits}f} %"


def fmt_count(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def fmt_share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def fmt_minutes(seconds: float) -> str:
    return f"{seconds / 60:.3g} min" if seconds >= 60 else f"{seconds:.2g} s"


def fmt_ms(micros: int | float) -> str:
    return f"{micros / 1000:,.2f}"


def counts_text(by_type: dict[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in sorted(by_type.items())) or "none"


def drops_text(dropped: dict[str, dict[str, int]]) -> str:
    if not dropped:
        return "none"
    return "; ".join(f"{reason}: {counts_text(by)}" for reason, by in sorted(dropped.items()))


def rerun_command(settings: Settings) -> str:
    """The command line that repeats this run: the script with its non-default flags."""
    parts = [".venv/bin/python scripts/soak.py"]
    defaults = Settings()
    for field in dataclasses.fields(Settings):
        value = getattr(settings, field.name)
        if value != getattr(defaults, field.name):
            flag = "--" + field.name.replace("_", "-")
            parts.append(f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}")
    return " ".join(parts)


def rss_by_period(result: dict[str, Any], periods: int = 6) -> list[str]:
    """Each router's RSS over equal spans of the load (median, and min-max): two points
    can be caught on a high and a low, but spans that keep rising are a creep, and
    spans that go up and down are noise."""
    samples = [s for s in result["samples"] if s["phase"] == "load"]
    end = result["end_seconds"]
    if end <= 0 or not samples:
        return []
    span = end / periods
    unit, scale = ("min", 60.0) if end >= 60 else ("s", 1.0)
    labels = [f"{k * span / scale:.3g}-{(k + 1) * span / scale:.3g} {unit}" for k in range(periods)]
    lines = [
        f"RSS in MiB over the load, by {fmt_minutes(span)} span: median (min-max).",
        "",
        "| router | " + " | ".join(labels) + " |",
        "|---|" + "---:|" * periods,
    ]
    for index, router in enumerate(result["routers"]):
        cells = []
        for k in range(periods):
            values = [
                s["routers"][index]["rss"] / 2**20
                for s in samples
                if s["routers"][index]["rss"] and min(periods - 1, int(s["at"] // span)) == k
            ]
            cells.append(
                f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"
                if values
                else "-"
            )
        lines.append(f"| {router['name']} | " + " | ".join(cells) + " |")
    last = samples[-1]["routers"]
    sizes = []
    for router, r in zip(result["routers"], last, strict=True):
        known = [f"{r.get('route_entries') or 0:,} route-table entries"]
        known += [f"{r[k]:,} {name}" for k, name in CACHES if r.get(k) is not None]
        sizes.append(f"{router['name']} " + ", ".join(known))
    lines += ["", "At the end: " + "; ".join(sizes) + ".", ""]
    return lines


def report_lines(result: dict[str, Any], plot: Path | None, doc: Path) -> list[str]:
    """The soak's section of docs/robustness.md, as Markdown lines (also printed)."""
    settings = result["settings"]
    routers = result["routers"]
    ref = fmt_minutes(result["reference_seconds"])
    window = fmt_minutes(result["window_seconds"])
    load = result["load"]
    machine_load = result["machine_load"]
    links = ", ".join(f"{r['name']} -> {d}" for r in routers for d in r["dials"])
    lines = [
        "## Soak",
        "",
        f"`scripts/soak.py`, {result['date'][:10]}, on {result['machine']}: three "
        f"`gnutella-router run` processes on 127.0.0.1 linked in a {settings['topology']} "
        f"({links}), {settings['rate']:,.0f} msgs/s of the SEDA paper's mix (85 % pings, "
        f"15 % queries) for {fmt_minutes(result['load_seconds'])}"
        + (" (INTERRUPTED: partial figures)" if result["interrupted"] else "")
        + ".",
        "",
        "Each router runs with its defaults, except its admin interface on a port of its "
        "own and `catcher.min_connections` equal to its seeds (so it keeps exactly its "
        "planned links). The project's load client connects five peers: injectors on R0 "
        "and R2 share one open-loop schedule, and one sink on each router answers like a "
        "servent (a pong per ping, a query hit now and then), so queries cross the network "
        "both ways and pongs and hits come back across it. Every "
        f"{settings['sample_seconds']:g} s the script reads each router's VmRSS and open "
        "file descriptors from /proc and its counters from its admin interface. "
        f'"At {ref}" and "at the end" are medians of the samples in the {window} before '
        "each point.",
        "",
        f"Verdict: **{result['verdict']}**"
        + (
            ""
            if result["verdict"] == "pass"
            else ": " + "; ".join(text for ok, text in result["checks"] if not ok)
        ),
        "",
        "| router | RSS at " + ref + " | RSS at end | drift | trend after " + ref + " | peak RSS "
        "(VmHWM) | FDs before load / at " + ref + " / at end / after load (min-max under load) "
        "| msgs read/s (all peers) | CPU (one core) | kicked / refused | exit |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r, share in zip(routers, machine_load["routers_cpu_share"], strict=True):
        trend = r["rss_trend_mib_per_hour"]
        rate = r["received_per_second"]
        lines.append(
            f"| {r['name']} | {fmt_mib(r['rss_at_reference'])} | {fmt_mib(r['rss_at_end'])} "
            f"| {fmt_percent(r['rss_drift_percent'])} "
            f"| {'-' if trend is None else f'{trend:+.2f} MiB/h'} "
            f"| {fmt_mib(r['rss_peak_vmhwm'] or r['rss_peak_sampled'])} "
            f"| {fmt_count(r['fds_before_load'])} / {fmt_count(r['fds_at_reference'])} / "
            f"{fmt_count(r['fds_at_end'])} / {fmt_count(r['fds_after_load'])} "
            f"({fmt_count(r['fds_min'])}-{fmt_count(r['fds_max'])}) "
            f"| {'-' if rate is None else f'{rate:,.0f}'} | {fmt_share(share)} "
            f"| {counter_total(r['kicked'])} / {counter_total(r['refused'])} | {r['exit_status']} |"
        )
    client = result["client"]
    lines += [
        f"| load client (this script) | {fmt_mib(client['rss_at_reference'])} "
        f"| {fmt_mib(client['rss_at_end'])} | {fmt_percent(client['rss_drift_percent'])} | "
        f"| {fmt_mib(client['rss_peak_vmhwm'])} | - / {fmt_count(client['fds_at_reference'])} / "
        f"{fmt_count(client['fds_at_end'])} / - | | {fmt_share(client['cpu_share'])} | | |",
        "",
        *rss_by_period(result),
    ]
    if load is not None:
        sent = load["sent"]
        total = sum(sent.values())
        late = load["late"]
        lines += [
            f"Sent {total:,} messages ({counts_text(sent)}) at {load['achieved_rate']:,.0f} "
            f"msgs/s; {late:,} ({late / total if total else 0:.1%}) went out more than "
            f"{load['late_threshold_ms']:g} ms after their scheduled time (their latency "
            "counts from the scheduled time).",
            "",
            "| type | copies owed to the sinks | arrived | not arrived |",
            "|---|---:|---:|---:|",
        ]
        for name, owed in sorted(load["expected"].items()):
            got = load["received"].get(name, 0)
            lines.append(
                f"| {name} | {owed:,} | {got:,} | {owed - got:,} "
                f"({(owed - got) / owed if owed else 0:.3%}) |"
            )
        lines += [
            "",
            f"Replies back at the injectors: {counts_text(load['replies'])}. Dropped by the "
            f"routers during the load, by reason: {drops_text(result['dropped_by_routers'])}. "
            "Dropped by their outgoing queues: "
            + (
                "; ".join(
                    f"{r['name']} {counts_text(r['outgoing_dropped_during_load'])}"
                    for r in routers
                    if r["outgoing_dropped_during_load"]
                )
                or "none"
            )
            + ". Load client peers disconnected by a router: "
            + ("; ".join(load["disconnected"]) or "none")
            + ".",
            "",
            "Latency in ms, from each message's scheduled send time: *one-hop* is a copy "
            "reaching a sink (through one to three routers), *round-trip* a sink's reply "
            "back at the injector, *target-reply* the pong of the injector's own router.",
            "",
            "| kind | type | count | p50 | p90 | p99 | p99.9 | max |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for kind, by_type in load["latency"].items():
            for name, s in by_type.items():
                lines.append(
                    f"| {kind} | {name} | {s['count']:,} | {fmt_ms(s['p50'])} "
                    f"| {fmt_ms(s['p90'])} | {fmt_ms(s['p99'])} | {fmt_ms(s['p999'])} "
                    f"| {fmt_ms(s['max'])} |"
                )
        if load["negative_samples"]:
            lines.append(
                f"\n{load['negative_samples']:,} latency samples below zero were left out "
                "(an error of the instrument)."
            )
        lines.append("")
    load_avg = machine_load["load_average_median"]
    lines += [
        f"What else ran: on {machine_load['cores']} cores, the 1-minute load average was "
        f"{machine_load['load_average_at_start']:.2f} at the start and a median of "
        + ("-" if load_avg is None else f"{load_avg:.2f}")
        + f" (max {machine_load['load_average_max'] or 0:.2f}) during the load; processes "
        "other than the routers and the load client used a median of "
        f"{fmt_share(machine_load['others_cpu_share_median'])} of one core.",
        "",
        "Checks:",
        "",
        *(f"- {'met' if ok else 'MISSED'}: {text}" for ok, text in result["checks"]),
        "",
    ]
    if plot is not None:
        link = os.path.relpath(plot, doc.parent)
        lines += [f"![RSS, open FDs and load over the soak]({link})", ""]
    lines += [
        "Rerun (the routers and the load client share the machine; about "
        f"{fmt_minutes(result['load_seconds'] + 30)} in all):",
        "",
        "```sh",
        rerun_command(Settings(**settings)),
        "```",
    ]
    return lines


def replace_block(text: str | None, lines: Sequence[str]) -> str:
    """``text`` with the soak block replaced (or appended; a new file if ``None``)."""
    block = [BEGIN, *lines, END]
    if text is None:
        return "# Robustness\n\n" + "\n".join(block) + "\n"
    existing = text.splitlines()
    try:
        start = existing.index(BEGIN)
        end = existing.index(END, start)
    except ValueError:
        return text.rstrip("\n") + "\n\n" + "\n".join(block) + "\n"
    kept = existing[:start] + block + existing[end + 1 :]
    return "\n".join(kept) + ("\n" if text.endswith("\n") else "")


def write_block(path: Path, lines: Sequence[str], attempts: int = 5) -> None:
    """Replace our block in ``path`` atomically (temporary file + rename).

    Another script may write its own section of the same file meanwhile: if the file
    changed between our read and our rename, we read it again rather than overwrite
    what it wrote.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(attempts):
        try:
            original: str | None = path.read_text()
        except FileNotFoundError:
            original = None
        updated = replace_block(original, lines)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(handle, "w") as out:
                out.write(updated)
            with contextlib.suppress(OSError):
                os.chmod(temporary, path.stat().st_mode & 0o777 if path.exists() else 0o644)
            try:
                current: str | None = path.read_text()
            except FileNotFoundError:
                current = None
            if current == original:
                os.replace(temporary, path)
                return
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
    raise OSError(f"{path} kept changing while the soak section was written")
