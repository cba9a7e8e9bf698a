"""The host cache against an eclipse: shares per teller, per network and per address,
and dialling spread over tellers and networks."""

from __future__ import annotations

import collections
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gnutella_router.discovery.host_cache import HostCache, HostRecord
from gnutella_router.discovery.ranges import address_group

ATTACKER = "peer/81.2.0.0/16"
HONEST = "peer/93.184.0.0/16"


def public(n: int) -> str:
    """A distinct public address per ``n``, in ``n % 250`` networks of its own."""
    return f"{11 + n % 200}.{n // 200 % 250}.{n // 50_000 % 250}.{n % 250 + 1}"


def held(cache: HostCache) -> collections.Counter[str]:
    return collections.Counter(r.teller for r in cache.hosts() if r.limited)


def test_one_teller_holds_at_most_its_share_and_churns_only_its_own() -> None:
    cache = HostCache(1000, source_share=0.05)  # 50 hosts per teller
    for n in range(30):
        assert cache.add(public(10_000 + n), 6346, "pong", 0.0, HONEST)
    for n in range(10_000):
        cache.add(public(n), 6346, "pong", float(n), ATTACKER)
    assert held(cache) == {ATTACKER: 50, HONEST: 30}
    stats = cache.statistics()
    assert (stats.largest_teller, stats.per_teller, stats.tellers) == (50, 50, 2)
    assert stats.replaced == 10_000 - 50 - sum(stats.rejected.values())
    assert stats.evicted == 0
    # Each newcomer replaced the attacker's least useful host: the freshest stay.
    kept = sorted(r.last_seen for r in cache.hosts() if r.teller == ATTACKER)
    assert kept == [float(n) for n in range(9950, 10_000)]


def test_a_teller_replaces_its_most_failed_host_first() -> None:
    cache = HostCache(100, source_share=0.02)  # 2 per teller
    cache.add("81.2.69.1", 1, "pong", 1.0, ATTACKER)
    cache.add("81.3.69.2", 1, "pong", 2.0, ATTACKER)
    cache.mark_failure("81.3.69.2", 1, 3.0)
    cache.add("81.4.69.3", 1, "pong", 4.0, ATTACKER)
    assert {r.host for r in cache.hosts()} == {"81.2.69.1", "81.4.69.3"}


def test_one_network_holds_at_most_its_share() -> None:
    cache = HostCache(1000, group_share=0.01)  # 10 per /16
    for n in range(50):
        cache.add(f"81.2.{n}.1", 6346, "pong", 0.0, f"peer/{n}.0.0.0/16")
    assert len(cache) == 10
    assert cache.statistics().rejected["group-full"] == 40
    assert cache.add("81.3.0.1", 6346, "pong", 0.0, HONEST)  # the next network has room


def test_one_address_holds_at_most_ports_per_address() -> None:
    cache = HostCache(ports_per_address=2)
    victim = "81.2.69.7"
    added = [cache.add(victim, port, "pong", 0.0, ATTACKER) for port in range(1000, 1088)]
    assert added.count(True) == 2
    assert cache.statistics().rejected["ports-per-address"] == 86
    # The limit is per address, whoever names it.
    assert not cache.add(victim, 6346, "pong", 0.0, HONEST)


def test_the_operators_hosts_count_against_no_share() -> None:
    cache = HostCache(100, source_share=0.01, group_share=0.01, ports_per_address=1)
    for port in range(1, 11):
        assert cache.add("81.2.69.7", port, "seed", 0.0)
        assert cache.add("81.2.69.8", port, "operator", 0.0)
    assert cache.add("81.2.69.9", 1, "pong", 0.0, ATTACKER)
    stats = cache.statistics()
    assert (len(cache), stats.largest_teller, stats.tellers) == (21, 1, 1)


def test_a_host_named_by_the_operator_leaves_the_shares() -> None:
    cache = HostCache(100, source_share=0.01)  # 1 per teller
    cache.add("81.2.69.1", 1, "pong", 0.0, ATTACKER)
    cache.add("81.2.69.1", 1, "seed", 1.0)
    assert cache.add("81.3.69.2", 1, "pong", 2.0, ATTACKER)  # its slot is free again
    assert len(cache) == 2
    assert cache.statistics().replaced == 0


