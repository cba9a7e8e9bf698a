"""A stateful property test: an honest initiator and acceptor driven by hypothesis
in any order, with invariants on the states each may reach and the events each may see,
in the order it may see them.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import event as note_event
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from protocol.errors import HandshakeError, LocalProtocolError
from protocol.handshake import (
    Acceptor,
    ConnectRequest,
    HandshakeComplete,
    HandshakeRejected,
    HandshakeResponse,
    Initiator,
    busy_response_headers,
    router_headers,
)
from tests.support.handshake import Endpoint, S

ACCEPTOR_STATES = {
    S.READING_REQUEST,
    S.DECIDING,
    S.READING_CONFIRMATION,
    S.COMPLETING,
    S.COMPLETE,
    S.CLOSED,
    S.ERROR,
}
INITIATOR_STATES = {
    S.IDLE,
    S.READING_RESPONSE,
    S.CONFIRMING,
    S.COMPLETING,
    S.COMPLETE,
    S.CLOSED,
    S.ERROR,
}
ACCEPTOR_STORIES = (
    (ConnectRequest, HandshakeResponse, HandshakeComplete),
    (ConnectRequest, HandshakeRejected),
    (ConnectRequest, HandshakeComplete),  # 0.4
)
INITIATOR_STORIES = (
    (HandshakeResponse, HandshakeComplete),
    (HandshakeRejected,),
    (HandshakeComplete,),  # 0.4
)


class HandshakePair(RuleBasedStateMachine):
    """Both machines joined by two in-memory pipes; the rules play network and apps.

    Rules are always enabled and do nothing when their moment has not come, so that
    Hypothesis never has to hunt for an applicable rule.
    """

    def __init__(self) -> None:
        super().__init__()
        self.initiator = Endpoint(Initiator())
        self.acceptor = Endpoint(Acceptor())
        self.pipes = {"initiator": bytearray(), "acceptor": bytearray()}
        self.sent = {"initiator": bytearray(), "acceptor": bytearray()}
        self.may_close = False
        self.closed_towards: set[str] = set()
        self.errors: dict[str, int] = {"initiator": 0, "acceptor": 0}
        self.initiator_accepts = False
        self.acceptor_accepts = False
        self.acceptor_deflates: bool | None = None
        self.initiator_deflates: bool | None = None

    @property
    def i(self) -> Initiator:
        machine = self.initiator.machine
        assert isinstance(machine, Initiator)
        return machine

    @property
    def a(self) -> Acceptor:
        machine = self.acceptor.machine
        assert isinstance(machine, Acceptor)
        return machine

    def endpoint(self, side: str) -> Endpoint:
        return self.initiator if side == "initiator" else self.acceptor

    def guarded(self, side: str, action: Callable[[], None]) -> None:
        """Run ``action``; an honest exchange fails only after an injected close."""
        try:
            action()
        except HandshakeError:
            assert side in self.closed_towards, "an honest peer caused a HandshakeError"
            assert self.endpoint(side).machine.state is S.ERROR
            self.errors[side] += 1

    @initialize(
        version=st.sampled_from(["0.6", "0.6", "0.4"]),
        initiator_accepts=st.booleans(),
        acceptor_accepts=st.booleans(),
        may_close=st.sampled_from([False, False, True]),
    )
    def start(
        self, version: str, initiator_accepts: bool, acceptor_accepts: bool, may_close: bool
    ) -> None:
        self.initiator_accepts = initiator_accepts
        self.acceptor_accepts = acceptor_accepts
        self.may_close = may_close
        headers = router_headers(
            user_agent="I/1", listen=None, remote_ip=None, deflate=initiator_accepts
        )
        self.pipes["acceptor"] += self.i.start(headers, version)

    @rule(size=st.one_of(st.integers(1, 8), st.integers(1, 400)))
    def deliver_to_acceptor(self, size: int) -> None:
        self.deliver("acceptor", size)

    @rule(size=st.one_of(st.integers(1, 8), st.integers(1, 400)))
    def deliver_to_initiator(self, size: int) -> None:
        self.deliver("initiator", size)

    @rule()
    def deliver_everything(self) -> None:
        self.deliver("acceptor", len(self.pipes["acceptor"]))
        self.deliver("initiator", len(self.pipes["initiator"]))

    def deliver(self, side: str, size: int) -> None:
        """Some of the bytes in flight towards ``side`` arrive."""
        if side in self.closed_towards:
            return
        queue = self.pipes[side]
        chunk = bytes(queue[:size])
        del queue[:size]
        if chunk:  # b"" would mean end of stream
            self.guarded(side, lambda: self.endpoint(side).deliver(chunk))

    @rule(accept=st.booleans(), deflate=st.booleans(), code=st.sampled_from([204, 409, 503]))
    def acceptor_decides(self, accept: bool, deflate: bool, code: int) -> None:
        if self.a.state is not S.DECIDING:
            return
        if accept:
            headers = router_headers(
                user_agent="A/1", listen=None, remote_ip=None, deflate=self.acceptor_accepts
            )
            self.acceptor_deflates = deflate
            self.pipes["initiator"] += self.a.accept(headers, deflate=deflate)
            self.guarded("acceptor", self.acceptor.collect)
        else:
            hosts = busy_response_headers([("10.0.0.1", 6346)])
            self.pipes["initiator"] += self.a.reject(code, "No", hosts)

    @rule(confirm=st.booleans(), deflate=st.booleans())
    def initiator_decides(self, confirm: bool, deflate: bool) -> None:
        if self.i.state is not S.CONFIRMING:
            return
        if confirm:
            self.initiator_deflates = deflate
            step3 = self.i.confirm([("Private-Data", "5ef89a")], deflate=deflate)
            self.pipes["acceptor"] += step3
            self.guarded("initiator", self.initiator.collect)
        else:
            self.pipes["acceptor"] += self.i.decline(403, "Not today")

    @rule(side=st.sampled_from(["initiator", "acceptor"]), message=st.binary(min_size=1))
    def send_message(self, side: str, message: bytes) -> None:
        """Once its handshake is complete, a side's application sends a message."""
        if self.endpoint(side).machine.state is not S.COMPLETE:
            return
        other = "acceptor" if side == "initiator" else "initiator"
        self.pipes[other] += message
        self.sent[side] += message

    @rule(side=st.sampled_from(["initiator", "acceptor"]))
    def peer_closes(self, side: str) -> None:
        """The socket towards ``side`` closes: pending bytes arrive, then end of stream."""
        if not self.may_close or self.closed_towards:
            return
        queue = self.pipes[side]
        endpoint = self.endpoint(side)
        chunk = bytes(queue)
        queue.clear()
        if chunk:
            self.guarded(side, lambda: endpoint.deliver(chunk))
        self.closed_towards.add(side)
        if endpoint.machine.state is not S.COMPLETE:
            self.guarded(side, lambda: endpoint.deliver(b""))

    @rule(
        call=st.sampled_from(
            ["start", "confirm", "decline", "accept", "reject", "i.next", "a.next"]
        )
    )
    def call_out_of_turn(self, call: str) -> None:
        """Any call the state does not allow is refused and changes nothing."""
        legal = {
            "start": (self.i, S.IDLE),
            "confirm": (self.i, S.CONFIRMING),
            "decline": (self.i, S.CONFIRMING),
            "accept": (self.a, S.DECIDING),
            "reject": (self.a, S.DECIDING),
        }
        actions: dict[str, Callable[[], object]] = {
            "start": self.i.start,
            "confirm": self.i.confirm,
            "decline": lambda: self.i.decline(503, "x"),
            "accept": self.a.accept,
            "reject": lambda: self.a.reject(503, "x"),
            "i.next": self.i.next_event,
            "a.next": self.a.next_event,
        }
        if call in legal:
            machine, allowed = legal[call]
            if machine.state is allowed:
                return
        else:
            machine = self.i if call == "i.next" else self.a
            if machine.state not in (S.DECIDING, S.CONFIRMING, S.COMPLETE, S.CLOSED, S.IDLE):
                return
        before = (self.i.state, self.a.state)
        with pytest.raises(LocalProtocolError):
            actions[call]()
        assert (self.i.state, self.a.state) == before

    @invariant()
    def states_are_legal(self) -> None:
        assert self.i.state in INITIATOR_STATES
        assert self.a.state in ACCEPTOR_STATES

    @invariant()
    def events_tell_a_possible_story(self) -> None:
        for endpoint, stories in (
            (self.initiator, INITIATOR_STORIES),
            (self.acceptor, ACCEPTOR_STORIES),
        ):
            kinds = tuple(type(event) for event in endpoint.events)
            assert any(story[: len(kinds)] == kinds for story in stories), kinds

    @invariant()
    def terminal_states_produce_nothing(self) -> None:
        for machine in (self.i, self.a):
            if machine.state in (S.COMPLETE, S.CLOSED):
                with pytest.raises(LocalProtocolError):
                    machine.next_event()
            elif machine.state is S.ERROR:
                with pytest.raises(HandshakeError):
                    machine.next_event()
                with pytest.raises(HandshakeError):
                    machine.receive_data(b"x")

    @invariant()
    def outcomes_agree(self) -> None:
        states = {self.i.state, self.a.state}
        assert not {S.COMPLETE, S.CLOSED} <= states
        if self.i.state is S.COMPLETE and self.a.state is S.COMPLETE:
            i_done, a_done = self.initiator.complete, self.acceptor.complete
            assert i_done.legacy == a_done.legacy
            assert a_done.compress_outgoing == i_done.decompress_incoming
            assert i_done.compress_outgoing == a_done.decompress_incoming
            assert a_done.compress_outgoing == bool(
                self.acceptor_deflates and self.initiator_accepts and not a_done.legacy
            )
            assert i_done.compress_outgoing == bool(
                self.initiator_deflates and self.acceptor_accepts and not i_done.legacy
            )

    @invariant()
    def messages_arrive_in_order(self) -> None:
        assert self.sent["initiator"].startswith(self.acceptor.framer)
        assert self.sent["acceptor"].startswith(self.initiator.framer)

    def teardown(self) -> None:
        """Play the honest exchange out: it must end the same way on both sides."""
        note_event(f"before teardown: {self.i.state.name}, {self.a.state.name}")
        if self.closed_towards:
            note_event(f"closed towards {sorted(self.closed_towards)}, errors {self.errors}")
            return
        for _ in range(4):
            self.acceptor_decides(accept=True, deflate=True, code=503)
            self.initiator_decides(confirm=True, deflate=False)
            self.deliver("acceptor", len(self.pipes["acceptor"]) + 1)
            self.deliver("initiator", len(self.pipes["initiator"]) + 1)
        assert self.errors == {"initiator": 0, "acceptor": 0}
        assert (self.i.state, self.a.state) in (
            (S.COMPLETE, S.COMPLETE),
            (S.CLOSED, S.CLOSED),
        )
        assert bytes(self.acceptor.framer) == bytes(self.sent["initiator"])
        assert bytes(self.initiator.framer) == bytes(self.sent["acceptor"])


HandshakePair.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestHandshakePair = HandshakePair.TestCase
