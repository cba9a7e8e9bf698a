"""Deflate for Gnutella links (``Content-Encoding: deflate``), without I/O.

Each direction is negotiated separately in the handshake and is one endless zlib stream
(with its zlib header), never finished while the link lives. The sender ends every
write with ``Z_SYNC_FLUSH`` so the receiver can decode everything sent so far: a router
must not hold a message back waiting for more to compress. This is what gtk-gnutella,
LimeWire and stdlib zlib interoperate with (verified against gtk-gnutella 1.2.3).

The receiver bounds its output: a hostile peer can send a few kilobytes that inflate to
gigabytes, so inflated data is handed out in pieces of at most ``max_output`` bytes and
the rest stays compressed in zlib's input buffer until asked for.
"""

from __future__ import annotations

import zlib

from .errors import CompressionError


class DeflateCompressor:
    """Compresses one direction of a link; every call's output is decodable on its own."""

    __slots__ = ("_compressor", "bytes_in", "bytes_out")

    def __init__(self, level: int = 6) -> None:
        self._compressor = zlib.compressobj(level)
        self.bytes_in = 0
        self.bytes_out = 0

    def compress(self, data: bytes | bytearray | memoryview) -> bytes:
        """Compress ``data`` and flush, so the peer can read all of it now."""
        out = self._compressor.compress(data) + self._compressor.flush(zlib.Z_SYNC_FLUSH)
        self.bytes_in += len(data)
        self.bytes_out += len(out)
        return out

    @property
    def ratio(self) -> float:
        """Compressed size over original size so far (1.0 before any data)."""
        return self.bytes_out / self.bytes_in if self.bytes_in else 1.0


class DeflateDecompressor:
    """Inflates one direction of a link, never producing more than asked for at once."""

    __slots__ = ("_decompressor", "_output_full", "_pending", "bytes_in", "bytes_out", "max_output")

    def __init__(self, max_output: int = 256 * 1024) -> None:
        if max_output <= 0:
            raise ValueError("max_output must be positive")
        self._decompressor = zlib.decompressobj()
        self._pending = b""
        self._output_full = False
        self.max_output = max_output
        self.bytes_in = 0
        self.bytes_out = 0

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Queue compressed bytes from the peer."""
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
        """
        if not self._pending and not self._output_full:
            return b""
        try:
            out = self._decompressor.decompress(self._pending, self.max_output)
        except zlib.error as exc:
            self._pending = b""
            raise CompressionError(f"corrupt deflate stream: {exc}") from exc
        self._pending = self._decompressor.unconsumed_tail
        # A full output buffer may leave inflated bytes inside zlib even when all input
        # was consumed; remember to ask again.
        self._output_full = len(out) == self.max_output
        if self._decompressor.eof and self._decompressor.unused_data:
            raise CompressionError("data after the end of the deflate stream")
        self.bytes_out += len(out)
        return out

    @property
    def has_pending(self) -> bool:
        """Whether compressed input is still waiting to be inflated."""
        return bool(self._pending) or self._output_full
