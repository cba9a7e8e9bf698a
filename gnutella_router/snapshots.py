"""Statistics snapshots read from the object they describe: :func:`from_attributes`.

Most fields of a statistics dataclass are counters that the object it describes keeps
under the same name, publicly or as a private attribute behind the field. Spelling each
one out as ``name=self._name`` writes every counter's name twice more in each snapshot,
and a counter added to the dataclass must then be added to the call as well. Reading
the fields by name instead states the correspondence once, in the names themselves,
and leaves each snapshot to say only what is worked out (sizes, ages, nested
snapshots).

Nothing here is on a per-message path: snapshots are taken for dumps, metrics and the
profiler.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["from_attributes"]

Snapshot = TypeVar("Snapshot", bound="DataclassInstance")


def from_attributes(cls: type[Snapshot], source: object, /, **given: Any) -> Snapshot:
    """A ``cls`` (a dataclass) whose fields in ``given`` are as given and whose other
    fields are ``source``'s attribute of the same name or, where it has none, its
    private one (``_`` and the name).

    A field that ``source`` has under neither name raises :class:`AttributeError`, as a
    misspelt keyword would: nothing falls back to a default unseen.
    """
    values = dict(given)
    for field in dataclasses.fields(cls):
        if field.name not in values:
            values[field.name] = _read(source, field.name)
    return cls(**values)


_MISSING = object()


def _read(source: object, name: str) -> Any:
    value = getattr(source, name, _MISSING)
    return getattr(source, "_" + name) if value is _MISSING else value
