"""A target whose compiled side can be made to do more work than its eager side, for ``aa_noise.py``.

``chain`` runs ``ROUNDS`` rounds of ``x = cos(sin(x))`` over a vector (each round reads x once:
with two reads a round, inductor's inlining of pointwise ops grows as 2^rounds). With ``AA_EXTRA``
set (a fraction: ``0.05``), the code Dynamo traces (``torch.compiler.is_compiling()``) also runs
``round(ROUNDS * AA_EXTRA)`` more rounds on a copy of the result and adds that times zero. Inductor
fuses them into the same loop after the others; starting from the result, neither common-
subexpression elimination nor the CPU's overlap of independent chains hides them, so the compiled
side does that fraction more arithmetic (``aa_noise.py`` measures and prints how much more). The
outputs stay equal (cos and sin of finite values are finite, so ``0 * y`` is 0) and the correctness
check passes. Eager never runs the extra rounds: the speedup drops by the extra, as a compiler
change that made the generated code slower would. The variable is read when the target is built, in
the worker; the experiment id does not depend on it, so a run with it compares with a run without.
"""

from __future__ import annotations

import os
from typing import Any

EXTRA_ENV = "AA_EXTRA"  # the compiled side's extra work, a fraction of ROUNDS (0.05: one round more in 20)
ROUNDS = 20  # rounds of cos(sin(x)): one round is 5% of the compiled side's fused loop
N = 2**14  # elements: the compiled side takes about 0.7 ms single-threaded on this machine's CPU


def extra_rounds(rounds: int = ROUNDS) -> int:
    """The extra rounds the compiled side runs: ``AA_EXTRA`` of ``rounds``, rounded (0 when unset)."""
    return round(rounds * float(os.environ.get(EXTRA_ENV) or 0.0))


def chain(device: Any, n: int = N, rounds: int = ROUNDS) -> tuple[Any, tuple[Any, ...]]:
    """``rounds`` rounds of cos(sin(x)) over n elements; the compiled side runs ``extra_rounds()`` more."""
    import torch

    extra = extra_rounds(rounds)

    def fn(x: torch.Tensor) -> torch.Tensor:
        for _ in range(rounds):
            x = torch.cos(torch.sin(x))
        if torch.compiler.is_compiling() and extra:
            y = x
            for _ in range(extra):
                y = torch.cos(torch.sin(y))
            x = x + y * 0.0
        return x

    return fn, (torch.randn(n, device=device),)
