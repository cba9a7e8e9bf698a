"""The run router's parts: copies built from kept header tails, runs cut from a batch.

(How it routes is held to a naive reference in ``test_one_path.py``.)
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.framing import Frame


def test_the_run_router_s_type_constants_are_the_protocol_s() -> None:
    """flood.py spells its message types as int literals (constants once compiled)."""
    from gnutella_router.routing import flood
    from protocol.constants import MessageType

    assert (flood.PING, flood.PONG, flood.QUERY) == (
        MessageType.PING,
        MessageType.PONG,
        MessageType.QUERY,
    )


def test_a_batch_is_cut_into_its_runs_of_one_link_s_frames_in_order() -> None:
    from gnutella_router.routing.flood import runs_of

    def frames(*sources: int) -> list[Frame]:
        return [Frame(bytes(16), 0x00, 1, 0, b"", source=s) for s in sources]

    assert runs_of([]) == []
    single = frames(3, 3, 3)
    assert runs_of(single) == [single]
    assert runs_of(single)[0] is single  # not copied
    mixed = frames(1, 1, 2, 1, 3, 3)
    assert [[f.source for f in run] for run in runs_of(mixed)] == [[1, 1], [2], [1], [3, 3]]
    assert [f for run in runs_of(mixed) for f in run] == mixed


@settings(max_examples=200)
@given(
    guid=st.binary(min_size=16, max_size=16),
    message_type=st.sampled_from([0x00, 0x80]),
    ttl=st.integers(0, 15),
    hops=st.integers(0, 15),
    payload=st.binary(max_size=300),
)
def test_a_copy_is_the_message_encoded_with_its_new_ttl_and_hops(
    guid: bytes, message_type: int, ttl: int, hops: int, payload: bytes
) -> None:
    from gnutella_router.routing.flood import Copies
    from protocol.header import HEADER_STRUCT

    copies = Copies()
    expected = HEADER_STRUCT.pack(guid, message_type, ttl, hops, len(payload)) + payload
    assert copies.copy(guid, message_type, ttl, hops, payload) == expected
    # Again, from what it kept, and after a copy of another shape.
    assert copies.copy(guid, message_type, ttl, hops, payload) == expected
    copies.copy(guid, message_type ^ 0x80, ttl, hops, payload + b"x")
    assert copies.copy(guid, message_type, ttl, hops, payload) == expected


def test_copies_keep_a_bounded_number_of_header_tails() -> None:
    from gnutella_router.routing.flood import TAILS_KEPT, Copies

    copies = Copies()
    for length in range(3 * TAILS_KEPT):
        data = copies.copy(b"g" * 16, 0x80, 3, 1, bytes(length))
        assert int.from_bytes(data[19:23], "little") == length
    assert len(copies._tails) <= TAILS_KEPT
