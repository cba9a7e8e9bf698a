"""Message mixes: which kinds of message a synthetic source sends, and in what shares.

Theory of operation
-------------------
A mix is a weight per routed message type. It says nothing about *when* messages go
out (that is :mod:`traffic_models.arrivals`) nor what they contain
(:mod:`traffic_models.content`); keeping the three apart lets any rate be combined with
any mix, which is how the paper's experiments vary the offered load while the traffic
stays the same.

Two mixes come from the SEDA papers:

* ``paper``: the load model of the SOSP'01 paper (section 5.2.3): 15 % of the generated
  packets are queries, the rest pings. The generator injects only requests; the
  replies a router carries in that experiment are produced by the peers that answer
  (see :mod:`traffic_models.responder`), so injecting replies as well would count them
  twice.
* ``trace``: the shares seen on the live network. The quals proposal's 37-hour trace
  (section 5.2.1, Fig. 13) has pongs as more than half of all packets, then pings,
  queries, query hits and a trickle of pushes. Injected replies carry GUIDs no router
  has seen, so a router drops most of them as unroutable, which is what happens to a
  large part of real reply traffic too.

Weights need not sum to one: they are normalised when used, so a spec file can say
``pong = 52`` or ``pong = 0.52`` alike. A zero weight keeps a type in the spec but never
draws it. Drawing is one ``random()`` and a bisection over a precomputed cumulative
table, as cheap as a draw can be, because the load client draws one type per message at
tens of thousands of messages per second.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import math
import random
import tomllib
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from protocol.constants import MessageType

__all__ = [
    "MIXES",
    "PAPER_MIX",
    "ROUTED_TYPES",
    "TRACE_LIKE_MIX",
    "MessageMix",
    "load_mix",
    "mix_by_name_or_path",
    "type_code",
    "type_label",
]

ROUTED_TYPES: Mapping[str, int] = MappingProxyType(
    {
        "ping": int(MessageType.PING),
        "pong": int(MessageType.PONG),
        "query": int(MessageType.QUERY),
        "query_hit": int(MessageType.QUERY_HIT),
        "push": int(MessageType.PUSH),
    }
)
"""The five message types a router routes, by the names spec files use.

Only these can be synthesised: the others are hop-by-hop (QRP, vendor messages, Bye) and
mean nothing when injected by a load source.
"""

_LABELS: Mapping[int, str] = MappingProxyType({code: name for name, code in ROUTED_TYPES.items()})

_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "queryhit": "query_hit",
        "queryhits": "query_hit",
        "query_hits": "query_hit",
        "hit": "query_hit",
    }
)


def type_label(message_type: int) -> str:
    """The spec-file name of a routed type (``query_hit``), or its hex code otherwise."""
    return _LABELS.get(message_type, f"0x{message_type:02x}")


def type_code(name: str | int) -> int:
    """The type code for a spec-file key: a name (``ping``, ``query-hit``, ``QueryHit``)
    or a number (``128``, ``0x80``). JSON and TOML keys are always strings, so numbers
    arrive as text too.

    Raises:
        ValueError: not one of the five routed types.
    """
    if isinstance(name, int) and not isinstance(name, bool):
        code = int(name)
    else:
        text = str(name).strip().lower().replace("-", "_").replace(" ", "_")
        text = _ALIASES.get(text, text)
        if text in ROUTED_TYPES:
            return int(ROUTED_TYPES[text])
        try:
            code = int(text, 0)
        except ValueError:
            raise ValueError(
                f"unknown message type {name!r}; use one of {', '.join(ROUTED_TYPES)} "
                "or their type codes"
            ) from None
    if code not in _LABELS:
        raise ValueError(
            f"message type {name!r} (0x{code & 0xFF:02x}) cannot be synthesised; "
            f"only {', '.join(ROUTED_TYPES)} can"
        )
    return code


def _check_weight(label: str, weight: object) -> float:
    if isinstance(weight, bool) or not isinstance(weight, int | float):
        raise ValueError(f"weight of {label} must be a number, got {weight!r}")
    value = float(weight)
    if not math.isfinite(value):
        raise ValueError(f"weight of {label} must be finite, got {weight!r}")
    if value < 0:
        raise ValueError(f"weight of {label} must not be negative, got {weight!r}")
    return value


@dataclasses.dataclass(frozen=True, slots=True)
class MessageMix:
    """A named set of weights, one per routed message type code.

    The weights are copied into a read-only mapping on construction, so a mix can be
    shared between generators and used as a module constant without anyone changing it
    underneath. Keys are type codes; spec-file names (``"ping"``, ``"0x80"``) are also
    accepted and turned into codes, which is how :func:`load_mix` builds its mixes.
    """

    name: str
    weights: Mapping[int, float]
    _types: tuple[int, ...] = dataclasses.field(init=False, repr=False, compare=False)
    _cumulative: tuple[float, ...] = dataclasses.field(init=False, repr=False, compare=False)
    _fallback: int = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.weights:
            raise ValueError(f"mix {self.name!r} has no message types")
        checked: dict[int, float] = {}
        for key, weight in self.weights.items():
            code = type_code(key)
            if code in checked:
                raise ValueError(f"mix {self.name!r} names {type_label(code)} twice")
            checked[code] = _check_weight(type_label(code), weight)
        total = math.fsum(checked.values())
        if total <= 0:
            raise ValueError(f"mix {self.name!r}: every weight is zero; nothing could be drawn")
        running = 0.0
        cumulative = []
        for weight in checked.values():
            running += weight
            cumulative.append(running)
        object.__setattr__(self, "weights", MappingProxyType(checked))
        object.__setattr__(self, "_types", tuple(checked))
        object.__setattr__(self, "_cumulative", tuple(cumulative))
        object.__setattr__(self, "_fallback", [c for c, w in checked.items() if w > 0][-1])

    def __hash__(self) -> int:
        return hash((self.name, tuple(sorted(self.weights.items()))))

    @property
    def total(self) -> float:
        """The sum of the raw weights (what shares are relative to)."""
        return self._cumulative[-1]

    @property
    def types(self) -> tuple[int, ...]:
        """The type codes in the order they were given (zero weights included)."""
        return self._types

    def share(self, message_type: int) -> float:
        """The normalised share of ``message_type``: 0.0 for a type the mix lacks."""
        return self.weights.get(message_type, 0.0) / self.total

    def shares(self) -> dict[int, float]:
        """Every type's normalised share; they sum to one."""
        return {code: self.share(code) for code in self._types}

    def choose(self, rng: random.Random) -> int:
        """Draw one type code with probability equal to its share.

        The uniform draw lies in ``[0, total)``; ``bisect_right`` gives the first slot
        whose cumulative weight exceeds it, and a zero-width slot can never be that
        first slot, so a zero weight is never drawn.
        """
        cumulative = self._cumulative
        index = bisect.bisect_right(cumulative, rng.random() * cumulative[-1])
        if index < len(cumulative):
            return self._types[index]
        # random() < 1, but rounding of random() * total can land on total itself.
        return self._fallback

    def describe(self) -> str:
        """One line for logs and reports: ``pong 52%, ping 25%, ...``."""
        return ", ".join(f"{type_label(code)} {self.share(code):.0%}" for code in self._types)


