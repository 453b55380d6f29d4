"""Targets as a user would write them, named by import path in specs (``tests.user_targets:...``)."""

from __future__ import annotations

import torch


def make_scaled(device: torch.device, n: int = 64):
    """A plain function and its inputs: the factory contract."""
    return (lambda x: torch.tanh(x) * 3), (torch.randn(n, device=device),)


def make_broken(device: torch.device):
    """A factory that fails: the experiment must become a runtime_error, not a crash."""
    raise ValueError("this factory cannot build its target")


def make_failing_call(device: torch.device):
    def fn(x):
        raise RuntimeError("boom inside the target")

    return fn, (torch.ones(2, device=device),)


def make_sleepy(device: torch.device, ms: float = 50.0):
    """A call that takes ``ms`` of wall time, long enough for tasks to overlap."""
    import time

    def fn(x):
        time.sleep(ms / 1e3)
        return x + 1

    return fn, (torch.ones(4, device=device),)


def make_relu(device: torch.device):
    """torch.relu in a graph: the debug backends named *_TESTING_ONLY break exactly this op."""
    return (lambda x: torch.relu(x) * 2), (torch.randn(16, device=device),)


def make_crash(device: torch.device):
    """Kills its own worker process, as a segfault or the OOM killer would."""
    import os

    os._exit(3)


PYTHON_FORWARDS = {"eager": 0}


class CountingModule(torch.nn.Module):
    """Counts the forwards Python runs outside Dynamo: the eager calls."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        if not torch.compiler.is_compiling():
            PYTHON_FORWARDS["eager"] += 1
        return self.lin(x)


def make_counting_module(device: torch.device):
    PYTHON_FORWARDS["eager"] = 0
    return CountingModule().to(device), (torch.randn(2, 4, device=device),)
