"""Read deadlines on virtual time: the idle peer and the message left half-sent."""

from __future__ import annotations

from gnutella_router.control.deadlines import Deadline, ReadWatch, check_interval


class Peer:
    """A connection's counters, as the server hands them to the watch."""

    def __init__(self, *, idle: float = 180.0, partial: float = 60.0) -> None:
        self.watch = ReadWatch(0.0, idle=idle, partial=partial)
        self.bytes_in = 0
        self.messages_in = 0
        self.partial_bytes = 0
        self.unfinished = 0

    def at(self, now: float) -> Deadline | None:
        return self.watch.check(
            now,
            bytes_in=self.bytes_in,
            messages_in=self.messages_in,
            partial_bytes=self.partial_bytes,
            unfinished=self.unfinished,
        )

    def sends(self, whole: int = 0, partial: int = 0) -> None:
        """``whole`` messages of 23 bytes, then ``partial`` bytes of the next one."""
        self.bytes_in += 23 * whole + partial
        self.messages_in += whole
        self.partial_bytes = partial if whole else self.partial_bytes + partial


def test_a_silent_peer_is_idle_after_the_timeout_and_any_byte_resets_it() -> None:
    peer = Peer(idle=180.0)
    assert all(peer.at(t) is None for t in range(180))
    assert peer.at(180.0) is Deadline.IDLE
    peer = Peer(idle=180.0)
    for t in range(0, 1000, 100):
        peer.sends(whole=1)
        assert peer.at(float(t)) is None


def test_a_message_held_half_sent_passes_the_partial_deadline_though_bytes_trickle() -> None:
    peer = Peer(idle=180.0, partial=60.0)
    peer.sends(whole=2, partial=10)
    verdicts = []
    for t in range(1, 70):
        peer.sends(partial=1)  # a byte a second: never idle
        verdicts.append(peer.at(float(t)))
    # Seen first at t=1, so passed at t=61.
    assert verdicts.index(Deadline.PARTIAL_MESSAGE) == 60


def test_completed_messages_reset_the_partial_deadline() -> None:
    """A peer sending large messages slowly, one after another, is never stalled."""
    peer = Peer(partial=60.0)
    for t in range(0, 600, 50):
        peer.sends(whole=1, partial=1000)  # one finished, the next begun
        assert peer.at(float(t)) is None


def test_nothing_is_judged_while_the_router_has_not_finished_with_the_peers_frames() -> None:
    """The reader waits for room in the router's queue: the peer's next bytes wait in
    the kernel, and the peer is not to blame."""
    peer = Peer(idle=20.0, partial=10.0)
    peer.sends(whole=5, partial=7)
    peer.unfinished = 5
    assert all(peer.at(float(t)) is None for t in range(100))
    peer.unfinished = 0
    assert peer.at(100.0) is None
    assert peer.at(109.0) is None
    assert peer.at(110.0) is Deadline.PARTIAL_MESSAGE


def test_zero_turns_a_deadline_off() -> None:
    peer = Peer(idle=0.0, partial=0.0)
    peer.sends(partial=5)
    assert all(peer.at(float(t)) is None for t in range(0, 100_000, 1000))


def test_the_partial_deadline_comes_first_when_both_pass() -> None:
    peer = Peer(idle=5.0, partial=5.0)
    peer.sends(partial=3)
    assert peer.at(1.0) is None
    assert peer.at(6.0) is Deadline.PARTIAL_MESSAGE


def test_checks_are_a_second_apart_or_a_quarter_of_a_short_deadline() -> None:
    assert check_interval(180.0, 60.0) == 1.0
    assert check_interval(2.0, 0.0) == 0.5
    assert check_interval(0.0, 0.4) == 0.1
    assert check_interval(0.0, 0.0) == 1.0
