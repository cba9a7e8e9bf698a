"""Valid messages of every kind a servent sends, built with ``protocol/`` from a
seeded generator, and the pools of templates the frame fuzzer draws from. Nothing here
is hostile: the mutations that make frames hostile are in :mod:`router_fuzz.mutations`.
"""

from __future__ import annotations

import dataclasses
import random
import zlib
from collections.abc import Callable

from protocol.codec import encode_message
from protocol.constants import HEADER_SIZE, ByeCode, MessageType
from protocol.ggep import (
    GGEPBlock,
    GGEPExtension,
    daily_uptime_extension,
    packed_hosts_extension,
    ultrapeer_slots_extension,
    vendor_code_extension,
)
from protocol.header import HEADER_STRUCT
from protocol.messages import (
    Bye,
    Extension,
    HugeExtension,
    Message,
    OpaquePayload,
    Payload,
    Ping,
    Pong,
    Push,
    QrpPatch,
    QrpReset,
    Query,
    QueryHit,
    QueryHitDescriptor,
    QueryHitResult,
    UnknownExtension,
    VendorMessage,
    XmlExtension,
)
from protocol.qrp import ENTRY_BITS, QrpTable, table_messages
from protocol.vendor import (
    Feature,
    VendorMessageId,
    features_supported,
    hops_flow,
    messages_supported,
)
from scripts.router_fuzz.settings import QRP_TABLES, TEMPLATES_PER_KIND

WORDS = (
    b"jazz", b"free", b"ogg", b"seda", b"router", b"holiday", b"mp3", b"linux", b"iso",
    b"caf\xc3\xa9", b"\xe6\x97\xa5\xe6\x9c\xac", b"a" * 200, b"%s%n", b"..\\..", b"\xff\xfe",
)  # fmt: skip
VENDORS = (b"GTKG", b"LIME", b"BEAR", b"RAZA", b"\0\0\0\0", b"GRTR", b"\xff\xff\xff\xff")
UNKNOWN_TYPES = (MessageType.RUDP, MessageType.DHT, MessageType.HSEP, 0x03, 0x7F, 0x82, 0xFF)
KNOWN_TYPES = tuple(int(t) for t in MessageType)


def random_ip(rng: random.Random) -> str:
    special = ("0.0.0.0", "255.255.255.255", "127.0.0.1", "10.0.0.1", "192.168.1.1", "224.0.0.1")
    if rng.random() < 0.3:
        return rng.choice(special)
    return ".".join(str(rng.randrange(256)) for _ in range(4))


def random_host(rng: random.Random) -> str:
    return f"{random_ip(rng)}:{rng.randrange(65536)}"


def random_text(rng: random.Random, words: int) -> bytes:
    return b" ".join(rng.choice(WORDS) for _ in range(max(1, words)))


def random_ggep(rng: random.Random) -> GGEPBlock:
    """A well-formed block of the extensions routers read, and some they do not."""
    choices: list[Callable[[], GGEPExtension]] = [
        lambda: daily_uptime_extension(rng.randrange(1 << 32)),
        lambda: vendor_code_extension("GTKG", rng.randrange(256)),
        lambda: ultrapeer_slots_extension(
            rng.randrange(256), rng.randrange(256), rng.randrange(256)
        ),
        lambda: packed_hosts_extension(
            [(random_ip(rng), rng.randrange(1, 65536)) for _ in range(rng.randint(1, 20))]
        ),
        lambda: GGEPExtension("SCP", bytes([rng.randrange(256)])),
        lambda: GGEPExtension("H", b"\x01" + rng.randbytes(20)),
        lambda: GGEPExtension("XYZZY", rng.randbytes(rng.randint(0, 300)), compressed=True),
        lambda: GGEPExtension("NUL", bytes(rng.randint(1, 40)), cobs=True),
    ]
    return GGEPBlock(tuple(rng.choice(choices)() for _ in range(rng.randint(1, 4))))


def maybe_ggep(rng: random.Random, share: float = 0.4) -> GGEPBlock | None:
    return random_ggep(rng) if rng.random() < share else None


def cobs_ggep(rng: random.Random) -> GGEPBlock:
    """A block without NUL bytes on the wire: what a query hit's result may carry."""
    extensions = tuple(
        dataclasses.replace(ext, cobs=True, compressed=False) for ext in random_ggep(rng).extensions
    )
    return GGEPBlock(extensions)


