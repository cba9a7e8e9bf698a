"""The Gnutella 0.6 connection handshake as two sans-IO state machines.

Theory of operation
-------------------
A connection opens with three text steps, each a *head* (a first line, headers, an
empty line; see :mod:`protocol.headers`)::

    initiator                                   acceptor
    1. GNUTELLA CONNECT/0.6 + headers   ---->
                                        <----   2. GNUTELLA/0.6 200 OK + headers
    3. GNUTELLA/0.6 200 OK + headers    ---->
       (binary messages from here)      <--->   (binary messages once step 3 is read)

Either side may refuse instead: the acceptor with a non-200 status in step 2 (503 plus
``X-Try-Ultrapeers`` when it is full), the initiator with a non-200 status in step 3.
A 0.4 peer sends ``GNUTELLA CONNECT/0.4\\n\\n`` and is answered ``GNUTELLA OK\\n\\n``
with no headers and no third step.

:class:`Acceptor` and :class:`Initiator` follow h11: the caller feeds received bytes to
``receive_data`` (``b""`` for end of stream), pulls events from ``next_event`` until it
returns :data:`NEED_DATA`, and sends the bytes that ``start``/``accept``/``confirm`` and
their refusing counterparts return. No socket, clock or log is touched here.

Events: the acceptor reads :class:`ConnectRequest`; after ``accept()`` it reads the
step 3 head as :class:`HandshakeResponse` followed by :class:`HandshakeComplete`, or a
:class:`HandshakeRejected`. The initiator reads :class:`HandshakeResponse` (or
:class:`HandshakeRejected`); after ``confirm()`` it reads :class:`HandshakeComplete`.

Compression is decided per direction because each sender announces its own
``Content-Encoding``: we deflate only when the caller asks (``deflate=True``) and the
peer sent ``Accept-Encoding: deflate``, and we inflate whenever the peer's last head says
``Content-Encoding: deflate``. The machine works both flags out so no caller can get
them crossed.

Where trailing bytes go: a peer may send Gnutella messages in the same segment as its
last head. Whatever follows that head is handed over, untouched and possibly deflated,
in :attr:`HandshakeComplete.trailing_data`; the caller gives it to the message framer
before any byte it reads later. From :attr:`HandshakeState.COMPLETE` on, the machine
takes no more bytes.

States (:class:`HandshakeState`)::

    Acceptor:  READING_REQUEST -> DECIDING -> READING_CONFIRMATION -> COMPLETING -> COMPLETE
                                     |  (0.4) accept() -------------> COMPLETING
                                     +-- reject() -> CLOSED   (non-200 step 3 -> CLOSED)
    Initiator: IDLE -> READING_RESPONSE -> CONFIRMING -> COMPLETING -> COMPLETE
                          |  (0.4) GNUTELLA OK -----------------------> COMPLETE
                          +-- non-200 -> CLOSED   decline() -> CLOSED

COMPLETING means the outcome is settled and :class:`HandshakeComplete` is the next
event. Any failure caused by the peer raises :class:`HandshakeError` and leaves the
machine in ERROR for good; calling a method in the wrong state raises
:class:`LocalProtocolError` and changes nothing.

While we owe the peer an answer (DECIDING, CONFIRMING, or after its head arrived but
before we read it) the peer should be silent; the machine holds at most
``max_block_size`` such bytes, so that nothing the peer does makes it buffer without
bound.
"""

from __future__ import annotations

import abc
import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from .capabilities import (
    MAX_TRY_HOSTS,
    Capabilities,
    busy_response_headers,
    content_encoding,
    format_host,
    parse_host_port,
    parse_try_hosts,
    router_headers,
)
from .errors import HandshakeError, LocalProtocolError
from .headers import STATUS_TOO_LARGE, HandshakeLimits, HeadBuffer, HeaderBlock

__all__ = [
    "MAX_TRY_HOSTS",
    "NEED_DATA",
    "Acceptor",
    "Capabilities",
    "ConnectRequest",
    "HandshakeComplete",
    "HandshakeEvent",
    "HandshakeRejected",
    "HandshakeResponse",
    "HandshakeState",
    "Initiator",
    "NeedData",
    "busy_response_headers",
    "format_host",
    "format_refusal",
    "parse_host_port",
    "parse_try_hosts",
    "router_headers",
]

