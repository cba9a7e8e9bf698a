"""The admin interface's side of HTTP: what a reply is, how a request's target and
parameters are read (strictly: an unknown or repeated parameter is a 400 that says
which), and how a reply is put on the wire with h11.

Kept apart from :mod:`.admin`, which decides what each page says and who may ask.
"""

from __future__ import annotations

import dataclasses
import http
import json
import urllib.parse
from collections.abc import Callable, Sequence

import h11
import trio

from gnutella_router import __version__
from gnutella_router.observe.dump_stream import JsonDocument
from gnutella_router.observe.dumps import DEFAULT_ROUTE_LIMIT

MAX_ROUTE_LIMIT = 100_000
"""Largest ``limit`` accepted: route entries shown per table."""
READ_SIZE = 4096
JSON_TYPE = "application/json"


@dataclasses.dataclass(frozen=True, slots=True)
class Reply:
    """A response to send: status, body and its content type, extra headers."""

    status: int
    body: bytes
    content_type: str = JSON_TYPE
    headers: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class StreamedReply:
    """A 200 whose JSON body is written as it is made (chunked), for the route dumps.

    ``document`` takes the snapshot the body shows: it is called on the trio thread
    when the response is about to be sent, once no other streamed response is being
    made (one at a time bounds the memory the snapshots hold). See
    :mod:`.dump_stream`.
    """

    document: Callable[[], JsonDocument]
    status: int = 200
    content_type: str = JSON_TYPE


class BadRequest(Exception):
    """A request the admin interface cannot answer; the message says why."""

    def __init__(self, status: int, message: str, headers: Sequence[tuple[str, str]] = ()):
        super().__init__(message)
        self.status = status
        self.headers = tuple(headers)


def json_reply(status: int, payload: object, headers: Sequence[tuple[str, str]] = ()) -> Reply:
    """A JSON reply of ``payload`` (compact, one line)."""
    body = json.dumps(payload, allow_nan=False, separators=(",", ":")).encode() + b"\n"
    return Reply(status, body, JSON_TYPE, tuple(headers))


async def read_body(stream: trio.SocketStream, conn: h11.Connection, limit: int) -> bytes:
    """The request body, at most ``limit`` bytes (413 beyond)."""
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(bytes(await stream.receive_some(READ_SIZE)))
            continue
        if isinstance(event, h11.Data):
            body += event.data
            if len(body) > limit:
                raise BadRequest(413, f"the body is over {limit} bytes")
            continue
        if isinstance(event, h11.EndOfMessage):
            return bytes(body)
        raise BadRequest(400, "the request ended before its body")


def parse_target(target: str) -> tuple[str, dict[str, str]]:
    parts = urllib.parse.urlsplit(target)
    params: dict[str, str] = {}
    try:
        pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True, max_num_fields=16)
    except ValueError:
        raise BadRequest(400, "too many query parameters") from None
    for name, value in pairs:
        if name in params:
            raise BadRequest(400, f"{name} is given twice")
        params[name] = value
    return urllib.parse.unquote(parts.path) or "/", params


def allow_params(params: dict[str, str], *names: str) -> None:
    unknown = sorted(set(params) - set(names))
    if unknown:
        allowed = ", ".join(names) if names else "none"
        raise BadRequest(400, f"unknown parameter {unknown[0]!r}; this page takes {allowed}")


def route_limit(params: dict[str, str]) -> int:
    text = params.get("limit")
    if text is None or text == "":
        return DEFAULT_ROUTE_LIMIT
    if not (text.isascii() and text.isdigit() and len(text) <= 7) or int(text) > MAX_ROUTE_LIMIT:
        raise BadRequest(
            400, f"limit={text[:20]!r}: expected a whole number from 0 to {MAX_ROUTE_LIMIT}"
        )
    return int(text)


def offset_param(params: dict[str, str]) -> int:
    text = params.get("offset")
    if text is None or text == "":
        return 0
    if not (text.isascii() and text.isdigit() and len(text) <= 9):
        raise BadRequest(400, f"offset={text[:20]!r}: expected a whole number, 0 or more")
    return int(text)


def parse_guid(text: str) -> bytes:
    try:
        guid = bytes.fromhex(text)
    except ValueError:
        guid = b""
    if len(guid) != 16:
        raise BadRequest(400, f"guid={text[:64]!r}: expected 32 hex digits")
    return guid


def response_headers(reply: Reply) -> list[tuple[str, str]]:
    return [
        ("content-type", reply.content_type),
        ("content-length", str(len(reply.body))),
        ("cache-control", "no-store"),
        ("connection", "close"),
        ("server", f"gnutella-router/{__version__}"),
        *reply.headers,
    ]


def streamed_headers(reply: StreamedReply) -> list[tuple[str, str]]:
    """As :func:`_response_headers`, without a length: h11 sends the body chunked (to
    an HTTP/1.0 client, until the connection closes)."""
    return [
        ("content-type", reply.content_type),
        ("cache-control", "no-store"),
        ("connection", "close"),
        ("server", f"gnutella-router/{__version__}"),
    ]


def encode_response(conn: h11.Connection, reply: Reply) -> bytes:
    reason = http.HTTPStatus(reply.status).phrase.encode("ascii")
    head = conn.send(
        h11.Response(status_code=reply.status, headers=response_headers(reply), reason=reason)
    )
    body = conn.send(h11.Data(data=reply.body))
    end = conn.send(h11.EndOfMessage())
    return (head or b"") + (body or b"") + (end or b"")


def raw_response(reply: Reply) -> bytes:
    """A response written without reading the request (the 503 for a full house)."""
    return encode_response(h11.Connection(h11.SERVER), reply)
