"""One-line, human-readable descriptions of messages, for captures, dumps and logs."""

from __future__ import annotations

from protocol.constants import message_type_name
from protocol.errors import MalformedPayloadError
from protocol.framing import Frame
from protocol.ggep import GGEPBlock
from protocol.messages import (
    Bye,
    Extension,
    HugeExtension,
    OpaquePayload,
    Payload,
    Ping,
    Pong,
    Push,
    QrpPatch,
    QrpReset,
    Query,
    QueryHit,
    VendorMessage,
    XmlExtension,
)


def type_name(message_type: int) -> str:
    """The upper-case label of one-line descriptions (``QUERY_HIT``, ``0X7F``)."""
    return message_type_name(message_type).upper()


def describe_ggep(block: GGEPBlock | None) -> str:
    if block is None:
        return ""
    return " GGEP{" + ",".join(f"{e.id}({len(e.data)})" for e in block.extensions) + "}"


def describe_extensions(extensions: tuple[Extension, ...]) -> str:
    parts = []
    for item in extensions:
        if isinstance(item, GGEPBlock):
            parts.append(describe_ggep(item).strip())
        elif isinstance(item, HugeExtension):
            parts.append(item.urn.decode("ascii", "replace"))
        elif isinstance(item, XmlExtension):
            parts.append(f"xml({len(item.data)})")
        else:
            parts.append(f"ext({len(item.data)})")
    return (" [" + " ".join(parts) + "]") if parts else ""


def describe_payload(payload: Payload) -> str:
    """The interesting fields of a payload, compactly."""
    if isinstance(payload, Ping):
        return describe_ggep(payload.ggep).strip()
    if isinstance(payload, Pong):
        return (
            f"{payload.ip}:{payload.port} files={payload.files} kbytes={payload.kbytes}"
            + describe_ggep(payload.ggep)
        )
    if isinstance(payload, Query):
        flags = (
            f"flags=0x{payload.flags:04x}"
            if payload.is_modern
            else f"min_speed={payload.min_speed}"
        )
        return f"{flags} text={payload.text!r}" + describe_extensions(payload.extensions)
    if isinstance(payload, QueryHit):
        vendor = payload.descriptor.vendor.decode("ascii", "replace") if payload.descriptor else "-"
        names = ", ".join(repr(r.text) for r in payload.results[:3])
        more = f" +{len(payload.results) - 3}" if len(payload.results) > 3 else ""
        return (
            f"{payload.ip}:{payload.port} hits={len(payload.results)} vendor={vendor} "
            f"servent={payload.servent_guid.hex()} {names}{more}"
        )
    if isinstance(payload, Push):
        return (
            f"servent={payload.servent_guid.hex()} index={payload.file_index} "
            f"to {payload.ip}:{payload.port}" + describe_ggep(payload.ggep)
        )
    if isinstance(payload, Bye):
        return f"code={payload.code} reason={payload.reason!r}"
    if isinstance(payload, QrpReset):
        return f"RESET table_length={payload.table_length} infinity={payload.infinity}"
    if isinstance(payload, QrpPatch):
        return (
            f"PATCH seq={payload.seq_no}/{payload.seq_size} compressor={payload.compressor} "
            f"bits={payload.entry_bits} data={len(payload.data)}"
        )
    if isinstance(payload, VendorMessage):
        return (
            f"vendor={payload.vendor!r} selector={payload.selector} version={payload.version} "
            f"body={len(payload.body)}"
        )
    assert isinstance(payload, OpaquePayload)
    return f"{len(payload.data)} bytes"


def describe_frame(frame: Frame) -> str:
    """Header fields, then the decoded payload or the reason it does not decode."""
    head = (
        f"{type_name(frame.payload_type):<15} ttl={frame.ttl} hops={frame.hops} "
        f"len={len(frame.payload):<5} guid={frame.guid.hex()}"
    )
    try:
        body = describe_payload(frame.payload_record())
    except MalformedPayloadError as exc:
        body = f"MALFORMED: {exc.reason}"
    return f"{head}  {body}".rstrip()
