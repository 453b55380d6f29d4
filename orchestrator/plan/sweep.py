"""Sweep expansion: an experiment entry with ``sweep`` becomes the cartesian product."""

from __future__ import annotations

import copy
import itertools
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from tasks.experiment import Experiment


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` wins; nested mappings merge key by key (``defaults`` ⊕ an experiment)."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds: its annotation's, or the one of an optional one (``DistributedConfig | None``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    models = [a for a in typing.get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
    others = [a for a in typing.get_args(annotation) if a is not type(None) and a not in models]
    return models[0] if len(models) == 1 and not others else None


def check_path(path: str, model: type[BaseModel] = Experiment) -> str | None:
    """Why ``path`` (``compile.mode``) names no field of ``model``, or None when it does.

    Below a free-form mapping field (``params``, ``compile.options``) any key is accepted.
    """
    current: type[BaseModel] | None = model
    for depth, part in enumerate(path.split(".")):
        if current is None:  # inside a dict field
            return None if part else f"'{path}' has an empty component"
        if part not in current.model_fields:
            prefix = ".".join(path.split(".")[:depth]) or "an experiment"
            return f"no field '{part}' (fields of {prefix}: {', '.join(current.model_fields)})"
        annotation = current.model_fields[part].annotation
        if (nested := _model_of(annotation)) is not None:
            current = nested
        elif depth < len(path.split(".")) - 1 and getattr(annotation, "__origin__", None) is not dict:
            return f"'{path}' goes below '{part}', which has no fields"
        else:
            current = None
    return None


def split_path(path: str, model: type[BaseModel] = Experiment) -> list[str]:
    """The keys ``path`` names, outermost first. Below a free-form mapping field the rest of the
    path is one key: ``compile.options.triton.cudagraphs`` sets inductor's option
    ``triton.cudagraphs`` (a flat dotted name), not ``{'triton': {'cudagraphs': ...}}``."""
    parts = path.split(".")
    current: type[BaseModel] | None = model
    for depth, part in enumerate(parts):
        field = current.model_fields.get(part) if current is not None else None
        if field is None:
            return parts  # check_path reports a path that names no field
        annotation = field.annotation
        if (nested := _model_of(annotation)) is not None:
            current = nested
        elif getattr(annotation, "__origin__", None) is dict and depth + 1 < len(parts):
            return [*parts[: depth + 1], ".".join(parts[depth + 1 :])]
        else:
            current = None
    return parts


def _set(data: dict[str, Any], keys: list[str], value: Any, copied: set[int]) -> None:
    """``value`` (a copy) at ``keys`` of ``data``, each mapping on the way a copy of its own: ``data`` shares the
    rest with the entry it was copied from. ``copied``: the ids of the mappings this point already copied (two
    paths under ``compile`` copy it once)."""
    *parents, leaf = keys
    for part in parents:
        child = data.get(part)
        if not (isinstance(child, dict) and id(child) in copied):
            child = data[part] = dict(child) if isinstance(child, dict) else {}
            copied.add(id(child))
        data = child
    data[leaf] = value if type(value) in _SCALARS else _copy(value)


def expand(entry: Mapping[str, Any], sweep: Mapping[str, list[Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Each combination of the sweep's values, in spec order: ``(point, experiment_dict)``. Each point's mapping is
    the entry's, copied along the swept paths only: what no path changes is shared with the entry and the other
    points (validation only reads it; copying all of it took a third of loading 100,000 experiments)."""
    paths = list(sweep)
    keys = [split_path(p) for p in paths]  # once per sweep, not once per point
    for values in itertools.product(*(sweep[p] for p in paths)):
        data = dict(entry)
        copied: set[int] = set()
        for key, value in zip(keys, values, strict=True):
            _set(data, key, value, copied)
        yield dict(zip(paths, values, strict=True)), data


_SCALARS = frozenset({str, int, float, bool, type(None)})  # loaded values that need no copy


def _copy(value: Any) -> Any:
    """A deep copy of loaded YAML/JSON (mappings, lists, scalars): 3x faster than ``copy.deepcopy``."""
    if isinstance(value, dict):  # what YAML and JSON load (an ABC check costs 10x more)
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    if value is None or isinstance(value, str | int | float):
        return value
    return copy.deepcopy(value)  # anything else (a date, a set) as deepcopy would


def _parts() -> tuple[tuple[str, type[BaseModel]], ...]:
    found = ((name, _model_of(field.annotation)) for name, field in Experiment.model_fields.items())
    return tuple((name, model) for name, model in found if model is not None)


_PARTS = _parts()  # each field of an experiment that holds a model (compile, timing, ...): its name and model


def with_parts(
    data: dict[str, Any], entry: Mapping[str, Any], validated: dict[Any, BaseModel | None]
) -> dict[str, Any]:
    """``data`` (a point of ``expand``) with each part that is a mapping (``compile: {...}``) replaced by its model,
    validated once: once per sweep entry for a part no sweep path changes (``entry``'s own mapping, which every
    point shares), once per distinct text for one that a path changes. ``validated``: the entry's parts so far.
    An experiment given a part's model takes it as it is, so each of a sweep's points builds one model, not one
    per part, and shares its parts' instances (``tasks.ids`` dumps each instance once for the ids). A part that
    does not validate alone stays a mapping: the experiment's validation reports it, where it always did."""
    out = data
    for name, model in _PARTS:
        part = data.get(name)
        if type(part) is not dict:
            continue
        key = name if part is entry.get(name) else (name, repr(part))
        if key not in validated:
            try:
                validated[key] = model.model_validate(part)
            except ValidationError:
                validated[key] = None
        if (instance := validated[key]) is not None:
            out = dict(out) if out is data else out
            out[name] = instance
    return out
