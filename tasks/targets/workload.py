"""What a target's factory builds, and the inputs each call takes: a ``Workload`` (the thing to
compile, its example inputs, check inputs, inputs that cycle, a training loss), the calls that
cycle through inputs (``CycleCall``) and fresh copies of inputs for a target that mutates them
(``FreshInputs``). torch is imported where it is used."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


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

    def peek(self) -> Any:
        """``fn`` on the inputs the next call will take, without moving on: a timer's untimed
        settling call before a timed block times what the block starts with."""
        return self.fn(*self.sets[self.position % len(self.sets)])

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
