"""What an operator can change while the router runs: the admin interface's POSTs.

In the manner of gtk-gnutella's shell, a few actions that would otherwise need a
restart: dial a peer, drop one (with Bye), hold a link down or take the whole node
offline (:mod:`gnutella_router.control.holds`) and back, send a ping or query of the
operator's as the router's own (the console's ``reach`` probe, followed through the
other routers' route tables by its GUID), change the log level, start or stop the
profiler, read the configuration file again (as SIGHUP does). Each is a POST with a
small JSON body (at most :data:`MAX_BODY_BYTES`) and a JSON answer; ``gnutella-router
ctl`` is the client.

Control needs the admin token, always: reading a router's state from its own machine
is harmless, changing it is not, so a router without ``[admin] token`` refuses every
POST with 403 and says how to enable control. The actions themselves are the daemon's
(:class:`~gnutella_router.observe.view.RouterControl`); this module only checks the
request and turns outcomes into status codes.
"""

from __future__ import annotations

import json
import math
from typing import Any

from gnutella_router.config import ConfigError, parse_host_port
from gnutella_router.config.live import ReloadError
from gnutella_router.logs import LOG_LEVELS
from gnutella_router.observe.view import RouterControl
from gnutella_router.stages.server import AlreadyConnected, DialError
from protocol.messages import Message, Ping, Query, random_guid

MAX_BODY_BYTES = 4096
"""Largest request body accepted by a control endpoint."""

CONTROL_ENDPOINTS = {
    "/peers/add": 'POST {"address": "HOST:PORT"}: dial a peer now',
    "/peers/drop": 'POST {"connection": ID} or {"address": "HOST:PORT"}: close it with Bye '
    "(and dial it not again for catcher.drop_hold seconds)",
    "/peers/hold": 'POST {"address": "HOST:PORT", "seconds": S}: close it, and neither '
    "dial nor accept it for S seconds (until released without seconds)",
    "/peers/release": 'POST {"address": "HOST:PORT"}: end its hold',
    "/offline": 'POST {"offline": true|false}: close every connection and accept and dial '
    "none, or come back",
    "/inject": 'POST {"type": "ping|query", "ttl": N, "text": "..."}: send our own ping or '
    "query to the neighbours; its GUID",
    "/log-level": 'POST {"level": "debug|info|warning|error"}: change the log level',
    "/profiler": 'POST {"action": "start|stop"}: start or stop the profiler',
    "/reload": "POST {}: read the configuration file again, as SIGHUP does; what was "
    "applied and what needs a restart",
}


