"""The figures of a soak (drift of RSS and descriptors against the steady-state
point, slopes, losses, what the routers logged and counted, the machine's share) and the
checks they are judged by. Pure functions of the samples, so a run's JSON can be judged
again without running anything.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from scripts.benchdocs import machine
from scripts.router_soak.probes import counter_increase, counter_total, proc_status
from scripts.router_soak.processes import LOOPBACK
from scripts.router_soak.report import fmt_count, fmt_minutes, fmt_percent
from scripts.router_soak.runs import Settings, Soak
from scripts.router_soak.samples import Sample


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def slope_per_hour(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) points, per hour."""
    if len(points) < 3:
        return None
    mean_t = statistics.fmean(t for t, _ in points)
    mean_v = statistics.fmean(v for _, v in points)
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return None
    return sum((t - mean_t) * (v - mean_v) for t, v in points) / spread * 3600


def window_values(
    samples: Sequence[Sample], start: float, end: float, pick: Callable[[Sample], float | None]
) -> list[float]:
    out = []
    for s in samples:
        if s.phase == "load" and start - 1e-6 <= s.at <= end + 1e-6:
            value = pick(s)
            if value is not None:
                out.append(value)
    return out


def log_findings(path: Path) -> dict[str, Any]:
    """Warnings and errors in a router's JSON log, counted by event; tracebacks."""
    events: dict[str, int] = {}
    tracebacks = 0
    errors = 0
    with contextlib.suppress(OSError):
        for line in path.read_text(errors="replace").splitlines():
            if "Traceback" in line:
                tracebacks += 1
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not isinstance(record, dict):
                continue
            level = record.get("level")
            if level in ("warning", "error", "critical"):
                key = f"{level}: {record.get('event')}"
                events[key] = events.get(key, 0) + 1
                errors += level != "warning"
    return {"warnings_and_errors": events, "errors": errors, "tracebacks": tracebacks}


