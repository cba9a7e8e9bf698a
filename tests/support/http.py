"""An HTTP client for tests of the admin interface: one request, the whole answer."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import h11
import trio


@dataclasses.dataclass
class Fetched:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def http_get(
    address: tuple[str, int],
    target: str,
    *,
    headers: Sequence[tuple[str, str]] = (),
    method: str = "GET",
    body: bytes = b"",
    timeout: float = 5.0,
) -> Fetched:
    """One request over a fresh connection (with ``body``, if any), read to the end of
    the response."""
    with trio.fail_after(timeout):
        stream = await trio.open_tcp_stream(*address)
        async with stream:
            client = h11.Connection(h11.CLIENT)
            length = [("content-length", str(len(body)))] if body or method == "POST" else []
            request = h11.Request(
                method=method, target=target, headers=[("host", "admin"), *length, *headers]
            )
            data = client.send(request) or b""
            if body:
                data += client.send(h11.Data(data=body)) or b""
            await stream.send_all(data + (client.send(h11.EndOfMessage()) or b""))
            response: h11.Response | None = None
            received = b""
            while True:
                event = client.next_event()
                if event is h11.NEED_DATA:
                    client.receive_data(await stream.receive_some(65536))
                elif isinstance(event, h11.Response):
                    response = event
                elif isinstance(event, h11.Data):
                    received += event.data
                elif isinstance(event, h11.EndOfMessage):
                    break
    assert response is not None
    fields = {k.decode().lower(): v.decode() for k, v in response.headers}
    return Fetched(response.status_code, fields, received)
