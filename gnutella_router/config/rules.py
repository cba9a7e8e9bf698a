"""How a setting is declared, checked and refused.

A setting's type and range are declared once, on its field, as an ``Annotated`` type
that msgspec enforces (``Annotated[int, Meta(ge=1, le=15)]``). msgspec reports a
failure as a terse path (``Expected `int` <= 15 - at `$.network.max_ttl```); this
module turns it into the operator's sentence by reading the same declaration back
(``network.max_ttl = 99: expected an integer from 1 to 15``), so a rule and its message
can never disagree. Where a pattern or a range cannot say it in words, the field's
``Meta(extra={"expected": ...})`` does; ``extra={"secret": True}`` keeps a value out of
messages. Rules that need code (an address, rules tying fields together) raise
:class:`ConfigError` themselves from a section's ``_check``.
"""

from __future__ import annotations

import contextvars
import re
import reprlib
from collections.abc import Mapping
from typing import Annotated, ClassVar, Literal, TypeVar, get_args, get_origin, get_type_hints

import msgspec
from msgspec import Meta

from gnutella_router.addresses import AddressError
from gnutella_router.addresses import parse_host_port as _parse_address

T = TypeVar("T")

Seconds = Annotated[float, Meta(gt=0, le=86_400)]
"""A duration in seconds: above 0 and at most a day."""
Fraction = Annotated[float, Meta(gt=0, le=1)]
"""A share of something: above 0 and at most 1."""


class ConfigError(Exception):
    """A setting is missing its mark: unknown, of the wrong type, or out of range.

    ``str(error)`` is a complete sentence for the operator, naming the key, the bad
    value and what is allowed. :attr:`key` is the dotted key (``"network.max_ttl"``),
    the section alone for a misplaced table, or ``None`` when the file itself cannot
    be read. (Not a ``ValueError``, so that msgspec hands it on untouched when a
    section's own check raises it during a conversion.)
    """

    def __init__(self, key: str | None, message: str) -> None:
        super().__init__(message)
        self.key = key


_show = reprlib.Repr()
_show.maxstring = 80
_show.maxother = 80
_show.maxlist = 8


def bad(key: str, value: object, allowed: str) -> ConfigError:
    """The error for ``key = value``, followed by what is ``allowed``."""
    return ConfigError(key, f"{key} = {_show.repr(value)}: {allowed}")


def parse_host_port(text: object, *, key: str, allow_port_zero: bool = True) -> tuple[str, int]:
    """:func:`gnutella_router.addresses.parse_host_port`, blaming the setting ``key``.

    Raises:
        ConfigError: naming ``key`` and the text, for a missing or bad host or port.
    """
    try:
        return _parse_address(text, allow_port_zero=allow_port_zero)
    except AddressError as exc:
        raise bad(key, text, str(exc)) from None


def declared(annotation: object) -> tuple[object, Meta]:
    """A field's declared type and its constraints (an empty ``Meta`` for none)."""
    if get_origin(annotation) is Annotated:
        base, meta, *_ = get_args(annotation)
        return base, meta
    return annotation, Meta()


def expected(annotation: object) -> str:
    """What a field declared as ``annotation`` accepts, in words."""
    base, meta = declared(annotation)
    if meta.extra and "expected" in meta.extra:
        return str(meta.extra["expected"])
    if base is bool:
        return "expected true or false"
    if base is int:
        return f"expected an integer from {meta.ge} to {meta.le}"
    if base is float and meta.gt is None:
        return f"expected a number from {meta.ge:g} to {meta.le:g}"
    if base is float:
        return f"expected a number above {meta.gt:g} and at most {meta.le:g}"
    if get_origin(base) is Literal:
        return "expected one of " + ", ".join(repr(v) for v in get_args(base))
    raise TypeError(f"no words for a field declared as {annotation}")  # a declaration to extend


def field_types(cls: type) -> dict[str, object]:
    """The declared type of each field of the struct ``cls``, by name."""
    return {
        name: hint
        for name, hint in get_type_hints(cls, include_extras=True).items()
        if get_origin(hint) is not ClassVar
    }


_trusted = contextvars.ContextVar("trusted", default=False)


def is_trusted() -> bool:
    """Whether the struct being made comes out of :func:`converted` (so is being checked)."""
    return _trusted.get()


_AT = re.compile(r" - at `\$((?:\.\w+)*)(?:\[\d+\])*`$")


def converted(cls: type[T], data: Mapping[str, object], *, section: str = "") -> T:
    """``data`` as a ``cls``, every declaration and check applied, or :class:`ConfigError`.

    ``section`` prefixes the keys in messages when ``cls`` is one section alone.
    """
    token = _trusted.set(True)
    try:
        return msgspec.convert(data, cls, strict=True)
    except msgspec.ValidationError as exc:
        match = _AT.search(str(exc))
        names = [n for n in match.group(1).split(".") if n] if match else []
        if not names:  # unknown fields are caught before conversion; a backstop
            raise ConfigError(section or None, f"{section or 'config'}: {exc}") from None
        value: object = data
        kind: object = cls
        for name in names:
            value = value.get(name) if isinstance(value, Mapping) else None
            kind = field_types(kind)[name]  # type: ignore[arg-type]
        key = ".".join([section, *names] if section else names)
        if (declared(kind)[1].extra or {}).get("secret"):
            raise ConfigError(key, f"{key}: {expected(kind)}") from None
        raise bad(key, value, expected(kind)) from None
    finally:
        _trusted.reset(token)
