"""Packet traces: what a router read from its peers, message by message, with timing.

Theory of operation
-------------------
A trace is a file header followed by back-to-back records; the byte layout is in
``docs/trace-format.md``. Each record is a fixed 35-byte prefix (a timestamp in
microseconds, a connection id, and the 23-byte Gnutella header exactly as it came off
the wire) followed by the payload. The payload length in the header is the only length
field, so a record costs 12 bytes more than the message itself.

:class:`TraceWriter` never does I/O while a record is added: records are packed into a
bounded in-memory buffer (1 MiB by default). What is buffered is written to the file in
large pieces, either by the writer itself once ``flush_bytes`` have piled up
(``auto_flush=True``, for scripts and tests) or by whoever owns the writer: the daemon's
recorder takes the buffer on the event loop (:meth:`TraceWriter.take_pending`) and
writes it from a worker thread (:meth:`TraceWriter.write_pending`). A record that finds
the buffer full is dropped and counted, never silently and never by growing memory.

Files are bounded: when a record would take the file past ``max_bytes``, the writer
closes it and renames it ``PATH.1`` (an older ``PATH.1`` becomes ``PATH.2``, and so on),
then starts a fresh ``PATH``, keeping at most ``max_files`` files in all and deleting the
oldest. The decision is made when a record is added, so files always end on a record
boundary. Every file of a set carries the same trace id and clock base, so offsets are
comparable across files, and a part number saying where it belongs.

:func:`read_trace` reads one file or a whole rotated set (oldest first). A final record
cut short (a crash while writing) is reported and skipped; so is anything after a
corrupt length. Reports go to an ``on_problem`` callback, or become
:class:`TraceWarning` warnings. A file that is not a trace at all raises
:class:`TraceFormatError`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import struct
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from protocol.constants import DEFAULT_MAX_PAYLOAD, GUID_SIZE, HEADER_SIZE
from protocol.framing import Frame
from protocol.header import HEADER_STRUCT

__all__ = [
    "FILE_HEADER_SIZE",
    "FORMAT_VERSION",
    "MAGIC",
    "RECORD_PREFIX_SIZE",
    "TraceFormatError",
    "TraceHeader",
    "TraceProblem",
    "TraceRecord",
    "TraceWarning",
    "TraceWriter",
    "TraceWriterStatistics",
    "read_header",
    "read_trace",
    "read_wire",
    "trace_files",
    "write_trace",
]

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


# ---------------------------------------------------------------------------------------
# Writing


def _check_record_fields(
    connection: int, guid: bytes, payload_type: int, ttl: int, hops: int
) -> None:
    if not 0 <= connection <= _MAX_CONNECTION:
        raise ValueError(f"connection id {connection} does not fit in 32 bits")
    if len(guid) != GUID_SIZE:
        raise ValueError(f"a GUID is {GUID_SIZE} bytes, not {len(guid)}")
    for name, value in (("payload type", payload_type), ("TTL", ttl), ("hops", hops)):
        if not 0 <= value <= 255:
            raise ValueError(f"{name} {value} does not fit in a byte")


class TraceWriter:
    """Appends records to a trace file, in bounded memory and bounded files.

    Not thread-safe in general; the one arrangement supported is the recorder's: one
    thread adds records and calls :meth:`take_pending`, while another writes what was
    taken with :meth:`write_pending`, one call at a time. Opening (in the constructor)
    writes the first file's header and deletes the files of an earlier trace at the
    same path (``PATH``, ``PATH.1``, ...): a new trace replaces an old one.
    """

    def __init__(
        self,
        path: Path,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_files: int = DEFAULT_MAX_FILES,
        clock_origin: float = 0.0,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        flush_bytes: int = DEFAULT_FLUSH_BYTES,
        auto_flush: bool = True,
        start_time: float | None = None,
        trace_id: bytes | None = None,
    ) -> None:
        """
        Args:
            path: the live file; rotated files are ``PATH.1`` (newest) to
                ``PATH.{max_files - 1}`` (oldest).
            max_bytes: largest size of one file, header included. A record that does
                not fit even in an empty file is written alone in one.
            max_files: files kept in all, the live one included (1 to 1000).
            clock_origin: the clock reading that is offset 0; :meth:`write` and
                :meth:`write_many` take readings of the same clock.
            buffer_bytes: most record bytes held in memory before they are written.
            flush_bytes: with ``auto_flush``, write out once this much is buffered.
            auto_flush: write from within :meth:`write_many` (``False`` for a caller
                that flushes from elsewhere and prefers dropping to blocking).
            start_time: Unix time of offset 0 for the header; default now.
            trace_id: 8 bytes naming the trace; default random.
        """
        if max_bytes < FILE_HEADER_SIZE + RECORD_PREFIX_SIZE:
            raise ValueError(f"max_bytes must be at least {FILE_HEADER_SIZE + RECORD_PREFIX_SIZE}")
        if not 1 <= max_files <= 1000:
            raise ValueError("max_files must be from 1 to 1000")
        if buffer_bytes < 1 or flush_bytes < 1:
            raise ValueError("buffer_bytes and flush_bytes must be positive")
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.max_files = max_files
        self.clock_origin = clock_origin
        self.buffer_bytes = buffer_bytes
        self.flush_bytes = flush_bytes
        self.auto_flush = auto_flush
        self.start_time = time.time() if start_time is None else start_time
        self.trace_id = os.urandom(8) if trace_id is None else bytes(trace_id)
        if len(self.trace_id) != 8:
            raise ValueError("trace_id must be 8 bytes")
        # Event-loop side: the buffer and the accounting that decides rotation.
        self._current = bytearray()
        self._current_records = 0
        self._pending: list[Piece | None] = []
        """Full pieces waiting to be written; ``None`` marks a rotation."""
        self._pending_bytes = 0
        self._file_bytes = FILE_HEADER_SIZE
        """Size of the current file once everything accepted so far is written."""
        self._records = 0
        self._bytes = 0
        self._dropped = 0
        self._closed = False
        # File side (the thread that writes, if there is one).
        self._flushed_bytes = 0
        self._lost = 0
        """Records lost to a failed write (counted by the writing thread)."""
        self._files = 0
        self._failed: str | None = None
        self.replaced = _remove_trace_files(self.path)
        """Files of an earlier trace removed when this one was opened."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: BinaryIO | None = None
        self._open_part()

    # ------------------------------------------------------------------ adding records

    @property
    def pending_bytes(self) -> int:
        """Record bytes accepted and not yet taken for writing."""
        return self._pending_bytes

    def write(self, at: float, connection: int, frame: Frame) -> None:
        """Add one message read at clock reading ``at`` (checked; see :meth:`write_many`)."""
        _check_record_fields(connection, frame.guid, frame.payload_type, frame.ttl, frame.hops)
        self.write_many(at, connection, (frame,))

    def write_many(self, at: float, connection: int, frames: Sequence[Frame]) -> None:
        """Add a batch of messages read together at clock reading ``at``.

        The hot path: no I/O unless ``auto_flush``, no per-message checks beyond what
        ``struct`` does (frames from the framer are well-formed by construction).
        """
        if self._closed:
            self._dropped += len(frames)
            return
        micros = int((at - self.clock_origin) * 1_000_000 + 0.5)
        if not 0 <= micros <= _MAX_OFFSET_US:
            raise ValueError(f"clock reading {at} is before the trace's origin")
        connection &= _MAX_CONNECTION
        pack = _RECORD_PREFIX.pack
        count = len(frames)
        if count == 1:
            f = frames[0]
            data = pack(micros, connection, f.guid, f.payload_type, f.ttl, f.hops, len(f.payload))
            data += f.payload
        else:
            data = b"".join(
                [
                    pack(micros, connection, f.guid, f.payload_type, f.ttl, f.hops, len(f.payload))
                    + f.payload
                    for f in frames
                ]
            )
        size = len(data)
        pending = self._pending_bytes + size
        file_bytes = self._file_bytes + size
        if pending <= self.buffer_bytes and file_bytes <= self.max_bytes:
            # The common case: the whole batch fits the buffer and the file.
            self._current += data
            self._current_records += count
            self._file_bytes = file_bytes
            self._pending_bytes = pending
            self._records += count
            self._bytes += size
        else:
            for frame in frames:
                self._add_one(micros, connection, frame)
        if self.auto_flush and self._pending_bytes >= self.flush_bytes:
            self.flush()

    def _add_one(self, micros: int, connection: int, frame: Frame) -> None:
        """One record, rotating or flushing first if it does not fit (the slow path)."""
        payload = frame.payload
        size = RECORD_PREFIX_SIZE + len(payload)
        if self._file_bytes + size > self.max_bytes and self._file_bytes > FILE_HEADER_SIZE:
            self._mark_rotation()
        pending = self._pending_bytes
        if pending and pending + size > self.buffer_bytes:
            if not self.auto_flush:
                self._dropped += 1
                return
            self.flush()
        self._current += _RECORD_PREFIX.pack(
            micros, connection, frame.guid, frame.payload_type, frame.ttl, frame.hops, len(payload)
        )
        self._current += payload
        self._current_records += 1
        self._file_bytes += size
        self._account(1, size, self._pending_bytes + size)

    def _account(self, records: int, size: int, pending: int) -> None:
        self._records += records
        self._bytes += size
        self._pending_bytes = pending

    def _mark_rotation(self) -> None:
        if self._current:
            self._pending.append((self._current, self._current_records))
        self._pending.append(None)
        self._current = bytearray()
        self._current_records = 0
        self._file_bytes = FILE_HEADER_SIZE

    def take_pending(self) -> list[Piece | None]:
        """Everything buffered, to be written with :meth:`write_pending`; the buffer
        is empty afterwards (the pieces are no longer the writer's). ``None`` is a rotation."""
        if self._current:
            self._pending.append((self._current, self._current_records))
            self._current = bytearray()
            self._current_records = 0
        taken, self._pending = self._pending, []
        self._pending_bytes = 0
        return taken

    # ------------------------------------------------------------------ file side

    def write_pending(self, pieces: list[Piece | None]) -> None:
        """Write what :meth:`take_pending` returned, rotating where it says; may block.

        Raises:
            OSError: the write failed; the writer is then failed for good, and the
                records of the pieces not written are counted as dropped.
        """
        for index, piece in enumerate(pieces):
            if self._failed is not None:
                self._lost += sum(p[1] for p in pieces[index:] if p is not None)
                return
            try:
                if piece is None:
                    self._rotate()
                else:
                    data, _ = piece
                    assert self._file is not None
                    self._file.write(data)
                    self._flushed_bytes += len(data)
            except OSError as exc:
                self._fail(exc)
                self._lost += sum(p[1] for p in pieces[index:] if p is not None)
                raise
        if self._file is not None:
            try:
                self._file.flush()
            except OSError as exc:
                self._fail(exc)
                raise

    def flush(self) -> None:
        """Write everything buffered now (blocking)."""
        self.write_pending(self.take_pending())

    def stop(self) -> list[Piece | None]:
        """Refuse further records and take what is buffered: the first half of a close
        split across threads; pass the result to :meth:`finish`."""
        self._closed = True
        return self.take_pending()

    def finish(self, pieces: list[Piece | None]) -> None:
        """Write the last pieces and close the file (may block)."""
        try:
            if self._failed is None and self._file is not None:
                self.write_pending(pieces)
        finally:
            if self._file is not None:
                file, self._file = self._file, None
                file.close()

    def close(self) -> None:
        """Write everything buffered and close the file; later records are dropped."""
        self.finish(self.stop())

    @property
    def closed(self) -> bool:
        return self._closed

    def statistics(self) -> TraceWriterStatistics:
        return TraceWriterStatistics(
            path=str(self.path),
            records=self._records,
            bytes=self._bytes,
            dropped=self._dropped + self._lost,
            buffered_bytes=self._pending_bytes,
            flushed_bytes=self._flushed_bytes,
            files=self._files,
            failed=self._failed,
        )

    def _fail(self, exc: OSError) -> None:
        self._failed = f"{exc.__class__.__name__}: {exc}"
        self._closed = True
        if self._file is not None:
            file, self._file = self._file, None
            with contextlib.suppress(OSError):
                file.close()

    def _open_part(self) -> None:
        header = _FILE_HEADER.pack(
            MAGIC,
            FORMAT_VERSION,
            FILE_HEADER_SIZE,
            self._files,
            self.trace_id,
            self.start_time,
            self.clock_origin,
        )
        file = self.path.open("wb")
        try:
            file.write(header)
        except BaseException:
            file.close()
            raise
        self._file = file
        self._files += 1

    def _rotate(self) -> None:
        assert self._file is not None
        file, self._file = self._file, None
        file.close()
        name = self.path.name
        keep = self.max_files - 1
        if keep == 0:
            self.path.unlink(missing_ok=True)
        for number in range(keep, 0, -1):
            source = self.path if number == 1 else self.path.with_name(f"{name}.{number - 1}")
            if source.exists():
                os.replace(source, self.path.with_name(f"{name}.{number}"))
        self._open_part()


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


def _remove_trace_files(path: Path) -> int:
    removed = 0
    for _, old in _rotated_files(path):
        old.unlink(missing_ok=True)
        removed += 1
    if path.exists():
        path.unlink()
        removed += 1
    return removed


def write_trace(
    path: Path,
    records: Iterable[TraceRecord],
    *,
    start_time: float | None = None,
) -> int:
    """Write ``records`` as a single-file trace at ``path``; returns how many.

    Offsets are taken as given (records need not be in time order, though readers
    and replay expect them to be).

    Raises:
        ValueError: a record's field is out of range (negative ``at``, a GUID that is
            not 16 bytes, a byte field over 255); nothing after it is written.
    """
    writer = TraceWriter(
        path, max_bytes=1 << 62, max_files=1, clock_origin=0.0, start_time=start_time
    )
    count = 0
    try:
        for record in records:
            if not record.at >= 0:
                raise ValueError(f"record at {record.at}: offsets must not be negative")
            _check_record_fields(
                record.connection,
                record.guid,
                record.payload_type,
                record.ttl,
                record.hops,
            )
            writer.write_many(record.at, record.connection, (record.frame(),))
            count += 1
    finally:
        writer.close()
    return count


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
