"""The library of benchmark targets and how a target name becomes a workload.

A target is a factory ``factory(device: torch.device, **params)`` returning
``(callable_or_module, example_inputs)`` or ``(callable_or_module, example_inputs,
check_inputs)`` (or a ``Workload``, to give a training ``loss_fn`` too), where
``check_inputs`` is a list of further input tuples on which the
compiled result is checked against eager but never timed (to cover every branch of a
data-dependent target). Built-in targets are registered under a name (``seed.foo``);
user targets are named by import path (``package.module:factory``) and follow the
same contract.

``example_inputs`` may also be an ``InputCycle``: a list of input tuples that successive
calls take in turn (a workload whose shapes change between calls). The first tuple is the
one for the first call, the correctness check and the estimate of a call's length.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# torch is imported where it is used, never when this module is imported: listing the
# targets (``compilebench tasks``, spec validation) must not pay for it.

Factory = Callable[..., Any]


@dataclass(frozen=True)
class Target:
    name: str
    factory: Factory
    description: str


class InputCycle(list):  # type: ignore[type-arg]
    """Input tuples that successive calls take in turn, from the first."""


@dataclass(frozen=True)
class Workload:
    """What a factory built: the thing to compile, its example inputs, extra check inputs."""

    fn: Callable[..., Any]
    inputs: tuple[Any, ...]
    check_inputs: list[tuple[Any, ...]] = field(default_factory=list)
    cycle: list[tuple[Any, ...]] | None = None  # inputs of successive calls, when they vary
    loss_fn: Callable[[Any], Any] | None = None  # training: output -> scalar loss (default: tasks.phases)

    def caller(self, fn: Callable[..., Any]) -> Callable[[], Any]:
        """A no-argument call of ``fn`` on this workload's inputs (the next ones, when they cycle).

        A cycling call is a ``CycleCall``: its ``start_round(calls)``, handed to a timer as the
        per-round setup, starts the first timed round at the first input, so that every side sees the
        same input in the same round whatever its warmup and estimate calls were.
        """
        if not self.cycle:
            inputs = self.inputs
            return lambda: fn(*inputs)
        return CycleCall(fn, self.cycle)

    @property
    def is_module(self) -> bool:
        import torch

        return isinstance(self.fn, torch.nn.Module)


class CycleCall:
    """``fn`` on input tuples taken in turn. The first timed round starts at the first input,
    whatever warmup and estimate calls came before; each later round goes on where the last one
    left off (the timers call nothing between rounds), so every input is timed equally often and
    every side sees the same input in the same round; ``repeat`` takes no new input."""

    def __init__(self, fn: Callable[..., Any], sets: list[tuple[Any, ...]]) -> None:
        self.fn, self.sets = fn, sets
        self.position = 0
        self.timed = False  # whether a timed round has started

    def __call__(self) -> Any:
        inputs = self.sets[self.position % len(self.sets)]
        self.position += 1
        return self.fn(*inputs)

    def repeat(self) -> Any:
        """``fn`` once more on the inputs of the last call, without moving on: the device-time call
        of a CUDA wall round times the input its wall sample timed."""
        return self.fn(*self.sets[(self.position - 1) % len(self.sets)])

    def start_round(self, calls: int) -> None:
        """A timer's per-round setup; a round moves on by the inputs its calls take, so ``calls``
        is not needed here."""
        if not self.timed:
            self.position, self.timed = 0, True


def copy_inputs(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """The inputs with every tensor copied (strides, dtype and ``requires_grad`` kept), inside
    tuples, lists and dicts; other values as they are."""
    import torch
    import torch.utils._pytree as pytree

    def copy(t: torch.Tensor) -> torch.Tensor:
        return t.detach().clone().requires_grad_(t.requires_grad)

    return tuple(pytree.tree_map_only(torch.Tensor, copy, inputs))


def input_versions(inputs: tuple[Any, ...]) -> list[int]:
    """The version counters of the input tensors: any in-place change of a tensor bumps its own."""
    import torch
    import torch.utils._pytree as pytree

    return [t._version for t in pytree.tree_leaves(inputs) if isinstance(t, torch.Tensor)]


class FreshInputs:
    """Copies of a workload's input tuples, made ahead for a target that mutates its inputs, so
    that every call sees the same values and no copy is made inside a timed block.

    ``setup(n)`` (a timer's per-block hook, outside the timed region) tops up ``n`` waiting copies
    of each input tuple; ``wrap(fn)`` calls ``fn`` on the next waiting copy of the inputs it is
    given, or on a copy made on the spot when none waits (the untimed estimate and warmup calls).
    """

    def __init__(self, input_sets: list[tuple[Any, ...]]) -> None:
        self._sets = {_key(s): s for s in input_sets}
        self._waiting: dict[tuple[int, ...], list[tuple[Any, ...]]] = {k: [] for k in self._sets}

    def setup(self, calls: int) -> None:
        for key, inputs in self._sets.items():
            waiting = self._waiting[key]
            while len(waiting) < calls:
                waiting.append(copy_inputs(inputs))

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*inputs: Any) -> Any:
            waiting = self._waiting.get(_key(inputs))
            return fn(*(waiting.pop() if waiting else copy_inputs(inputs)))

        return call


def _key(inputs: tuple[Any, ...]) -> tuple[int, ...]:
    return tuple(id(x) for x in inputs)


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


from tasks.targets import blocks as _blocks  # noqa: E402,F401
from tasks.targets import dynamic as _dynamic  # noqa: E402,F401  (registers the built-in targets)
from tasks.targets import gpt as _gpt  # noqa: E402,F401
from tasks.targets import hf as _hf  # noqa: E402,F401
from tasks.targets import seed as _seed  # noqa: E402,F401