teller_adds = st.lists(
    st.tuples(
        st.sampled_from([ATTACKER, HONEST, "peer/5.6.0.0/16", "gwebcache/gwc.example.org"]),
        st.integers(0, 400),  # the address
        st.integers(1, 4),  # the port
        st.sampled_from(["add", "fail", "connect", "remove"]),
    ),
    max_size=150,
)


@settings(max_examples=150, deadline=None)
@given(
    capacity=st.integers(1, 60),
    source_share=st.sampled_from([0.05, 0.2, 0.5, 1.0]),
    group_share=st.sampled_from([0.05, 0.3, 1.0]),
    ports=st.integers(1, 3),
    events=teller_adds,
)
def test_whatever_tellers_send_no_one_exceeds_a_share(
    capacity: int,
    source_share: float,
    group_share: float,
    ports: int,
    events: list[tuple[str, int, int, str]],
) -> None:
    cache = HostCache(
        capacity, source_share=source_share, group_share=group_share, ports_per_address=ports
    )
    stats = cache.statistics()
    for step, (teller, n, port, action) in enumerate(events):
        host = f"{11 + n % 7}.{n % 3}.{n}.1" if n < 250 else f"2a00:{n}::1"
        before = {(r.host, r.port): r.teller for r in cache.hosts()}
        if action == "add":
            cache.add(host, port, "pong", float(step), teller)
        elif action == "fail":
            cache.mark_failure(host, port, float(step))
        elif action == "connect":
            cache.mark_connected(host, port, float(step))
        else:
            cache.remove(host, port)
        records = cache.hosts()
        after = {(r.host, r.port) for r in records}
        assert len(records) <= capacity
        assert max(collections.Counter(r.teller for r in records).values(), default=0) <= (
            stats.per_teller
        )
        assert max(
            collections.Counter(address_group(r.host) for r in records).values(), default=0
        ) <= (stats.per_group)
        assert max(collections.Counter(r.host for r in records).values(), default=0) <= ports
        if action == "add" and len(before) < capacity:
            # Room left: whatever a teller sends costs nobody else a host.
            assert {k for k, t in before.items() if t != teller} <= after
        assert cache.statistics().largest_teller == max(
            collections.Counter(r.teller for r in records).values(), default=0
        )


# -- choosing whom to dial


def test_candidates_take_one_port_per_address_and_never_a_busy_address() -> None:
    cache = HostCache(ports_per_address=3)
    for port in (1, 2, 3):
        cache.add("81.2.69.7", port, "pong", 0.0, ATTACKER)
    cache.add("93.184.216.1", 1, "pong", 0.0, HONEST)
    cache.add("93.184.216.1", 2, "pong", 0.0, HONEST)
    got = cache.candidates(1.0, (), 10)
    assert sorted(host for host, _ in got) == ["81.2.69.7", "93.184.216.1"]
    got = cache.candidates(1.0, [("81.2.69.7", 2)], 10)  # being dialled, or connected
    assert [host for host, _ in got] == ["93.184.216.1"]


def test_candidates_spread_over_tellers_whatever_their_freshness() -> None:
    cache = HostCache(10_000, rng=random.Random(7))
    cache.add("93.184.216.1", 6346, "pong", 0.0, HONEST)  # heard of long ago
    for n in range(300):  # an attacker's fresh news, in many networks
        cache.add(public(n), 6346, "pong", 1000.0 + n, ATTACKER)
    # The honest teller's one host is among the first two dials, whatever the order the
    # tellers are taken in.
    assert ("93.184.216.1", 6346) in cache.candidates(2000.0, (), 2)


def test_candidates_take_new_networks_before_repeating_one() -> None:
    cache = HostCache(10_000, rng=random.Random(1))
    for n in range(40):  # one teller, all in one /16
        cache.add(f"81.2.{n}.1", 6346, "pong", float(n), ATTACKER)
    for n in range(3):  # another, three networks
        cache.add(f"93.{n}.0.1", 6346, "pong", 0.0, HONEST)
    got = cache.candidates(100.0, (), 4)
    assert len({address_group(host) for host, _ in got}) == 4
    # With fewer networks than dials, networks repeat rather than dials go missing.
    assert len(cache.candidates(100.0, (), 10)) == 10


