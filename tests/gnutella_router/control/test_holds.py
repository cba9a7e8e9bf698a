"""The operator's holds: which peers a router neither dials nor accepts, and for how long."""

from __future__ import annotations

import math

import pytest

from gnutella_router.control.holds import MAX_HOLD_SECONDS, PeerHolds

A = ("127.0.0.1", 6346)
B = ("127.0.0.1", 6348)


def test_a_hold_lasts_until_released_by_default() -> None:
    holds = PeerHolds()
    holds.hold(A, now=10.0)
    assert holds.held(A, 1e9)
    assert not holds.held(B, 10.0)
    assert holds.release(A)
    assert not holds.held(A, 11.0)
    assert not holds.release(A), "nothing left to release"


def test_a_timed_hold_ends_at_its_deadline() -> None:
    holds = PeerHolds()
    holds.hold(A, now=10.0, seconds=5)
    assert holds.held(A, 14.9)
    assert not holds.held(A, 15.0)
    assert len(holds) == 0, "an ended hold is forgotten"


def test_holding_again_moves_the_deadline() -> None:
    holds = PeerHolds()
    holds.hold(A, now=0.0, seconds=5)
    holds.hold(A, now=4.0, seconds=5)
    assert holds.held(A, 8.0)
    assert [h.until for h in holds.holds(8.0)] == [9.0]


def test_offline_holds_every_peer_and_unknown_ones() -> None:
    holds = PeerHolds()
    holds.offline = True
    assert holds.held(A, 0.0)
    assert holds.held(None, 0.0), "a peer that announced no address is held too"
    holds.offline = False
    assert not holds.held(None, 0.0)


def test_the_table_is_bounded_and_gives_up_the_hold_nearest_its_end() -> None:
    holds = PeerHolds(capacity=2)
    holds.hold(A, now=0.0, seconds=100)
    holds.hold(B, now=0.0, seconds=10)
    holds.hold(("127.0.0.1", 1), now=0.0)
    assert len(holds) == 2
    assert holds.replaced == 1
    assert holds.addresses(1.0) == {A, ("127.0.0.1", 1)}


@pytest.mark.parametrize("seconds", [0, -1, math.nan, MAX_HOLD_SECONDS + 1])
def test_nonsense_durations_are_refused(seconds: float) -> None:
    with pytest.raises(ValueError, match="a hold lasts"):
        PeerHolds().hold(A, now=0.0, seconds=seconds)
