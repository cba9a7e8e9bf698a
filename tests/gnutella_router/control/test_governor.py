"""The thread governor grows the router's pool when its queue backs up, and shrinks it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gnutella_router.config import GovernorConfig, load_config
from gnutella_router.control.governor import ThreadGovernor
from gnutella_router.runtime.stage import Stage
from gnutella_router.traffic.load import LoadSettings, run_load
from tests.support.peers import running_daemons
from traffic_models.arrivals import ConstantRate
from traffic_models.generator import TrafficGenerator
from traffic_models.mix import MessageMix


async def _nothing(batch: list[int]) -> None:
    return None


def governed(**settings: object) -> tuple[Stage[int], ThreadGovernor]:
    stage: Stage[int] = Stage("test", _nothing, threshold=100, max_pool_size=20)
    config = GovernorConfig(**{"enabled": True, "threshold": 10, "idle_timeout": 5.0, **settings})  # type: ignore[arg-type]
    return stage, ThreadGovernor(stage, config)


def test_a_long_queue_adds_a_thread_up_to_the_maximum() -> None:
    stage, governor = governed(max_threads=3)
    stage.queue.admit(list(range(10)))
    assert governor.step(1.0).action == "added"
    assert stage.pool_size == 2
    assert stage.limiter.total_tokens == 2
    governor.step(2.0)
    assert stage.pool_size == 3
    assert governor.step(3.0).action == ""  # at the maximum
    assert governor.added == 2


def test_a_short_queue_adds_nothing() -> None:
    stage, governor = governed()
    stage.queue.admit(list(range(9)))
    assert governor.step(1.0).action == ""
    assert stage.pool_size == 1


def test_an_unneeded_thread_is_removed_after_the_idle_timeout() -> None:
    stage, governor = governed(idle_timeout=5.0)
    stage.queue.admit(list(range(10)))
    governor.step(1.0)
    stage.queue.take(100)
    assert stage.pool_size == 2
    governor._last_full_at = 1.0
    assert governor.step(4.0).action == ""  # idle, but not for long enough
    assert governor.step(6.5).action == "removed"
    assert stage.pool_size == 1
    assert governor.step(20.0).action == ""  # never below the initial size


def test_the_thrashing_guard_undoes_an_addition_that_did_not_help() -> None:
    stage, governor = governed(thrashing_guard=True)
    stage.queue.admit(list(range(50)))
    governor.step(1.0)
    assert stage.pool_size == 2
    sample = governor.step(2.0)  # no events handled: throughput did not rise
    assert sample.action == "reverted"
    assert stage.pool_size == 1
    assert governor.step(3.0).action == ""  # held until the queue drains


def test_the_governor_threshold_must_be_reachable() -> None:
    import pytest

    from gnutella_router.config import ConfigError

    with pytest.raises(ConfigError, match=r"governor\.threshold"):
        load_config(
            None,
            {"governor.enabled": True, "governor.threshold": 5000, "router.queue_threshold": 1000},
        )


@pytest.mark.e2e
async def test_the_pool_grows_under_the_papers_query_delay(tmp_path: Path) -> None:
    overrides = {
        "router.query_delay_ms": 20,
        "router.queue_threshold": 200,
        "router.batch_size": 50,
        "governor.enabled": True,
        "governor.interval": 0.2,
        "governor.threshold": 100,
        "governor.max_threads": 8,
    }
    async with running_daemons(tmp_path, overrides=overrides) as (daemon,):
        half_queries = MessageMix("half", {0x00: 0.5, 0x80: 0.5})
        traffic = TrafficGenerator(mix=half_queries, arrivals=ConstantRate(300), seed=3)
        settings = LoadSettings(target=daemon.address, peers=3, duration=4.0, drain=1.0)
        report = await run_load(settings, traffic)
        governor = daemon.governor
        assert governor is not None
        # 300 msgs/s x 50 % queries x 20 ms = 3 busy threads by Little's law.
        assert governor.added >= 2
        assert max(s.pool_size for s in governor.samples) >= 3
        assert report.received == report.expected  # backpressure: nothing lost