class ControlError(Exception):
    """A control request that cannot be carried out: an HTTP status and a sentence."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def handle_control(control: RouterControl, path: str, body: bytes) -> dict[str, Any]:
    """Carry out the POST at ``path``; the JSON answer.

    Raises:
        ControlError: an unknown path (404), a bad body (400), a peer that could not be
            dialled (502), a connection that is not there (404).
    """
    request = _body(body)
    if path == "/peers/add":
        host, port = _address(request)
        try:
            connection = await control.add_peer(host, port)
        except AlreadyConnected as exc:
            raise ControlError(409, str(exc)) from None
        except DialError as exc:
            raise ControlError(502, f"cannot connect to {host}:{port}: {exc}") from None
        return {"connected": True, "connection": connection}
    if path == "/peers/drop":
        return {"dropped": _drop(control, request)}
    if path == "/peers/hold":
        host, port = _address(request)
        seconds = _seconds(request)
        try:
            closed = control.hold_peer(host, port, seconds)
        except ValueError as exc:
            raise ControlError(400, f"seconds: {exc}") from None
        return {"held": f"{host}:{port}", "closed": closed, "seconds": _finite(seconds)}
    if path == "/peers/release":
        host, port = _address(request)
        return {"released": control.release_peer(host, port)}
    if path == "/offline":
        offline = request.get("offline")
        if not isinstance(offline, bool):
            raise ControlError(400, "offline: expected true or false")
        return {"offline": offline, "closed": control.set_offline(offline)}
    if path == "/inject":
        message = _message(request, control.config.network.max_ttl)
        sent = control.inject(message)
        return {
            "guid": message.guid.hex(),
            "type": "ping" if isinstance(message.payload, Ping) else "query",
            "ttl": message.ttl,
            "sent_to": sent,
        }
    if path == "/log-level":
        level = request.get("level")
        if not isinstance(level, str) or level.lower() not in LOG_LEVELS:
            raise ControlError(400, f"level: expected one of {', '.join(LOG_LEVELS)}")
        control.set_log_level(level.lower())
        return {"level": level.lower()}
    if path == "/profiler":
        action = request.get("action")
        if action == "start":
            return {"started": await control.start_profiler()}
        if action == "stop":
            written = control.stop_profiler()
            return {"stopped": written is not None, "written": [str(p) for p in written or ()]}
        raise ControlError(400, 'action: expected "start" or "stop"')
    if path == "/reload":
        if request:
            raise ControlError(400, "a reload takes no arguments: send {}")
        try:
            plan = await control.reload(by="the admin interface")
        except ReloadError as exc:
            raise ControlError(409, f"{exc}; the router runs on as it was") from None
        return plan.to_json()
    raise ControlError(404, f"no control endpoint {path!r}; try {', '.join(CONTROL_ENDPOINTS)}")


def _body(body: bytes) -> dict[str, Any]:
    try:
        request = json.loads(body or b"{}")
    except ValueError:
        raise ControlError(400, "the body must be a JSON object") from None
    if not isinstance(request, dict):
        raise ControlError(400, "the body must be a JSON object")
    return request


def _address(request: dict[str, Any]) -> tuple[str, int]:
    text = request.get("address")
    if not isinstance(text, str):
        raise ControlError(400, 'address: expected "HOST:PORT"')
    try:
        return parse_host_port(text, key="address", allow_port_zero=False)
    except ConfigError as exc:
        raise ControlError(400, str(exc)) from None


def _drop(control: RouterControl, request: dict[str, Any]) -> int:
    connection = request.get("connection")
    if "address" in request:
        host, port = _address(request)
        for candidate in control.server.connections.snapshot():
            listen = candidate.listen_address
            if candidate.peer == (host, port) or listen == (host, port):
                connection = candidate.id
                break
        else:
            raise ControlError(404, f"no connection to {host}:{port}")
    if not isinstance(connection, int) or isinstance(connection, bool):
        raise ControlError(400, 'give "connection": ID or "address": "HOST:PORT"')
    if not control.drop_peer(connection):
        raise ControlError(404, f"no open connection {connection}")
    return connection


MAX_QUERY_TEXT = 200
"""Longest query text ``/inject`` takes, in characters."""


def _seconds(request: dict[str, Any]) -> float:
    seconds = request.get("seconds")
    if seconds is None:
        return math.inf
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ControlError(400, "seconds: expected a number of seconds")
    return float(seconds)


def _finite(seconds: float) -> float | None:
    return seconds if math.isfinite(seconds) else None


def _message(request: dict[str, Any], max_ttl: int) -> Message:
    """The ping or query an ``/inject`` body asks for, with a fresh GUID."""
    kind = request.get("type", "query")
    ttl = request.get("ttl", max_ttl)
    if isinstance(ttl, bool) or not isinstance(ttl, int) or not 1 <= ttl <= max_ttl:
        raise ControlError(
            400, f"ttl: expected a whole number from 1 to {max_ttl} (network.max_ttl)"
        )
    if kind == "ping":
        if "text" in request:
            raise ControlError(400, "text: a ping carries none")
        return Message(random_guid(), ttl, 0, Ping())
    if kind != "query":
        raise ControlError(400, 'type: expected "ping" or "query"')
    text = request.get("text")
    if not isinstance(text, str) or not 0 < len(text) <= MAX_QUERY_TEXT or "\0" in text:
        raise ControlError(
            400, f"text: expected 1 to {MAX_QUERY_TEXT} characters (no NUL) for a query"
        )
    return Message(random_guid(), ttl, 0, Query(text.encode()))
