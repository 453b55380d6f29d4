"""Phases: what one call of a side is, for inference and for training.

``inference``: modules in ``eval()`` (dropout off, batch norm on its running statistics) and every
call under ``torch.no_grad()`` (``grad_mode``), as PyTorch's dynamo harness runs inference. A call
is the forward. ``inference_mode`` is not used: the tensors it creates can never enter autograd,
and Dynamo guards on it like on any grad mode, so it would buy nothing here.

``training``: modules in ``train()``; a call is a step (``PhaseRun.side``):

1. gradients set to None (inside the step, on both sides alike);
2. forward;
3. a scalar loss: the workload's ``loss_fn(output)`` if it has one, else the sum of its floating
   outputs that require grad (each summed in float32 at least): gradients then have the scale of
   the outputs, so that the check's absolute tolerance does not swamp them;
4. ``backward()``;
5. with ``optimizer: sgd | adamw``, an optimizer step (lr ``SGD_LR``/``ADAMW_LR``).

A target without parameters (a plain function) trains with respect to its floating inputs, which
then require grad; it has no optimizer step, whatever ``optimizer`` says. Both sides share the
module and the optimizer: the compiled side is ``torch.compile`` of the module (``compile.scope:
model``) or of the whole step (``scope: step``).

For the correctness check the training state (parameters, buffers, optimizer state) is saved once
and restored before each checked call, so that every checked step starts from the same state; the
check compares the outputs, the loss, the gradients and, after an optimizer step, the parameters.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.utils._pytree as pytree

from tasks.check.outputs import Observed, Uncheckable, leaves, observe
from tasks.models import Optimizer, Phase
from tasks.targets import Workload

SGD_LR = 1e-3  # small: thousands of timed steps on summed outputs must not drive the weights to inf
ADAMW_LR = 1e-4


def grad_mode(phase: Phase) -> AbstractContextManager[Any]:
    """``no_grad`` for inference, ``enable_grad`` for training, around the whole experiment."""
    return torch.no_grad() if phase == "inference" else torch.enable_grad()


def make_optimizer(kind: Optimizer, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    if kind == "sgd":
        return torch.optim.SGD(params, lr=SGD_LR)
    return torch.optim.AdamW(params, lr=ADAMW_LR)


def default_loss(output: Any) -> torch.Tensor:
    """The sum of the output's floating tensors that require grad (in float32 at least)."""
    try:
        tensors = list(leaves(output).values())
    except Uncheckable:
        tensors = pytree.tree_leaves(output)
    trainable = [t for t in tensors if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
    if not trainable:
        raise ValueError(
            "phase 'training' needs a floating output that requires grad; the target returns none "
            "(give the workload a loss_fn)"
        )
    losses = [t.sum(dtype=torch.promote_types(t.dtype, torch.float32)) for t in trainable]
    return torch.stack(losses).sum()


@dataclass
class PhaseRun:
    """How calls of one target are made and observed in one phase."""

    phase: Phase
    model: torch.nn.Module | None = None
    loss_fn: Callable[[Any], torch.Tensor] = default_loss
    optimizer: torch.optim.Optimizer | None = None
    optimizer_kind: Optimizer | None = None
    input_grads: bool = False  # training a target without parameters: its floating inputs require grad
    _saved: list[torch.Tensor] = field(default_factory=list)

    @classmethod
    def prepare(cls, work: Workload, phase: Phase, optimizer: Optimizer | None) -> tuple[PhaseRun, Workload]:
        """Set the module's mode; in training, make the optimizer (or the inputs require grad)."""
        model = work.fn if isinstance(work.fn, torch.nn.Module) else None
        if model is not None:
            model.train(phase == "training")
        if phase == "inference":
            return cls(phase, model), work
        params = [p for p in model.parameters() if p.requires_grad] if model is not None else []
        with_optimizer = optimizer is not None and bool(params)  # nothing to step without parameters
        run = cls(
            phase,
            model,
            work.loss_fn or default_loss,
            make_optimizer(optimizer, params) if with_optimizer and optimizer is not None else None,
            optimizer if with_optimizer else None,
            input_grads=not params,
        )
        if run.input_grads:
            work = replace(
                work,
                inputs=_requiring_grad(work.inputs),
                check_inputs=[_requiring_grad(i) for i in work.check_inputs],
                cycle=[_requiring_grad(i) for i in work.cycle] if work.cycle else work.cycle,
            )
        return run, work

    @property
    def training(self) -> bool:
        return self.phase == "training"

    def side(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """One call of a side: ``fn`` itself for inference, a training step around it otherwise."""
        if not self.training:
            return fn
        params = list(self.model.parameters()) if self.model is not None else []
        loss_fn, optimizer, input_grads = self.loss_fn, self.optimizer, self.input_grads

        def step(*inputs: Any) -> tuple[Any, torch.Tensor]:
            for p in params:
                p.grad = None
            if input_grads:
                for x in inputs:
                    if isinstance(x, torch.Tensor):
                        x.grad = None
            output = fn(*inputs)
            loss = loss_fn(output)
            loss.backward()
            if optimizer is not None:
                optimizer.step()
            return output, loss

        return step

    def observe(self, result: Any, inputs: tuple[Any, ...], inputs_mutated: bool) -> Observed:
        """What the check compares of one call: outputs; in training also the loss, the gradients
        and, after an optimizer step, the parameters; and the inputs, when the target mutates them."""
        parts: dict[str, Any] = {"outputs": result}
        if self.training:
            output, loss = result
            parts = {"outputs": output, "loss": loss}
            named = dict(self.model.named_parameters()) if self.model is not None else {}
            if named:
                parts["gradients"] = {name: p.grad for name, p in named.items()}
            if self.input_grads:
                parts["input_gradients"] = [x.grad for x in inputs if isinstance(x, torch.Tensor)]
            if self.optimizer is not None:
                parts["parameters"] = named
        if inputs_mutated:
            parts["inputs"] = list(inputs)
        return observe(parts)

    def save(self) -> None:
        """Remember the training state that checked steps start from (nothing for inference)."""
        self._saved = [t.detach().clone() for t in self._state()]

    def restore(self) -> None:
        with torch.no_grad():
            for t, saved in zip(self._state(), self._saved, strict=True):
                t.copy_(saved)

    def _state(self) -> list[torch.Tensor]:
        if not self.training or self.model is None:
            return []
        state = [*self.model.parameters(), *self.model.buffers()]
        if self.optimizer is not None:
            for per_param in self.optimizer.state.values():
                state += [v for _, v in sorted(per_param.items()) if isinstance(v, torch.Tensor)]
        return state

    def float64(self, fn: Callable[..., Any]) -> tuple[PhaseRun, Callable[..., Any]]:
        """A float64 deep copy of the target (and its optimizer state) for the reference run; a
        plain function is used as it is, its inputs being what is cast."""
        if self.model is None:
            return self, fn
        model = copy.deepcopy(self.model).to(torch.float64)
        optimizer = None
        if self.optimizer is not None and self.optimizer_kind is not None:
            optimizer = make_optimizer(self.optimizer_kind, [p for p in model.parameters() if p.requires_grad])
            optimizer.load_state_dict(self.optimizer.state_dict())  # casts the state to float64
        copied = replace(self, model=model, optimizer=optimizer, _saved=[])
        copied.save()
        return copied, model


def _requiring_grad(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    def require(t: torch.Tensor) -> torch.Tensor:
        return t.detach().requires_grad_(True) if t.is_floating_point() else t

    return tuple(pytree.tree_map_only(torch.Tensor, require, inputs))
