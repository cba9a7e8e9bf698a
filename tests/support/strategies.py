"""Hypothesis strategies producing every valid payload record.

"Valid" means representable on the wire: the builders must accept everything drawn
here, and parse(build(x)) must give x back.
"""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from protocol.constants import MessageType
from protocol.ggep import GGEPBlock, GGEPExtension
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
from protocol.spec import PAYLOADS

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFF_FFFF)
guids = st.binary(min_size=16, max_size=16)
ipv4s = st.tuples(u8, u8, u8, u8).map(lambda t: ".".join(map(str, t)))


def _without(
    forbidden: bytes, *, min_size: int = 0, max_size: int = 40
) -> st.SearchStrategy[bytes]:
    return (
        st.binary(min_size=min_size, max_size=max_size)
        .map(lambda b: bytes(c for c in b if c not in forbidden))
        .filter(lambda b: len(b) >= min_size)
    )


nul_free = _without(b"\x00")
ext_text = _without(b"\x00\x1c")

ggep_ids = st.text(
    alphabet=st.characters(min_codepoint=1, max_codepoint=255), min_size=1, max_size=15
)
ggep_extensions = st.builds(
    GGEPExtension,
    id=ggep_ids,
    data=st.binary(max_size=48) | st.sampled_from([b"", b"\x00" * 5, b"\x1c\x00\xc3"]),
    compressed=st.booleans(),
    cobs=st.booleans(),
)
ggep_blocks = st.lists(ggep_extensions, min_size=1, max_size=4).map(
    lambda exts: GGEPBlock(tuple(exts))
)
optional_ggep = st.none() | ggep_blocks


def _unknown_ok(data: bytes) -> bool:
    return bool(data) and data[:4].lower() != b"urn:" and data[:1] not in (b"<", b"{", b"\xc3")


text_extensions: st.SearchStrategy[Extension] = st.one_of(
    ext_text.map(lambda b: HugeExtension(b"urn:sha1:" + b)),
    ext_text.map(lambda b: XmlExtension(b"<" + b)),
    ext_text.map(lambda b: XmlExtension(b"{" + b)),
    ext_text.filter(_unknown_ok).map(UnknownExtension),
)


def _all_cobs(block: GGEPBlock) -> GGEPBlock:
    """Inside a NUL-terminated result block, GGEP data must be COBS-encoded."""
    return GGEPBlock(tuple(dataclasses.replace(e, cobs=True) for e in block.extensions))


def _extension_lists(
    ggep: st.SearchStrategy[GGEPBlock],
) -> st.SearchStrategy[tuple[Extension, ...]]:
    """Text items first, then at most one GGEP block, as the spec orders them."""
    return st.tuples(st.lists(text_extensions, max_size=3), st.none() | ggep).map(
        lambda parts: (*parts[0], *(() if parts[1] is None else (parts[1],)))
    )


extension_lists = _extension_lists(ggep_blocks)
result_extension_lists = _extension_lists(ggep_blocks.map(_all_cobs))

pings = st.builds(Ping, ggep=optional_ggep)
pongs = st.builds(Pong, port=u16, ip=ipv4s, files=u32, kbytes=u32, ggep=optional_ggep)
pushes = st.builds(Push, servent_guid=guids, file_index=u32, ip=ipv4s, port=u16, ggep=optional_ggep)
queries = st.builds(Query, search=nul_free, flags=u16, extensions=extension_lists)

_bye_chars = st.characters(codec="utf-8", exclude_characters="\r\n\x00")
_bye_text = st.text(alphabet=_bye_chars, max_size=30).filter(lambda s: s == s.strip())
_bye_names = _bye_text.filter(lambda s: bool(s) and ":" not in s)
byes = st.builds(
    Bye,
    code=u16,
    reason=_bye_text,
    headers=st.lists(st.tuples(_bye_names, _bye_text), max_size=3).map(tuple),
)

hit_results = st.builds(
    QueryHitResult,
    file_index=u32,
    file_size=u32,
    name=nul_free,
    extensions=result_extension_lists,
)
descriptors = st.builds(
    QueryHitDescriptor,
    vendor=st.binary(min_size=4, max_size=4),
    open_data=st.binary(max_size=6),
    private_data=st.binary(max_size=24),
)
query_hits = st.builds(
    QueryHit,
    port=u16,
    ip=ipv4s,
    speed=u32,
    results=st.lists(hit_results, max_size=4).map(tuple),
    servent_guid=guids,
    descriptor=st.none() | descriptors,
)
qrp_resets = st.builds(QrpReset, table_length=u32, infinity=u8)
qrp_patches = st.builds(
    QrpPatch, seq_no=u8, seq_size=u8, compressor=u8, entry_bits=u8, data=st.binary(max_size=40)
)
vendor_messages = st.builds(
    VendorMessage,
    vendor=st.binary(min_size=4, max_size=4),
    selector=u16,
    version=u16,
    body=st.binary(max_size=40),
    message_type=st.sampled_from([MessageType.VENDOR, MessageType.STANDARD_VENDOR]),
)
opaque_types = st.integers(0, 255).filter(lambda t: t not in PAYLOADS)
opaque_payloads = st.builds(OpaquePayload, message_type=opaque_types, data=st.binary(max_size=40))

payloads: st.SearchStrategy[Payload] = st.one_of(
    pings,
    pongs,
    pushes,
    queries,
    byes,
    query_hits,
    qrp_resets,
    qrp_patches,
    vendor_messages,
    opaque_payloads,
)

messages = st.builds(Message, guid=guids, ttl=u8, hops=u8, payload=payloads)

message_types = st.sampled_from(sorted(PAYLOADS)) | st.integers(0, 255)