def sha1_urn(rng: random.Random) -> HugeExtension:
    alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
    return HugeExtension(b"urn:sha1:" + bytes(rng.choice(alphabet) for _ in range(32)))


def random_extensions(rng: random.Random, result: bool) -> tuple[Extension, ...]:
    items: list[Extension] = []
    if rng.random() < 0.5:
        items.append(sha1_urn(rng))
    if rng.random() < 0.3:
        items.append(
            XmlExtension(b'<audios><audio title="' + random_text(rng, 3) + b'"/></audios>')
        )
    if rng.random() < 0.2:
        items.append(UnknownExtension(b"legacy text " + bytes([0x41 + rng.randrange(26)])))
    if rng.random() < 0.4:
        items.append(cobs_ggep(rng) if result else random_ggep(rng))
    return tuple(items)


def random_ping(rng: random.Random) -> Payload:
    return Ping(maybe_ggep(rng, 0.3))


def random_pong(rng: random.Random) -> Payload:
    return Pong(
        rng.randrange(65536),
        random_ip(rng),
        rng.randrange(1 << 32),
        rng.randrange(1 << 32),
        maybe_ggep(rng, 0.6),
    )


def random_query(rng: random.Random) -> Payload:
    flags = rng.choice((0x8000, 0x0000, 0xFFFF, 0x8800, 0x4000, rng.randrange(1 << 16)))
    search = random_text(rng, rng.randint(1, 6)).replace(b"\x00", b"")
    return Query(search, flags, random_extensions(rng, result=False))


def random_results(rng: random.Random, count: int, name_words: int) -> tuple[QueryHitResult, ...]:
    return tuple(
        QueryHitResult(
            rng.randrange(1 << 32),
            rng.randrange(1 << 32),
            random_text(rng, name_words) + b".ogg",
            random_extensions(rng, result=True),
        )
        for _ in range(count)
    )


def random_descriptor(rng: random.Random) -> QueryHitDescriptor | None:
    if rng.random() < 0.3:
        return None
    private = b"" if rng.random() < 0.5 else b"\xc3" + rng.randbytes(rng.randint(0, 30))
    return QueryHitDescriptor(rng.choice(VENDORS), rng.randbytes(rng.choice((0, 1, 2, 4))), private)


def random_query_hit(rng: random.Random) -> Payload:
    return QueryHit(
        rng.randrange(65536),
        random_ip(rng),
        rng.randrange(1 << 32),
        random_results(rng, rng.randint(0, 10), 3),
        rng.randbytes(16),
        random_descriptor(rng),
    )


def huge_query_hit(rng: random.Random) -> Payload:
    """255 results with long names: as close to 64 KiB as a query hit gets."""
    name = bytes(rng.choice(b"abcdefghij") for _ in range(230))
    results = tuple(
        QueryHitResult(index, rng.randrange(1 << 32), name + b"%03d" % index)
        for index in range(255)
    )
    return QueryHit(6346, random_ip(rng), 1_000, results, rng.randbytes(16), None)


def random_push(rng: random.Random) -> Payload:
    return Push(
        rng.randbytes(16),
        rng.randrange(1 << 32),
        random_ip(rng),
        rng.randrange(65536),
        maybe_ggep(rng, 0.2),
    )


def random_bye(rng: random.Random) -> Payload:
    code = rng.choice((*(int(c) for c in ByeCode), 0, 65535, rng.randrange(65536)))
    return Bye(code, random_text(rng, rng.randint(0, 8)).decode("utf-8", "replace"))


def garbage_qrp(rng: random.Random) -> Payload:
    """A reset or a patch out of any sequence, from plausible to garbage: odd sizes,
    unknown compressors, entry widths of 0 or 255, sequence numbers past their size, data
    that is not zlib. A router refuses any of them (Bye 413), as gtk-gnutella does."""
    if rng.random() < 0.3:
        length = rng.choice((0, 1, 65_536, 1 << 20, (1 << 32) - 1, rng.randrange(1 << 32)))
        return QrpReset(length, rng.randrange(256))
    compressor = rng.choice((0, 1, 1, 2, 255))
    if compressor == 1 and rng.random() < 0.5:
        data = zlib.compress(rng.randbytes(rng.randint(0, 2000)))
    else:
        data = rng.randbytes(rng.randint(0, 4000))
    return QrpPatch(
        rng.randrange(256),
        rng.randrange(256),
        compressor,
        rng.choice((0, 1, 2, 4, 8, 255)),
        data,
    )