PAPER_MIX = MessageMix("paper", {MessageType.QUERY: 0.15, MessageType.PING: 0.85})
"""SOSP'01 section 5.2.3: "query messages constitute 15% of the generated packets"."""

TRACE_LIKE_MIX = MessageMix(
    "trace",
    {
        MessageType.PONG: 0.55,
        MessageType.PING: 0.25,
        MessageType.QUERY: 0.12,
        MessageType.QUERY_HIT: 0.065,
        MessageType.PUSH: 0.015,
    },
)
"""Quals proposal, Fig. 13: pongs are more than half of all packets on the live network.
The other shares are assumptions, chosen so that the generator's payloads average the
papers' 32 bytes (see :mod:`traffic_models.trace_model`)."""

MIXES: Mapping[str, MessageMix] = MappingProxyType({m.name: m for m in (PAPER_MIX, TRACE_LIKE_MIX)})
"""The built-in mixes by name, for the command line."""

_SPEC_KEYS = frozenset({"name", "weights", "description"})


def _read_spec(path: Path) -> Any:
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            return json.loads(path.read_text(encoding="utf-8"))
        if suffix == ".toml":
            return tomllib.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid {suffix[1:].upper()}: {exc}") from exc
    raise ValueError(f"{path}: a mix spec must be a .toml or .json file")


def load_mix(path: Path) -> MessageMix:
    """Read a mix from a TOML or JSON file shaped like::

        name = "uploads"                  # optional: defaults to the file's stem
        description = "free text"         # optional, ignored
        [weights]
        ping = 0.5
        query = 0.4
        query_hit = 0.1                   # names, or type codes such as "0x81"

    Raises:
        ValueError: the file cannot be read or parsed, or the spec is wrong (unknown
            keys or message types, weights that are negative, not numbers, or all zero);
            the message names the file and the problem.
    """
    path = Path(path)
    try:
        spec = _read_spec(path)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the mix spec: {exc.strerror or exc}") from exc
    if not isinstance(spec, dict):
        raise ValueError(f"{path}: a mix spec must be a table/object, got {type(spec).__name__}")
    unknown = sorted(set(spec) - _SPEC_KEYS)
    if unknown:
        raise ValueError(
            f"{path}: unknown key(s) {', '.join(map(repr, unknown))}; "
            f"expected {', '.join(sorted(_SPEC_KEYS))}"
        )
    name = spec.get("name", path.stem)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{path}: 'name' must be a non-empty string")
    weights = spec.get("weights")
    if not isinstance(weights, dict):
        raise ValueError(f"{path}: 'weights' must be a table of message type -> weight")
    try:
        return MessageMix(name, weights)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc


def mix_by_name_or_path(text: str) -> MessageMix:
    """A built-in mix by name (``paper``, ``trace``), else a spec file at that path.

    Raises:
        ValueError: neither a known name nor a readable, valid spec file.
    """
    key = text.strip()
    if key.lower() in MIXES:
        return MIXES[key.lower()]
    path = Path(key)
    if path.suffix.lower() in (".toml", ".json") or path.exists():
        return load_mix(path)
    raise ValueError(
        f"unknown mix {text!r}: use one of {', '.join(MIXES)} or a .toml/.json spec file"
    )
