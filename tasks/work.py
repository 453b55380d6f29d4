"""The work of one call of a target, counted rather than guessed: FLOPs and a lower bound of bytes.

**FLOPs** come from ``torch.utils.flop_counter.FlopCounterMode`` around one eager call, made
outside any timing. It counts only the matmul, convolution and attention families (``mm``,
``addmm``, ``bmm``, ``baddbmm``, ``_scaled_mm``, ``convolution`` and its backward, the
``scaled_dot_product_attention`` kernels; the CPU's SDPA kernel is added here, as PyTorch's
registry lacks it). Pointwise ops, normalisation, a softmax outside SDPA, reductions, embedding
lookups and optimizer steps count zero, so a memory-bound target (``blocks.layernorm_gelu``,
``blocks.softmax``) has 0 FLOPs. A multiply-add is 2 FLOPs. Causal attention counts the full
``seq x seq`` scores, as PyTorch's formula does. In training the count is forward, loss and
backward (what ``torch.autograd.grad`` computes for the parameters and grad-requiring inputs).

**Bytes** are a lower bound of the memory traffic of one call: every distinct tensor the call
must read or write at least once, counted once each (``numel * element_size``): its tensor
inputs, the module's parameters and buffers (when ``fn`` is a module or a method of one) and its
outputs; in training also the gradients (one per parameter and grad-requiring input). Tensors
sharing a storage count once, at the size of the largest. Intermediate activations, re-reads,
and an optimizer's state are not counted: GB/s derived from it understates the real traffic.

The counted call leaves no trace: the RNG state, the module's buffers (BatchNorm's running
statistics) and the parameters' ``.grad`` are as they were.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tasks.models import WorkInfo
from tasks.text import error_line

if TYPE_CHECKING:
    import torch

MAX_DEPTH = 8  # how deep the walk for tensors goes into outputs of unknown structure


def count_work(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    *,
    phase: str = "inference",
    loss_fn: Callable[[Any], Any] | None = None,
    notes: list[str] | None = None,
) -> WorkInfo:
    """FLOPs and bytes of one call of ``fn(*inputs)`` (a training step's forward and backward when
    ``phase`` is ``training``); never raises. What could not be counted is ``None``, and the reason
    is appended to ``notes`` when given. Call it with the module and inputs as they will be timed
    (cast to the experiment's precision, under its autocast, in its train/eval mode)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    try:
        counter = FlopCounterMode(display=False, custom_mapping=_extra_flop_formulas())
    except Exception as e:  # an older or newer torch whose counter does not take these
        _note(notes, "FLOPs not counted", e)
        counter = None
    try:
        with torch.random.fork_rng(devices=_devices(fn, inputs)), _restored_buffers(fn):
            if counter is not None:
                try:
                    with counter:
                        touched = _one_call(fn, inputs, phase, loss_fn)
                    return WorkInfo(flops=counter.get_total_flops(), bytes=touched)
                except Exception as e:
                    _note(notes, "FLOPs not counted", e)
            return WorkInfo(bytes=_one_call(fn, inputs, phase, loss_fn))
    except Exception as e:
        _note(notes, "bytes not counted", e)
        return WorkInfo()


def _one_call(fn: Callable[..., Any], inputs: Sequence[Any], phase: str, loss_fn: Callable[[Any], Any] | None) -> int:
    """Make the call (and in training the loss and its gradients); the bytes it touched at least."""
    import torch
    from torch.utils._pytree import tree_map

    if phase != "training":
        with torch.no_grad():
            output = fn(*inputs)
        return tensor_bytes([*_tensors(inputs), *_state(fn), *_tensors(output)])
    # Grad-requiring inputs enter as aliases (view_as): FlopCounterMode's module tracker rejects
    # autograd.grad with respect to a leaf that a module took as input. autograd.grad, unlike
    # backward(), leaves every .grad as it was.
    inputs = tree_map(lambda t: t.view_as(t) if isinstance(t, torch.Tensor) and t.requires_grad else t, inputs)
    output = fn(*inputs)
    loss = loss_fn(output) if loss_fn is not None else _sum_of_floating(output)
    wrt = [t for t in [*_params(fn), *_tensors(inputs)] if t.requires_grad]
    if not wrt:
        raise ValueError("training step with nothing that requires grad")
    grads = [g for g in torch.autograd.grad(loss, wrt, allow_unused=True) if g is not None]
    return tensor_bytes([*_tensors(inputs), *_state(fn), *_tensors(output), *grads])


def tensor_bytes(tensors: Sequence[torch.Tensor]) -> int:
    """Bytes of distinct tensors: ``numel * element_size`` each, a storage counted once (its largest
    view). Tensors without storage (meta, fake) count zero."""
    largest: dict[tuple[str, int], int] = {}
    for t in tensors:
        try:
            key = (str(t.device), t.untyped_storage().data_ptr())
        except Exception:
            continue
        if t.device.type == "meta" or key[1] == 0:  # no memory behind it
            continue
        largest[key] = max(largest.get(key, 0), t.numel() * t.element_size())
    return sum(largest.values())


def _tensors(obj: Any, depth: int = 0, seen: set[int] | None = None) -> Iterator[torch.Tensor]:
    """Every tensor inside ``obj``: containers, mappings, dataclasses, and the attributes of
    objects of unknown structure (e.g. a Hugging Face cache), to ``MAX_DEPTH``."""
    import torch

    if isinstance(obj, torch.Tensor):
        yield obj
        return
    seen = set() if seen is None else seen
    if depth >= MAX_DEPTH or id(obj) in seen or isinstance(obj, (str, bytes, int, float, bool, type(None))):
        return
    seen.add(id(obj))
    if isinstance(obj, Mapping):
        children: Any = obj.values()
    elif isinstance(obj, (list, tuple, set, frozenset)):
        children = obj
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        children = [getattr(obj, f.name, None) for f in dataclasses.fields(obj)]
    elif hasattr(obj, "__dict__") and not isinstance(obj, (type, torch.nn.Module)) and not callable(obj):
        children = vars(obj).values()
    else:
        return
    for child in children:
        yield from _tensors(child, depth + 1, seen)


def _module(fn: Callable[..., Any]) -> torch.nn.Module | None:
    import torch

    for candidate in (fn, getattr(fn, "__self__", None)):
        if isinstance(candidate, torch.nn.Module):
            return candidate
    return None


def _params(fn: Callable[..., Any]) -> list[torch.Tensor]:
    module = _module(fn)
    return list(module.parameters()) if module is not None else []


def _state(fn: Callable[..., Any]) -> list[torch.Tensor]:
    module = _module(fn)
    return [*module.parameters(), *module.buffers()] if module is not None else []


def _sum_of_floating(output: Any) -> torch.Tensor:
    floating = [t.float().sum() for t in _tensors(output) if t.is_floating_point() and t.requires_grad]
    if not floating:
        raise ValueError("training step whose output has no floating tensor that requires grad")
    return sum(floating[1:], floating[0])


@contextlib.contextmanager
def _restored_buffers(fn: Callable[..., Any]) -> Iterator[None]:
    """Copy the module's buffers (BatchNorm's running statistics, counters) back after the call."""
    import torch

    module = _module(fn)
    saved = [(b, b.detach().clone()) for b in module.buffers()] if module is not None else []
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, value in saved:
                buffer.copy_(value)


def _devices(fn: Callable[..., Any], inputs: Sequence[Any]) -> list[int]:
    """The CUDA devices whose RNG the call may draw from (``fork_rng`` restores theirs too)."""
    tensors = [*_tensors(inputs), *_state(fn)]
    return sorted({t.device.index or 0 for t in tensors if t.device.type == "cuda"})


def _extra_flop_formulas() -> dict[Any, Any]:
    """SDPA's CPU kernels, which PyTorch's registry lacks, counted with PyTorch's own SDPA formulas
    (the kernels take query, key, value first, and grad_out before them in the backward)."""
    import torch
    from torch.utils import flop_counter

    def forward(query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        return flop_counter.sdpa_flop_count(query, key, value)

    def backward(grad: Any, query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        return flop_counter.sdpa_backward_flop_count(grad, query, key, value)

    aten = torch.ops.aten
    extra: dict[Any, Any] = {}
    for name, formula in (
        ("_scaled_dot_product_flash_attention_for_cpu", forward),
        ("_scaled_dot_product_flash_attention_for_cpu_backward", backward),
    ):
        op = getattr(aten, name, None)
        if op is not None and op not in flop_counter.flop_registry:
            extra[op] = formula
    return extra


def _note(notes: list[str] | None, what: str, error: BaseException) -> None:
    if notes is not None:
        notes.append(f"{what}: {error_line(error, with_type=True)}")
