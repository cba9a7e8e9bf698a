"""The figures of every scenario against the floors: printed, and written as a dated
section of docs/robustness.md."""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from scripts.benchdocs import ROBUSTNESS_DOC, commit, machine, replace_section
from scripts.router_attack.settings import SECTION, STALL_FLOOR_MS, Floor, Result, Settings
from scripts.router_attack.target import COMMON_CONFIG, config_text

MIB = 1 << 20


def floors(result: Result, slots_checked: bool) -> list[Floor]:
    """Every floor of a scenario: the common ones, then its own."""
    if result.error is not None:
        return [Floor("the scenario ran to its end", False, result.error), *result.floors]
    found = [
        Floor(
            f"worst routing stall of an honest ultrapeer's pings <= {STALL_FLOOR_MS:g} ms",
            result.worst_ms <= STALL_FLOOR_MS,
            f"{result.worst_ms:.1f} ms over {len(result.trips):,} pings "
            f"(median {result.median_ms:.2f} ms; {result.idle_worst_ms:.1f} ms before the "
            f"attack; this script's own loop up to {result.client_lag * 1000:.1f} ms late)",
        ),
        Floor(
            "honest peers closed: 0",
            not result.honest_closed,
            ", ".join(result.honest_closed) or "none",
        ),
        Floor(
            "honest pending routes lost: 0",
            result.pending_lost == 0 if result.pending_delivered else None,
            f"{result.pending_lost} of the {result.pending_delivered} of "
            f"{result.pending_sent} that reached the answering peer",
        ),
    ]
    if slots_checked:
        held = result.attacker_slots or 0
        found.append(
            Floor(
                f"one untrusted address holds at most {result.slots_allowed} slot(s)",
                held <= result.slots_allowed,
                f"at most {held} held at once",
            )
        )
    found += result.floors
    clean = result.exit_status == 0 and not result.log_problems
    found.append(
        Floor(
            "router exited 0 on SIGTERM, no error logged",
            clean,
            f"exit status {result.exit_status}"
            + ("; " + "; ".join(result.log_problems) if result.log_problems else ""),
        )
    )
    return found


def print_summary(results: Sequence[Result], checked: dict[str, bool]) -> None:
    print("\nSummary")
    for result in results:
        print(f"\n{result.key}: {result.title}")
        print(f"  {rss_text(result)}")
        for floor in floors(result, checked[result.key]):
            print(f"  {floor.verdict}: {floor.name} ({floor.detail})")


def rss_text(result: Result) -> str:
    if not result.rss_before:
        return "router RSS: not read"
    return (
        f"router RSS {result.rss_before / MIB:.0f} -> {result.rss_after / MIB:.0f} MiB "
        f"(peak {result.rss_peak / MIB:.0f} MiB)"
    )


def all_met(results: Sequence[Result], checked: dict[str, bool]) -> bool:
    return all(f.met is not False for r in results for f in floors(r, checked[r.key]))


def _cell(met: bool | None, text: str) -> str:
    return text if met is not False else f"**{text}**"


def table_row(result: Result, checked: bool) -> str:
    if result.error is not None:
        return f"| {result.key} | failed: {result.error} | | | | | | |"
    found = {f.name: f for f in floors(result, checked)}
    stall = next(f for n, f in found.items() if n.startswith("worst routing stall"))
    counted = found.get("attacker counted as an offender")
    kicked = found.get("attacker kicked")
    slots = "n/a" if not checked else str(result.attacker_slots or 0)
    closed = str(len(result.honest_closed))
    rss = f"{result.rss_before / MIB:.0f} -> {result.rss_after / MIB:.0f}"
    cells = [
        result.key,
        f"{_cell(stall.met, f'{result.worst_ms:.1f}')} ({result.idle_worst_ms:.1f})",
        _cell(not result.honest_closed, closed),
        f"{result.pending_lost} of {result.pending_delivered}",
        slots,
        "n/a" if counted is None else counted.verdict,
        "not expected" if kicked is None else kicked.verdict,
        f"{rss} ({result.rss_peak / MIB:.0f})",
    ]
    return "| " + " | ".join(cells) + " |"


