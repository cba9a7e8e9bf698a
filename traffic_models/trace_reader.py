"""Reading traces: one file or a rotated set, damage reported and skipped (see :mod:`.trace`)."""

from __future__ import annotations

import struct
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from protocol.constants import DEFAULT_MAX_PAYLOAD

from .trace_format import (
    _FILE_HEADER,
    _RECORD_PREFIX,
    _TIMESTAMP_SIZE,
    FILE_HEADER_SIZE,
    FORMAT_VERSION,
    MAGIC,
    READ_SIZE,
    RECORD_PREFIX_SIZE,
    TraceFormatError,
    TraceHeader,
    TraceProblem,
    TraceRecord,
    TraceWarning,
    _rotated_files,
)

# ---------------------------------------------------------------------------------------
# Reading


def read_header(path: Path) -> TraceHeader:
    """The header of one trace file.

    Raises:
        TraceFormatError: not a trace, an unknown version, or the header is cut short.
        OSError: the file cannot be read.
    """
    with Path(path).open("rb") as file:
        return _read_header(file, Path(path))


class _CutShortHeader(TraceFormatError):
    """The file starts like a trace but ends within its header (a crash at creation)."""


def _read_header(file: BinaryIO, path: Path) -> TraceHeader:
    data = file.read(FILE_HEADER_SIZE)
    if data[: len(MAGIC)] != MAGIC[: len(data)]:
        raise TraceFormatError(f"{path}: not a trace file (no {MAGIC.decode()} magic)")
    if len(data) < FILE_HEADER_SIZE:
        raise _CutShortHeader(
            f"{path}: the file header is cut short ({len(data)} of {FILE_HEADER_SIZE} bytes)"
        )
    _, version, header_size, part, trace_id, start, base = _FILE_HEADER.unpack(data)
    if version != FORMAT_VERSION:
        raise TraceFormatError(
            f"{path}: trace format version {version}; this program reads {FORMAT_VERSION}"
        )
    if header_size < FILE_HEADER_SIZE:
        raise TraceFormatError(f"{path}: header size {header_size} is below {FILE_HEADER_SIZE}")
    extra = header_size - FILE_HEADER_SIZE
    if extra and len(file.read(extra)) != extra:
        raise _CutShortHeader(f"{path}: the file header is cut short")
    return TraceHeader(version, part, trace_id, start, base, header_size)


def trace_files(path: Path, *, rotated: bool = True) -> list[Path]:
    """The files that make up the trace at ``path``, oldest first.

    With ``rotated``, that is ``PATH.N`` ... ``PATH.1`` then ``PATH`` (those that
    exist); otherwise just ``PATH``.
    """
    path = Path(path)
    files = [p for _, p in _rotated_files(path)] if rotated else []
    if path.exists() or not files:
        files.append(path)
    return files


def read_trace(
    path: Path,
    *,
    rotated: bool = True,
    on_problem: Callable[[TraceProblem], None] | None = None,
    max_payload: int = DEFAULT_MAX_PAYLOAD,
) -> Iterator[TraceRecord]:
    """Every record of the trace at ``path``, in file order.

    Args:
        path: the trace; given the base path of a rotated set, every file of the set
            is read, oldest first (``rotated=False`` reads ``path`` alone). Rotated
            files that belong to another trace (another trace id) are skipped and
            reported.
        on_problem: called for every skipped part (a final record cut short, a corrupt
            length, a stray file); by default each becomes a :class:`TraceWarning`.
        max_payload: a larger payload length means the file is corrupt from there on.

    Raises:
        TraceFormatError: ``path`` (or a file of its set) is not a trace file.
        OSError: a file cannot be read.
    """
    for file_path, header, report in _trace_parts(path, rotated, on_problem):
        yield from _read_file(file_path, header, report, max_payload)


def read_wire(
    path: Path,
    *,
    rotated: bool = True,
    on_problem: Callable[[TraceProblem], None] | None = None,
    max_payload: int = DEFAULT_MAX_PAYLOAD,
) -> Iterator[tuple[float, int, int, bytes]]:
    """Every record as ``(at, connection, payload_type, wire)``, where ``wire`` is the
    message as it was on the wire: :func:`read_trace` without building records, for
    replay's hot path (several times faster). Arguments and errors as :func:`read_trace`.
    """
    for file_path, header, report in _trace_parts(path, rotated, on_problem):
        yield from _read_file_wire(file_path, header, report, max_payload)