STATUS_OK = 200
STATUS_BAD_REQUEST = 400
STATUS_UNSUPPORTED_ENCODING = 415
STATUS_VERSION_NOT_SUPPORTED = 505

_REQUEST_LINE = re.compile(r"GNUTELLA CONNECT/([0-9]{1,3})\.([0-9]{1,3})", re.ASCII)
_STATUS_LINE = re.compile(
    r"GNUTELLA/([0-9]{1,3})\.([0-9]{1,3}) ([0-9]{3})(?:[ \t](.*))?", re.ASCII | re.DOTALL
)
_LEGACY_OK = "GNUTELLA OK"
_CONTROL_TEXT = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


class HandshakeState(enum.Enum):
    """Where a handshake machine stands; see the module docstring for the diagram."""

    IDLE = "IDLE"
    READING_REQUEST = "READING_REQUEST"
    DECIDING = "DECIDING"
    READING_RESPONSE = "READING_RESPONSE"
    CONFIRMING = "CONFIRMING"
    READING_CONFIRMATION = "READING_CONFIRMATION"
    COMPLETING = "COMPLETING"
    COMPLETE = "COMPLETE"
    CLOSED = "CLOSED"
    ERROR = "ERROR"


class _NeedData(enum.Enum):
    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = _NeedData.NEED_DATA
"""Returned by ``next_event`` when nothing can happen until more bytes arrive."""

NeedData: TypeAlias = Literal[_NeedData.NEED_DATA]


# ---------------------------------------------------------------------------
# Events


@dataclass(frozen=True, slots=True)
class ConnectRequest:
    """Step 1 as the acceptor read it; ``legacy`` for a 0.4 request (no headers)."""

    version: str
    headers: HeaderBlock
    legacy: bool = False

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities.from_headers(self.headers)


@dataclass(frozen=True, slots=True)
class HandshakeResponse:
    """A 200 status head: step 2 for the initiator, step 3 for the acceptor."""

    version: str
    status_code: int
    reason: str
    headers: HeaderBlock

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities.from_headers(self.headers)


@dataclass(frozen=True, slots=True)
class HandshakeComplete:
    """The connection now carries Gnutella messages.

    ``trailing_data`` are message bytes that arrived with the last head; they come
    before anything read later. The deflate flags are per direction because
    ``Content-Encoding`` is announced by each sender separately.
    """

    peer: Capabilities
    trailing_data: bytes
    compress_outgoing: bool
    decompress_incoming: bool
    legacy: bool = False


@dataclass(frozen=True, slots=True)
class HandshakeRejected:
    """The peer refused the connection (step 2 or step 3) with a non-200 status."""

    status_code: int
    reason: str
    headers: HeaderBlock
    try_hosts: tuple[tuple[str, int], ...]


HandshakeEvent: TypeAlias = (
    ConnectRequest | HandshakeResponse | HandshakeComplete | HandshakeRejected
)


# ---------------------------------------------------------------------------
# Output


def _head(first_line: str, headers: HeaderBlock) -> bytes:
    return first_line.encode("ascii") + b"\r\n" + headers.to_bytes() + b"\r\n"


def _own_headers(headers: Sequence[tuple[str, str]]) -> HeaderBlock:
    block = HeaderBlock(headers)
    if "Content-Encoding" in block:
        raise LocalProtocolError(
            "Content-Encoding is negotiated by the handshake machine: pass deflate=True"
        )
    return block


def format_refusal(status_code: int, reason: str, headers: Sequence[tuple[str, str]] = ()) -> bytes:
    """A complete refusing head, e.g. ``GNUTELLA/0.6 503 Busy`` plus ``X-Try-Ultrapeers``.

    Public so that the I/O layer can answer with a :class:`HandshakeError`'s status
    after the machine itself has failed.
    """
    if type(status_code) is not int or not 100 <= status_code <= 999:
        raise LocalProtocolError(f"status code {status_code!r} is not three digits")
    if status_code == STATUS_OK:
        raise LocalProtocolError("a refusal cannot carry status 200")
    if not isinstance(reason, str) or _CONTROL_TEXT.search(reason) or not reason.isascii():
        raise LocalProtocolError(f"reason {reason!r} cannot be sent")
    reason = reason.strip()
    line = f"GNUTELLA/0.6 {status_code} {reason}" if reason else f"GNUTELLA/0.6 {status_code}"
    return _head(line, HeaderBlock(headers))


# ---------------------------------------------------------------------------
# Input


