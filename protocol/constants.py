"""Numbers the Gnutella 0.6 protocol fixes: message types, Bye codes, limits.

Sources: the Gnutella 0.6 draft (header, payload types, TTL rules) and gtk-gnutella's
``doc/public/bye_codes`` (the Bye code list every modern servent follows).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Final

HEADER_SIZE: Final = 23
"""GUID (16) + payload type (1) + TTL (1) + hops (1) + payload length (4)."""

GUID_SIZE = 16

DEFAULT_MAX_PAYLOAD: Final = 64 * 1024
"""gtk-gnutella and LimeWire both close a connection announcing a larger payload."""

HARD_TTL_LIMIT = 15
"""hops + TTL above this is dropped by every mature servent (spec section 2.2.1)."""


class MessageType(enum.IntEnum):
    """Payload type codes.

    Only the first five are routed; the rest are hop-by-hop or carried opaquely.
    """

    PING = 0x00
    PONG = 0x01
    BYE = 0x02
    QRP = 0x30
    VENDOR = 0x31
    STANDARD_VENDOR = 0x32
    PUSH = 0x40
    RUDP = 0x41
    DHT = 0x44
    QUERY = 0x80
    QUERY_HIT = 0x81
    HSEP = 0xCD


def message_type_name(message_type: int) -> str:
    """The one label of a payload type, as every report and metric spells it: the
    lowercase name (``ping``, ``query_hit``), or ``0xNN`` for a code without one.
    Upper-case and spaced forms are derived from this."""
    try:
        return MessageType(message_type).name.lower()
    except ValueError:
        return f"0x{message_type:02x}"


def counts_by_type_name(counts: Sequence[int]) -> dict[str, int]:
    """Per-type counters kept as a list indexed by type code, as a dict by label, with
    the types never counted left out."""
    return {message_type_name(t): n for t, n in enumerate(counts) if n}


KNOWN_MESSAGE_TYPES = frozenset(int(t) for t in MessageType)


class ByeCode(enum.IntEnum):
    """Bye codes as listed by gtk-gnutella; 2xx are polite, 4xx blame the peer, 5xx us."""

    SHUTDOWN = 200
    USER_REMOVAL = 201
    LOCAL_NODE_PREFERRED = 202
    CHANGING_PEER_MODE = 203
    MESSAGE_TOO_LARGE = 400
    TOO_MANY_DUPLICATES = 401
    IMPROPER_QUERIES = 402
    RELAYED_HIGH_TTL = 403
    TOO_MANY_UNKNOWN = 404
    ACTIVITY_TIMEOUT = 405
    NO_REPLY_TO_ALIVE_PINGS = 406
    NOT_SHARING = 407
    TTL_ZERO = 408
    TOO_MANY_ERRORS = 409
    EXCESSIVE_MESSAGES = 410
    INVALID_PAYLOAD = 411
    SECURITY_VIOLATION = 412
    INVALID_QRP_SEQUENCE = 413
    LEAF_RELAYING = 414
    INTERNAL_ERROR = 500
    PROTOCOL_DESYNC = 501
    SEND_QUEUE_FULL = 502
    CLOSING = 503
    ROLE_SWITCH_IN_HANDSHAKE = 504
    PROTOCOL_NOT_SUPPORTED = 505