def _trace_parts(
    path: Path, rotated: bool, on_problem: Callable[[TraceProblem], None] | None
) -> Iterator[tuple[Path, TraceHeader, Callable[[TraceProblem], None]]]:
    """The files to read, oldest first, with their headers; reports stray files."""
    report = on_problem if on_problem is not None else _warn
    headers: list[tuple[TraceHeader, Path]] = []
    for file_path in trace_files(path, rotated=rotated):
        try:
            headers.append((read_header(file_path), file_path))
        except _CutShortHeader:
            report(TraceProblem(file_path, 0, "the file header is cut short; skipped"))
    if not headers:
        return
    newest = headers[-1][0]
    parts: list[tuple[int, Path, TraceHeader]] = []
    for header, file_path in headers:
        if header.trace_id != newest.trace_id:
            report(TraceProblem(file_path, 0, "belongs to another trace; skipped"))
        else:
            parts.append((header.part, file_path, header))
    for _, file_path, header in sorted(parts, key=lambda part: part[0]):
        yield file_path, header, report


def _warn(problem: TraceProblem) -> None:
    warnings.warn(TraceWarning(str(problem)), stacklevel=3)


class _Chunks:
    """A trace file's records area, read in large chunks, with the damage reports."""

    def __init__(
        self,
        path: Path,
        expected: TraceHeader,
        report: Callable[[TraceProblem], None],
        max_payload: int,
    ) -> None:
        self.path = path
        self.expected = expected
        self.report = report
        self.max_payload = max_payload
        self.position = 0
        """How far the consumer got in the current buffer (it sets this)."""
        self.consumed = 0
        """File offset of the current buffer's first byte."""
        self.corrupt = False

    def chunks(self, file: BinaryIO) -> Iterator[bytes]:
        """Yield buffers that start at a record; :meth:`used` says how far each was read."""
        header = _read_header(file, self.path)
        if header != self.expected:
            # Rotated between our look at the set and now (a trace being written).
            self.report(
                TraceProblem(self.path, 0, "the file changed while the trace was read; skipped")
            )
            return
        consumed = header.header_size
        buffer = b""
        self.position = 0
        while chunk := file.read(READ_SIZE):
            consumed += self.position
            position = self.position
            buffer = buffer[position:] + chunk if position < len(buffer) else chunk
            self.position = 0
            self.consumed = consumed
            yield buffer
            if self.corrupt:
                return
        left = len(buffer) - self.position
        if left:
            self.report(
                TraceProblem(
                    self.path,
                    consumed + self.position,
                    f"the last record is cut short ({left} bytes); skipped",
                )
            )

    def bad_length(self, position: int, length: int) -> None:
        self.corrupt = True
        self.report(
            TraceProblem(
                self.path,
                self.consumed + position,
                f"payload length {length} exceeds {self.max_payload}: the rest of "
                "the file is corrupt and was skipped",
            )
        )


_WIRE_PREFIX = struct.Struct("<QI16xBxxI")
"""A record prefix without the fields replay does not need."""


def _read_file(
    path: Path,
    expected: TraceHeader,
    report: Callable[[TraceProblem], None],
    max_payload: int,
) -> Iterator[TraceRecord]:
    unpack = _RECORD_PREFIX.unpack_from
    record = TraceRecord
    reader = _Chunks(path, expected, report, max_payload)
    with path.open("rb") as file:
        for buffer in reader.chunks(file):
            available = len(buffer)
            position = 0
            while available - position >= RECORD_PREFIX_SIZE:
                micros, connection, guid, payload_type, ttl, hops, length = unpack(buffer, position)
                if length > max_payload:
                    reader.bad_length(position, length)
                    return
                start = position + RECORD_PREFIX_SIZE
                end = start + length
                if end > available:
                    break
                yield record(
                    micros / 1_000_000, connection, guid, payload_type, ttl, hops, buffer[start:end]
                )
                position = end
            reader.position = position


def _read_file_wire(
    path: Path,
    expected: TraceHeader,
    report: Callable[[TraceProblem], None],
    max_payload: int,
) -> Iterator[tuple[float, int, int, bytes]]:
    unpack = _WIRE_PREFIX.unpack_from
    reader = _Chunks(path, expected, report, max_payload)
    with path.open("rb") as file:
        for buffer in reader.chunks(file):
            available = len(buffer)
            position = 0
            while available - position >= RECORD_PREFIX_SIZE:
                micros, connection, payload_type, length = unpack(buffer, position)
                if length > max_payload:
                    reader.bad_length(position, length)
                    return
                end = position + RECORD_PREFIX_SIZE + length
                if end > available:
                    break
                yield (
                    micros / 1_000_000,
                    connection,
                    payload_type,
                    buffer[position + _TIMESTAMP_SIZE : end],
                )
                position = end
            reader.position = position