def _parse_request_line(line: str) -> tuple[str, bool]:
    """The version of a ``GNUTELLA CONNECT/x.y`` line and whether it is 0.4."""
    match = _REQUEST_LINE.fullmatch(line.rstrip(" \t"))
    if match is None:
        raise HandshakeError(
            f"not a Gnutella connect request: {line[:80]!a}", status_code=STATUS_BAD_REQUEST
        )
    major, minor = int(match[1]), int(match[2])
    version = f"{match[1]}.{match[2]}"
    if major == 0 and minor == 4:
        return version, True
    # The spec asks servents to take any higher 0.x as 0.6 so the protocol can grow.
    if major == 0 and minor >= 6:
        return version, False
    raise HandshakeError(
        f"protocol version {version} not supported", status_code=STATUS_VERSION_NOT_SUPPORTED
    )


def _parse_status_line(line: str) -> tuple[str, int, str]:
    """Version, code and reason of a ``GNUTELLA/x.y code reason`` line."""
    match = _STATUS_LINE.fullmatch(line.rstrip(" \t"))
    if match is None or int(match[3]) < 100:
        raise HandshakeError(
            f"not a Gnutella status line: {line[:80]!a}", status_code=STATUS_BAD_REQUEST
        )
    major, minor = int(match[1]), int(match[2])
    version = f"{match[1]}.{match[2]}"
    if major != 0 or minor < 6:
        raise HandshakeError(
            f"protocol version {version} not supported",
            status_code=STATUS_VERSION_NOT_SUPPORTED,
        )
    return version, int(match[3]), (match[4] or "").strip()


def _incoming_deflate(headers: HeaderBlock) -> bool:
    """Whether the sender of ``headers`` deflates; an encoding we cannot undo is fatal."""
    encoding = content_encoding(headers)
    if encoding is None:
        return False
    if encoding == "deflate":
        return True
    raise HandshakeError(
        f"unsupported Content-Encoding {encoding!a}", status_code=STATUS_UNSUPPORTED_ENCODING
    )


# ---------------------------------------------------------------------------
# Machines


