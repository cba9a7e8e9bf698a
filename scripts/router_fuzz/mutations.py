"""Hostile frames: the mutations that each change a draft frame while keeping its
length field true, the :class:`FrameFuzzer` that turns templates into a deterministic
stream of frames, and the session endings that do break the stream. Pure generators, no
sockets, so the tests can check them quickly and by seed.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import random
import struct
import zlib
from collections.abc import Callable

from protocol.constants import DEFAULT_MAX_PAYLOAD, HEADER_SIZE, MessageType
from protocol.header import HEADER_STRUCT
from scripts.router_fuzz.payloads import HOSTILE_KINDS, KIND_WEIGHTS, KNOWN_TYPES, Template
from scripts.router_fuzz.settings import BOMB_BYTES, REPLAY_KEPT


@dataclasses.dataclass(slots=True)
class Draft:
    """A frame being built; :meth:`to_bytes` writes the true payload length."""

    guid: bytes
    payload_type: int
    ttl: int
    hops: int
    payload: bytes

    def to_bytes(self) -> bytes:
        return (
            HEADER_STRUCT.pack(self.guid, self.payload_type, self.ttl, self.hops, len(self.payload))
            + self.payload
        )


def flip_bits(rng: random.Random, data: bytes, flips: int) -> bytes:
    if not data:
        return data
    changed = bytearray(data)
    for _ in range(flips):
        bit = rng.randrange(len(changed) * 8)
        changed[bit >> 3] ^= 1 << (bit & 7)
    return bytes(changed)


def mutate_payload_bits(rng: random.Random, draft: Draft) -> None:
    draft.payload = flip_bits(rng, draft.payload, rng.randint(1, 8))


def mutate_header_bits(rng: random.Random, draft: Draft) -> None:
    """One bit of the GUID, the type, the TTL or the hops (never the length)."""
    field = rng.randrange(4)
    if field == 0:
        draft.guid = flip_bits(rng, draft.guid, 1)
    elif field == 1:
        draft.payload_type ^= 1 << rng.randrange(8)
    elif field == 2:
        draft.ttl ^= 1 << rng.randrange(8)
    else:
        draft.hops ^= 1 << rng.randrange(8)


def mutate_truncate(rng: random.Random, draft: Draft) -> None:
    if draft.payload:
        draft.payload = draft.payload[: rng.randrange(len(draft.payload))]


def mutate_extend(rng: random.Random, draft: Draft) -> None:
    draft.payload += rng.randbytes(rng.randint(1, 64))


def garbage_ggep(rng: random.Random) -> bytes:
    """A block that starts like GGEP and is wrong in one of the ways parsers trip on."""
    ext_id = b"GX"
    variant = rng.randrange(9)
    if variant == 0:  # random bytes after the magic
        return b"\xc3" + rng.randbytes(rng.randint(0, 40))
    if variant == 1:  # deflate flag, data that does not inflate
        data = rng.randbytes(rng.randint(1, 60))
        return (
            b"\xc3"
            + bytes((0x80 | 0x20 | len(ext_id),))
            + ext_id
            + bytes((0x40 | len(data),))
            + data
        )
    if variant == 2:  # a deflate bomb: inflates far past any message
        bomb = DEFLATED_ZEROS
        length = bytes(
            (0x80 | len(bomb) >> 12, 0x80 | (len(bomb) >> 6) & 0x3F, 0x40 | len(bomb) & 0x3F)
        )
        return b"\xc3" + bytes((0x80 | 0x20 | len(ext_id),)) + ext_id + length + bomb
    if variant == 3:  # COBS flag, code bytes that run past the end
        data = bytes((0xFF,)) + rng.randbytes(rng.randint(0, 20)).replace(b"\x00", b"\x01")
        return (
            b"\xc3"
            + bytes((0x80 | 0x40 | len(ext_id),))
            + ext_id
            + bytes((0x40 | len(data),))
            + data
        )
    if variant == 4:  # a length whose chunks never end
        return b"\xc3" + bytes((0x80 | len(ext_id),)) + ext_id + b"\x80" * rng.randint(3, 10)
    if variant == 5:  # ID length 0, or the reserved bit
        return b"\xc3" + rng.choice((b"\x80", b"\x90GX")) + b"\x41x"
    if variant == 6:  # no "last" flag: the block runs off the end of the payload
        return b"\xc3" + bytes((len(ext_id),)) + ext_id + b"\x41x"
    if variant == 7:  # a length beyond the payload
        return b"\xc3" + bytes((0x80 | len(ext_id),)) + ext_id + b"\xbf\x7f" + b"x" * 10
    return b"\xc3\x82GX\x41x" + rng.randbytes(rng.randint(1, 10))  # bytes glued to a good block


DEFLATED_ZEROS = zlib.compress(bytes(BOMB_BYTES), 9)


def mutate_ggep(rng: random.Random, draft: Draft) -> None:
    garbage = garbage_ggep(rng)
    if rng.random() < 0.6 or not draft.payload:
        draft.payload += garbage
    else:
        at = rng.randrange(len(draft.payload))
        draft.payload = draft.payload[:at] + garbage + draft.payload[at:]


def garbage_extension_area(rng: random.Random) -> bytes:
    """Items separated by 0x1C as queries and results carry them, each one wrong."""
    items = [
        b"urn:" + rng.randbytes(rng.randint(0, 40)),
        b"urn:sha1:" + b"!" * rng.randint(0, 60),
        b"<" + rng.randbytes(rng.randint(0, 80)),
        b"{" + b"x" * rng.randint(0, 3000),
        b"\xc3" + rng.randbytes(rng.randint(0, 20)),
        b"text\x00with a NUL",
        b"\x1c" * rng.randint(1, 50),
        rng.randbytes(rng.randint(1, 100)),
    ]
    return b"\x1c".join(rng.choice(items) for _ in range(rng.randint(1, 6)))


def mutate_extension_area(rng: random.Random, draft: Draft) -> None:
    """Garbage where a query's extensions go (after its NUL), or inside a hit's results."""
    nul = draft.payload.find(b"\x00", 2)
    garbage = garbage_extension_area(rng)
    if draft.payload_type == MessageType.QUERY and nul >= 0:
        draft.payload = draft.payload[: nul + 1] + garbage
    elif draft.payload_type == MessageType.QUERY_HIT and nul >= 0:
        draft.payload = draft.payload[: nul + 1] + garbage + draft.payload[nul + 1 :]
    else:
        draft.payload += b"\x00\x1c" + garbage


def mutate_extreme_header(rng: random.Random, draft: Draft) -> None:
    draft.ttl = rng.choice((0, 1, 7, 8, 15, 16, 127, 255))
    draft.hops = rng.choice((0, 1, 7, 14, 15, 16, 255))


def mutate_type(rng: random.Random, draft: Draft) -> None:
    draft.payload_type = rng.choice((*KNOWN_TYPES, rng.randrange(256)))


def mutate_pad_to_limit(rng: random.Random, draft: Draft) -> None:
    """Exactly the longest payload the router accepts (64 KiB)."""
    room = DEFAULT_MAX_PAYLOAD - len(draft.payload)
    if room > 0:
        draft.payload += rng.choice((bytes(room), rng.randbytes(room), b"\xc3" * room))
    else:
        draft.payload = draft.payload[:DEFAULT_MAX_PAYLOAD]


Mutation = Callable[[random.Random, Draft], None]

MUTATIONS: dict[str, tuple[float, Mutation | None]] = {
    "payload bit flips": (16, mutate_payload_bits),
    "header bit flips": (6, mutate_header_bits),
    "truncated": (10, mutate_truncate),
    "extended": (8, mutate_extend),
    "GGEP garbage": (10, mutate_ggep),
    "extension-area garbage": (7, mutate_extension_area),
    "extreme TTL/hops": (6, mutate_extreme_header),
    "other type code": (5, mutate_type),
    "replayed": (4, None),
    "padded to 64 KiB": (0.15, mutate_pad_to_limit),
}
"""Mutation name: (weight, function) for hostile frames; "replayed" sends an earlier frame
again as it was. Peaceful frames are sent "valid", without one."""


@dataclasses.dataclass(frozen=True, slots=True)
class FuzzFrame:
    data: bytes
    kind: str
    mutation: str


class FrameFuzzer:
    """One worker's source of frames: deterministic for a given generator and templates."""

    def __init__(self, rng: random.Random, templates: dict[str, list[Template]]) -> None:
        self.rng = rng
        self.templates = templates
        self._kinds = list(KIND_WEIGHTS)
        self._kind_weights = list(itertools.accumulate(KIND_WEIGHTS.values()))
        peaceful = {k: w for k, w in KIND_WEIGHTS.items() if k not in HOSTILE_KINDS}
        self._peaceful_kinds = list(peaceful)
        self._peaceful_weights = list(itertools.accumulate(peaceful.values()))
        self._mutations = list(MUTATIONS)
        self._mutation_weights = list(itertools.accumulate(w for w, _ in MUTATIONS.values()))
        self._sent: collections.deque[FuzzFrame] = collections.deque(maxlen=REPLAY_KEPT)
        qrp = templates["qrp 0x30"]
        self._qrp_resets = [i for i, t in enumerate(qrp) if t.payload[:1] == b"\x00"]
        self._qrp_next = 0
        self.mutation_share = 1.0
        """The share of hostile frames: drawn from every kind, then given one of the
        :data:`MUTATIONS`. The rest are peaceful: valid, of the kinds a servent sends.
        Each session sets its own (:meth:`start_session`)."""

    def start_session(self, mutation_share: float) -> None:
        """A new connection: its own share of hostile frames, and its QRP table begins
        with a RESET (a router refuses a PATCH before one)."""
        self.mutation_share = mutation_share
        self._qrp_next = self.rng.choice(self._qrp_resets)

    def next_qrp(self) -> Template:
        """The next message of the valid QRP sequences, table after table."""
        qrp = self.templates["qrp 0x30"]
        template = qrp[self._qrp_next]
        self._qrp_next = (self._qrp_next + 1) % len(qrp)
        return template

    def header_fields(self) -> tuple[bytes, int, int]:
        """A fresh GUID (modern marks most of the time), a TTL and hops that are
        mostly usual: enough is forwarded for the router to do real work."""
        rng = self.rng
        guid = bytearray(rng.randbytes(16))
        if rng.random() < 0.9:
            guid[8], guid[15] = 0xFF, 0
        ttl = rng.choice((1, 1, 2, 2, 2, 3, 4, 7))
        hops = rng.choice((0, 0, 0, 1, 2, 3))
        return bytes(guid), ttl, hops

    def next_frame(self) -> FuzzFrame:
        rng = self.rng
        if rng.random() < self.mutation_share:
            mutation = rng.choices(self._mutations, cum_weights=self._mutation_weights)[0]
            if mutation == "replayed":
                if self._sent:
                    earlier = rng.choice(self._sent)
                    return FuzzFrame(earlier.data, earlier.kind, mutation)
                mutation = "payload bit flips"  # nothing sent yet to replay
            kind = rng.choices(self._kinds, cum_weights=self._kind_weights)[0]
        else:
            mutation = "valid"
            kind = rng.choices(self._peaceful_kinds, cum_weights=self._peaceful_weights)[0]
        guid, ttl, hops = self.header_fields()
        if kind == "random header":
            payload_type = rng.randrange(256)
            draft = Draft(guid, payload_type, rng.randrange(256), rng.randrange(256), b"")
            draft.payload = rng.randbytes(rng.randint(0, 512))
        else:
            template = self.next_qrp() if kind == "qrp 0x30" else rng.choice(self.templates[kind])
            draft = Draft(guid, template.payload_type, ttl, hops, template.payload)
        change = MUTATIONS[mutation][1] if mutation != "valid" else None
        if change is not None:
            change(rng, draft)
        frame = FuzzFrame(draft.to_bytes(), kind, mutation)
        self._sent.append(frame)
        return frame

    def frames(self, count: int) -> list[FuzzFrame]:
        return [self.next_frame() for _ in range(count)]

    def good_frame(self) -> bytes:
        """A valid, unmutated frame (the start of a half frame, a slow drip)."""
        guid, ttl, hops = self.header_fields()
        template = self.rng.choice(self.templates["query"])
        return Draft(guid, template.payload_type, ttl, hops, template.payload).to_bytes()


