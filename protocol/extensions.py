"""The extension areas of queries and query-hit results.

Both carry a list of items separated by 0x1C: HUGE ``urn:`` references, XML (or
``{``-prefixed) metadata, GGEP blocks, and whatever older servents put there. A result's
area ends with a NUL; a query's runs to the end of the payload.

A GGEP block is walked by its own length fields rather than by looking for the next
separator, because binary GGEP data may legitimately contain 0x1C or 0x00 bytes. A
segment that starts with the GGEP magic byte but does not parse as GGEP is kept as an
unknown item instead of failing the whole message: 0xC3 is also a common UTF-8 lead
byte in free text left by old servents.
"""

from __future__ import annotations

from collections.abc import Iterable

from .errors import LocalProtocolError, MalformedPayloadError
from .ggep import GGEP_MAGIC, GGEPBlock, build_ggep, parse_ggep
from .messages import Extension, HugeExtension, UnknownExtension, XmlExtension

SEPARATOR = 0x1C
_SEPARATOR_BYTE = b"\x1c"
_NUL_BYTE = b"\x00"


def _classify(segment: bytes) -> Extension:
    if segment[:4].lower() == b"urn:":
        return HugeExtension(segment)
    if segment[:1] in (b"<", b"{"):
        return XmlExtension(segment)
    return UnknownExtension(segment)


def _next_delimiter(data: bytes, pos: int, end: int) -> int:
    separator = data.find(_SEPARATOR_BYTE, pos, end)
    nul = data.find(_NUL_BYTE, pos, end)
    if separator < 0:
        return end if nul < 0 else nul
    return separator if nul < 0 else min(separator, nul)


def parse_extension_area(
    data: bytes, start: int, end: int, *, nul_terminated: bool, message_type: int
) -> tuple[tuple[Extension, ...], int]:
    """Parse ``data[start:end]`` into extension items.

    Returns the items and the offset just past the area (past its NUL when
    ``nul_terminated``). A query's area may end with NUL padding, which is tolerated.

    Raises:
        MalformedPayloadError: an unterminated result area, a NUL in the middle of a
            query area, or bytes glued to the end of a GGEP block.
    """
    items: list[Extension] = []
    pos = start
    view = memoryview(data)[:end]
    while pos < end:
        byte = data[pos]
        if byte == 0:
            if nul_terminated:
                return tuple(items), pos + 1
            if data.count(_NUL_BYTE, pos, end) == end - pos:
                return tuple(items), end
            raise MalformedPayloadError(
                "NUL byte inside a query's extension area", message_type=message_type
            )
        if byte == SEPARATOR:
            pos += 1
            continue
        if byte == GGEP_MAGIC:
            try:
                block, after = parse_ggep(view, pos)
            except MalformedPayloadError:
                pass
            else:
                if after < end and data[after] not in (SEPARATOR, 0):
                    raise MalformedPayloadError(
                        "unexpected bytes right after a GGEP block", message_type=message_type
                    )
                items.append(block)
                pos = after
                continue
        stop = _next_delimiter(data, pos, end)
        items.append(_classify(data[pos:stop]))
        pos = stop
    if nul_terminated:
        raise MalformedPayloadError(
            "result extension block is not NUL-terminated", message_type=message_type
        )
    return tuple(items), end


def _check_text_item(data: bytes, kind: str) -> None:
    if not data:
        raise LocalProtocolError(f"an empty {kind} extension cannot be represented")
    if _SEPARATOR_BYTE in data or _NUL_BYTE in data:
        raise LocalProtocolError(f"a {kind} extension may not contain 0x1C or NUL bytes")


def _encode_item(item: Extension) -> bytes:
    if isinstance(item, GGEPBlock):
        return build_ggep(item)
    if isinstance(item, HugeExtension):
        _check_text_item(item.urn, "HUGE")
        if item.urn[:4].lower() != b"urn:":
            raise LocalProtocolError("a HUGE extension must start with 'urn:'")
        return item.urn
    if isinstance(item, XmlExtension):
        _check_text_item(item.data, "XML")
        if item.data[:1] not in (b"<", b"{"):
            raise LocalProtocolError("an XML extension must start with '<' or '{'")
        return item.data
    _check_text_item(item.data, "unknown")
    if not isinstance(_classify(item.data), UnknownExtension) or item.data[0] == GGEP_MAGIC:
        raise LocalProtocolError("an unknown extension may not look like a HUGE, XML or GGEP item")
    return item.data


def build_extension_area(items: Iterable[Extension], *, nul_terminated: bool) -> bytes:
    """Join extension items with 0x1C, the inverse of :func:`parse_extension_area`.

    Stricter than the parser, as the spec asks of senders: a GGEP block must come after
    every HUGE and XML item, and a result's area (which a NUL ends) must hold no NUL, so
    GGEP data with NUL bytes there has to be COBS-encoded.

    Raises:
        LocalProtocolError: an item that cannot be represented, or one of the rules above.
    """
    items = tuple(items)
    seen_ggep = False
    for item in items:
        if isinstance(item, GGEPBlock):
            seen_ggep = True
        elif seen_ggep:
            raise LocalProtocolError("a GGEP block must follow every HUGE and XML extension")
    area = _SEPARATOR_BYTE.join(_encode_item(item) for item in items)
    if nul_terminated:
        if _NUL_BYTE in area:
            raise LocalProtocolError(
                "a result's extension block may not contain NUL: COBS-encode the GGEP data"
            )
        area += _NUL_BYTE
    return area
