"""Every example of the torch.compile introduction tutorial, as built-in targets."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tasks.targets import dtype_of, register


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


class MyModule(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.relu(self.lin(x))


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
    x, y = (torch.randn(*shape, device=device, dtype=dtype_of(dtype)) for _ in range(2))
    return foo, (x, y)


@register("seed.outer")
def make_outer(device: torch.device, shape: Sequence[int] = (1024, 1024), dtype: str = "float32"):
    """sin(x) + cos(y) through a nested inner function (compiled recursively)."""
    x, y = (torch.randn(*shape, device=device, dtype=dtype_of(dtype)) for _ in range(2))
    return outer, (x, y)


@register("seed.my_module")
def make_my_module(device: torch.device, batch: int = 16):
    """The tutorial's MyModule: Linear(3, 3) then relu, an nn.Module compiled."""
    return MyModule().to(device), (torch.randn(batch, 3, device=device),)


@register("seed.foo3")
def make_foo3(device: torch.device, shape: Sequence[int] = (4096, 4096), dtype: str = "float32"):
    """x + 1 -> relu -> * 2, the tutorial's speedup demo (fusable pointwise ops)."""
    return foo3, (torch.randn(*shape, device=device, dtype=dtype_of(dtype)),)


@register("seed.bar")
def make_bar(device: torch.device, size: int = 10):
    """a / (|a| + 1) * b with a data-dependent `if b.sum() < 0`: one graph break."""
    a, b = torch.randn(size, device=device), torch.randn(size, device=device)
    return bar, (a, b), [(a, -b)]  # check both branches


@register("seed.bar_fixed")
def make_bar_fixed(device: torch.device, size: int = 1):
    """bar rewritten with torch.cond: one graph, compiles with fullgraph=True."""
    a, b = torch.ones(size, device=device), torch.ones(size, device=device)
    return bar_fixed, (a, b), [(a, -b)]  # false branch timed, both checked