# ---------------------------------------------------------------------------------------
# Session endings: what breaks the stream at the end of a session


ENDINGS: dict[str, float] = {
    "close": 30,
    "reset mid-frame (SO_LINGER 0)": 15,
    "length beyond 64 KiB": 14,
    "wrong length, then more frames": 10,
    "random bytes": 10,
    "half a frame, then close": 8,
    "our Bye": 8,
}
DEFLATE_ENDINGS: dict[str, float] = {
    "garbage in the deflate stream": 12,
    "deflate bomb (1 MiB of zeros)": 3,
}


def oversized_header(rng: random.Random) -> bytes:
    length = rng.choice(
        (DEFAULT_MAX_PAYLOAD + 1, DEFAULT_MAX_PAYLOAD + 2, 1 << 20, 1 << 31, (1 << 32) - 1)
    )
    return HEADER_STRUCT.pack(rng.randbytes(16), rng.randrange(256), 1, 0, length)


def wrong_length_frames(rng: random.Random, fuzzer: FrameFuzzer) -> bytes:
    """A frame whose length field is off, followed by frames the router now misreads."""
    frame = bytearray(fuzzer.good_frame())
    length = len(frame) - HEADER_SIZE
    wrong = rng.choice(
        (0, max(0, length - rng.randint(1, 64)), length + rng.randint(1, 64), DEFAULT_MAX_PAYLOAD)
    )
    struct.pack_into("<I", frame, 19, wrong)
    return bytes(frame) + b"".join(f.data for f in fuzzer.frames(rng.randint(1, 20)))