def analyse(soak: Soak) -> dict[str, Any]:
    """Every figure of the run, JSON-ready, with the checks and the verdict."""
    settings = soak.settings
    samples = soak.samples
    load_samples = [s for s in samples if s.phase == "load"]
    last = max((s.at for s in load_samples), default=0.0)
    duration = last if soak.interrupted else settings.duration
    ref_point = min(settings.reference, last)
    end_point = last
    window = settings.window
    ref_span = (ref_point - window, ref_point)
    end_span = (end_point - window, end_point)
    before = next((s for s in samples if s.phase == "before"), None)
    after = next((s for s in samples if s.phase == "after"), None)

    routers: list[dict[str, Any]] = []
    for index, router in enumerate(soak.routers):

        def pick_rss(s: Sample, i: int = index) -> float | None:
            return s.routers[i].rss

        def pick_fds(s: Sample, i: int = index) -> float | None:
            return s.routers[i].fds

        rss_ref = median(window_values(samples, *ref_span, pick_rss))
        rss_end = median(window_values(samples, *end_span, pick_rss))
        fds_ref = median(window_values(samples, *ref_span, pick_fds))
        fds_end = median(window_values(samples, *end_span, pick_fds))
        rss_all = [v for s in load_samples if (v := s.routers[index].rss)]
        fds_all = [f for s in load_samples if (f := s.routers[index].fds) is not None]
        steady = [
            (s.at, v / 2**20)
            for s in load_samples
            if s.at >= ref_point and (v := s.routers[index].rss)
        ]
        cpu = [(s.at, c) for s in load_samples if (c := s.routers[index].cpu) is not None]
        stats_before = soak.stats_before[index] if soak.stats_before else {}
        stats_after = soak.stats_after[index] if soak.stats_after else {}
        routing_delta = counter_increase(
            stats_after.get("router", {}), stats_before.get("router", {})
        )
        server_after = stats_after.get("server", {})
        server_delta = counter_increase(server_after, stats_before.get("server", {}))
        received = counter_total(routing_delta.get("received", {})) if routing_delta else 0
        routers.append(
            {
                "name": router.name,
                "pid": router.process.pid if router.process else None,
                "address": f"{LOOPBACK}:{router.port}",
                "admin": f"{LOOPBACK}:{router.admin_port}",
                "dials": [soak.routers[s].name for s in router.seeds],
                "rss_at_reference": rss_ref,
                "rss_at_end": rss_end,
                "rss_drift_percent": (
                    (rss_end / rss_ref - 1) * 100 if rss_ref and rss_end is not None else None
                ),
                "rss_trend_mib_per_hour": slope_per_hour(steady),
                "rss_min": min(rss_all, default=None),
                "rss_peak_sampled": max(rss_all, default=None),
                "rss_peak_vmhwm": soak.peak_rss[index],
                "fds_before_load": before.routers[index].fds if before else None,
                "fds_at_reference": fds_ref,
                "fds_at_end": fds_end,
                "fds_min": min(fds_all, default=None),
                "fds_max": max(fds_all, default=None),
                "fds_after_load": after.routers[index].fds if after else None,
                "cpu_share": (cpu[-1][1] - cpu[0][1]) / (cpu[-1][0] - cpu[0][0])
                if len(cpu) > 1 and cpu[-1][0] > cpu[0][0]
                else None,
                "received_during_load": received,
                "received_per_second": received / duration if duration else None,
                "forwarded_during_load": counter_total(routing_delta.get("forwarded", {})),
                "dropped_during_load": routing_delta.get("dropped", {}),
                "outgoing_dropped_during_load": server_delta.get("outgoing_dropped", {}),
                "route_entries_at_end": next(
                    (
                        s.routers[index].route_entries
                        for s in reversed(load_samples)
                        if s.routers[index].route_entries is not None
                    ),
                    None,
                ),
                "kicked": server_after.get("kicked", {}),
                "refused": server_after.get("refused", {}),
                "failed_connections": server_after.get("failed_connections"),
                "bans": server_after.get("bans"),
                "alive_to_the_end": router.died_at is None
                and all(s.routers[index].alive for s in samples),
                "died_at_seconds": router.died_at - soak.t0
                if router.died_at is not None and soak.t0 is not None
                else None,
                "exit_status": router.exit_status,
                "killed_after_grace": router.killed,
                "log": log_findings(router.log_path),
            }
        )

    client_rss_ref = median(window_values(samples, *ref_span, lambda s: s.client_rss))
    client_rss_end = median(window_values(samples, *end_span, lambda s: s.client_rss))
    shares = machine_shares(soak)
    report = soak.report
    load: dict[str, Any] | None = json.loads(report.to_json()) if report is not None else None
    not_arrived = (
        {
            name: expected - report.received.get(name, 0)
            for name, expected in report.expected.items()
        }
        if report is not None
        else {}
    )
    owed = sum(report.expected.values()) if report is not None else 0
    loss_percent = (sum(not_arrived.values()) / owed * 100) if owed else None
    dropped_total: dict[str, dict[str, int]] = {}
    for r in routers:
        for reason, by_type in r["dropped_during_load"].items():
            into = dropped_total.setdefault(reason, {})
            for name, count in by_type.items():
                into[name] = into.get(name, 0) + count
    result: dict[str, Any] = {
        "date": soak.started_at.isoformat(timespec="seconds"),
        "machine": machine(),
        "settings": dataclasses.asdict(settings),
        "interrupted": soak.interrupted,
        "load_seconds": duration,
        "reference_seconds": ref_point,
        "end_seconds": end_point,
        "window_seconds": window,
        "routers": routers,
        "client": {
            "rss_at_reference": client_rss_ref,
            "rss_at_end": client_rss_end,
            "rss_drift_percent": (client_rss_end / client_rss_ref - 1) * 100
            if client_rss_ref and client_rss_end is not None
            else None,
            "rss_peak_vmhwm": proc_status("self").get("VmHWM"),
            "fds_at_reference": median(window_values(samples, *ref_span, lambda s: s.client_fds)),
            "fds_at_end": median(window_values(samples, *end_span, lambda s: s.client_fds)),
            "cpu_share": shares["client"],
        },
        "machine_load": {
            "load_average_at_start": soak.load_average_start,
            "load_average_median": median([s.load_average for s in load_samples]),
            "load_average_max": max((s.load_average for s in load_samples), default=None),
            "cores": os.cpu_count(),
            "others_cpu_share_median": shares["others"],
            "routers_cpu_share": shares["routers"],
            "other_commands": soak.others.top(
                (load_samples[-1].clock - load_samples[0].clock) if len(load_samples) > 1 else 0
            ),
        },
        "load": load,
        "not_arrived": not_arrived,
        "loss_percent": loss_percent,
        "dropped_by_routers": dropped_total,
        "samples": [dataclasses.asdict(s) for s in samples],
        "router_stats_before_load": soak.stats_before,
        "router_stats_after_load": soak.stats_after,
    }
    result["checks"] = checks(result, settings)
    if soak.interrupted:
        result["verdict"] = "interrupted"  # no steady state to judge
    else:
        result["verdict"] = "pass" if all(ok for ok, _ in result["checks"]) else "fail"
    return result