class _Handshake(abc.ABC):
    """What both roles share: input buffering, end of stream, the ERROR state."""

    def __init__(self, limits: HandshakeLimits | None, initial: HandshakeState) -> None:
        self._limits = limits if limits is not None else HandshakeLimits()
        self._buffer = HeadBuffer(self._limits)
        self._state = initial
        self._eof = False
        self._error: HandshakeError | None = None
        self._legacy = False
        self._peer_headers = HeaderBlock()
        self._compress_outgoing = False
        self._decompress_incoming = False

    @property
    def state(self) -> HandshakeState:
        return self._state

    @property
    def limits(self) -> HandshakeLimits:
        return self._limits

    @property
    def legacy(self) -> bool:
        """The handshake is the headerless 0.4 one."""
        return self._legacy

    def receive_data(self, data: bytes) -> None:
        """Take bytes from the peer; ``b""`` means it closed its side.

        Raises :class:`HandshakeError` as soon as the bytes break a limit or cannot
        start a handshake. After a refusal the peer's bytes no longer matter and are
        dropped; after completion they belong to the message framer, so passing them
        here is an error.
        """
        state = self._state
        if state is HandshakeState.ERROR:
            raise self._again()
        if state is HandshakeState.CLOSED:
            return
        if state is HandshakeState.COMPLETE:
            raise LocalProtocolError("the handshake is complete: bytes go to the framer now")
        if state is HandshakeState.IDLE:
            raise LocalProtocolError("start() the handshake before receiving")
        if self._eof:
            if data:
                raise LocalProtocolError("bytes received after end of stream")
            return
        if not data:
            self._eof = True
            return
        try:
            self._buffer.feed(data)
            if self._peer_must_wait() and self._buffer.excess > self._limits.max_block_size:
                raise HandshakeError(
                    f"peer sent more than {self._limits.max_block_size} bytes "
                    "while it should wait for our answer",
                    status_code=STATUS_TOO_LARGE,
                )
        except HandshakeError as exc:
            raise self._fail(exc) from None

    def next_event(self) -> HandshakeEvent | NeedData:
        """The next thing the peer did, or :data:`NEED_DATA`.

        Raises :class:`HandshakeError` for a peer's failure (and again on every later
        call), :class:`LocalProtocolError` when an answer from us is due first or the
        handshake is over.
        """
        if self._state is HandshakeState.ERROR:
            raise self._again()
        try:
            return self._next_event()
        except HandshakeError as exc:
            raise self._fail(exc) from None

    @abc.abstractmethod
    def _next_event(self) -> HandshakeEvent | NeedData:
        """The role's reading logic, called outside the ERROR state."""

    @abc.abstractmethod
    def _peer_must_wait(self) -> bool:
        """Whether bytes beyond the current head are the peer speaking out of turn."""

    def _read_head(self) -> tuple[str, HeaderBlock] | None:
        self._buffer.scan()
        if self._buffer.complete:
            return self._buffer.take_head()
        if self._eof:
            raise HandshakeError(
                "peer closed the connection during the handshake",
                status_code=STATUS_BAD_REQUEST,
            )
        return None

    def _complete(self) -> HandshakeComplete:
        self._state = HandshakeState.COMPLETE
        return HandshakeComplete(
            peer=Capabilities.from_headers(self._peer_headers),
            trailing_data=self._buffer.take_rest(),
            compress_outgoing=self._compress_outgoing,
            decompress_incoming=self._decompress_incoming,
            legacy=self._legacy,
        )

    def _rejected(self, code: int, reason: str, headers: HeaderBlock) -> HandshakeRejected:
        self._state = HandshakeState.CLOSED
        self._buffer.clear()
        return HandshakeRejected(code, reason, headers, parse_try_hosts(headers))

    def _refuse(self, status_code: int, reason: str, headers: Sequence[tuple[str, str]]) -> bytes:
        data = format_refusal(status_code, reason, headers)
        self._state = HandshakeState.CLOSED
        self._buffer.clear()
        return data

    def _require(self, state: HandshakeState, action: str) -> None:
        if self._state is not state:
            raise LocalProtocolError(
                f"{action} is only valid in state {state.name}, not {self._state.name}"
            )

    def _misuse(self) -> LocalProtocolError:
        return LocalProtocolError(f"no event to read in state {self._state.name}")

    def _fail(self, exc: HandshakeError) -> HandshakeError:
        self._state = HandshakeState.ERROR
        self._error = exc
        self._buffer.clear()
        return exc

    def _again(self) -> HandshakeError:
        assert self._error is not None
        return HandshakeError(
            f"handshake already failed: {self._error.reason}",
            status_code=self._error.status_code,
        )


class Acceptor(_Handshake):
    """The side that accepted the TCP connection: reads step 1, answers step 2."""

    def __init__(self, limits: HandshakeLimits | None = None) -> None:
        super().__init__(limits, HandshakeState.READING_REQUEST)
        self._buffer.arm()
        self._request_headers = HeaderBlock()

    def accept(self, headers: Sequence[tuple[str, str]] = (), *, deflate: bool = False) -> bytes:
        """Step 2 accepting the connection; returns the bytes to send.

        With ``deflate=True`` our messages are compressed if the peer accepts deflate,
        and ``Content-Encoding: deflate`` is added to say so. A 0.4 request gets
        ``GNUTELLA OK`` and the handshake is complete; ``headers`` are not sent then,
        since 0.4 has none.
        """
        self._require(HandshakeState.DECIDING, "accept()")
        if self._legacy:
            self._state = HandshakeState.COMPLETING
            return b"GNUTELLA OK\n\n"
        block = _own_headers(headers)
        if deflate and Capabilities.from_headers(self._request_headers).accepts_deflate:
            block = HeaderBlock([*block.items(), ("Content-Encoding", "deflate")])
            self._compress_outgoing = True
        self._state = HandshakeState.READING_CONFIRMATION
        self._buffer.arm()
        return _head("GNUTELLA/0.6 200 OK", block)

    def reject(
        self, status_code: int, reason: str, headers: Sequence[tuple[str, str]] = ()
    ) -> bytes:
        """Step 2 refusing the connection (e.g. 503 with :func:`busy_response_headers`)."""
        self._require(HandshakeState.DECIDING, "reject()")
        return self._refuse(status_code, reason, headers)

    def _peer_must_wait(self) -> bool:
        return self._state in (HandshakeState.READING_REQUEST, HandshakeState.DECIDING)

    def _next_event(self) -> HandshakeEvent | NeedData:
        state = self._state
        if state is HandshakeState.READING_REQUEST:
            head = self._read_head()
            if head is None:
                return NEED_DATA
            line, headers = head
            version, legacy = _parse_request_line(line)
            if legacy and len(headers):
                raise HandshakeError(
                    "a 0.4 connect request carries no headers", status_code=STATUS_BAD_REQUEST
                )
            self._legacy = legacy
            self._request_headers = headers
            self._peer_headers = headers
            self._state = HandshakeState.DECIDING
            return ConnectRequest(version, headers, legacy)
        if state is HandshakeState.READING_CONFIRMATION:
            head = self._read_head()
            if head is None:
                return NEED_DATA
            line, headers = head
            version, code, reason = _parse_status_line(line)
            if code != STATUS_OK:
                return self._rejected(code, reason, headers)
            self._decompress_incoming = _incoming_deflate(headers)
            self._peer_headers = self._request_headers.merged_with(headers)
            self._state = HandshakeState.COMPLETING
            return HandshakeResponse(version, code, reason, headers)
        if state is HandshakeState.COMPLETING:
            return self._complete()
        raise self._misuse()


