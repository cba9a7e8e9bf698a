"""The slot policy: one address's share, and diversity when the slots are full."""

from __future__ import annotations

import collections
import ipaddress

from hypothesis import given
from hypothesis import strategies as st

from gnutella_router.control.slots import (
    Occupant,
    SlotPolicy,
    address_key,
    choose_eviction,
    group_key,
)

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


def policy(
    *, max_connections: int = 4, max_leaves: int = 4, per_address: int = 1, trusted: bool = True
) -> SlotPolicy:
    return SlotPolicy(
        max_connections=max_connections,
        max_leaves=max_leaves,
        per_address=per_address,
        trusted=LOOPBACK if trusted else (),
    )


def occupant(n: int, host: str, *, leaf: bool = False, evictable: bool = True) -> Occupant:
    return Occupant(n, host, leaf=leaf, evictable=evictable, since=float(n))


def test_an_ipv4_address_is_one_host_and_an_ipv6_host_is_its_slash_64() -> None:
    assert address_key("192.0.2.7") == "192.0.2.7"
    assert address_key("::ffff:192.0.2.7") == "192.0.2.7"
    assert address_key("2001:db8:1:2::1") == address_key("2001:db8:1:2:ffff::9")
    assert address_key("2001:db8:1:2::1") != address_key("2001:db8:1:3::1")
    assert address_key("not an address") == "not an address"


def test_networks_are_ipv4_slash_24_and_ipv6_slash_48() -> None:
    assert group_key("192.0.2.7") == group_key("192.0.2.250") == "192.0.2.0/24"
    assert group_key("192.0.3.7") != group_key("192.0.2.7")
    assert group_key("::ffff:192.0.2.7") == "192.0.2.0/24"
    assert group_key("2001:db8:1:2::1") == group_key("2001:db8:1:ffff::1") == "2001:db8:1::/48"


def test_a_second_connection_from_an_untrusted_address_is_409() -> None:
    slots = policy()
    held = [occupant(1, "192.0.2.7")]
    refused = slots.admit("192.0.2.7", leaf=False, occupants=held, admitting=[])
    assert (refused.code, refused.reason) == (409, "Already connected")
    # Of either kind, and a handshake under way counts as a connection.
    assert slots.admit("192.0.2.7", leaf=True, occupants=held, admitting=[]).code == 409
    assert slots.admit("192.0.2.8", leaf=False, occupants=[], admitting=["192.0.2.8"]).code == 409
    assert slots.admit("192.0.2.8", leaf=False, occupants=held, admitting=[]).accepted
    # One IPv6 host: its /64.
    six = [occupant(2, "2001:db8::1")]
    assert slots.admit("2001:db8::2", leaf=False, occupants=six, admitting=[]).code == 409


def test_trusted_addresses_and_a_higher_limit_let_more_in() -> None:
    held = [occupant(1, "127.0.0.1"), occupant(2, "192.0.2.7")]
    assert policy().admit("127.0.0.1", leaf=False, occupants=held, admitting=[]).accepted
    untrusted = policy(trusted=False)
    assert untrusted.admit("127.0.0.1", leaf=False, occupants=held, admitting=[]).code == 409
    two = policy(per_address=2)
    assert two.admit("192.0.2.7", leaf=False, occupants=held, admitting=[]).accepted
    assert two.admit("192.0.2.7", leaf=False, occupants=held, admitting=["192.0.2.7"]).code == 409


def test_a_full_node_of_diverse_peers_answers_503() -> None:
    held = [occupant(n, f"10.0.{n}.1") for n in range(4)]
    refused = policy().admit("10.9.9.9", leaf=False, occupants=held, admitting=[])
    assert (refused.code, refused.reason, refused.evict) == (503, "Too many connections", None)
    # A handshake under way holds a slot too.
    three = held[:3]
    busy = policy().admit("10.9.9.9", leaf=False, occupants=three, admitting=["10.8.8.8"])
    assert busy.code == 503
    leaves = [occupant(n, f"10.0.{n}.1", leaf=True) for n in range(4)]
    assert policy().admit("10.9.9.9", leaf=True, occupants=leaves, admitting=[]).reason == (
        "Too many leaves"
    )
    # Leaves and ultrapeers have slots of their own.
    assert policy().admit("10.9.9.9", leaf=False, occupants=leaves, admitting=[]).accepted


def test_a_crowd_from_one_network_gives_its_newest_slot_to_a_newcomer() -> None:
    crowd = [occupant(n, f"10.0.0.{n}") for n in range(1, 5)]
    admission = policy().admit("10.7.7.7", leaf=False, occupants=crowd, admitting=[])
    assert admission.accepted
    assert admission.evict == crowd[-1]


