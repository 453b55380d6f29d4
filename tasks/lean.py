"""The base of the models that cross between driver and worker and fill reports: ``Lean``.

Imports nothing of the project: ``tasks.experiment``, ``tasks.result`` and the report's models build on it.
"""

from __future__ import annotations

from typing import Any

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
