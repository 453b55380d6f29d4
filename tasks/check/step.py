"""The check step of the procedure: references before anything compiles (eager twice, a float64
copy), then the compiled side's calls judged against them (see ``tasks.check``, last paragraph)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.utils._pytree as pytree

from tasks import precision
from tasks.check.judge import Tolerances, Verdict, combine, compare, deterministic
from tasks.check.outputs import Observed
from tasks.models import CheckInfo, Experiment
from tasks.targets import Workload, copy_inputs
from tasks.text import error_line

if TYPE_CHECKING:
    from tasks.phases import PhaseRun


@dataclass
class References:
    """What the compiled side is judged against on one input tuple."""

    inputs: tuple[Any, ...]
    eager: Observed
    fp64: Observed | None  # None: no float64 run was possible (``fp64_note`` says why)
    fp64_note: str | None = None
    eager_differs: str | None = None  # where a second eager run differed from the first


def take_references(
    exp: Experiment, run: PhaseRun, eager_fn: Callable[..., Any], work: Workload, device: torch.device, mutated: bool
) -> list[References]:
    """For the timed inputs and each check input: eager's checked call, a second one to see that
    eager repeats itself, and the call of a float64 copy of the target (``check.reference: fp64``)."""
    tolerances = Tolerances.of(exp)
    eager_side = run.side(eager_fn)
    reference, note = None, None
    if exp.check.reference == "fp64":
        try:
            run64, fn64 = run.float64(eager_fn)
            reference = (run64, run64.side(fn64))
        except Exception as e:
            note = f"no float64 copy of the target ({error_line(e, fallback='no message', with_type=True)})"
    found = []
    for inputs in [work.inputs, *work.check_inputs]:
        eager = checked_call(run, eager_side, inputs, exp.seed, mutated)
        again = checked_call(run, eager_side, inputs, exp.seed, mutated)
        fp64 = None
        if reference is not None:
            try:
                with precision.exact(device):
                    fp64 = checked_call(*reference, float64_inputs(inputs), exp.seed, mutated)
            except Exception as e:
                note = f"the float64 run failed ({error_line(e, fallback='no message', with_type=True)})"
        found.append(References(inputs, eager, fp64, note, deterministic(eager, again, tolerances)))
    return found


def check_compiled(
    exp: Experiment,
    run: PhaseRun,
    compiled_side: Callable[..., Any],
    first: Observed,
    references: list[References],
    mutated: bool,
    replays: int,
) -> Verdict:
    """The compiled side's first call, its call after ``replays`` more (a CUDA graph replay under
    ``reduce-overhead``) and its call on every check input, each judged against the references."""
    if not exp.check.enabled:
        return Verdict(None, CheckInfo(method="none"), note="not checked: check.enabled is false")
    differs = next((r.eager_differs for r in references if r.eager_differs), None)
    if differs is not None:
        note = f"eager is not deterministic: two runs from the same seed and inputs differ at {differs}"
        return Verdict(None, CheckInfo(method="none", eager_deterministic=False), note=f"{note}; compiled not judged")
    tolerances = Tolerances.of(exp)
    main = references[0]
    later = first
    for _ in range(replays):
        later = checked_call(run, compiled_side, main.inputs, exp.seed, mutated)
    judged = [compare(first, main.eager, main.fp64, tolerances), compare(later, main.eager, main.fp64, tolerances)]
    for ref in references[1:]:
        observed = checked_call(run, compiled_side, ref.inputs, exp.seed, mutated)
        judged.append(compare(observed, ref.eager, ref.fp64, tolerances))
    verdict = combine(judged)
    verdict.check.eager_deterministic = True
    fp64_note = next((r.fp64_note for r in references if r.fp64_note), None)
    if fp64_note is not None and verdict.note is None:
        verdict.note = f"{fp64_note}: judged by cosine similarity"
    return verdict


def checked_inputs(run: PhaseRun, inputs: tuple[Any, ...], seed: int) -> tuple[Any, ...]:
    """Before a checked call: the saved training state back, the RNG reseeded, fresh input copies."""
    run.restore()
    torch.manual_seed(seed)
    random.seed(seed)
    return copy_inputs(inputs)


def checked_call(
    run: PhaseRun, side: Callable[..., Any], inputs: tuple[Any, ...], seed: int, mutated: bool
) -> Observed:
    inputs = checked_inputs(run, inputs, seed)
    return run.observe(side(*inputs), inputs, mutated)


def float64_inputs(inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Floating input tensors as float64 copies (gradient requirement kept); others copied."""

    def widen(t: torch.Tensor) -> torch.Tensor:
        if not t.is_floating_point():
            return t.clone()
        return t.detach().to(torch.float64).requires_grad_(t.requires_grad)

    return tuple(pytree.tree_map_only(torch.Tensor, widen, inputs))
