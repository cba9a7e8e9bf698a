"""Reading settings: defaults, then a TOML file, then dotted overrides.

Command-line flags arrive as overrides (:mod:`gnutella_router.cli.config_flags`).

The file and the overrides are gathered into plain tables, checked for unknown names
(with a suggestion: ``did you mean network.max_ttl?``), lightly normalised (paths to
strings, choices to lower case) and converted in one step, so every value is judged
against the final state of the others.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal, get_origin

import msgspec
import tomli_w

from gnutella_router.config.rules import ConfigError, bad, converted, field_types
from gnutella_router.config.sections import SECTIONS, CatcherConfig, Config

TYPES = {name: field_types(cls) for name, cls in SECTIONS.items()}
_DEFAULT_MIN_CONNECTIONS = CatcherConfig().min_connections
"""Each setting's declared type, by table and name."""


def load_config(path: Path | None = None, overrides: Mapping[str, object] | None = None) -> Config:
    """Build the configuration from the defaults, a TOML file and overrides.

    Args:
        path: a TOML file; ``None`` for the built-in defaults alone.
        overrides: dotted keys and values (``{"network.max_ttl": 5,
            "catcher.seeds": ["10.0.0.1:6346"]}``), applied after the file and
            checked like it. A list value replaces the file's list.

    Raises:
        ConfigError: the file cannot be read or parsed, a section or key is unknown, or
            a value has the wrong type or is out of range.
    """
    tables: dict[str, dict[str, object]] = {name: {} for name in SECTIONS}
    if path is not None:
        for section, values in _read_toml(path).items():
            _known_section(section)
            if not isinstance(values, dict):
                raise ConfigError(section, f"{section} must be a table, as in [{section}]")
            for name, value in values.items():
                tables[section][_known_key(section, name)] = value
    for dotted, value in (overrides or {}).items():
        section, _, name = dotted.partition(".")
        _known_section(section)
        if not name:
            raise ConfigError(dotted, f"override {dotted!r} names no setting; use SECTION.KEY")
        tables[section][_known_key(section, name)] = value
    for section, values in tables.items():
        for name, value in values.items():
            values[name] = _normalised(f"{section}.{name}", value, TYPES[section][name])
    most = tables["network"].get("max_connections")
    if "min_connections" not in tables["catcher"] and type(most) is int:
        # A node allowed fewer peers than the default wants dials as many as it may.
        tables["catcher"]["min_connections"] = min(_DEFAULT_MIN_CONNECTIONS, max(most, 0))
    return converted(Config, tables)


def _normalised(key: str, value: object, kind: object) -> object:
    """Paths as strings, choices in lower case; text TOML could not hold is refused."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str) and get_origin(kind) is Literal:
        value = value.lower()
    for text in value if isinstance(value, list | tuple) else [value]:
        if isinstance(text, str) and not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise bad(key, value, "expected text in valid Unicode") from None
    return value


def _read_toml(path: Path) -> dict[str, object]:
    try:
        with Path(path).open("rb") as stream:
            return tomllib.load(stream)
    except OSError as exc:
        raise ConfigError(None, f"cannot read config file {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(None, f"config file {path} is not valid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(None, f"config file {path} is not UTF-8: {exc}") from exc


def _known_section(section: str) -> None:
    if section in SECTIONS:
        return
    owners = [name for name, fields in TYPES.items() if section in fields]
    hint = (
        f" ({section} is a setting of [{owners[0]}]: {owners[0]}.{section})"
        if owners
        else _suggest(section, SECTIONS)
    )
    raise ConfigError(
        section, f"unknown section {section!r}{hint}; sections are {', '.join(SECTIONS)}"
    )


def _known_key(section: str, name: str) -> str:
    names = list(TYPES[section])
    if name in names:
        return name
    key = f"{section}.{name}"
    raise ConfigError(
        key,
        f"unknown setting {key}{_suggest(name, names, prefix=section + '.')}; "
        f"[{section}] has {', '.join(names)}",
    )


def _suggest(word: str, choices: Iterable[str], prefix: str = "") -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


def config_as_dict(config: Config) -> dict[str, dict[str, object]]:
    """Every setting as plain TOML-shaped data: ``{"network": {"max_ttl": 7, ...}, ...}``.

    Lists are lists, so the result dumps as JSON or TOML, and flattening it into dotted
    keys gives overrides that rebuild the same configuration with :func:`load_config`.
    """
    tables: dict[str, dict[str, object]] = msgspec.to_builtins(config)
    for values in tables.values():
        values.update({k: list(v) for k, v in values.items() if isinstance(v, tuple)})
    return tables


def config_as_toml(config: Config) -> str:
    """The configuration as a TOML document that :func:`load_config` reads back."""
    return "\n".join(
        tomli_w.dumps({name: values}) for name, values in config_as_dict(config).items()
    )