def random_vendor(rng: random.Random, message_type: int = MessageType.VENDOR) -> Payload:
    pick = rng.randrange(4)
    if message_type == MessageType.VENDOR and pick == 0:
        ids = [
            VendorMessageId(rng.choice(VENDORS), rng.randrange(65536), rng.randrange(65536))
            for _ in range(rng.randint(0, 40))
        ]
        return messages_supported(ids).payload
    if message_type == MessageType.VENDOR and pick == 1:
        features = [Feature(rng.choice(("TLS!", "WHAT", "QRP1", "ZZZZ")), rng.randrange(65536))]
        return features_supported(features).payload
    if message_type == MessageType.VENDOR and pick == 2:
        return hops_flow(rng.randrange(256)).payload
    return VendorMessage(
        rng.choice(VENDORS),
        rng.randrange(65536),
        rng.randrange(65536),
        rng.randbytes(rng.randint(0, 300)),
        message_type,
    )


def random_unknown(rng: random.Random) -> Payload:
    return OpaquePayload(rng.choice(UNKNOWN_TYPES), rng.randbytes(rng.randint(0, 600)))


PAYLOAD_MAKERS: dict[str, Callable[[random.Random], Payload]] = {
    "ping": random_ping,
    "pong": random_pong,
    "query": random_query,
    "query hit": random_query_hit,
    "huge query hit": huge_query_hit,
    "push": random_push,
    "bye": random_bye,
    "qrp 0x30 garbage": garbage_qrp,
    "vendor 0x31": random_vendor,
    "vendor 0x32": lambda rng: random_vendor(rng, MessageType.STANDARD_VENDOR),
    "unknown type": random_unknown,
}

KIND_WEIGHTS: dict[str, float] = {
    "ping": 14,
    "pong": 14,
    "query": 18,
    "query hit": 10,
    "huge query hit": 0.15,
    "push": 8,
    "bye": 0.5,
    "qrp 0x30": 5,
    "qrp 0x30 garbage": 1,
    "vendor 0x31": 6,
    "vendor 0x32": 3,
    "unknown type": 6,
    "random header": 8,
}
"""How often each kind of frame is drawn. Byes are rare because a valid one ends the
connection; huge hits because each is 64 KiB. "qrp 0x30" is the next message of a valid
RESET and PATCH sequence (each connection starts one afresh)."""

HOSTILE_KINDS = frozenset({"qrp 0x30 garbage", "random header"})
"""Kinds that only hostile frames are drawn from: no servent sends them."""


def qrp_sequences(rng: random.Random) -> list[QrpReset | QrpPatch]:
    """Valid QRP tables, one after another, each a RESET and its PATCH messages (made
    by ``protocol.qrp``): sizes, entry widths and compression vary from table to table."""
    words = [w.decode("utf-8", "replace").lower() for w in WORDS]
    messages: list[QrpReset | QrpPatch] = []
    for _ in range(QRP_TABLES):
        shared = [f"{rng.choice(words)}{rng.randrange(1000)}" for _ in range(rng.randint(1, 300))]
        table = QrpTable.of_words(shared, slots=rng.choice((1 << 13, 1 << 16, 1 << 17)))
        messages += table_messages(
            table,
            entry_bits=rng.choice(ENTRY_BITS),
            infinity=rng.choice((2, 7)),
            compressed=rng.random() < 0.7,
            patch_bytes=rng.choice((1024, 4096, 16384)),
        )
    return messages


@dataclasses.dataclass(frozen=True, slots=True)
class Template:
    payload_type: int
    payload: bytes


def build_templates(rng: random.Random) -> dict[str, list[Template]]:
    """A pool of valid payloads per kind, built once: encoding through construct is far
    too slow to do for each of a million frames, and fresh header fields plus a mutation
    make every frame different anyway."""
    templates: dict[str, list[Template]] = {}
    for kind, make in PAYLOAD_MAKERS.items():
        count = 4 if kind == "huge query hit" else TEMPLATES_PER_KIND
        templates[kind] = [template_of(make(rng)) for _ in range(count)]
    templates["qrp 0x30"] = [template_of(message) for message in qrp_sequences(rng)]
    return templates


def template_of(payload: Payload) -> Template:
    data = encode_message(Message(bytes(16), 1, 0, payload))
    return Template(HEADER_STRUCT.unpack_from(data)[1], data[HEADER_SIZE:])
