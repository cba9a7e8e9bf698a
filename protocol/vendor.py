"""The vendor messages a servent introduces itself with, and Hops Flow.

A vendor message (header type 0x31) names itself by a 4-byte vendor code, a selector and
a version (:class:`VendorMessageId`, written ``BEAR/4v1``). Right after the handshake a
servent that announced ``Vendor-Message`` sends two of them:

* **Messages Supported** (``\\0\\0\\0\\0/0v0``): a little-endian count, then one 8-byte
  entry per vendor message it understands (vendor, selector, version). The two
  introductions themselves are always understood and are not listed. gtk-gnutella
  waits for it and, when it does not come within its first messages, marks the peer as
  not genuine.
* **Features Supported** (``\\0\\0\\0\\0/10v0``): a count, then 6-byte entries: a 4-letter
  feature name (``TLS!``, ``WHAT``, ``QRP1``...) and a version, 0 meaning "not".

**Query Status** (``BEAR/11v1`` request, ``BEAR/12v1`` response: 2 bytes, the results
a leaf kept for the query named by the message's GUID, 0xFFFF for "stop it") lets a
leaf guide its ultrapeer's dynamic querying.

**Hops Flow** (``BEAR/4v1``, one byte) asks the receiver not to send queries whose hop
count, as they would go on the wire, is that value or more: 0 stops all queries (a
gtk-gnutella whose queue towards us clogs sends it, and 255 when the clog clears).

Bodies are declared in construct. Like gtk-gnutella, readers take the entries their
count declares and ignore bytes after them; fewer bytes than declared is malformed.
Vendor messages travel one hop: TTL 1, hops 0, and an all-zero GUID.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from construct import (
    Bytes,
    Construct,
    ConstructError,
    Int8ul,
    Int16ul,
    PrefixedArray,
    Struct,
)

from .constants import GUID_SIZE, MessageType
from .errors import LocalProtocolError, MalformedPayloadError
from .messages import Message, VendorMessage


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class VendorMessageId:
    """Which vendor message: vendor code, selector, version."""

    vendor: bytes
    selector: int
    version: int

    def __str__(self) -> str:
        vendor = self.vendor.decode("latin-1") if any(self.vendor) else "0000"
        return f"{vendor}/{self.selector}v{self.version}"

    @classmethod
    def of(cls, message: VendorMessage) -> VendorMessageId:
        return cls(message.vendor, message.selector, message.version)


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class Feature:
    """One entry of Features Supported: a 4-letter name and a version (0: "not")."""

    name: str
    version: int

    def __str__(self) -> str:
        return f"{self.name}/{self.version}"


MESSAGES_SUPPORTED = VendorMessageId(b"\0\0\0\0", 0, 0)
FEATURES_SUPPORTED = VendorMessageId(b"\0\0\0\0", 10, 0)
HOPS_FLOW = VendorMessageId(b"BEAR", 4, 1)
QUERY_STATUS_REQUEST = VendorMessageId(b"BEAR", 11, 1)
"""An ultrapeer asks a leaf how many results it has kept for a query (the message's
GUID); no body."""
QUERY_STATUS_RESPONSE = VendorMessageId(b"BEAR", 12, 1)
"""The leaf's answer (solicited or not): results kept, 2 bytes little-endian; 0xFFFF
asks the ultrapeer to stop the query."""
STOP_QUERY = 0xFFFF

NO_HOPS_FLOW = 255
"""The hops-flow value of a peer that never asked for less: every query may go."""

MessagesSupportedBody: Construct[Any, Any] = PrefixedArray(
    Int16ul, Struct("vendor" / Bytes(4), "selector" / Int16ul, "version" / Int16ul)
)
FeaturesSupportedBody: Construct[Any, Any] = PrefixedArray(
    Int16ul, Struct("name" / Bytes(4), "version" / Int16ul)
)
HopsFlowBody: Construct[Any, Any] = Struct("hops" / Int8ul)
QueryStatusBody: Construct[Any, Any] = Struct("kept" / Int16ul)


def vendor_message(message_id: VendorMessageId, body: bytes) -> Message:
    """A vendor message as it goes to a neighbour: one hop, all-zero GUID."""
    payload = VendorMessage(message_id.vendor, message_id.selector, message_id.version, body)
    return Message(bytes(GUID_SIZE), 1, 0, payload)


def messages_supported(understood: Iterable[VendorMessageId]) -> Message:
    """Our Messages Supported, listing ``understood`` (the introductions excepted)."""
    entries = [
        {"vendor": m.vendor, "selector": m.selector, "version": m.version}
        for m in sorted(set(understood))
        if m not in (MESSAGES_SUPPORTED, FEATURES_SUPPORTED)
    ]
    return vendor_message(MESSAGES_SUPPORTED, _build(MessagesSupportedBody, entries))


def features_supported(features: Iterable[Feature]) -> Message:
    """Our Features Supported, listing ``features``."""
    entries = []
    for feature in sorted(set(features)):
        name = feature.name.encode("ascii", "replace")
        if len(name) != 4:
            raise LocalProtocolError(f"a feature name is 4 letters, not {feature.name!r}")
        entries.append({"name": name, "version": feature.version})
    return vendor_message(FEATURES_SUPPORTED, _build(FeaturesSupportedBody, entries))


def hops_flow(hops: int) -> Message:
    """A Hops Flow: the receiver should send us only queries of fewer hops."""
    return vendor_message(HOPS_FLOW, _build(HopsFlowBody, {"hops": hops}))


def query_status_request(query_guid: bytes) -> Message:
    """Ask a leaf how many results it has kept for the query ``query_guid``."""
    payload = VendorMessage(
        QUERY_STATUS_REQUEST.vendor, QUERY_STATUS_REQUEST.selector, QUERY_STATUS_REQUEST.version
    )
    return Message(query_guid, 1, 0, payload)


def query_status_response(query_guid: bytes, kept: int) -> Message:
    """A leaf's answer: ``kept`` results (:data:`STOP_QUERY`: stop it)."""
    body = _build(QueryStatusBody, {"kept": kept})
    response = QUERY_STATUS_RESPONSE
    return Message(
        query_guid, 1, 0, VendorMessage(response.vendor, response.selector, response.version, body)
    )


