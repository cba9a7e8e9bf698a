"""Deflate for Gnutella links (``Content-Encoding: deflate``), without I/O.

Each direction is negotiated separately in the handshake and is one endless zlib stream
(with its zlib header), never finished while the link lives. The sender ends every
write with ``Z_SYNC_FLUSH`` so the receiver can decode everything sent so far: a router
must not hold a message back waiting for more to compress. This is what gtk-gnutella,
LimeWire and stdlib zlib interoperate with (verified against gtk-gnutella 1.2.3).

The receiver bounds its output: a hostile peer can send a few kilobytes that inflate to
gigabytes, so inflated data is handed out in pieces of at most ``max_output`` bytes and
the rest stays compressed in zlib's input buffer until asked for.

Memory: zlib's state is large next to everything else a link holds (a deflater with
the default window and memory level allocates about 256 KB, an inflater about 7 KB and
then a 32 KB window), and a router holds thousands of links, most of them idle. So the
receiver makes its inflater when the first bytes arrive, and the sender makes a
deflater only for a write worth deflating, drops it when the link falls quiet
(:meth:`DeflateCompressor.release_if_idle`), and sends small writes without one, all
within the one zlib stream the peer reads.
"""

from __future__ import annotations

import zlib

from .errors import CompressionError, DeflateRatioError

WINDOW_BITS = 15
"""zlib's largest window (32 KB), which every inflater accepts."""

DEFAULT_DEFLATE_LEVEL = 1
"""The zlib level a router deflates its links at unless told otherwise. Gnutella traffic
is mostly random GUIDs, so the levels differ little in what they save and much in what
they cost: on the trace-like mix, level 1 deflates about twice as fast as zlib's
default (6) and its output is about 5 % larger (``scripts/bench_deflate.py --levels``
measures it). A router deflates every byte it sends, so under load the level decides
how much of a core goes to zlib; bandwidth is rarely what runs out first."""
STORED_UP_TO = 1024
"""A write of at most this many bytes, made while no deflater is held, goes out
uncompressed as a stored block: making a deflater costs about 256 KB and 30 µs, and
deflating a few hundred bytes with no history saves a few dozen."""

_SYNC_MARK = b"\x00\x00\x00\xff\xff"
"""An empty stored block: what zlib's sync flush ends a write with."""


def zlib_header(level: int) -> bytes:
    """The two bytes zlib starts a stream with for ``level`` and :data:`WINDOW_BITS`
    (RFC 1950: method and window, then the level hint and a check), as zlib's
    ``deflate.c`` writes them."""
    if not -1 <= level <= 9:
        raise ValueError(f"level must be -1..9, got {level}")
    level = 6 if level == -1 else level
    hint = 0 if level < 2 else 1 if level < 6 else 2 if level == 6 else 3
    header = (zlib.DEFLATED + ((WINDOW_BITS - 8) << 4)) << 8 | hint << 6
    header += 31 - header % 31
    return header.to_bytes(2, "big")


class DeflateCompressor:
    """Compresses one direction of a link; every call's output is decodable on its own.

    The stream is zlib's (RFC 1950), but this writes its two-byte header itself and
    deflates raw (RFC 1951) behind it, which zlib's own wrapper would do byte for byte:
    the wrapper adds nothing else until the stream is finished, and a link's stream
    never is. Every write ends with a sync flush, which closes no block for good but
    leaves the stream at a byte boundary between blocks, where any block may follow:
    one from a fresh raw deflater after :meth:`release_if_idle` dropped the last one, or
    a stored block written here without zlib (a write of at most :data:`STORED_UP_TO`
    bytes while no deflater is held, ended with an empty stored block as zlib's sync
    flush would be). The peer's inflater carries on as if nothing happened; the only
    loss is that a fresh deflater cannot refer back to what was sent before it.
    """

    __slots__ = ("_compressor", "_header", "_level", "_used", "bytes_in", "bytes_out")

    def __init__(self, level: int = DEFAULT_DEFLATE_LEVEL) -> None:
        self._header = zlib_header(level)
        """Written before the first output, then empty."""
        self._level = level
        self._compressor: zlib._Compress | None = None
        """Made at the first write, and again after a release."""
        self._used = False
        self.bytes_in = 0
        self.bytes_out = 0

    def compress(self, data: bytes | bytearray | memoryview) -> bytes:
        """Compress ``data`` and flush, so the peer can read all of it now."""
        compressor = self._compressor
        if compressor is None:
            size = len(data)
            if size <= STORED_UP_TO:
                out = b"".join(
                    (self._header, _stored(size), data, _SYNC_MARK)
                    if size
                    else (self._header, _SYNC_MARK)
                )
                self._header = b""
                self.bytes_in += size
                self.bytes_out += len(out)
                return out
            compressor = self._compressor = zlib.compressobj(
                self._level, zlib.DEFLATED, -WINDOW_BITS
            )
        out = compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)
        if self._header:
            out = self._header + out
            self._header = b""
        self._used = True
        self.bytes_in += len(data)
        self.bytes_out += len(out)
        return out

    def release_if_idle(self) -> bool:
        """Drop the deflater if nothing was compressed since the last call; whether one
        was dropped. Called now and then (a router: about once a second), it frees the
        deflater of a link that has been quiet for one to two periods."""
        if self._used:
            self._used = False
            return False
        dropped = self._compressor is not None
        self._compressor = None
        return dropped

    @property
    def holds_state(self) -> bool:
        """Whether a deflater is allocated now (it is made at the next write if not)."""
        return self._compressor is not None

    @property
    def ratio(self) -> float:
        """Compressed size over original size so far (1.0 before any data)."""
        return self.bytes_out / self.bytes_in if self.bytes_in else 1.0


