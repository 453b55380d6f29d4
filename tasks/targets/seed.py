"""Every example of the torch.compile introduction tutorial, as built-in targets.

The tutorial's functions read ``torch`` from this module's globals when they run; it is bound
by the first factory that runs (``_import_torch``), so that listing the targets does not
import torch.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tasks.targets.registry import dtype_of, register

if TYPE_CHECKING:
    import torch


def _import_torch() -> None:
    global torch
    import torch


def foo(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a = torch.sin(x)
    b = torch.cos(y)
    return a + b


def outer(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    def inner(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x)

    a = inner(x)
    b = torch.cos(y)
    return a + b


@functools.cache
def my_module_class() -> Any:
    """The tutorial's ``MyModule`` class (defined on first use: its base class is torch's)."""
    _import_torch()

    class MyModule(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.relu(self.lin(x))

    return MyModule


def foo3(x: torch.Tensor) -> torch.Tensor:
    y = x + 1
    z = torch.nn.functional.relu(y)
    u = z * 2
    return u


def bar(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:  # data-dependent control flow: a graph break
        b = b * -1
    return x * b


def bar_fixed(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x = a / (torch.abs(a) + 1)

    def true_branch(y: torch.Tensor) -> torch.Tensor:
        return y * -1

    def false_branch(y: torch.Tensor) -> torch.Tensor:
        return y.clone()  # torch.cond forbids outputs that alias inputs

    b = torch.cond(b.sum() < 0, true_branch, false_branch, (b,))
    return x * b


@register("seed.foo")
def make_foo(device: torch.device, shape: Sequence[int] = (1024, 1024), dtype: str = "float32"):
    """sin(x) + cos(y), a plain function compiled."""
    _import_torch()
    x, y = (torch.randn(*shape, device=device, dtype=dtype_of(dtype)) for _ in range(2))
    return foo, (x, y)


@register("seed.outer")
def make_outer(device: torch.device, shape: Sequence[int] = (1024, 1024), dtype: str = "float32"):
    """sin(x) + cos(y) through a nested inner function (compiled recursively)."""
    _import_torch()
    x, y = (torch.randn(*shape, device=device, dtype=dtype_of(dtype)) for _ in range(2))
    return outer, (x, y)


@register("seed.my_module")
def make_my_module(device: torch.device, batch: int = 16):
    """The tutorial's MyModule: Linear(3, 3) then relu, an nn.Module compiled."""
    _import_torch()
    return my_module_class()().to(device), (torch.randn(batch, 3, device=device),)


@register("seed.foo3")
def make_foo3(device: torch.device, shape: Sequence[int] = (4096, 4096), dtype: str = "float32"):
    """x + 1 -> relu -> * 2, the tutorial's speedup demo (fusable pointwise ops)."""
    _import_torch()
    return foo3, (torch.randn(*shape, device=device, dtype=dtype_of(dtype)),)


@register("seed.bar")
def make_bar(device: torch.device, size: int = 10):
    """a / (|a| + 1) * b with a data-dependent `if b.sum() < 0`: one graph break."""
    _import_torch()
    a, b = torch.randn(size, device=device), torch.randn(size, device=device)
    return bar, (a, b), [(a, -b)]  # check both branches


@register("seed.bar_fixed")
def make_bar_fixed(device: torch.device, size: int = 1):
    """bar rewritten with torch.cond: one graph, compiles with fullgraph=True."""
    _import_torch()
    a, b = torch.ones(size, device=device), torch.ones(size, device=device)
    return bar_fixed, (a, b), [(a, -b)]  # false branch timed, both checked
