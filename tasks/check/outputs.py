"""Flattening what a call returned into leaves named by their path, copied before a later call
overwrites them: tensors, containers, dataclasses, pytree nodes, and other objects through their
attributes (see ``tasks.check``, step 1). An object with no known structure is ``Uncheckable``."""

from __future__ import annotations

import collections
import dataclasses
import enum
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree

MAX_DEPTH = 32  # nesting followed into an output before it counts as having no known structure
PLAIN = (str, bytes, int, bool, complex, type(None), torch.dtype, torch.device, torch.Size, enum.Enum, range, type)
IDENTITY = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, torch.nn.Module)  # leaves, by ==


class Uncheckable(Exception):
    """An output the check cannot compare; the message says where and why."""


@dataclass(frozen=True)
class Observed:
    """One call's result, flattened into leaves by path and copied, or why it cannot be."""

    leaves: dict[str, Any] = field(default_factory=dict)
    note: str | None = None  # set when the result has no structure the check can follow

    @property
    def compared(self) -> list[str]:
        """The top-level names compared: outputs, loss, gradients, parameters, inputs."""
        roots = (path.split("[")[0].split(".")[0] for path in self.leaves)
        return list(dict.fromkeys(roots))


def observe(parts: Mapping[str, Any]) -> Observed:
    """Flatten ``{"outputs": ..., "loss": ...}`` and copy its tensors now, before a later call
    (a CUDA graph replay, an optimizer step) overwrites them."""
    try:
        found = {path: leaf for name, part in parts.items() for path, leaf in _leaves(part, name, 0, set())}
    except Uncheckable as e:
        return Observed(note=str(e))
    return Observed({path: _detached(leaf) for path, leaf in found.items()})


def leaves(obj: Any) -> dict[str, Any]:
    """The leaves of any output structure by path (the tensors themselves, not copies)."""
    return dict(_leaves(obj, "", 0, set()))


def _detached(leaf: Any) -> Any:
    return leaf.detach().clone() if isinstance(leaf, torch.Tensor) else leaf


def _leaves(obj: Any, path: str, depth: int, seen: set[int]) -> Iterator[tuple[str, Any]]:
    """(path, leaf) pairs of any output structure; ``Uncheckable`` for what has none."""
    if isinstance(obj, (torch.Tensor, float, _Equal, *PLAIN, *IDENTITY)):
        yield path, obj
        return
    if type(obj).__module__ == "numpy":
        yield path, torch.as_tensor(obj) if hasattr(obj, "shape") and obj.shape else obj.item()
        return
    if depth > MAX_DEPTH:
        raise Uncheckable(f"{path}: nested more than {MAX_DEPTH} levels deep")
    if id(obj) in seen:
        yield path, "<refers back to an enclosing object>"
        return
    seen = seen | {id(obj)}
    for sub, child in _children(obj, path):
        yield from _leaves(child, sub, depth + 1, seen)


def _children(obj: Any, path: str) -> list[tuple[str, Any]]:
    """The named parts of one container or object."""
    if isinstance(obj, Mapping):  # dict, OrderedDict, Hugging Face ModelOutput
        return [(f"{path}[{k!r}]", v) for k, v in obj.items()]
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
        return [(f"{path}.{name}", getattr(obj, name)) for name in obj._fields]
    if isinstance(obj, list | tuple | collections.deque):
        return [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
    if isinstance(obj, set | frozenset):
        if any(isinstance(v, torch.Tensor) for v in obj):
            raise Uncheckable(f"{path}: a set of tensors has no order to compare them in")
        return [(path, _Equal(frozenset(obj)))]
    if dataclasses.is_dataclass(obj):
        return [(f"{path}.{f.name}", getattr(obj, f.name)) for f in dataclasses.fields(obj)]
    if type(obj) in pytree.SUPPORTED_NODES:
        children, _ = pytree.SUPPORTED_NODES[type(obj)].flatten_fn(obj)
        return [(f"{path}[{i}]", v) for i, v in enumerate(children)]
    attributes = _attributes(obj)
    if attributes:  # e.g. a DynamicCache: its layers, their key and value tensors
        return [(f"{path}.{name}", v) for name, v in attributes.items()]
    if type(obj).__eq__ is not object.__eq__:
        return [(path, _Equal(obj))]
    raise Uncheckable(
        f"{path or 'output'}: an object of type {type(obj).__qualname__} has no known structure "
        "(no tensors, no attributes, no __eq__ to compare it by)"
    )


def _attributes(obj: Any) -> dict[str, Any]:
    if hasattr(obj, "__dict__"):
        return dict(vars(obj))
    slots = [s for cls in type(obj).__mro__ for s in getattr(cls, "__slots__", ())]
    return {s: getattr(obj, s) for s in slots if isinstance(s, str) and hasattr(obj, s)}


class _Equal:
    """A leaf compared by its own ``__eq__``."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Equal) and bool(self.value == other.value)

    def __hash__(self) -> int:
        return id(self.value)
