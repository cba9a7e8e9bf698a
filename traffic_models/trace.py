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

The format itself is in :mod:`.trace_format`, writing in :mod:`.trace_writer`, reading
in :mod:`.trace_reader`; this module is the one to import.
"""

from __future__ import annotations

from .trace_format import (
    DEFAULT_BUFFER_BYTES,
    DEFAULT_FLUSH_BYTES,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_FILES,
    FILE_HEADER_SIZE,
    FORMAT_VERSION,
    MAGIC,
    RECORD_PREFIX_SIZE,
    TraceFormatError,
    TraceHeader,
    TraceProblem,
    TraceRecord,
    TraceWarning,
    TraceWriterStatistics,
)
from .trace_reader import read_header, read_trace, read_wire, trace_files
from .trace_writer import TraceWriter, write_trace

__all__ = [
    "DEFAULT_BUFFER_BYTES",
    "DEFAULT_FLUSH_BYTES",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_FILES",
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
