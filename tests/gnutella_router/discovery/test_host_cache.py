"""The bootstrap stage's host cache: admission, ranking, backoff, bounds and persistence."""

from __future__ import annotations

import ipaddress
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gnutella_router.discovery.host_cache import (
    FILE_HEADER,
    HostCache,
    HostRecord,
)

# -- admission


def test_add_accepts_public_addresses_in_canonical_form() -> None:
    cache = HostCache()
    assert cache.add("81.2.69.7", 6346, "pong", 1.0)
    assert cache.add("2A02:6B8:0:0::1", 6348, "x-try", 1.0)
    assert cache.add("::ffff:93.184.216.1", 6346, "gwebcache", 1.0)
    assert ("81.2.69.7", 6346) in cache
    assert ("2a02:6b8::1", 6348) in cache
    assert ("93.184.216.1", 6346) in cache
    assert ("81.2.69.7", 6347) not in cache
    assert "81.2.69.7" not in cache
    assert len(cache) == 3
    assert cache.statistics().added == 3


@pytest.mark.parametrize(
    ("host", "port", "reason"),
    [
        ("example.com", 6346, "bad-address"),
        ("1.2.3", 6346, "bad-address"),
        ("01.2.3.4", 6346, "bad-address"),  # octal-looking, ambiguous
        ("", 6346, "bad-address"),
        ("fe80::1%eth0", 6346, "bad-address"),
        ("[2a02:6b8::1]", 6346, "bad-address"),
        ("81.2.69.7", 0, "port-zero"),
        ("81.2.69.7", 65536, "bad-port"),
        ("81.2.69.7", -1, "bad-port"),
        ("0.0.0.0", 6346, "unspecified"),
        ("0.1.2.3", 6346, "unspecified"),
        ("::", 6346, "unspecified"),
        ("224.0.0.1", 6346, "multicast"),
        ("239.255.255.250", 6346, "multicast"),
        ("ff02::1", 6346, "multicast"),
        ("255.255.255.255", 6346, "reserved"),
        ("240.0.0.1", 6346, "reserved"),
        ("4000::1", 6346, "reserved"),
    ],
)
def test_add_refuses_undialable_addresses_and_counts_why(host: str, port: int, reason: str) -> None:
    cache = HostCache()
    assert cache.add(host, port, "pong", 0.0) is False
    assert len(cache) == 0
    rejected = cache.statistics().rejected
    assert rejected[reason] == 1
    assert sum(rejected.values()) == 1


def test_add_refuses_values_of_the_wrong_type() -> None:
    cache = HostCache()
    assert cache.add(0x01020304, 6346, "pong", 0.0) is False  # type: ignore[arg-type]
    assert cache.add("81.2.69.7", True, "pong", 0.0) is False
    assert cache.add("81.2.69.7", "6346", "pong", 0.0) is False  # type: ignore[arg-type]
    rejected = cache.statistics().rejected
    assert (rejected["bad-address"], rejected["bad-port"]) == (1, 2)