def parse_query_status(body: bytes) -> int:
    """The results a leaf says it kept (:data:`STOP_QUERY`: stop the query)."""
    kept: int = _parse(QueryStatusBody, body, QUERY_STATUS_RESPONSE).kept
    return kept


def parse_messages_supported(body: bytes) -> tuple[VendorMessageId, ...]:
    """The vendor messages a peer says it understands, in its order."""
    entries = _parse(MessagesSupportedBody, body, MESSAGES_SUPPORTED)
    return tuple(VendorMessageId(e.vendor, e.selector, e.version) for e in entries)


def parse_features_supported(body: bytes) -> tuple[Feature, ...]:
    """The features a peer announces, in its order (names decoded as latin-1)."""
    entries = _parse(FeaturesSupportedBody, body, FEATURES_SUPPORTED)
    return tuple(Feature(e.name.decode("latin-1"), e.version) for e in entries)


def parse_hops_flow(body: bytes) -> int:
    """The hop count from which a peer wants no more queries."""
    hops: int = _parse(HopsFlowBody, body, HOPS_FLOW).hops
    return hops


def _parse(spec: Construct[Any, Any], body: bytes, message_id: VendorMessageId) -> Any:
    try:
        return spec.parse(body)
    except (ConstructError, ValueError, OverflowError) as exc:
        raise MalformedPayloadError(
            f"vendor message {message_id} is malformed: {exc}",
            message_type=MessageType.VENDOR,
        ) from exc


def _build(spec: Construct[Any, Any], value: object) -> bytes:
    try:
        data: bytes = spec.build(value)
    except (ConstructError, ValueError, OverflowError) as exc:
        raise LocalProtocolError(f"cannot build a vendor message body: {exc}") from exc
    return data
