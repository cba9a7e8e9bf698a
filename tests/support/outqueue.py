"""Messages for the outgoing-queue tests: shaped like the real thing, each GUID a serial
number so every message is unique and can be told apart after a queue reorders it."""

from __future__ import annotations

import itertools
import struct

from gnutella_router.net.outqueue import OutgoingQueue, Verdict
from protocol.constants import HEADER_SIZE, MessageType

PING, PONG, BYE = MessageType.PING, MessageType.PONG, MessageType.BYE
QUERY, HIT, PUSH = MessageType.QUERY, MessageType.QUERY_HIT, MessageType.PUSH
VENDOR, QRP = MessageType.VENDOR, MessageType.QRP

_serials = itertools.count(1)
_HEADER = struct.Struct("<16sBBBI")


def message(message_type: int, size: int = 100, hops: int = 0) -> bytes:
    """A message shaped like the real thing, its GUID a serial number so each is unique."""
    assert size >= HEADER_SIZE
    guid = next(_serials).to_bytes(16, "big")
    header = _HEADER.pack(guid, message_type, 1, hops, size - HEADER_SIZE)
    return header + bytes(size - HEADER_SIZE)


def header_of(data: bytes) -> tuple[int, int, int]:
    """(serial, type, hops) read back from a message built by :func:`message`."""
    guid, message_type, _ttl, hops, _length = _HEADER.unpack_from(data)
    return int.from_bytes(guid, "big"), message_type, hops


def offer(
    queue: OutgoingQueue, message_type: int, size: int = 100, hops: int = 0, now: float = 0.0
) -> tuple[Verdict, bytes]:
    data = message(message_type, size, hops)
    return queue.offer(data, message_type, hops, now), data


def drain(queue: OutgoingQueue, max_bytes: int = 1 << 30) -> list[bytes]:
    out: list[bytes] = []
    while batch := queue.take(max_bytes):
        out.extend(batch)
    return out


def types_of(batch: list[bytes]) -> list[int]:
    return [header_of(data)[1] for data in batch]
