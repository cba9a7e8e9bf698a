"""Header blocks of the Gnutella 0.6 handshake: parsing, limits and formatting.

A handshake step is a *head*: one first line (``GNUTELLA CONNECT/0.6`` or a status
line), then RFC 822 style ``Name: value`` lines, then an empty line. The rules follow the
Gnutella 0.6 draft, section 2.1:

* a line starting with a space or a tab continues the previous header, and the folded
  whitespace collapses to one space;
* a name may repeat, which means the same as one header whose values are joined by
  commas, in order;
* names are case-insensitive, unknown names are kept (and ignored by whoever does not
  know them).

Lines end in ``\\r\\n``; a bare ``\\n`` is accepted because old servents send it and the
meaning is unambiguous.

Values are ``str`` decoded as latin-1: every byte maps to one code point, so a header
survives a parse/format round trip byte for byte whatever a peer put in it.

:class:`HeadBuffer` is the streaming half. The handshake is the one place where a peer
can make us buffer text before any length field bounds it, so every limit of
:class:`HandshakeLimits` is checked as bytes arrive, each byte is examined once, and a
peer sending an endless line or endless headers is refused as soon as it passes a limit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from .errors import HandshakeError, LocalProtocolError

__all__ = [
    "HandshakeLimits",
    "HeadBuffer",
    "HeaderBlock",
    "format_headers",
]

STATUS_TOO_LARGE = 413
STATUS_BAD_REQUEST = 400

# C0 controls other than TAB, plus DEL. CR and LF never reach the line checks: they
# delimit lines.
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_CONTROL_TEXT = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_NAME_FORBIDDEN = re.compile(r"[\x00-\x20\x7f:]")


@dataclass(frozen=True, slots=True)
class HandshakeLimits:
    """How much handshake text a peer may make us hold.

    The defaults are gtk-gnutella's (at most 128 header lines and 16 KiB per head),
    which every real servent stays far below: the largest head seen from gtk-gnutella
    1.2 is about 900 bytes in 22 lines.
    """

    max_line_length: int = 4096
    """Longest line, without its line terminator."""
    max_headers: int = 128
    """Most header lines in one head, continuation lines included."""
    max_block_size: int = 16384
    """Most bytes in one head, first line and terminators included."""

    def __post_init__(self) -> None:
        for name in ("max_line_length", "max_headers", "max_block_size"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise LocalProtocolError(f"HandshakeLimits.{name} must be a positive int")


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or _NAME_FORBIDDEN.search(name):
        raise LocalProtocolError(f"invalid header name {name!r}")
    _check_latin1(name)


def _check_value(name: str, value: str) -> None:
    if not isinstance(value, str) or _CONTROL_TEXT.search(value):
        raise LocalProtocolError(f"invalid value for header {name}: {value!r}")
    _check_latin1(value)


def _check_latin1(text: str) -> None:
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        raise LocalProtocolError(f"{text!r} cannot be sent: not latin-1") from None


class HeaderBlock:
    """An immutable, ordered list of headers with case-insensitive lookup.

    Order and repetition are kept because the spec gives repeated headers a meaning
    (their values concatenate in order) and because formatting a parsed block must give
    back what the peer sent.
    """

    __slots__ = ("_index", "_items")

    _items: tuple[tuple[str, str], ...]
    _index: dict[str, tuple[str, ...]]

    def __init__(self, items: Iterable[tuple[str, str]] = ()) -> None:
        pairs = tuple((name, value) for name, value in items)
        index: dict[str, list[str]] = {}
        for name, value in pairs:
            _check_name(name)
            _check_value(name, value)
            index.setdefault(name.lower(), []).append(value)
        self._items = pairs
        self._index = {key: tuple(values) for key, values in index.items()}

    @classmethod
    def parse(cls, data: bytes, limits: HandshakeLimits | None = None) -> HeaderBlock:
        """Parse a complete block of header lines, optionally ended by an empty line.

        For text that arrived whole (a Bye reason carries headers too); streamed
        handshake text goes through :class:`HeadBuffer`.
        """
        limits = limits or HandshakeLimits()
        if len(data) > limits.max_block_size:
            raise HandshakeError(
                f"header block of {len(data)} bytes exceeds {limits.max_block_size}",
                status_code=STATUS_TOO_LARGE,
            )
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        lines = [line.removesuffix(b"\r") for line in lines]
        if b"" in lines:
            end = lines.index(b"")
            if end != len(lines) - 1:
                raise HandshakeError(
                    "text after the end of the header block", status_code=STATUS_BAD_REQUEST
                )
            lines.pop()
        return cls.parse_lines(lines, limits)

    @classmethod
    def parse_lines(
        cls, lines: Iterable[bytes], limits: HandshakeLimits | None = None
    ) -> HeaderBlock:
        """Parse header lines given without their line terminators.

        Raises :class:`HandshakeError` (400) for a line that is neither a header nor a
        continuation, or holds control characters; (413) past a limit.
        """
        limits = limits or HandshakeLimits()
        pairs: list[tuple[str, str]] = []
        for count, raw in enumerate(lines, start=1):
            if count > limits.max_headers:
                raise HandshakeError(
                    f"more than {limits.max_headers} header lines",
                    status_code=STATUS_TOO_LARGE,
                )
            if len(raw) > limits.max_line_length:
                raise HandshakeError(
                    f"header line longer than {limits.max_line_length} bytes",
                    status_code=STATUS_TOO_LARGE,
                )
            if _CONTROL.search(raw):
                raise HandshakeError(
                    "control character in a header line", status_code=STATUS_BAD_REQUEST
                )
            line = raw.decode("latin-1")
            if line[:1] in (" ", "\t"):
                if not pairs:
                    raise HandshakeError(
                        "continuation line before any header", status_code=STATUS_BAD_REQUEST
                    )
                extra = line.strip(" \t")
                if extra:
                    name, value = pairs[-1]
                    pairs[-1] = (name, f"{value} {extra}" if value else extra)
                continue
            name, colon, value = line.partition(":")
            name = name.rstrip(" \t")
            if not colon:
                raise HandshakeError(
                    f"header line without a colon: {line[:80]!a}",
                    status_code=STATUS_BAD_REQUEST,
                )
            if not name or _NAME_FORBIDDEN.search(name):
                raise HandshakeError(
                    f"malformed header name {name[:80]!a}", status_code=STATUS_BAD_REQUEST
                )
            pairs.append((name, value.strip(" \t")))
        return cls(pairs)

    def get(self, name: str) -> str | None:
        """The value of ``name``; repeated headers are joined as the spec prescribes."""
        values = self._index.get(name.lower())
        if values is None:
            return None
        return ", ".join(values)

    def get_all(self, name: str) -> tuple[str, ...]:
        """Every value of ``name`` in arrival order; empty if absent."""
        return self._index.get(name.lower(), ())

    def items(self) -> tuple[tuple[str, str], ...]:
        """The headers as sent, names in their original case."""
        return self._items

    def merged_with(self, later: HeaderBlock) -> HeaderBlock:
        """This block with every header named in ``later`` replaced by ``later``'s.

        An acceptor learns about its peer twice (steps 1 and 3); what the peer says last
        wins, e.g. an ultrapeer demoting itself with ``X-Ultrapeer: False`` in step 3.
        """
        kept = [(name, value) for name, value in self._items if name not in later]
        return HeaderBlock([*kept, *later.items()])

    def to_bytes(self) -> bytes:
        """The lines of this block (no terminating empty line), ready to send."""
        return b"".join(f"{name}: {value}\r\n".encode("latin-1") for name, value in self._items)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._index

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HeaderBlock):
            return NotImplemented
        return self._items == other._items

    def __hash__(self) -> int:
        return hash(self._items)

    def __repr__(self) -> str:
        return f"HeaderBlock({list(self._items)!r})"


def format_headers(headers: Iterable[tuple[str, str]]) -> bytes:
    """``Name: value\\r\\n`` lines for ``headers``.

    Raises :class:`LocalProtocolError` for a name or value that cannot be sent, rather
    than letting a stray CR/LF inject a header or end the block early.
    """
    return HeaderBlock(headers).to_bytes()


class HeadBuffer:
    """Bytes received during a handshake, scanned for the end of the current head.

    The buffer is *armed* while a head is expected: every byte fed is then examined once
    against the limits, and the head is complete at its first empty line. While disarmed
    (we owe the peer an answer, so it should be silent) bytes are only stored; the
    handshake machine decides how many it tolerates.

    Errors are raised by :meth:`feed` and :meth:`scan`; :meth:`arm` never raises, so that
    a caller's own action (accepting a connection) cannot fail because of the peer.
    """

    __slots__ = (
        "_armed",
        "_buf",
        "_end",
        "_limits",
        "_line_start",
        "_lines",
        "_pos",
        "_prefix",
    )

    def __init__(self, limits: HandshakeLimits, *, prefix: bytes = b"GNUTELLA") -> None:
        self._limits = limits
        self._prefix = prefix
        self._buf = bytearray()
        self._armed = False
        self._pos = 0
        self._line_start = 0
        self._lines = 0
        self._end: int | None = None

    def __len__(self) -> int:
        return len(self._buf)

    @property
    def complete(self) -> bool:
        """An armed buffer holds a whole head (call :meth:`scan` first)."""
        return self._armed and self._end is not None

    @property
    def excess(self) -> int:
        """Bytes held that are not part of the head being read."""
        if not self._armed:
            return len(self._buf)
        if self._end is None:
            return 0
        return len(self._buf) - self._end

    def arm(self) -> None:
        """Expect a head starting at the first byte held."""
        self._armed = True
        self._pos = 0
        self._line_start = 0
        self._lines = 0
        self._end = None

    def feed(self, data: bytes) -> None:
        """Store ``data``, checking it at once if a head is expected."""
        self._buf += data
        self.scan()

    def scan(self) -> None:
        """Look for the end of the head among the bytes not examined yet."""
        if not self._armed or self._end is not None:
            return
        buf = self._buf
        limits = self._limits
        if self._pos < len(self._prefix):
            seen = bytes(buf[: len(self._prefix)])
            if not self._prefix.startswith(seen):
                raise HandshakeError(
                    f"not a Gnutella handshake: starts with {seen!a}",
                    status_code=STATUS_BAD_REQUEST,
                )
        while True:
            newline = buf.find(b"\n", self._pos)
            if newline < 0:
                self._pos = len(buf)
                # One byte of slack: the line may be waiting for the LF of its CRLF.
                if self._pos - self._line_start > limits.max_line_length + 1:
                    raise self._line_too_long()
                if self._pos > limits.max_block_size:
                    raise self._block_too_large()
                return
            length = newline - self._line_start
            if length and buf[newline - 1] == 0x0D:
                length -= 1
            if length > limits.max_line_length:
                raise self._line_too_long()
            if newline + 1 > limits.max_block_size:
                raise self._block_too_large()
            self._pos = newline + 1
            if length == 0:
                self._end = newline + 1
                return
            if self._line_start > 0:
                self._lines += 1
                if self._lines > limits.max_headers:
                    raise HandshakeError(
                        f"more than {limits.max_headers} header lines",
                        status_code=STATUS_TOO_LARGE,
                    )
            self._line_start = newline + 1

    def take_head(self) -> tuple[str, HeaderBlock]:
        """Remove the complete head from the buffer: its first line and its headers.

        The buffer is disarmed afterwards; what follows the head stays buffered.
        """
        if not self.complete or self._end is None:
            raise LocalProtocolError("no complete head to take")
        raw = bytes(self._buf[: self._end])
        del self._buf[: self._end]
        self._armed = False
        self._end = None
        lines = [line.removesuffix(b"\r") for line in raw.split(b"\n")[:-2]]
        if not lines:
            raise HandshakeError("empty first line", status_code=STATUS_BAD_REQUEST)
        first = lines[0]
        if _CONTROL.search(first):
            raise HandshakeError(
                "control character in the first line", status_code=STATUS_BAD_REQUEST
            )
        return first.decode("latin-1"), HeaderBlock.parse_lines(lines[1:], self._limits)

    def take_rest(self) -> bytes:
        """Remove and return everything held."""
        rest = bytes(self._buf)
        self._buf.clear()
        self._armed = False
        self._end = None
        return rest

    def clear(self) -> None:
        """Forget everything held (after the handshake failed or was refused)."""
        self.take_rest()

    def _line_too_long(self) -> HandshakeError:
        return HandshakeError(
            f"handshake line longer than {self._limits.max_line_length} bytes",
            status_code=STATUS_TOO_LARGE,
        )

    def _block_too_large(self) -> HandshakeError:
        return HandshakeError(
            f"handshake head larger than {self._limits.max_block_size} bytes",
            status_code=STATUS_TOO_LARGE,
        )