def test_only_a_group_two_larger_than_the_newcomers_gives_way() -> None:
    held = [
        occupant(1, "10.0.0.1"),
        occupant(2, "10.0.0.2"),
        occupant(3, "10.1.0.1"),
        occupant(4, "10.2.0.1"),
    ]
    assert choose_eviction("10.0.0.9", held) is None  # the newcomer's own network
    assert choose_eviction("10.1.0.9", held) is None  # 2 is not 2 more than 1
    assert choose_eviction("10.3.0.1", held) == held[1]  # 2 is 2 more than 0


def test_dialled_and_trusted_connections_are_never_evicted_nor_counted() -> None:
    held = [occupant(n, f"10.0.0.{n}", evictable=False) for n in range(1, 5)]
    assert choose_eviction("10.7.7.7", held) is None
    mixed = [*held[:2], occupant(5, "10.0.0.5"), occupant(6, "10.0.0.6")]
    assert choose_eviction("10.7.7.7", mixed) == mixed[-1]


def test_a_full_node_never_evicts_a_peer_from_a_trusted_network() -> None:
    """The server hands every accepted connection in as evictable; the policy itself
    spares the trusted networks (looking them up only when the node is full)."""
    crowd = [occupant(n, f"127.0.0.{n}") for n in range(1, 4)]
    crowd.append(occupant(4, "10.0.0.1"))
    refused = policy().admit("10.9.9.9", leaf=False, occupants=crowd, admitting=[])
    assert (refused.code, refused.evict) == (503, None)
    crowd[3:] = [occupant(4, "10.0.0.1"), occupant(5, "10.0.0.2")]
    taken = policy(max_connections=5).admit("10.9.9.9", leaf=False, occupants=crowd, admitting=[])
    assert taken.evict == crowd[-1]  # the untrusted crowd of two gives way


def test_a_trusted_newcomer_evicts_nobody() -> None:
    """Behind a trusted address stand many peers whose networks cannot be told apart."""
    crowd = [occupant(n, f"10.0.0.{n}") for n in range(1, 5)]
    refused = policy().admit("127.0.0.1", leaf=False, occupants=crowd, admitting=[])
    assert (refused.code, refused.evict) == (503, None)


def test_of_equal_crowds_the_one_with_the_newest_member_gives_way() -> None:
    held = [occupant(1, "10.0.0.1"), occupant(4, "10.0.0.2"), occupant(2, "10.1.0.1")]
    held.append(occupant(3, "10.1.0.2"))
    assert choose_eviction("10.9.0.1", held) == held[1]


def test_newcomers_from_other_networks_take_a_crowds_slots_until_none_is_left_over() -> None:
    """The measured attack: every slot from one network. Newcomers from others get in,
    one eviction each, until the crowd holds one slot like everyone; then 503."""
    slots = policy(max_connections=32)
    held = [occupant(n, f"10.0.0.{n}") for n in range(1, 33)]
    evicted = 0
    for n in range(1, 40):
        newcomer = f"10.{n}.0.1"
        admission = slots.admit(newcomer, leaf=False, occupants=held, admitting=[])
        if not admission.accepted:
            assert admission.code == 503
            break
        assert admission.evict is not None
        held.remove(admission.evict)
        held.append(occupant(100 + n, newcomer))
        evicted += 1
    assert evicted == 31
    assert collections.Counter(group_key(o.host) for o in held).most_common(1)[0][1] == 1


hosts = st.builds("10.{}.{}.{}".format, st.integers(0, 2), st.integers(0, 2), st.integers(1, 3))
"""Few networks and few hosts in each, so that crowds form."""


def _squares(occupants: list[Occupant]) -> int:
    sizes = collections.Counter(group_key(o.host) for o in occupants if o.evictable)
    return sum(size * size for size in sizes.values())


@given(
    st.lists(st.tuples(hosts, st.booleans()), min_size=1, max_size=12, unique_by=lambda t: t[0]),
    st.lists(hosts, min_size=1, max_size=30),
)
def test_evictions_cannot_cycle(initial: list[tuple[str, bool]], arrivals: list[str]) -> None:
    """Every eviction lowers the sum of the squares of the crowds' sizes, and the peer
    just evicted, coming straight back, is refused."""
    slots = policy(max_connections=len(initial), trusted=False)
    held = [occupant(n, host, evictable=evictable) for n, (host, evictable) in enumerate(initial)]
    for n, newcomer in enumerate(arrivals, start=100):
        if any(address_key(o.host) == address_key(newcomer) for o in held):
            continue
        admission = slots.admit(newcomer, leaf=False, occupants=held, admitting=[])
        if admission.evict is None:
            assert admission.code == 503
            continue
        before = _squares(held)
        held.remove(admission.evict)
        held.append(occupant(n, newcomer))
        assert _squares(held) <= before - 2
        back = slots.admit(admission.evict.host, leaf=False, occupants=held, admitting=[])
        assert back.code == 503
