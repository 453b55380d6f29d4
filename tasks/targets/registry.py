"""Target names and how one becomes a workload: the built-in registry, import paths of user
targets (``package.module:factory``), parameter checks and ``build``. torch is imported where it is
used, never when this module is imported: listing the targets (``compilebench tasks``, spec
validation) must not pay for it."""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tasks.targets.workload import InputCycle, Workload

if TYPE_CHECKING:
    import torch

Factory = Callable[..., Any]


@dataclass(frozen=True)
class Target:
    name: str
    factory: Factory
    description: str


REGISTRY: dict[str, Target] = {}


class TargetError(ValueError):
    """A target name that names nothing, or parameters its factory does not take."""


def register(name: str) -> Callable[[Factory], Factory]:
    """Register ``factory`` as the built-in target ``name``; its docstring describes it."""

    def decorate(factory: Factory) -> Factory:
        if name in REGISTRY:
            raise ValueError(f"target {name!r} registered twice")
        doc = inspect.getdoc(factory) or ""
        REGISTRY[name] = Target(name, factory, doc.splitlines()[0] if doc else "")
        return factory

    return decorate


def resolve(target: str) -> Factory:
    """The factory a target names: a built-in name, or ``package.module:factory``."""
    if ":" not in target:
        if target not in REGISTRY:
            known = ", ".join(sorted(REGISTRY))
            raise TargetError(f"unknown target '{target}' (built-in targets: {known})")
        return REGISTRY[target].factory
    module_name, _, attr = target.partition(":")
    cwd = str(Path.cwd())
    if cwd not in sys.path:  # import paths resolve relative to where the command runs
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as e:  # the user's module runs here: a syntax error, a raise, an exit
        problem = str(e).strip().splitlines()[0] if str(e).strip() else "no message"
        kind = "" if isinstance(e, ImportError) else f"{type(e).__name__}: "
        raise TargetError(f"cannot import module '{module_name}' of target '{target}': {kind}{problem}") from e
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise TargetError(f"module '{module_name}' has no callable '{attr}' (target '{target}')")
    return factory


def params_of(factory: Factory) -> dict[str, Any]:
    """The parameters a factory accepts besides ``device``, with their defaults (``...`` if none)."""
    out: dict[str, Any] = {}
    for i, p in enumerate(inspect.signature(factory).parameters.values()):
        if i == 0 or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        out[p.name] = ... if p.default is p.empty else p.default
    return out


def check_params(target: str, params: dict[str, Any]) -> None:
    """Raise ``TargetError`` when ``params`` does not fit the factory's signature."""
    factory = resolve(target)
    try:
        inspect.signature(factory).bind(None, **params)  # the device's place; binding needs no torch
    except TypeError as e:
        accepted = ", ".join(params_of(factory)) or "none"
        raise TargetError(f"{e} (target '{target}' accepts: {accepted})") from e


def build(target: str, device: torch.device, params: dict[str, Any]) -> Workload:
    """Call the target's factory and normalise what it returns into a ``Workload``."""
    made = resolve(target)(device, **params)
    if isinstance(made, Workload):  # a factory may build the workload itself (e.g. to give a loss_fn)
        return made
    if not isinstance(made, tuple) or len(made) not in (2, 3):
        raise TargetError(
            f"target '{target}' returned {type(made).__name__}; expected (fn, inputs) or (fn, inputs, check_inputs)"
        )
    fn, inputs, *rest = made
    if not callable(fn):
        raise TargetError(f"target '{target}' returned a {type(fn).__name__}, which is not callable")
    checks = [tuple(c) for c in rest[0]] if rest else []
    if isinstance(inputs, InputCycle):
        if not inputs:
            raise TargetError(f"target '{target}' returned an empty InputCycle")
        cycle = [tuple(i) for i in inputs]
        return Workload(fn, cycle[0], checks, cycle)
    inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    return Workload(fn, inputs, checks)


def dtype_of(name: str) -> torch.dtype:
    """``"float16"`` → ``torch.float16``; a clear error for anything that is not a dtype."""
    import torch

    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise TargetError(f"unknown dtype '{name}'")
    return dtype