@settings(max_examples=100, deadline=None)
@given(
    hosts=st.lists(
        st.tuples(st.integers(0, 30), st.integers(0, 5), st.integers(1, 3), st.integers(0, 2)),
        max_size=80,
    ),
    limit=st.integers(1, 12),
    seed=st.integers(0, 1000),
)
def test_candidates_are_diverse_whatever_the_cache_holds(
    hosts: list[tuple[int, int, int, int]], limit: int, seed: int
) -> None:
    cache = HostCache(1000, source_share=1.0, group_share=1.0, ports_per_address=3)
    cache_rng = random.Random(seed)
    cache._rng = cache_rng
    for n, network, port, teller in hosts:
        cache.add(f"81.{network}.{n}.1", port, "pong", float(n), f"peer/{teller}.0.0.0/16")
    got = cache.candidates(100.0, (), limit)
    eligible = {(r.host, r.port) for r in cache.hosts()}
    addresses = [host for host, _ in got]
    assert set(got) <= eligible
    assert len(addresses) == len(set(addresses))  # one port per address
    distinct_addresses = {host for host, _ in eligible}
    assert len(got) == min(limit, len(distinct_addresses))  # nothing dialable left out
    groups = {address_group(host) for host in distinct_addresses}
    assert len({address_group(host) for host in addresses}) == min(len(got), len(groups))


def test_hosts_that_accepted_us_come_before_news() -> None:
    cache = HostCache(rng=random.Random(3))
    cache.add("93.184.216.1", 6346, "pong", 0.0, HONEST)
    for n in range(20):
        cache.add(public(n), 6346, "pong", 10.0, ATTACKER)
    cache.mark_connected("93.184.216.1", 6346, 5.0)
    assert cache.candidates(20.0, (), 1) == [("93.184.216.1", 6346)]


# -- persistence


def test_tellers_survive_a_restart_and_so_do_their_shares(tmp_path: Path) -> None:
    path = tmp_path / "hosts.txt"
    cache = HostCache(1000, source_share=0.01)  # 10 per teller
    for n in range(10):
        cache.add(public(n), 6346, "pong", 0.0, ATTACKER)
    cache.save(path, 0.0)
    restored = HostCache(100, source_share=0.05)  # 5 per teller now
    assert restored.load(path, 0.0) == 10
    assert len(restored) == 5
    assert {r.teller for r in restored.hosts()} == {ATTACKER}
    assert restored.statistics().replaced == 5


def test_a_first_format_file_loads_as_one_teller(tmp_path: Path) -> None:
    path = tmp_path / "hosts.txt"
    path.write_text("".join(f"{public(n)} 6346 pong 1.0 0\n" for n in range(200)))
    cache = HostCache(1000, source_share=0.05)
    cache.load(path, 10.0)
    assert held(cache) == {"cache-file": 50}


def test_records_say_who_told_us() -> None:
    cache = HostCache()
    cache.add("81.2.69.7", 6346, "pong", 0.0, cache.peer_teller("93.184.216.34"))
    cache.add("2a00:1450::1", 6346, "x-try", 0.0, cache.peer_teller("2a02:6b8:1:2::3"))
    url = "http://GWC.Example.org:8080/gwc.php"
    cache.add("81.3.69.7", 6346, "gwebcache", 0.0, cache.gwebcache_teller(url))
    assert cache.teller_of("81.2.69.7", 6346) == "peer/93.184.0.0/16"
    assert cache.teller_of("2a00:1450::1", 6346) == "peer/2a02:6b8::/32"
    assert cache.teller_of("81.3.69.7", 6346) == "gwebcache/gwc.example.org"
    assert cache.teller_of("81.9.9.9", 6346) is None


@pytest.mark.parametrize("teller", ["", "two words", "tab\there", "x" * 301])
def test_the_teller_must_be_one_word(teller: str) -> None:
    with pytest.raises(ValueError, match="teller"):
        HostCache().add("81.2.69.7", 6346, "pong", 0.0, teller)


def test_records_are_copies() -> None:
    cache = HostCache()
    cache.add("81.2.69.7", 6346, "pong", 0.0, ATTACKER)
    (record,) = cache.hosts()
    assert isinstance(record, HostRecord)
    record.limited = False
    assert cache.hosts()[0].limited
