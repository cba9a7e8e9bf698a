"""Log output: structlog, configured once, for a person at a terminal or a log shipper.

Output
------
``configure_logging(format, level)`` picks one renderer for the whole process:

* ``"json"``: one JSON object per line, with ``event``, ``level`` and an ISO 8601 UTC
  ``timestamp``; exceptions become structured data (``dict_tracebacks``), not text.
* ``"console"``: structlog's ``ConsoleRenderer``, in colour only on a terminal.
* ``"auto"``: console when the stream is a terminal, JSON otherwise.

Lines go to standard error unless another stream is given. Records that reach stdlib
:mod:`logging` (trio reports some errors there, under loggers such as
``trio.serve_listeners``) come out of the same stream in the same format, with a
``logger`` key, and through the same lock, so lines never interleave.

Loggers filter by level before doing any work (a class attribute read and a compare,
so that :func:`set_level` can change the level of loggers already bound, at run time)
and are cached on first use. :func:`get_logger` returns a lazy proxy, so module-level
loggers made at import time pick up the configuration; calls through the proxy cost
about 1.3 µs even when filtered. ``.bind()`` turns it into a concrete logger, whose
filtered calls cost about 0.3 µs, so bind once wherever a loop starts. A logger
bound before :func:`configure_logging` keeps the defaults it saw.

Rules for callers
-----------------
* Take a logger per component, ``log = get_logger("router")``; it carries
  ``component="router"``.
* Event names are constant ``snake_case`` strings and everything variable goes in
  key-value pairs: ``log.info("connection_closed", bye=200)``, never an f-string. Lines
  stay greppable, and a filtered call does no formatting.
* Bind connection context once per connection, at the top of its task
  (``log = base.bind(conn_id=..., peer=...)``), and keep that logger with the
  connection. Stage workers that serve many connections were started outside any
  connection, so they pass ``conn_id=`` explicitly.
* One summary line per closed connection: duration, bytes and messages each way,
  drops by reason, Bye code. Stages log periodic summaries in the same spirit.
* No per-message ``info`` lines. A rendered JSON line costs 7.5 to 13 µs (measured
  on two machines), more than routing the message it describes; per-message detail
  belongs at ``debug``, on a bound logger.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Literal, TextIO, get_args

import structlog
from structlog.typing import FilteringBoundLogger, Processor

__all__ = [
    "LOG_FORMATS",
    "LOG_LEVELS",
    "LogFormat",
    "LogLevel",
    "RateLimitedWarnings",
    "configure_logging",
    "current_level",
    "get_logger",
    "set_level",
]

LogFormat = Literal["auto", "console", "json"]
LogLevel = Literal["debug", "info", "warning", "error"]

LOG_FORMATS: tuple[str, ...] = get_args(LogFormat)
"""Accepted values of ``format``."""

LOG_LEVELS: Mapping[str, int] = MappingProxyType(
    {name: logging.getLevelNamesMapping()[name.upper()] for name in get_args(LogLevel)}
)
"""Accepted values of ``level`` (any case), lowest first."""

_installed: logging.Handler | None = None
"""The stdlib handler of the last configure_logging call, replaced by the next one."""


class _Level:
    """The level in force, read by every logger on every call: :func:`set_level` changes
    it for loggers already bound, which a level baked into each logger's class (as
    structlog's own filtering loggers do) could not."""

    value = logging.INFO