NON_PUBLIC = [
    ("127.0.0.1", "loopback"),
    ("127.5.6.7", "loopback"),
    ("::1", "loopback"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.254", "private"),
    ("192.168.1.1", "private"),
    ("::ffff:192.168.0.1", "private"),
    ("fd00::1", "private"),
    ("fc12::1", "private"),
    ("fec0::1", "private"),  # site-local, deprecated
    ("169.254.169.254", "link-local"),  # a cloud's metadata service
    ("fe80::1", "link-local"),
    ("100.64.0.1", "shared"),  # carrier-grade NAT
    ("100.127.255.254", "shared"),
    ("192.0.2.7", "documentation"),
    ("198.51.100.1", "documentation"),
    ("203.0.113.9", "documentation"),
    ("2001:db8::7", "documentation"),
    ("198.18.0.1", "special"),  # benchmarking
    ("192.0.0.1", "special"),  # IETF protocol assignments
    ("2001::1", "special"),  # Teredo
]


@pytest.mark.parametrize(("host", "reason"), NON_PUBLIC)
def test_non_public_addresses_are_refused_unless_allowed(host: str, reason: str) -> None:
    public = HostCache()  # a router on the internet: the default
    assert public.add(host, 6346, "pong", 0.0, teller="peer/81.2.0.0/16") is False
    assert public.statistics().rejected[reason] == 1
    assert sum(public.statistics().rejected.values()) == 1
    lan = HostCache(allow_private=True)
    assert lan.add(host, 6346, "pong", 0.0, teller="peer/81.2.0.0/16") is True
    assert (host, 6346) in lan


@pytest.mark.parametrize(("host", "_reason"), NON_PUBLIC)
def test_the_operators_hosts_may_be_anywhere(host: str, _reason: str) -> None:
    cache = HostCache()
    assert cache.add(host, 6346, "seed", 0.0)
    assert cache.add(host, 6347, "operator", 0.0)
    assert not any(r.limited for r in cache.hosts())


@pytest.mark.parametrize(
    "host", ["172.32.0.1", "11.0.0.1", "100.63.255.255", "100.128.0.1", "192.0.3.1", "2a00::7"]
)
def test_near_private_addresses_are_public(host: str) -> None:
    cache = HostCache()
    assert cache.add(host, 6346, "pong", 0.0) is True


def test_local_hosts_need_a_local_teller() -> None:
    cache = HostCache(local_networks=["127.0.0.0/8", "10.64.0.0/16"])
    lab_peer = cache.peer_teller("10.64.3.4")
    stranger = cache.peer_teller("81.2.69.7")
    assert lab_peer == "peer/10.64.3.4/32"  # local peers each count alone ...
    assert stranger == "peer/81.2.0.0/16"  # ... strangers by their network
    assert cache.add("10.64.9.9", 6346, "pong", 0.0, lab_peer)
    assert cache.add("127.0.0.1", 6346, "pong", 0.0, cache.peer_teller("127.0.0.1"))
    assert cache.add(
        "127.0.0.1", 6347, "gwebcache", 0.0, cache.gwebcache_teller("http://localhost:8080/")
    )
    assert not cache.add("10.64.9.9", 6347, "pong", 0.0, stranger)
    assert not cache.add("127.0.0.1", 6348, "pong", 0.0, stranger)
    assert not cache.add("10.65.0.1", 6346, "pong", 0.0, lab_peer)  # private, not local
    assert not cache.add(
        "127.0.0.1", 6349, "gwebcache", 0.0, cache.gwebcache_teller("http://gwc.example.org/")
    )
    assert cache.statistics().rejected["private"] == 2
    assert cache.statistics().rejected["loopback"] == 2
    # Local hosts are outside the limits: one address, any number of ports.
    for port in range(7000, 7100):
        assert cache.add("127.0.0.1", port, "pong", 0.0, cache.peer_teller("127.0.0.2"))
    assert cache.statistics().largest_teller == 0


def test_nothing_is_local_when_no_network_is() -> None:
    cache = HostCache(local_networks=())
    assert cache.peer_teller("127.0.0.1") == "peer/127.0.0.0/16"
    assert not cache.add("127.0.0.1", 6346, "pong", 0.0, cache.peer_teller("127.0.0.1"))


@pytest.mark.parametrize("source", ["", "two words", " pong", "pong\n"])
def test_the_source_must_be_one_word(source: str) -> None:
    with pytest.raises(ValueError, match="source"):
        HostCache().add("81.2.69.7", 6346, source, 0.0)


def test_adding_a_known_host_refreshes_it_without_forgiving_failures() -> None:
    cache = HostCache()
    cache.add("81.2.69.7", 6346, "pong", 1.0)
    cache.mark_failure("81.2.69.7", 6346, 2.0)
    assert cache.add("81.2.69.7", 6346, "x-try", 50.0)
    (record,) = cache.hosts()
    assert record == HostRecord("81.2.69.7", 6346, "pong", 1.0, 50.0, 1, 7.0, None, "pong")
    stats = cache.statistics()
    assert (stats.added, stats.refreshed, stats.size) == (1, 1, 1)


def test_a_host_named_as_a_seed_becomes_a_seed() -> None:
    cache = HostCache()
    cache.add("81.2.69.7", 6346, "pong", 1.0)
    cache.add("81.2.69.7", 6346, "seed", 2.0)
    cache.add("81.2.69.7", 6346, "pong", 3.0)
    assert cache.hosts()[0].source == "seed"


# -- capacity


def unlimited(capacity: int) -> HostCache:
    """A cache whose shares never bind, for the rules that are not about them."""
    return HostCache(capacity, source_share=1.0, group_share=1.0, ports_per_address=65535)


def test_a_full_cache_evicts_the_most_failed_then_the_stalest() -> None:
    cache = unlimited(capacity=4)
    cache.add("93.184.216.1", 1, "seed", 0.0)  # oldest of all, but a seed
    cache.add("81.2.69.1", 1, "pong", 1.0)
    cache.add("81.2.69.2", 1, "pong", 2.0)
    cache.add("81.2.69.3", 1, "pong", 3.0)
    cache.mark_failure("81.2.69.3", 1, 4.0)
    cache.mark_failure("81.2.69.3", 1, 5.0)
    cache.mark_failure("81.2.69.2", 1, 5.0)
    cache.add("81.2.69.4", 1, "pong", 6.0)
    assert ("81.2.69.3", 1) not in cache  # two failures
    cache.add("81.2.69.5", 1, "pong", 7.0)
    assert ("81.2.69.2", 1) not in cache  # one failure
    cache.add("81.2.69.6", 1, "pong", 8.0)
    assert ("81.2.69.1", 1) not in cache  # no failures, seen longest ago
    assert ("93.184.216.1", 1) in cache
    assert len(cache) == 4
    assert cache.statistics().evicted == 3


def test_a_refreshed_host_is_no_longer_the_stalest() -> None:
    cache = unlimited(capacity=2)
    cache.add("81.2.69.1", 1, "pong", 1.0)
    cache.add("81.2.69.2", 1, "pong", 2.0)
    cache.add("81.2.69.1", 1, "pong", 3.0)
    cache.add("81.2.69.3", 1, "pong", 4.0)
    assert ("81.2.69.1", 1) in cache
    assert ("81.2.69.2", 1) not in cache


def test_a_cache_of_seeds_only_evicts_a_seed() -> None:
    cache = unlimited(capacity=2)
    cache.add("93.184.216.1", 1, "seed", 0.0)
    cache.add("93.184.216.2", 1, "seed", 1.0)
    cache.mark_failure("93.184.216.2", 1, 2.0)
    cache.add("93.184.216.3", 1, "seed", 3.0)
    assert ("93.184.216.2", 1) not in cache
    assert len(cache) == 2
    assert cache.statistics().evicted == 1


host_events = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["seed", "pong", "x-try"]), st.integers(0, 15)),
        st.tuples(st.sampled_from(["fail", "connect", "remove"]), st.integers(0, 15)),
    ),
    max_size=60,
)


