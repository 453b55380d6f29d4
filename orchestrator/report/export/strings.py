"""A value as a string of PyTorch's benchmark database's ``Map(String, String)`` columns (``strings``), and what
many records share made once (``memo``).

The v3 records' ``extra_info`` maps hold strings only: a string as it is, anything else as the text
``json.dumps`` writes of it (``true``, ``3``, ``0.25``, ``NaN``, a list or a map as compact JSON). Half a million
records of 100,000 results make millions of these strings, so the common types go through C functions or one
short frame each. Imports nothing of the project.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

import orjson

MEMO_SIZE: Final = 4096  # entries a table keeps; past it, the rest are made each time
_T = TypeVar("_T")


def memo(table: dict[Any, _T], key: Any, make: Callable[[], _T]) -> _T:
    """``table[key]``, made (``make()``) and kept the first time; made each time where the key cannot be kept
    (unhashable, or the table full)."""
    try:
        return table[key]
    except KeyError:
        made = make()
        if len(table) < MEMO_SIZE:
            table[key] = made
        return made
    except TypeError:
        return make()


def strings(values: Mapping[str, Any]) -> dict[str, str]:
    """A ``Map(String, String)`` column: strings as they are, anything else as JSON text (``text``), None left
    out."""
    return {
        key: value if type(value) is str else TEXT.get(type(value), text)(value)
        for key, value in values.items()
        if value is not None
    }


def text(value: Any) -> str:
    """A value that is not None as a string of the map: a bool, an int or a finite float as ``json.dumps``
    writes it (``true``, ``3``, ``float.__repr__``) without its call, the column's most common values by far;
    a subclass of str as it is; a list or a map as compact JSON (``compact_json``)."""
    kind = type(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return int.__repr__(value)
    if kind is float and math.isfinite(value):
        return float.__repr__(value)
    if isinstance(value, str):
        return value
    return compact_json(value)


def float_text(value: float) -> str:
    """A float as ``json.dumps`` writes it: ``float.__repr__`` where finite (``value - value`` is 0 only then),
    else ``NaN``, ``Infinity`` or ``-Infinity`` (``compact_json``)."""
    return float.__repr__(value) if value - value == 0 else compact_json(value)


TEXT: Final[dict[type, Callable[[Any], str]]] = {  # a type's text where it is a C function's: no frame a value
    bool: {True: "true", False: "false"}.__getitem__,
    int: int.__repr__,
    float: float_text,  # one frame, not ``text``'s tests of the type first
}


def compact_json(value: Any) -> str:
    """A value as compact JSON text, a map's keys sorted: orjson's, except where it would write ``null`` for
    what is not None (NaN, an infinity) or cannot encode a value (a key that is not a string): there
    ``json.dumps``'s, which spells the one (``NaN``) and turns the other's keys into strings."""
    try:
        encoded = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        encoded = b"null"
    if b"null" in encoded:  # rare: a None inside the value, or what orjson would have written as one
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return encoded.decode()