def _stored(size: int) -> bytes:
    """The head of a stored block of ``size`` bytes, not the last (RFC 1951, 3.2.4),
    at a byte boundary: the block type in a byte of its own, then LEN and NLEN."""
    return b"\x00" + size.to_bytes(2, "little") + (size ^ 0xFFFF).to_bytes(2, "little")


MAX_RATIO = 100
"""Gnutella traffic deflates about 3:1 to 10:1 (the payloads of QRP patches are deflated
already); a stream that inflates a hundred times over is built to cost its receiver."""
RATIO_GRACE = 1 << 20
"""Inflated bytes before the ratio is judged: a short stream of alike messages may
compress well beyond it."""


class DeflateDecompressor:
    """Inflates one direction of a link, never producing more than asked for at once."""

    __slots__ = (
        "_decompressor",
        "_output_full",
        "_pending",
        "bytes_in",
        "bytes_out",
        "max_output",
        "max_ratio",
    )

    def __init__(self, max_output: int = 256 * 1024, max_ratio: int = MAX_RATIO) -> None:
        if max_output <= 0:
            raise ValueError("max_output must be positive")
        self.max_ratio = max_ratio
        """Inflated bytes per compressed byte a stream may reach, past its first
        :data:`RATIO_GRACE` bytes (0: no cap)."""
        self._decompressor: zlib._Decompress | None = None
        """Made when the first compressed bytes arrive: a peer may never send any."""
        self._pending = b""
        self._output_full = False
        self.max_output = max_output
        self.bytes_in = 0
        self.bytes_out = 0

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Queue compressed bytes from the peer."""
        if self._decompressor is None:
            if not data:
                return
            self._decompressor = zlib.decompressobj()
        if self._decompressor.eof:
            if data:
                raise CompressionError("data after the end of the deflate stream")
            return
        self.bytes_in += len(data)
        self._pending = self._pending + bytes(data) if self._pending else bytes(data)

    def read(self) -> bytes:
        """Return up to ``max_output`` inflated bytes; ``b""`` when nothing is ready.

        Call until it returns ``b""`` to drain what has been received.

        Raises:
            CompressionError: the stream is corrupt; the link must be closed.
            DeflateRatioError: the stream inflates past ``max_ratio`` to 1 (a
                decompression bomb); the link must be closed.
        """
        decompressor = self._decompressor
        if decompressor is None or (not self._pending and not self._output_full):
            return b""
        try:
            out = decompressor.decompress(self._pending, self.max_output)
        except zlib.error as exc:
            self._pending = b""
            raise CompressionError(f"corrupt deflate stream: {exc}") from exc
        self._pending = decompressor.unconsumed_tail
        # A full output buffer may leave inflated bytes inside zlib even when all input
        # was consumed; remember to ask again.
        self._output_full = len(out) == self.max_output
        if decompressor.eof and decompressor.unused_data:
            raise CompressionError("data after the end of the deflate stream")
        self.bytes_out += len(out)
        if (
            self.max_ratio
            and self.bytes_out > RATIO_GRACE
            and self.bytes_out > self.max_ratio * self.bytes_in
        ):
            raise DeflateRatioError(
                f"deflate stream inflates {self.bytes_out // max(1, self.bytes_in)}:1, "
                f"past {self.max_ratio}:1"
            )
        return out

    @property
    def holds_state(self) -> bool:
        """Whether an inflater is allocated (it is made when data first arrives)."""
        return self._decompressor is not None

    @property
    def has_pending(self) -> bool:
        """Whether compressed input is still waiting to be inflated."""
        return bool(self._pending) or self._output_full
