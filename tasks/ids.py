"""An experiment's identity: the canonical JSON text of a frozen model's fields that differ from their defaults,
and its digest (``Experiment.id``, the ids that key every journal and report).

``canonical_dump`` gives the text ``canonical(model.model_dump(mode="json", exclude_defaults=True,
exclude=...))`` gives, put together field by field: a nested model's text is worked out once per instance (the
spec loader gives every experiment of a sweep point that leaves a part alone the same instance), and a plain
value (text, numbers, lists and mappings of them) is encoded as it is. Anything else, such as a set, a tuple, a
float that is not finite or a subclass of a built-in type, takes pydantic's dump, whose JSON mode changes it.
``tests/test_ids.py`` holds the two equal over every field. Imports nothing of the project.
"""

from __future__ import annotations

import hashlib
import json
import math
import types
import typing
from collections.abc import Callable, Collection
from typing import Any, Final, Literal

from pydantic import BaseModel

# json.dumps(data, sort_keys=True, separators=(",", ":"), default=str), without a new encoder each call; the data
# is a tree (a model's dump), so no check for cycles
canonical: Final[Callable[[Any], str]] = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), default=str, check_circular=False
).encode

NESTED_MEMO_SIZE: Final = 4096  # nested models whose text is kept; a sweep holds a few distinct ones
# (id(model), id(default)) -> (the model and the default, kept alive so the ids stay theirs; its text)
_NESTED: dict[tuple[int, int], tuple[BaseModel, Any, str]] = {}
# (class, left out) -> its fields (``_fields_of``)
_FIELDS: dict[tuple[type, frozenset[str]], tuple[tuple[str, str, Any, frozenset[type] | None], ...]] = {}


def digest(data: Any, length: int) -> str:
    """The first ``length`` hex digits of the SHA-256 of ``data``'s canonical JSON."""
    return text_digest(canonical(data), length)


def text_digest(text: str, length: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def canonical_dump(model: BaseModel, exclude: frozenset[str] = frozenset()) -> str:
    """``canonical(model.model_dump(mode="json", exclude_defaults=True, exclude=exclude))``, the same text."""
    parts: list[str] = []
    values = model.__dict__
    for name, key, default, scalars in _fields_of(type(model), exclude):
        value = values[name]
        if value is default:
            continue
        if isinstance(value, BaseModel):
            text = _model_text(value, default)
            if text is _DEFAULT:
                continue
        elif value == default:  # exclude_defaults: pydantic compares with ==
            continue
        elif scalars is not None and type(value) in _SCALAR_TYPES and type(value) not in scalars:
            text = None  # a value its field does not hold as it is (set without validation): pydantic converts it
        else:
            text = _text(value)
        if text is None:  # not a plain value: pydantic's dump, whole
            return canonical(model.model_dump(mode="json", exclude_defaults=True, exclude=set(exclude)))
        parts.append(key + text)
    return "{" + ",".join(parts) + "}"


_DEFAULT: Final = ""  # a nested model equal to its field's default: left out, as exclude_defaults leaves it


def _model_text(value: BaseModel, default: Any) -> str | None:
    """A nested model's text, or ``_DEFAULT`` where it equals its field's default: worked out once per frozen
    instance and default (a sweep's points share their parts' instances, ``orchestrator.plan.sweep.with_parts``),
    each time for one that can change."""
    if not value.model_config.get("frozen"):
        return _DEFAULT if value == default else canonical_dump(value)
    key = (id(value), id(default))
    kept = _NESTED.get(key)
    if kept is not None and kept[0] is value and kept[1] is default:
        return kept[2]
    if len(_NESTED) >= NESTED_MEMO_SIZE:
        _NESTED.clear()
    text = _DEFAULT if value == default else canonical_dump(value)
    _NESTED[key] = (value, default, text)
    return text


def _fields_of(
    cls: type[BaseModel], exclude: frozenset[str]
) -> tuple[tuple[str, str, Any, frozenset[type] | None], ...]:
    """The class's fields less ``exclude``, in the canonical text's (sorted) order: each name, its key as JSON
    text with the colon, its default (a factory's called once: ``shared_default`` gives one instance) and the
    scalar types it holds as they are (``_scalars_of``)."""
    found = _FIELDS.get((cls, exclude))
    if found is None:
        fields = sorted((n, f) for n, f in cls.model_fields.items() if n not in exclude)
        found = tuple(
            (n, canonical(n) + ":", f.get_default(call_default_factory=True), _scalars_of(f.annotation))
            for n, f in fields
        )
        _FIELDS[(cls, exclude)] = found
    return found


_SCALAR_TYPES: Final = frozenset({str, int, float, bool})


def _scalars_of(annotation: Any) -> frozenset[type] | None:
    """The scalar types (``_SCALAR_TYPES``) a field of this annotation holds as validated: ``float`` holds no int
    (pydantic makes ``5`` ``5.0``), ``int`` no bool; a ``Literal`` its values' types; a union its members'. None
    where any value may stand (``Any``). A value of another scalar type got there without validation
    (``model_copy(update=...)``), and is dumped by pydantic, which converts it."""
    if annotation is Any:
        return None
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return frozenset(type(arg) for arg in typing.get_args(annotation))
    if origin is typing.Union or origin is types.UnionType:
        found: set[type] = set()
        for arg in typing.get_args(annotation):
            inner = _scalars_of(arg)
            if inner is None:
                return None
            found |= inner
        return frozenset(found)
    return frozenset({annotation}) & _SCALAR_TYPES if isinstance(annotation, type) else frozenset()


def _text(value: Any) -> str | None:
    """A field's value other than a model as canonical JSON, as pydantic's JSON mode would dump it; None where
    that mode could change it. A scalar is encoded as ``json`` encodes it (text ASCII-escaped, a float by its
    ``repr``)."""
    kind = type(value)
    if kind is str:
        return _ascii_text(value)
    if kind is int:
        return int.__repr__(value)
    if kind is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    if kind is float:
        return float.__repr__(value) if math.isfinite(value) else None
    return canonical(value) if _plain(value) else None


_ascii_text: Final[Callable[[str], str]] = json.encoder.encode_basestring_ascii  # json's own, ensure_ascii
_SCALARS: Final[Collection[type]] = frozenset({str, int, bool, type(None)})


def _plain(value: Any) -> bool:
    """Text, a whole number, a finite float, None, or a list or string-keyed mapping of these: what pydantic's
    JSON mode leaves as it is (it turns NaN into None, a tuple or a set into a list)."""
    kind = type(value)
    if kind in _SCALARS:
        return True
    if kind is float:
        return math.isfinite(value)
    if kind is dict:
        return all(type(k) is str and _plain(v) for k, v in value.items())
    if kind is list:
        return all(_plain(v) for v in value)
    return False
