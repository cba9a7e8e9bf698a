"""The trace file format: constants, headers, records, errors (layout in docs/trace-format.md).

The writer (:mod:`.trace_writer`) and the reader (:mod:`.trace_reader`) share what is
here; :mod:`.trace` is the module to import, and its docstring the theory of operation.
"""

from __future__ import annotations

import dataclasses
import re
import struct
from pathlib import Path

from protocol.constants import HEADER_SIZE
from protocol.framing import Frame
from protocol.header import HEADER_STRUCT

MAGIC = b"GNUTRACE"
FORMAT_VERSION = 1

_FILE_HEADER = struct.Struct("<8sHHI8sdd")
"""magic, version, header size, part, trace id, start (Unix time), clock base."""
FILE_HEADER_SIZE = _FILE_HEADER.size  # 40

_RECORD_PREFIX = struct.Struct("<QI16sBBBI")
"""offset (us), connection id, then the Gnutella header: GUID, type, TTL, hops, length."""
RECORD_PREFIX_SIZE = _RECORD_PREFIX.size  # 35
_TIMESTAMP_SIZE = 12
"""The part of the prefix before the Gnutella header."""

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_FILES = 4
DEFAULT_BUFFER_BYTES = 1024 * 1024
DEFAULT_FLUSH_BYTES = 256 * 1024
READ_SIZE = 1024 * 1024
_MAX_OFFSET_US = (1 << 64) - 1
_MAX_CONNECTION = (1 << 32) - 1

assert RECORD_PREFIX_SIZE == _TIMESTAMP_SIZE + HEADER_SIZE


Piece = tuple[bytearray, int]
"""Buffered records handed over for writing, and how many records they hold."""


class TraceFormatError(ValueError):
    """The file is not a trace this code can read (wrong magic, unknown version)."""


class TraceWarning(UserWarning):
    """Something in a trace was skipped (see :class:`TraceProblem`)."""


@dataclasses.dataclass(frozen=True, slots=True)
class TraceProblem:
    """Part of a trace that could not be read and was skipped."""

    path: Path
    offset: int
    """Byte offset in ``path`` where the unreadable part starts."""
    message: str

    def __str__(self) -> str:
        return f"{self.path}: at byte {self.offset}: {self.message}"


@dataclasses.dataclass(frozen=True, slots=True)
class TraceHeader:
    """The header at the start of every trace file."""

    version: int
    part: int
    """0 for the first file of a trace, then 1, 2, ... for each file started after it."""
    trace_id: bytes
    """8 random bytes shared by every file of one trace."""
    start_time: float
    """Unix time (wall clock, seconds) of offset 0, for humans."""
    clock_base: float
    """The recording clock's reading (seconds) at offset 0: a record's clock time is
    ``clock_base + at``. The daemon's clock is ``trio.current_time()``."""
    header_size: int = FILE_HEADER_SIZE


@dataclasses.dataclass(frozen=True, slots=True)
class TraceRecord:
    """One message as a router read it, and when."""

    at: float
    """Seconds since the trace's start (microsecond resolution)."""
    connection: int
    """The connection it arrived on (the daemon's connection id, 0 to 2**32 - 1)."""
    guid: bytes
    payload_type: int
    ttl: int
    hops: int
    payload: bytes

    def wire(self) -> bytes:
        """The message as it was on the wire: the 23-byte header, then the payload."""
        return (
            HEADER_STRUCT.pack(self.guid, self.payload_type, self.ttl, self.hops, len(self.payload))
            + self.payload
        )

    def frame(self) -> Frame:
        """The message as the framer would have produced it."""
        return Frame(self.guid, self.payload_type, self.ttl, self.hops, self.payload)


@dataclasses.dataclass(frozen=True, slots=True)
class TraceWriterStatistics:
    path: str
    records: int
    """Records accepted into the trace."""
    bytes: int
    """Bytes of those records (file headers not included)."""
    dropped: int
    """Records refused: the buffer was full, or the writer was closed or had failed."""
    buffered_bytes: int
    """Accepted, not yet handed to a file."""
    flushed_bytes: int
    """Record bytes written to files so far."""
    files: int
    """Files started: 1 plus the rotations."""
    failed: str | None
    """The error that stopped the writer, if one did."""


def _rotated_files(path: Path) -> list[tuple[int, Path]]:
    """``(number, path)`` for every ``PATH.N`` next to ``path``, highest N first."""
    pattern = re.compile(re.escape(path.name) + r"\.([0-9]{1,6})")
    try:
        entries = list(path.parent.iterdir())
    except FileNotFoundError:
        return []
    found = [
        (int(match.group(1)), entry)
        for entry in entries
        if (match := pattern.fullmatch(entry.name)) is not None
    ]
    return sorted(found, reverse=True)
