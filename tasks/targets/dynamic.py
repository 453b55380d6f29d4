"""Targets whose inputs change between calls: what recompiles, and what dynamic shapes avoid."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tasks.targets.registry import dtype_of, register
from tasks.targets.workload import InputCycle

if TYPE_CHECKING:
    import torch

DEFAULT_SHAPES = ((1024,), (2048,), (3072,), (4096,))


@register("dynamic.foo3")
def make_foo3_shapes(device: torch.device, shapes: Sequence[Sequence[int]] = DEFAULT_SHAPES, dtype: str = "float32"):
    """foo3 on an input whose shape changes every call, cycling through `shapes`."""
    import torch

    from tasks.targets.seed import _import_torch, foo3

    _import_torch()
    if not shapes:
        raise ValueError("shapes must name at least one shape")
    return foo3, InputCycle((torch.randn(*shape, device=device, dtype=dtype_of(dtype)),) for shape in shapes)
