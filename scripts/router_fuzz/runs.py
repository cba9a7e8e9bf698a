"""The run: every fuzzing task, the good peers and the watchers in one trio nursery,
stopped by the first of the frame target, the duration cap and the router's death, then
a settling time for the routing checks; and the router's own counters, read from its
admin interface.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

import trio

from gnutella_router.observe.admin_client import FetchError, fetch
from scripts.router_fuzz.checks import RoutingChecks
from scripts.router_fuzz.frames import FrameFuzzing
from scripts.router_fuzz.handshakes import HandshakeFuzzing
from scripts.router_fuzz.payloads import Template
from scripts.router_fuzz.router import RssWatch
from scripts.router_fuzz.settings import (
    CROWD_AFTER,
    FLOOD_AFTER_CROWD,
    PROGRESS_SECONDS,
    Figures,
    FuzzError,
    Settings,
)
from scripts.router_fuzz.wire import RouterTarget, close_quietly
from scripts.runner import Router, leaf_exceptions


async def progress(figures: Figures) -> None:
    last_frames, last_time = 0, trio.current_time()
    while True:
        await trio.sleep(PROGRESS_SECONDS)
        now = trio.current_time()
        rate = (figures.frames_sent - last_frames) / (now - last_time)
        last_frames, last_time = figures.frames_sent, now
        print(
            f"  {now - figures.started:5.0f} s  frames {figures.frames_sent:>9,} ({rate:,.0f}/s)"
            f"  sessions {figures.sessions['opened']:,}  connections {figures.connections_opened:,}"
            f"  checks {figures.checks_passed} passed / {figures.checks_failed} failed"
            f"  RSS {figures.rss_peak_sampled / 2**20:.0f} MiB peak",
            flush=True,
        )


async def fuzz(
    router: Router,
    target: RouterTarget,
    templates: dict[str, list[Template]],
    settings: Settings,
    figures: Figures,
) -> None:
    """Everything that talks to the router, from the first check to the last."""
    watch = RssWatch(router, settings, figures)
    figures.rss_before = watch.sample()
    checks = RoutingChecks(target, settings, figures)
    frames = FrameFuzzing(target, templates, settings, figures)
    handshakes = HandshakeFuzzing(target, templates, settings, figures)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch.run)
        figures.started = trio.current_time()
        await checks.start(nursery)
        await checks.warm_up()
        nursery.start_soon(checks.run)
        nursery.start_soon(progress, figures)

        fuzz_started = trio.current_time()
        deadline = fuzz_started + settings.duration
        with trio.move_on_at(deadline) as cap:
            async with trio.open_nursery() as fuzzing:
                async with trio.open_nursery() as frame_workers:
                    for index in range(settings.connections):
                        frame_workers.start_soon(frames.worker, index)
                    for index in range(settings.handshake_workers):
                        fuzzing.start_soon(handshakes.worker, index)
                    for index in range(settings.slowloris):
                        fuzzing.start_soon(handshakes.slowloris, index)
                    for index in range(settings.drippers):
                        fuzzing.start_soon(handshakes.dripper, index)
                    fuzzing.start_soon(crowd_then_flood, handshakes, settings)
                    fuzzing.start_soon(stop_if_died, watch, frame_workers.cancel_scope)
                fuzzing.cancel_scope.cancel()
        handshakes.stopping = True
        figures.fuzz_seconds = trio.current_time() - fuzz_started
        figures.ended_by = "the duration cap" if cap.cancelled_caught else "the frame target"
        if watch.died.is_set():
            figures.ended_by = "the router's death"
        print(
            f"fuzzing ended by {figures.ended_by} after {figures.fuzz_seconds:.1f} s; settling",
            flush=True,
        )

        settle_end = trio.current_time() + settings.settle
        await trio.sleep_until(settle_end)
        await checks.finish()
        recovered = [t for t in checks.passed_after if t > fuzz_started + figures.fuzz_seconds]
        if settings.settle >= 2 and not recovered and not watch.died.is_set():
            figures.problem("no routing check passed after the fuzzing ended")
        figures.rss_after = watch.sample() if not watch.died.is_set() else 0
        nursery.cancel_scope.cancel()
    for peer in checks.peers:
        if peer.stream is not None:
            await close_quietly(peer.stream)


async def crowd_then_flood(handshakes: HandshakeFuzzing, settings: Settings) -> None:
    """The crowd and then the burst of attempts, early enough to happen in any run (the
    frame target is usually reached long before the duration cap)."""
    await trio.sleep(min(settings.duration / 3, CROWD_AFTER))
    await handshakes.crowd()
    await trio.sleep(min(settings.duration / 6, FLOOD_AFTER_CROWD))
    await handshakes.flood()


async def stop_if_died(watch: RssWatch, scope: trio.CancelScope) -> None:
    await watch.died.wait()
    scope.cancel()


def run_trio(
    router: Router,
    target: RouterTarget,
    templates: dict[str, list[Template]],
    settings: Settings,
    figures: Figures,
) -> None:
    """:func:`fuzz` under trio, with its exception groups opened: a Ctrl-C or a
    :class:`FuzzError` comes out as itself, anything else (a bug here) as it is."""
    try:
        trio.run(fuzz, router, target, templates, settings, figures)
    except BaseExceptionGroup as group:
        leaves = leaf_exceptions(group)
        for kind in (KeyboardInterrupt, FuzzError):
            for leaf in leaves:
                if isinstance(leaf, kind):
                    raise leaf from None
        raise


def router_counters(admin: tuple[str, int], figures: Figures) -> dict[str, Any]:
    """The router's own account of the run, and what in it fails the run."""
    try:
        stats = fetch(admin, "/stats", timeout=10.0)
        stages = fetch(admin, "/stages", timeout=10.0)
    except FetchError as exc:
        figures.problem(f"the router's admin interface did not answer: {exc}")
        return {}
    assert isinstance(stats, dict)
    assert isinstance(stages, dict)
    server = stats.get("server", {})
    router = stats.get("router", {})
    failed = server.get("failed_connections", 0)
    if failed:
        figures.problem(f"{failed} connection tasks failed in the router (its failed_connections)")
    handler_errors = {name: stage.get("handler_errors", 0) for name, stage in iter_stages(stages)}
    if any(handler_errors.values()):
        figures.problem(f"stage handlers raised: {handler_errors}")
    dropped = collections.Counter[str]()
    for reason, by_type in router.get("dropped", {}).items():
        dropped[reason] += sum(by_type.values())
    return {
        "accepted": server.get("accepted"),
        "completed": server.get("completed"),
        "refused": server.get("refused"),
        "closed": server.get("closed"),
        "failed_connections": failed,
        "kicked": server.get("kicked"),
        "messages_in": server.get("messages_in"),
        "bytes_in": server.get("bytes_in"),
        "received_by_type": by_named_type(router.get("received", {})),
        "dropped_by_reason": dict(dropped.most_common()),
        "handler_errors": handler_errors,
    }


def by_named_type(counts: dict[str, int]) -> dict[str, int]:
    """Counts per message type, with the codes that have no name (``0x7f``...) summed."""
    named = {name: n for name, n in counts.items() if not name.startswith("0x")}
    named["codes without a name"] = sum(n for name, n in counts.items() if name.startswith("0x"))
    return dict(sorted(named.items(), key=lambda item: -item[1]))


def iter_stages(stages: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every stage in a ``/stages`` answer, wherever it is nested."""
    for key, value in stages.items():
        if isinstance(value, dict):
            if "handler_errors" in value:
                yield str(value.get("name", key)), value
            else:
                yield from iter_stages(value)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, dict) and "handler_errors" in item:
                    yield str(item.get("name", key)), item