class _LevelGatedLogger(structlog.BoundLoggerBase):
    """A bound logger that checks :class:`_Level` before doing any work: a filtered call
    costs a class attribute read and a comparison (about 0.3 us here, against 0.13 us for
    structlog's fixed-level loggers: the price of a level that can change)."""

    def debug(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        if _Level.value > _DEBUG:
            return None
        return self._proxy_to_logger("debug", _format(event, args), **kw)

    def info(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        if _Level.value > _INFO:
            return None
        return self._proxy_to_logger("info", _format(event, args), **kw)

    def warning(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        if _Level.value > _WARNING:
            return None
        return self._proxy_to_logger("warning", _format(event, args), **kw)

    warn = warning

    def error(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        if _Level.value > _ERROR:
            return None
        return self._proxy_to_logger("error", _format(event, args), **kw)

    def exception(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        if _Level.value > _ERROR:
            return None
        kw.setdefault("exc_info", True)
        return self._proxy_to_logger("error", _format(event, args), **kw)

    def critical(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        return self._proxy_to_logger("critical", _format(event, args), **kw)

    fatal = critical

    def msg(self, event: str | None = None, *args: Any, **kw: Any) -> Any:
        return self._proxy_to_logger("msg", _format(event, args), **kw)

    def log(self, level: int, event: str | None = None, *args: Any, **kw: Any) -> Any:
        if level < _Level.value:
            return None
        name = logging.getLevelName(level).lower()
        return self._proxy_to_logger(name, _format(event, args), **kw)


_DEBUG, _INFO, _WARNING, _ERROR = logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR


def _format(event: str | None, args: tuple[Any, ...]) -> str | None:
    return event % args if args and event is not None else event


def set_level(level: str) -> None:
    """Change the level in force now, for every logger, bound or not (the admin
    interface's ``POST /log-level``).

    Raises:
        ValueError: for an unknown level.
    """
    level_no = LOG_LEVELS.get(level.lower())
    if level_no is None:
        raise ValueError(f"log level {level!r}: expected one of {', '.join(LOG_LEVELS)}")
    _Level.value = level_no
    if _installed is not None:
        _installed.setLevel(level_no)
        logging.getLogger().setLevel(level_no)


def current_level() -> str:
    """The name of the level in force."""
    return logging.getLevelName(_Level.value).lower()


class _StdlibBridge(logging.Handler):
    """Hands formatted stdlib records to structlog's writer, sharing its lock."""

    def __init__(self, writer: structlog.WriteLogger, level: int) -> None:
        super().__init__(level)
        self._writer = writer

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._writer.msg(self.format(record))
        except Exception:
            self.handleError(record)


def configure_logging(
    format: str = "auto", level: str = "info", *, stream: TextIO | None = None
) -> None:
    """Set up structlog and the stdlib bridge for the whole process.

    Calling it again replaces the previous setup (loggers already cached keep theirs).

    Args:
        format: ``"auto"``, ``"console"`` or ``"json"``; see the module docstring.
        level: ``"debug"``, ``"info"``, ``"warning"`` or ``"error"``, in any case.
        stream: where lines go; standard error by default.

    Raises:
        ValueError: for an unknown format or level.
    """
    if format not in LOG_FORMATS:
        raise ValueError(f"log format {format!r}: expected one of {', '.join(LOG_FORMATS)}")
    level_no = LOG_LEVELS.get(level.lower())
    if level_no is None:
        raise ValueError(f"log level {level!r}: expected one of {', '.join(LOG_LEVELS)}")
    _Level.value = level_no
    out = sys.stderr if stream is None else stream
    tty = _isatty(out)

    renderer: Sequence[Processor]
    if format == "console" or (format == "auto" and tty):
        renderer = [structlog.dev.ConsoleRenderer(colors=tty)]
    else:
        renderer = [structlog.processors.dict_tracebacks, structlog.processors.JSONRenderer()]
    timestamper = structlog.processors.TimeStamper(fmt="iso", utc=True)

    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            timestamper,
            structlog.processors.StackInfoRenderer(),
            *renderer,
        ],
        wrapper_class=_LevelGatedLogger,
        logger_factory=structlog.WriteLoggerFactory(out),
        cache_logger_on_first_use=True,
    )

    bridge = _StdlibBridge(structlog.WriteLogger(out), level_no)
    bridge.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                structlog.contextvars.merge_contextvars,
                structlog.processors.add_log_level,
                structlog.stdlib.add_logger_name,
                timestamper,
            ],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *renderer],
        )
    )
    global _installed
    root = logging.getLogger()
    if _installed is not None:
        root.removeHandler(_installed)
    root.addHandler(bridge)
    root.setLevel(level_no)
    _installed = bridge


def get_logger(name: str) -> FilteringBoundLogger:
    """A logger for one part of the daemon, carrying ``component=name`` on every line.

    The result is lazy: it may be created at import time, before
    :func:`configure_logging`. Hot loops should call ``.bind()`` on it once (adding
    their own context) and log through that.
    """
    logger: FilteringBoundLogger = structlog.get_logger(component=name)
    return logger


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no such method, or the stream is closed
        return False


class RateLimitedWarnings:
    """Warnings an operator must see, at most one line per key per ``interval`` seconds.

    Refused peers and hosts that cannot be dialled come in floods (a misconfigured load
    client, a seed that is down): the first of a kind is logged at once, the rest of the
    interval only counted, and the next line for that key says how many were held back
    (``suppressed=N``). The table of keys is bounded: past ``max_keys`` the oldest key is
    forgotten, which at worst lets one extra line through.
    """

    def __init__(
        self,
        log: FilteringBoundLogger,
        *,
        interval: float = 10.0,
        max_keys: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log = log
        self.interval = interval
        self.max_keys = max_keys
        self.clock = clock
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def warn(self, key: str, event: str, **fields: object) -> bool:
        """Log ``event`` unless ``key`` was logged within the interval; True if logged."""
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            self._held[key] = self._held.get(key, 0) + 1
            return False
        held = self._held.pop(key, 0)
        self._last.pop(key, None)
        self._last[key] = now
        if len(self._last) > self.max_keys:
            oldest = next(iter(self._last))
            del self._last[oldest]
            self._held.pop(oldest, None)
        if held:
            fields["suppressed"] = held
        self.log.warning(event, **fields)
        return True
