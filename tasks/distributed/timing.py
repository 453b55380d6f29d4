"""Timing a gang: every rank must make the same calls in the same order, since each training step meets
the other ranks in collectives; a rank that planned one call more would wait in it for ever.

``GangTimer`` wraps the device's timer (``tasks.timers``) and changes one thing: the estimate of a call,
from which the counts and block size of each side are planned (``tasks.timers.plan``), is the largest
any rank measured (``agreed_max``), so that every rank plans the same warmup, block size and samples.
Everything else (first calls, warmup, the interleaved rounds of blocks) is the wrapped timer's, run in
lockstep by every rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from tasks.distributed.group import agreed_max
from tasks.timers import Call, Plan, Setup, SideSamples, Timer


class GangTimer:
    """A timer whose estimates are agreed across the gang (see the module docstring)."""

    def __init__(self, timer: Timer, device: torch.device) -> None:
        self.timer, self.device = timer, device
        self.method = timer.method
        self.blocked = timer.blocked
        self.budgets_by_default = timer.budgets_by_default

    def first_call(self, fn: Call) -> tuple[Any, float]:
        return self.timer.first_call(fn)

    def estimate(self, fn: Call) -> float:
        """This rank's estimate of one call, raised to the slowest rank's."""
        return agreed_max(self.timer.estimate(fn), self.device)

    def warm(self, fn: Call, calls: int) -> None:
        self.timer.warm(fn, calls)

    def interleaved(
        self, fns: Sequence[Call], plans: Sequence[Plan], rounds: int, setups: Sequence[Setup | None] | None = None
    ) -> list[SideSamples]:
        return self.timer.interleaved(fns, plans, rounds, setups)
