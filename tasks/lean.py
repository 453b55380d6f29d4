"""The base of the models that cross between driver and worker and fill reports (``Lean``), and the one default a
frozen model's holders share (``shared_default``).

Imports nothing of the project: ``tasks.experiment``, ``tasks.result`` and the report's models build on it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

_EVERY_FIELD: dict[type, set[str]] = {}  # per model class: the set of all its field names, shared (``Lean``)


class Lean(BaseModel):
    """A model that rejects unknown fields (a misspelt or unknown field is an error), at about half a plain
    model's memory.

    pydantic keeps, per instance, the set of the fields that were given (``__pydantic_fields_set__``): over
    700 bytes for a set of eight names or more, the largest part of what a validated ``Result`` weighs
    (17.4 KB with its parts; 8.9 KB as ``Lean`` models; a report of 100,000 results holds 1.2 million such
    sets). Every instance of a ``Lean`` class shares its class's one set of all its field names instead
    (adding a name to it, as ``__setattr__`` does, leaves it as it is). The set is read only by
    ``exclude_unset`` and ``model_fields_set``, which this project never uses: read them on a ``Lean`` model
    and every field counts as set."""

    model_config = ConfigDict(extra="forbid")

    def model_post_init(self, context: Any, /) -> None:
        cls = type(self)
        every = _EVERY_FIELD.get(cls)
        if every is None:
            every = _EVERY_FIELD[cls] = set(cls.model_fields)
        object.__setattr__(self, "__pydantic_fields_set__", every)


_Frozen = TypeVar("_Frozen", bound=BaseModel)


def shared_default(cls: type[_Frozen]) -> Callable[[], _Frozen]:
    """A field's ``default_factory`` that gives one instance of ``cls``, made once, to every model that leaves
    the field out: for a frozen model only (``tasks.experiment.Closed``), which no holder can change. pydantic
    calls a factory each time it builds a model and each time it dumps one with ``exclude_defaults``
    (``Experiment.id``); a new instance is a validation each call, half a million for a spec of 100,000
    experiments."""
    if not cls.model_config.get("frozen"):
        raise TypeError(f"{cls.__name__} is not frozen: one instance of it cannot be every holder's default")
    instance = cls()
    return lambda: instance
