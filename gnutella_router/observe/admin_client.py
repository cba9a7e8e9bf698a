"""A client for a router's admin interface: one GET, JSON back, a sentence on failure.

Plain :mod:`http.client`, blocking (call it from a worker thread inside trio): no
proxies, since an admin interface is on this machine or reached directly, and a timeout
on everything. Used by ``gnutella-router dump`` and by the load client, which reads the
router's own counters to reconcile what it sent with what the router saw.
"""

from __future__ import annotations

import http.client
import json
import os

TOKEN_ENVIRONMENT = "GNUTELLA_ADMIN_TOKEN"
"""Where the command-line tools look for the admin token when none is given."""
MAX_RESPONSE_BYTES = 256 * 1024 * 1024


def token_from(given: str | None) -> str:
    """The admin token a command uses: ``--token`` when given, else
    ``$GNUTELLA_ADMIN_TOKEN``, else none. Every command that talks to an admin
    interface reads it this way, as their messages say."""
    return given if given is not None else os.environ.get(TOKEN_ENVIRONMENT, "")


class FetchError(Exception):
    """The admin interface could not be reached or did not answer 200."""


def post(
    address: tuple[str, int],
    path: str,
    body: object,
    *,
    token: str = "",
    timeout: float = 30.0,
) -> object:
    """POST ``body`` as JSON to a control endpoint and decode the JSON answer.

    Raises:
        FetchError: as :func:`fetch`.
    """
    return fetch(address, path, token=token, timeout=timeout, body=body)


def fetch(
    address: tuple[str, int],
    path: str,
    *,
    token: str = "",
    timeout: float = 10.0,
    body: object = None,
) -> object:
    """GET ``path`` (POST ``body`` as JSON, when given) from the admin interface at
    ``address`` and decode its JSON.

    Raises:
        FetchError: the connection failed, or the answer was not a 200 with JSON; the
            message is a sentence for the operator.
    """
    host, port = address
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        if body is None:
            connection.request("GET", path, headers=headers)
        else:
            headers["Content-Type"] = "application/json"
            connection.request("POST", path, body=json.dumps(body).encode(), headers=headers)
        response = connection.getresponse()
        body = response.read(MAX_RESPONSE_BYTES)
    except (OSError, http.client.HTTPException) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise FetchError(
            f"cannot reach the admin interface at {where}: {reason or type(exc).__name__}"
        ) from None
    finally:
        connection.close()
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if response.status != 200:
        detail = data.get("error") if isinstance(data, dict) else None
        hint = ""
        if response.status == 401:
            hint = f" (give --token or set {TOKEN_ENVIRONMENT})"
        raise FetchError(
            f"the admin interface at {where} answered {response.status} {response.reason}"
            + (f": {detail}" if detail else "")
            + hint
        )
    if data is None:
        raise FetchError(f"the admin interface at {where} sent something that is not JSON")
    return data
