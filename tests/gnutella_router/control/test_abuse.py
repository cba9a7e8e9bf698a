"""The abuse meter, the ban list and trusted networks, on virtual time."""

from __future__ import annotations

import ipaddress

import pytest

from gnutella_router.control.abuse import (
    AbuseMeter,
    BanList,
    Offence,
    ban_keys,
    in_networks,
)

THRESHOLDS = dict.fromkeys(Offence, 20) | {Offence.UNROUTABLE: 100}


def meter() -> AbuseMeter:
    return AbuseMeter(THRESHOLDS, half_life=10.0)


def test_a_burst_up_to_the_threshold_kicks_with_the_offences_bye_code() -> None:
    abuse = meter()
    verdicts = [abuse.offend(Offence.DUPLICATE, 5.0, 100) for _ in range(20)]
    assert verdicts[:19] == [None] * 19
    kick = verdicts[19]
    assert kick is not None
    assert (kick.offence, kick.bye_code) == (Offence.DUPLICATE, 401)
    assert "duplicate" in kick.reason


@pytest.mark.parametrize(
    ("offence", "code"),
    [
        (Offence.HIGH_TTL, 403),
        (Offence.TTL_ZERO, 408),
        (Offence.MALFORMED, 411),
        (Offence.UNKNOWN_TYPE, 404),
    ],
)
def test_each_offence_has_gtk_gnutellas_bye_code(offence: Offence, code: int) -> None:
    abuse = meter()
    kicks = [abuse.offend(offence, 0.0, 0) for _ in range(20)]
    assert kicks[-1] is not None
    assert kicks[-1].bye_code == code


def test_a_steady_trickle_below_the_threshold_is_tolerated_for_ever() -> None:
    # One a second with a 10 s half-life settles at 1 / (1 - 2 ** -0.1), about 14.9 < 20.
    abuse = meter()
    assert all(abuse.offend(Offence.MALFORMED, float(t), t) is None for t in range(3600))
    assert 14.5 < abuse.level(Offence.MALFORMED, 3599.0) < 15


def test_twice_that_rate_is_not() -> None:
    # Two a second would settle near 29.4: the count passes 20 after 33 offences.
    abuse = meter()
    kicked_at = next(
        t / 2 for t in range(200) if abuse.offend(Offence.MALFORMED, t / 2, t) is not None
    )
    assert kicked_at == 16.0


def test_counts_decay_by_half_every_half_life() -> None:
    abuse = meter()
    for _ in range(16):
        abuse.offend(Offence.HIGH_TTL, 0.0, 0)
    assert abuse.level(Offence.HIGH_TTL, 10.0) == pytest.approx(8)
    assert abuse.level(Offence.HIGH_TTL, 20.0) == pytest.approx(4)
    assert abuse.level(Offence.DUPLICATE, 20.0) == 0


def test_offences_are_counted_apart() -> None:
    abuse = meter()
    for offence in (Offence.DUPLICATE, Offence.MALFORMED):
        for _ in range(19):
            assert abuse.offend(offence, 0.0, 0) is None


def test_a_zero_threshold_never_kicks() -> None:
    abuse = AbuseMeter({Offence.DUPLICATE: 0}, half_life=10.0)
    assert all(abuse.offend(Offence.DUPLICATE, 0.0, 0) is None for _ in range(10_000))


def test_unroutable_replies_kick_only_when_they_are_most_of_the_traffic() -> None:
    busy = meter()
    received = 0
    for _ in range(150):  # 150 unroutable among 1,000 messages: an overloaded router's doing
        received += 1000 // 150
        assert busy.offend(Offence.UNROUTABLE, 1.0, received) is None
    garbage = meter()
    kicks = [garbage.offend(Offence.UNROUTABLE, 1.0, n + 1) for n in range(100)]
    assert kicks[-1] is not None
    assert kicks[-1].bye_code == 409


def test_bans_expire_and_are_forgotten() -> None:
    bans = BanList()
    bans.ban([("guid", "ab"), ("ip", "192.0.2.1")], until=60.0)
    assert bans.banned([("ip", "192.0.2.1")], 59.0)
    assert not bans.banned([("ip", "192.0.2.2")], 59.0)
    assert not bans.banned([("guid", "ab")], 60.0)
    assert len(bans) == 1  # the expired guid ban went when it was looked up


def test_the_ban_list_is_bounded_and_drops_the_oldest() -> None:
    bans = BanList(capacity=3)
    for n in range(5):
        bans.ban([("ip", f"192.0.2.{n}")], until=100.0)
    assert len(bans) == 3
    assert bans.evicted == 2
    assert not bans.banned([("ip", "192.0.2.0")], 0.0)
    assert bans.banned([("ip", "192.0.2.4")], 0.0)


def test_a_trusted_address_is_banned_by_identity_never_by_ip() -> None:
    guid = bytes(range(16))
    assert ban_keys("127.0.0.1", guid, ("127.0.0.1", 6346), trusted_ip=True) == [
        ("guid", guid.hex()),
        ("listen", "127.0.0.1:6346"),
    ]
    assert ban_keys("192.0.2.9", None, None, trusted_ip=False) == [("ip", "192.0.2.9")]


def test_trusted_networks_match_ipv4_ipv6_and_mapped_addresses() -> None:
    networks = [ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128")]
    assert in_networks("127.0.0.2", networks)
    assert in_networks("::1", networks)
    assert in_networks("::ffff:127.0.0.1", networks)
    assert not in_networks("192.0.2.1", networks)
    assert not in_networks("not an address", networks)