def machine_shares(soak: Soak) -> dict[str, Any]:
    """Median shares of one core, per sampling interval: the routers, this process (the
    load client), and every other process on the machine (what else was running)."""
    load_samples = [s for s in soak.samples if s.phase == "load"]
    others: list[float] = []
    client: list[float] = []
    for a, b in itertools.pairwise(load_samples):
        span = b.clock - a.clock
        if span <= 0:
            continue
        ours = b.client_cpu - a.client_cpu
        for ra, rb in zip(a.routers, b.routers, strict=True):
            if ra.cpu is not None and rb.cpu is not None:
                ours += rb.cpu - ra.cpu
        others.append(max(0.0, (b.machine_busy - a.machine_busy - ours) / span))
        client.append((b.client_cpu - a.client_cpu) / span)
    routers = []
    for index in range(len(soak.routers)):
        values = []
        for a, b in itertools.pairwise(load_samples):
            first, last = a.routers[index].cpu, b.routers[index].cpu
            if first is not None and last is not None and b.clock > a.clock:
                values.append((last - first) / (b.clock - a.clock))
        routers.append(median(values))
    return {"others": median(others), "client": median(client), "routers": routers}


def checks(result: dict[str, Any], settings: Settings) -> list[tuple[bool, str]]:
    """The soak's goals, each (met, text)."""
    out: list[tuple[bool, str]] = []
    for r in result["routers"]:
        name = r["name"]
        out.append((r["alive_to_the_end"], f"{name} ran to the end"))
        out.append(
            (
                r["exit_status"] == 0 and not r["killed_after_grace"],
                f"{name} exited 0 on SIGTERM (exit status {r['exit_status']}"
                + (", killed after the grace period" if r["killed_after_grace"] else "")
                + ")",
            )
        )
        drift = r["rss_drift_percent"]
        out.append(
            (
                drift is not None and drift < settings.max_drift,
                f"{name} RSS drift from {fmt_minutes(result['reference_seconds'])} to the end "
                f"under {settings.max_drift:g} % ({fmt_percent(drift)})",
            )
        )
        fd_ref, fd_end = r["fds_at_reference"], r["fds_at_end"]
        out.append(
            (
                fd_ref is not None and fd_end is not None and fd_end - fd_ref <= settings.fd_slack,
                f"{name} open FDs steady under load ({fmt_count(fd_ref)} -> {fmt_count(fd_end)}, "
                f"at most +{settings.fd_slack})",
            )
        )
        fd_before, fd_after = r["fds_before_load"], r["fds_after_load"]
        out.append(
            (
                fd_before is not None
                and fd_after is not None
                and fd_after - fd_before <= settings.fd_slack,
                f"{name} back to its FDs once the load client left "
                f"({fmt_count(fd_before)} before, {fmt_count(fd_after)} after)",
            )
        )
        kicked, refused = counter_total(r["kicked"]), counter_total(r["refused"])
        out.append(
            (
                kicked == 0 and refused == 0 and not r["failed_connections"],
                f"{name} kicked no peer ({kicked}), refused none ({refused}), "
                f"no connection task failed ({r['failed_connections']})",
            )
        )
        log = r["log"]
        out.append(
            (
                log["errors"] == 0 and log["tracebacks"] == 0,
                f"{name} logged no error ({log['errors']}) and no traceback ({log['tracebacks']})",
            )
        )
    load = result["load"]
    if load is None:
        out.append((False, "the load client reported"))
    else:
        out.append(
            (
                not load["disconnected"],
                "no load client peer was disconnected"
                + (f" ({'; '.join(load['disconnected'])})" if load["disconnected"] else ""),
            )
        )
        loss = result["loss_percent"]
        out.append(
            (
                loss is not None and loss <= settings.max_loss,
                f"copies not arrived at most {settings.max_loss:g} % "
                f"({'-' if loss is None else f'{loss:.3f} %'})",
            )
        )
    return out