def section(
    results: Sequence[Result], checked: dict[str, bool], settings: Settings, load: float
) -> list[str]:
    not_met = [
        f"{r.key}: {f.name} ({f.detail})"
        for r in results
        for f in floors(r, checked[r.key])
        if f.met is False
    ]
    lines = [
        "## Hostile peers",
        "",
        f"`scripts/attack_router.py`, {datetime.date.today().isoformat()}, at {commit()}, "
        f"on {machine()}; load average before the run {load:.2f}. Each scenario has a "
        "`gnutella-router run` process of its own on 127.0.0.1, on its defaults except the "
        "settings below and the scenario's own. Beside the attacker, three honest "
        "ultrapeers with gtk-gnutella's handshake connect from 127.0.0.1, the only trusted "
        "address: U1 pings (TTL 1) without a break, 1 ms after each pong; U2 and U3 read "
        "everything and ping every 0.5 s. Before the attack U2 leaves "
        f"{results[0].pending_sent if results else 0} queries pending that reach U3; after "
        "it U3 answers each with a hit, which must reach U2. Attackers connect from "
        "127.0.0.2-4, untrusted (one host each), and their connections in the router are "
        "counted every 0.5 s from `/connections` (and by the attacker itself). The attack "
        "window runs from the first attacking byte until the router has read the "
        "attacker's last one (the pong of a ping sent last), plus 1 s; *worst stall* is "
        "the longest round trip of U1's pings that overlapped it, beside (in brackets) the "
        "worst of the second before the attack; the script's own event loop, which runs "
        "the attackers and the honest peers alike, is timed too (how late a 1 ms sleep "
        "wakes), so that a stall of the script is not taken for the router's. "
        "Counters are the growth of the router's `/stats` over the attack; RSS is VmRSS "
        "before and after it, and VmHWM. Timed attacks last "
        f"{settings.seconds:g} s (seed {settings.seed}).",
        "",
        "```toml",
        *config_text(COMMON_CONFIG).strip().splitlines(),
        "# plus [admin] listen on a free loopback port",
        "```",
        "",
        "| scenario | worst stall ms (idle) | honest peers closed | pending routes lost "
        "| attacker's most slots | offender counted | kicked | RSS MiB before -> after (peak) |",
        "|---|---:|---:|---:|---:|---|---|---:|",
        *(table_row(r, checked[r.key]) for r in results),
        "",
    ]
    for result in results:
        lines += [f"### {result.key}", "", result.title + ".", ""]
        if result.config:
            changed = ", ".join(
                f"`{table}.{k} = {v!r}`"
                for table, values in result.config.items()
                for k, v in values.items()
            )
            lines += [f"Settings changed for it: {changed}.", ""]
        figures = [f"- {label}: {value}" for label, value in result.figures]
        if result.attack_seconds:
            figures.append(f"- attack window: {result.attack_seconds:.2f} s, then 1 s of settling")
        lines += [*figures, *([""] if figures else [])]
        lines += [
            *(f"- {f.verdict}: {f.name} ({f.detail})" for f in floors(result, checked[result.key])),
            "",
        ]
    lines += (
        ["Every floor was met.", ""]
        if not not_met
        else ["Not met:", "", *(f"- {text}" for text in not_met), ""]
    )
    lines += [
        "Rerun (each scenario takes seconds to a minute; the whole run a few minutes):",
        "",
        "```sh",
        ".venv/bin/python scripts/attack_router.py --write",
        "```",
    ]
    return lines


def write(
    results: Sequence[Result], checked: dict[str, bool], settings: Settings, load: float
) -> str:
    return str(replace_section(SECTION, section(results, checked, settings, load), ROBUSTNESS_DOC))
