"""Writing traces: a bounded buffer, large writes, rotation (see :mod:`.trace`)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import BinaryIO

from protocol.constants import GUID_SIZE
from protocol.framing import Frame

from .trace_format import (
    _FILE_HEADER,
    _MAX_CONNECTION,
    _MAX_OFFSET_US,
    _RECORD_PREFIX,
    DEFAULT_BUFFER_BYTES,
    DEFAULT_FLUSH_BYTES,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_FILES,
    FILE_HEADER_SIZE,
    FORMAT_VERSION,
    MAGIC,
    RECORD_PREFIX_SIZE,
    Piece,
    TraceRecord,
    TraceWriterStatistics,
    _rotated_files,
)

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
