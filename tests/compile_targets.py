"""Targets for the compile tests: what the compiled code was compiled with, a loss that breaks the graph."""

from __future__ import annotations

import torch

FALLBACK_RANDOM_SEEN: list[bool] = []  # inductor's fallback_random at each call of a spied compiled callable


def make_breaking_loss(device: torch.device, batch: int = 4):
    """A model whose forward compiles into one graph and whose loss breaks it (a Python branch on a value)."""
    from tasks.targets import Workload

    def loss(out: torch.Tensor) -> torch.Tensor:
        total = out.square().mean()
        if total.item() > 0:  # data-dependent: a graph break in the loss, invisible to the forward alone
            return total
        return -total

    model = torch.nn.Linear(8, 3).to(device)
    return Workload(model, (torch.randn(batch, 8, device=device),), loss_fn=loss)


def make_gelu_sin(device: torch.device, size: int = 32):
    """A small function inductor compiles in under a second once its process has compiled once."""
    return (lambda x: torch.nn.functional.gelu(x) + x.sin()), (torch.randn(size, size, device=device),)