@settings(max_examples=150)
@given(capacity=st.integers(1, 6), events=host_events)
def test_eviction_always_takes_a_least_useful_host(
    capacity: int, events: list[tuple[str, int]]
) -> None:
    cache = unlimited(capacity=capacity)
    for step, (event, n) in enumerate(events):
        now = float(step // 2)  # ties in last_seen happen, on purpose
        host = f"81.2.69.{n}"
        if event == "fail":
            cache.mark_failure(host, 1, now)
        elif event == "connect":
            cache.mark_connected(host, 1, now)
        elif event == "remove":
            cache.remove(host, 1)
        else:
            before = {(r.host, r.port): r for r in cache.hosts()}
            full = len(before) >= capacity and (host, 1) not in before
            assert cache.add(host, 1, event, now)
            after = {(r.host, r.port) for r in cache.hosts()}
            if full:
                (victim,) = set(before) - after
                pool = [r for r in before.values() if r.source != "seed"] or list(before.values())
                best = min((-r.failures, r.last_seen) for r in pool)
                gone = before[victim]
                assert (-gone.failures, gone.last_seen) == best
        assert len(cache) <= capacity


def test_ranking_bookkeeping_stays_bounded_under_endless_refreshes() -> None:
    # Eviction ranks hosts with a lazily pruned heap; re-advertising the same few hosts
    # forever must not grow it without bound.
    cache = unlimited(capacity=10)
    for step in range(5000):
        cache.add(f"81.2.69.{step % 5}", 1, "pong", float(step))
    assert len(cache._heap) <= 2 * len(cache) + 64
    cache.add("81.2.69.200", 1, "pong", 9999.0)
    assert len(cache) == 6


# -- choosing whom to dial


def test_candidates_put_seeds_then_reached_hosts_then_fresh_news_first() -> None:
    cache = HostCache()
    cache.add("81.2.69.1", 1, "pong", 10.0)
    cache.add("81.2.69.2", 1, "pong", 20.0)
    cache.add("81.2.69.3", 1, "pong", 5.0)
    cache.add("81.2.69.4", 1, "pong", 1.0)
    cache.add("93.184.216.1", 1, "seed", 0.0)
    cache.mark_connected("81.2.69.3", 1, 30.0)
    cache.mark_connected("81.2.69.4", 1, 40.0)
    assert cache.candidates(50.0, (), 10) == [
        ("93.184.216.1", 1),
        ("81.2.69.4", 1),  # connected most recently
        ("81.2.69.3", 1),
        ("81.2.69.2", 1),  # heard of most recently
        ("81.2.69.1", 1),
    ]
    assert cache.candidates(50.0, (), 2) == [("93.184.216.1", 1), ("81.2.69.4", 1)]
    assert cache.candidates(50.0, (), 0) == []
    assert [(r.host, r.port) for r in cache.hosts()] == cache.candidates(50.0, (), 10)


def test_candidates_leave_out_ourselves_and_peers_in_any_spelling() -> None:
    cache = HostCache()
    for n in range(1, 5):
        cache.add(f"81.2.69.{n}", 6346, "pong", float(n))
    cache.add("2a02:6b8::1", 6346, "pong", 0.0)
    exclude = [
        ("81.2.69.4", 6346),
        ("::ffff:81.2.69.3", 6346),
        ("2A02:6B8::1", 6346),
        ("not an address", 6346),
        ("81.2.69.2", 6347),  # another port of an address being dialled: wait
    ]
    got = cache.candidates(10.0, exclude, 10)
    assert got == [("81.2.69.1", 6346)]
    assert len(set(got)) == len(got)


def test_a_failed_host_waits_out_a_doubling_capped_backoff() -> None:
    cache = HostCache(backoff_initial=5.0, backoff_max=30.0)
    cache.add("81.2.69.1", 1, "pong", 0.0)
    now = 100.0
    waits = []
    for _ in range(6):
        assert cache.mark_attempt("81.2.69.1", 1, now)
        assert cache.candidates(now, (), 5) == []  # held back while connecting
        assert cache.mark_failure("81.2.69.1", 1, now)
        wait = cache.hosts()[0].next_attempt - now
        waits.append(wait)
        assert cache.candidates(now + wait - 0.001, (), 5) == []
        assert cache.candidates(now + wait, (), 5) == [("81.2.69.1", 1)]
        now += wait
    assert waits == [5.0, 10.0, 20.0, 30.0, 30.0, 30.0]
    stats = cache.statistics()
    assert (stats.attempts, stats.dial_failures, stats.connections) == (6, 6, 0)


def test_a_connection_clears_the_backoff() -> None:
    cache = HostCache(backoff_initial=5.0, backoff_max=300.0)
    cache.add("81.2.69.1", 1, "pong", 0.0)
    for t in (1.0, 2.0, 3.0):
        cache.mark_failure("81.2.69.1", 1, t)
    assert cache.mark_connected("81.2.69.1", 1, 50.0)
    (record,) = cache.hosts()
    assert (record.failures, record.last_connected, record.last_seen) == (0, 50.0, 50.0)
    assert cache.candidates(50.0, (), 1) == [("81.2.69.1", 1)]
    cache.mark_failure("81.2.69.1", 1, 60.0)
    assert cache.hosts()[0].next_attempt == 65.0
    assert cache.statistics().connections == 1


def test_a_huge_failure_count_does_not_overflow() -> None:
    cache = HostCache(backoff_initial=5.0, backoff_max=300.0)
    cache.add("81.2.69.1", 1, "pong", 0.0)
    for _ in range(2000):
        cache.mark_failure("81.2.69.1", 1, 0.0)
    assert cache.hosts()[0].next_attempt == 300.0


def test_marks_on_unknown_hosts_change_nothing() -> None:
    cache = HostCache()
    assert cache.mark_attempt("81.2.69.9", 1, 0.0) is False
    assert cache.mark_failure("81.2.69.9", 1, 0.0) is False
    assert cache.mark_connected("81.2.69.9", 1, 0.0) is False
    assert cache.mark_failure("garbage", 1, 0.0) is False
    stats = cache.statistics()
    assert (stats.attempts, stats.dial_failures, stats.connections, stats.size) == (0, 0, 0, 0)


# -- forgetting


def test_remove() -> None:
    cache = HostCache()
    cache.add("81.2.69.1", 1, "pong", 0.0)
    assert cache.remove("::ffff:81.2.69.1", 1) is True
    assert cache.remove("81.2.69.1", 1) is False
    assert cache.remove("nonsense", 1) is False
    assert len(cache) == 0


def test_remove_then_evict_never_resurrects_or_miscounts() -> None:
    cache = unlimited(capacity=2)
    cache.add("81.2.69.1", 1, "pong", 0.0)
    cache.add("81.2.69.2", 1, "pong", 1.0)
    cache.remove("81.2.69.1", 1)
    cache.add("81.2.69.3", 1, "pong", 2.0)  # room left: nothing evicted
    assert cache.statistics().evicted == 0
    cache.add("81.2.69.4", 1, "pong", 3.0)
    assert {(r.host, r.port) for r in cache.hosts()} == {("81.2.69.3", 1), ("81.2.69.4", 1)}


def test_expire_drops_hosts_not_heard_of_for_max_age_except_seeds() -> None:
    cache = HostCache(max_age=100.0)
    cache.add("93.184.216.1", 1, "seed", 0.0)
    cache.add("81.2.69.1", 1, "pong", 0.0)
    cache.add("81.2.69.2", 1, "pong", 0.0)
    cache.add("81.2.69.3", 1, "pong", 0.0)
    cache.add("81.2.69.2", 1, "pong", 60.0)  # advertised again
    cache.mark_connected("81.2.69.3", 1, 70.0)
    assert cache.expire(100.0) == 0
    assert cache.expire(100.5) == 1
    assert {r.host for r in cache.hosts()} == {"93.184.216.1", "81.2.69.2", "81.2.69.3"}
    assert cache.expire(1000.0) == 2
    assert [r.host for r in cache.hosts()] == ["93.184.216.1"]
    assert cache.statistics().expired == 3


# -- persistence


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "hosts.txt"
    cache = HostCache()
    cache.add("93.184.216.1", 6346, "seed", 900.0)
    cache.add("81.2.69.1", 6346, "pong", 950.0, cache.peer_teller("93.0.1.2"))
    cache.add("2a02:6b8::5", 6348, "x-try", 990.0)
    cache.mark_failure("2a02:6b8::5", 6348, 995.0)
    cache.mark_failure("2a02:6b8::5", 6348, 996.0)
    assert cache.save(path, now=1000.0) == 3
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines == [
        FILE_HEADER,
        "93.184.216.1 6346 seed seed 100.000 0",
        "2a02:6b8::5 6348 x-try x-try 10.000 2",
        "81.2.69.1 6346 pong peer/93.0.0.0/16 50.000 0",
    ]
    # A new run, with a clock that started somewhere else.
    restored = HostCache()
    assert restored.load(path, now=5.0) == 3
    assert sorted((r.host, r.port, r.last_seen, r.failures) for r in restored.hosts()) == [
        ("2a02:6b8::5", 6348, -5.0, 2),
        ("81.2.69.1", 6346, -45.0, 0),
        ("93.184.216.1", 6346, -95.0, 0),
    ]
    # Only the configuration names seeds; all hosts are offered straight away.
    assert {r.source for r in restored.hosts()} == {"cache-file"}
    assert {r.next_attempt for r in restored.hosts()} == {5.0}
    assert restored.statistics().added == 3


def test_load_keeps_hosts_already_known(tmp_path: Path) -> None:
    path = tmp_path / "hosts.txt"
    old = HostCache()
    old.add("93.184.216.1", 6346, "pong", 0.0)
    old.add("81.2.69.1", 6346, "pong", 0.0)
    old.save(path, now=10.0)
    cache = HostCache()
    cache.add("93.184.216.1", 6346, "seed", 50.0)
    assert cache.load(path, now=50.0) == 1
    seed = next(r for r in cache.hosts() if r.host == "93.184.216.1")
    assert (seed.source, seed.last_seen) == ("seed", 50.0)


def test_load_of_a_missing_file_is_empty(tmp_path: Path) -> None:
    cache = HostCache()
    assert cache.load(tmp_path / "absent.txt", 0.0) == 0
    assert len(cache) == 0


def test_load_skips_and_counts_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "hosts.txt"
    path.write_bytes(
        b"# a comment\n"
        b"\n"
        b"81.2.69.1 6346 pong 1.5 0\n"
        b"complete garbage\n"
        b"81.2.69.2 6346 pong 1.5\n"  # a field short
        b"81.2.69.3 6346 pong 1.5 0 extra\n"
        b"81.2.69.4 +6346 pong 1.5 0\n"
        b"81.2.69.5 63_46 pong 1.5 0\n"
        b"81.2.69.6 6346 pong nan 0\n"
        b"81.2.69.7 6346 pong -4 0\n"
        b"81.2.69.8 6346 pong inf 0\n"
        b"81.2.69.9 6346 pong 1.5 many\n"
        b"81.2.69.10 6346 pong 1.5 " + b"9" * 5000 + b"\n"
        b"\xff\xfe\x00\x01 binary\n"
        b"not-an-address 6346 pong 1.5 0\n"  # parses, but refused as add() would
        b"81.2.69.11 0 pong 1.5 0\n"
        b"127.0.0.1 6346 pong 1.5 0\n"
        b"  2a02:6b8::1   6346 gwebcache 2 1  \r\n"
        b"81.2.69.12 6346 pong 3 0"  # no final newline
    )
    cache = HostCache(allow_private=False)
    assert cache.load(path, now=100.0) == 3
    assert sorted(r.host for r in cache.hosts()) == ["2a02:6b8::1", "81.2.69.1", "81.2.69.12"]
    rejected = cache.statistics().rejected
    assert rejected["bad-line"] == 11
    assert (rejected["bad-address"], rejected["port-zero"], rejected["loopback"]) == (1, 1, 1)


def test_save_replaces_atomically(tmp_path: Path) -> None:
    path = tmp_path / "hosts.txt"
    cache = HostCache()
    cache.add("81.2.69.1", 6346, "pong", 0.0)
    cache.save(path, now=0.0)
    cache.add("81.2.69.2", 6346, "pong", 0.0)
    assert cache.save(path, now=1.0) == 2
    assert len(path.read_text(encoding="utf-8").splitlines()) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hosts.txt"]


@pytest.mark.parametrize("failing", ["replace", "fsync"])
def test_a_failed_save_leaves_the_old_file_and_no_litter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    path = tmp_path / "hosts.txt"
    cache = HostCache()
    cache.add("81.2.69.1", 6346, "pong", 0.0)
    cache.save(path, now=0.0)
    before = path.read_bytes()
    cache.add("81.2.69.2", 6346, "pong", 0.0)

    def broken(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, failing, broken)
    with pytest.raises(OSError, match="No space"):
        cache.save(path, now=1.0)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hosts.txt"]


def _is_public(host: str) -> bool:
    return HostCache(allow_private=False).add(host, 1, "pong", 0.0)


public_hosts = (
    st.one_of(st.ip_addresses(v=4), st.ip_addresses(network="2000::/3")).map(str).filter(_is_public)
)


@settings(max_examples=30)
@given(
    hosts=st.lists(
        st.tuples(
            public_hosts,
            st.integers(1, 65535),
            st.integers(0, 10),
            st.floats(0.0, 1e6, allow_nan=False),
        ),
        max_size=20,
    )
)
def test_whatever_is_saved_loads_back(hosts: list[tuple[str, int, int, float]]) -> None:
    cache = HostCache(allow_private=False)
    now = 2e6
    for host, port, failures, seen in hosts:
        cache.add(host, port, "pong", seen)
        for _ in range(failures):
            cache.mark_failure(host, port, seen)
    expected = {(r.host, r.port): (r.failures, now - r.last_seen) for r in cache.hosts()}
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "hosts.txt"
        assert cache.save(path, now) == len(expected)
        restored = HostCache(allow_private=False)
        assert restored.load(path, 10.0) == len(expected)
    got = {(r.host, r.port): (r.failures, 10.0 - r.last_seen) for r in restored.hosts()}
    assert got.keys() == expected.keys()
    for key, (failures, age) in expected.items():
        assert got[key][0] == failures
        assert got[key][1] == pytest.approx(age, abs=1e-3)
    assert all(ipaddress.ip_address(h) for h, _ in got)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"capacity": 0},
        {"backoff_initial": 0.0},
        {"backoff_initial": 10.0, "backoff_max": 5.0},
        {"max_age": 0.0},
    ],
)
def test_rejects_nonsense_parameters(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must"):
        HostCache(**kwargs)  # type: ignore[arg-type]


def test_leftovers_of_killed_saves_are_removed_and_nothing_else(tmp_path: Path) -> None:
    from gnutella_router.discovery.saving import remove_leftovers

    path = tmp_path / "hosts.txt"
    path.write_text("# kept\n")
    (tmp_path / ".hosts.txt.abc123.tmp").write_text("half a sa")
    (tmp_path / ".other.txt.abc123.tmp").write_text("not ours")
    assert remove_leftovers(path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.txt.abc123.tmp", "hosts.txt"]
