"""How much load the load client itself can drive: its ceiling, against a trivial echo.

Run from the repository root, in the project's virtual environment:

    .venv/bin/python scripts/bench_load_client.py            # print the figures
    .venv/bin/python scripts/bench_load_client.py --write    # also update docs/benchmarks.md

The load client (`gnutella-router load`) drives open-loop traffic and times every copy
that comes back. Its own cost bounds every experiment, so it is measured alone: against
`gnutella_router.lab.traffic.echo.EchoRouter` with no delay, running in the same process (both
share one core, so the figure is conservative), with one injecting and two sinking
peers and the paper's mix (15 % queries). Each offered rate runs for a few seconds; a
rate is *sustained* when every copy arrives, fewer than 1 % of sends are late (more than
1 ms behind schedule) and the achieved rate is within 2 % of the offered one. The
project's floor: at least 30,000 msgs/s, three times what the paper's experiments need.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import trio

from gnutella_router.lab.traffic.echo import EchoRouter
from gnutella_router.lab.traffic.load import LoadSettings, run_load
from scripts.benchdocs import machine, provenance, replace_section
from traffic_models.arrivals import ConstantRate
from traffic_models.generator import TrafficGenerator
from traffic_models.latency import LoadReport
from traffic_models.mix import PAPER_MIX

FLOOR = 30_000
RATES = (10_000, 20_000, 30_000, 40_000, 50_000, 60_000)


def sustained(report: LoadReport, offered: float) -> bool:
    sent = sum(report.sent.values())
    return (
        report.received == report.expected
        and report.late <= 0.01 * sent
        and report.achieved_rate >= 0.98 * offered
    )


async def one_rate(rate: float, duration: float) -> LoadReport:
    echo = EchoRouter()
    async with trio.open_nursery() as nursery:
        address = await nursery.start(echo.serve)
        settings = LoadSettings(target=address, peers=3, duration=duration, drain=0.5)
        generator = TrafficGenerator(mix=PAPER_MIX, arrivals=ConstantRate(rate), seed=1)
        report = await run_load(settings, generator)
        nursery.cancel_scope.cancel()
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per rate")
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args(argv)

    rows: list[str] = []
    best = 0.0
    for rate in RATES:
        report = trio.run(one_rate, float(rate), args.duration)
        ok = sustained(report, rate)
        sent = sum(report.sent.values())
        one_hop = report.latency.get("one-hop", {}).get("ping")
        p99 = f"{one_hop.p99:,} µs" if one_hop else "-"
        lost = sum(report.expected.values()) - sum(report.received.values())
        line = (
            f"| {rate:,} | {report.achieved_rate:,.0f} | {report.late / max(1, sent):.2%} "
            f"| {lost:,} | {p99} | {'yes' if ok else 'no'} |"
        )
        print(line)
        rows.append(line)
        if ok:
            best = max(best, rate)
        else:
            break
    verdict = "met" if best >= FLOOR else "MISSED"
    print(f"highest sustained rate: {best:,.0f} msgs/s (floor {FLOOR:,}: {verdict})")
    if args.write:
        lines = [
            "## Load client ceiling (`scripts/bench_load_client.py`)",
            "",
            f"Measured {provenance()} on {machine()}. The load client against a trivial echo "
            "(`gnutella_router.lab.traffic.echo.EchoRouter`, no delay) in the same process, "
            "so both share one core; one injecting and two sinking peers, the paper's mix, "
            f"{args.duration:g} s per rate. Sustained: every copy arrived, "
            "under 1 % of sends more than 1 ms late, "
            "achieved rate within 2 % of the offered one.",
            "",
            "| offered msgs/s | achieved msgs/s | late sends | copies lost | one-hop p99 (ping) "
            "| sustained |",
            "|---:|---:|---:|---:|---:|---|",
            *rows,
            "",
            f"Highest sustained rate: **{best:,.0f} msgs/s** (floor {FLOOR:,}: {verdict}).",
            "",
            "Rerun: `.venv/bin/python scripts/bench_load_client.py --write`"
            " (exits 1 if the floor is missed).",
        ]
        print(f"wrote {replace_section('bench_load_client', lines)}")
    return 0 if best >= FLOOR else 1


if __name__ == "__main__":
    raise SystemExit(main())