class Initiator(_Handshake):
    """The side that opened the TCP connection: sends step 1, answers step 2 with step 3."""

    def __init__(self, limits: HandshakeLimits | None = None) -> None:
        super().__init__(limits, HandshakeState.IDLE)

    def start(self, headers: Sequence[tuple[str, str]] = (), version: str = "0.6") -> bytes:
        """Step 1; returns the bytes to send.

        ``version="0.4"`` sends the headerless legacy request (``headers`` are not sent)
        and expects ``GNUTELLA OK``; it exists for the odd old servent, since modern
        ones refuse 0.4.
        """
        self._require(HandshakeState.IDLE, "start()")
        if version not in ("0.6", "0.4"):
            raise LocalProtocolError(f"cannot initiate protocol version {version!r}")
        block = _own_headers(headers)
        self._legacy = version == "0.4"
        self._state = HandshakeState.READING_RESPONSE
        self._buffer.arm()
        if self._legacy:
            return b"GNUTELLA CONNECT/0.4\n\n"
        return _head("GNUTELLA CONNECT/0.6", block)

    def confirm(self, headers: Sequence[tuple[str, str]] = (), *, deflate: bool = False) -> bytes:
        """Step 3 accepting the acceptor's answer; returns the bytes to send.

        With ``deflate=True`` our messages are compressed if the acceptor accepts
        deflate, and ``Content-Encoding: deflate`` is added to say so.
        """
        self._require(HandshakeState.CONFIRMING, "confirm()")
        block = _own_headers(headers)
        if deflate and Capabilities.from_headers(self._peer_headers).accepts_deflate:
            block = HeaderBlock([*block.items(), ("Content-Encoding", "deflate")])
            self._compress_outgoing = True
        self._state = HandshakeState.COMPLETING
        return _head("GNUTELLA/0.6 200 OK", block)

    def decline(
        self, status_code: int, reason: str, headers: Sequence[tuple[str, str]] = ()
    ) -> bytes:
        """Step 3 refusing the acceptor's answer (its headers did not suit us)."""
        self._require(HandshakeState.CONFIRMING, "decline()")
        return self._refuse(status_code, reason, headers)

    def _peer_must_wait(self) -> bool:
        if self._state is HandshakeState.READING_RESPONSE:
            return not self._legacy
        return self._state is HandshakeState.CONFIRMING

    def _next_event(self) -> HandshakeEvent | NeedData:
        state = self._state
        if state is HandshakeState.READING_RESPONSE:
            head = self._read_head()
            if head is None:
                return NEED_DATA
            line, headers = head
            if self._legacy and line.rstrip(" \t") == _LEGACY_OK:
                if len(headers):
                    raise HandshakeError(
                        "a 0.4 answer carries no headers", status_code=STATUS_BAD_REQUEST
                    )
                return self._complete()
            version, code, reason = _parse_status_line(line)
            if code != STATUS_OK:
                return self._rejected(code, reason, headers)
            if self._legacy:
                raise HandshakeError(
                    "a 0.4 request was answered with a 0.6 acceptance",
                    status_code=STATUS_BAD_REQUEST,
                )
            self._decompress_incoming = _incoming_deflate(headers)
            self._peer_headers = headers
            self._state = HandshakeState.CONFIRMING
            return HandshakeResponse(version, code, reason, headers)
        if state is HandshakeState.COMPLETING:
            return self._complete()
        raise self._misuse()
