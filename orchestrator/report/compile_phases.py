"""Where a compile's time went, by phase, and which phases explain a change of compile latency.

``Result.compile_breakdown`` is torch's ``calculate_time_spent()`` after the measured compile: the
seconds of every event ``dynamo_timed`` recorded, summed by name. The events nest, so the figures
overlap: ``total_wall_time`` is ``entire_frame_compile`` (the forward, from Dynamo's start) plus
``entire_backward_compile`` (training: the backward, compiled at the first backward);
``backend_compile`` is inside the first, ``inductor_compile`` inside ``backend_compile`` (the
forward graph) or ``entire_backward_compile`` (the backward graph), ``code_gen`` inside
``inductor_compile``, and so on. Explaining a change needs phases that do not overlap, so each
phase here is its events' time less that of the phases recorded inside it, and the phases add up
to the compile latency (the first call's wall time):

======================  ============================================================  ==================
phase                   events                                                        inside
======================  ============================================================  ==================
``dynamo``              ``entire_frame_compile`` (less ``backend_compile``): Dynamo's
                        own work, bytecode tracing, guards, the output graph
``aot_autograd``        ``backend_compile`` + ``entire_backward_compile``: AOTAutograd
                        and the backend; a backend's own work where it is not inductor
``pre_grad_passes``     ``_recursive_pre_grad_passes``                                aot_autograd
``joint_graph_passes``  ``_recursive_joint_graph_passes``                             aot_autograd
``inductor``            ``inductor_compile``: lowering and scheduling                 aot_autograd
``post_grad_passes``    ``_recursive_post_grad_passes``                               inductor
``code_gen``            ``code_gen``: writing and loading the generated module        inductor
``async_compile_wait``  ``async_compile.wait``: waiting for the kernels to build      code_gen
``gc``                  ``gc``: the collection Dynamo runs before it compiles         dynamo
``outside_compile``     the compile latency less ``total_wall_time``: the first
                        call's own run, its guards and wrappers
======================  ============================================================  ==================

A phase whose parent was not recorded is inside the nearest recorded one above it: a compile
served from the caches records no ``inductor_compile`` nor ``code_gen``, and its
``async_compile.wait`` (loading the cached module) is inside ``backend_compile``; with no recorded
parent at all, inside ``outside_compile``. The nesting was read from torch 2.13's ``dynamo_timed``
call sites (``convert_frame.py``, ``output_graph.py``, ``compile_fx.py``, ``graph.py``,
``async_compile.py``) and checked on its figures (CPU; inference and training; inductor, cold and
warm, and aot_eager): no phase came out below zero. Events torch records that are not named here
(autotuning, remote caches) are inside a phase already and are left out.

``explain`` then names the phases that moved the way the latency moved, largest first, until they
account for ``EXPLAINED_SHARE`` (80%) of the change: the few phases worth looking at in the traces.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

EXPLAINED_SHARE = 0.8  # the phases named account for at least this share of a compile-latency change
OUTSIDE = "outside_compile"
PHASE_EVENTS: dict[str, tuple[str, ...]] = {  # each phase's events in compile_breakdown (torch 2.13's names)
    "dynamo": ("entire_frame_compile",),
    "aot_autograd": ("backend_compile", "entire_backward_compile"),
    "pre_grad_passes": ("_recursive_pre_grad_passes",),
    "joint_graph_passes": ("_recursive_joint_graph_passes",),
    "inductor": ("inductor_compile",),
    "post_grad_passes": ("_recursive_post_grad_passes",),
    "code_gen": ("code_gen",),
    "async_compile_wait": ("async_compile.wait",),
    "gc": ("gc",),
}
PARENTS: dict[str, tuple[str, ...]] = {  # the phases a phase may be inside, innermost first
    "gc": ("dynamo",),
    "pre_grad_passes": ("aot_autograd",),
    "joint_graph_passes": ("aot_autograd",),
    "inductor": ("aot_autograd",),
    "post_grad_passes": ("inductor", "aot_autograd"),
    "code_gen": ("inductor", "aot_autograd"),
    "async_compile_wait": ("code_gen", "inductor", "aot_autograd"),
}
PHASES = (*PHASE_EVENTS, OUTSIDE)


@dataclass(frozen=True)
class PhaseChange:
    """One phase's seconds on each side of a comparison and its share of the latency change."""

    phase: str
    base_s: float
    new_s: float
    share: float  # delta_s over the change of compile latency: 0.76 for 76%

    @property
    def delta_s(self) -> float:
        return self.new_s - self.base_s

    def text(self) -> str:
        """``inductor +0.38 s (76%)``."""
        return f"{self.phase} {self.delta_s:+.2f} s ({self.share:.0%})"


class Compiled(Protocol):
    """What the phases are read from: a ``Result``, or its ``Digest`` (``orchestrator.report.digest``)."""

    @property
    def compile_breakdown(self) -> Mapping[str, float]: ...

    @property
    def compile_latency_s(self) -> float | None: ...


def phase_seconds(breakdown: Mapping[str, float], latency_s: float) -> dict[str, float]:
    """The compile latency split into the phases of ``PHASES`` (module docstring), from torch's
    nested event times (``compile_breakdown``); they add up to ``latency_s``."""
    totals = {phase: sum(float(breakdown.get(e, 0.0)) for e in events) for phase, events in PHASE_EVENTS.items()}
    compiled = float(breakdown.get("entire_frame_compile", 0.0)) + float(breakdown.get("entire_backward_compile", 0.0))
    own = {**totals, OUTSIDE: latency_s - compiled}
    own["dynamo"] -= float(breakdown.get("backend_compile", 0.0))  # the forward's backend; the backward's is not inside
    for phase, parents in PARENTS.items():
        parent = next((p for p in parents if totals[p] > 0), OUTSIDE)
        own[parent] -= totals[phase]
    return own


def side_phases(runs: Sequence[Compiled]) -> dict[str, float] | None:
    """Each phase's median over the runs that have a compile latency and a breakdown; None when none has."""
    split = [
        phase_seconds(r.compile_breakdown, r.compile_latency_s)
        for r in runs
        if r.compile_latency_s is not None and r.compile_breakdown
    ]
    if not split:
        return None
    return {phase: statistics.median(s[phase] for s in split) for phase in PHASES}


def explain(
    base: Sequence[Compiled], new: Sequence[Compiled], change_s: float, share: float = EXPLAINED_SHARE
) -> list[PhaseChange]:
    """The phases that account for at least ``share`` of ``change_s`` (the compile latency's change,
    NEW - BASE, as the comparison measured it): among the phases that moved the same way, the
    largest first, as few as reach the share. Each phase's seconds are its median over a side's
    runs (``side_phases``): with one run a side the phases add up to the change exactly. Empty
    when either side has no breakdown or nothing changed."""
    b, n = side_phases(base), side_phases(new)
    if b is None or n is None or change_s == 0:
        return []
    moved = sorted(
        (PhaseChange(p, b[p], n[p], (n[p] - b[p]) / change_s) for p in PHASES), key=lambda c: c.share, reverse=True
    )
    named: list[PhaseChange] = []
    for change in moved:
        if change.share <= 0 or sum(c.share for c in named) >= share:
            break
        named.append(change)
    return named


def explanation(changes: Sequence[PhaseChange]) -> str:
    """``inductor +0.38 s (76%), aot_autograd +0.08 s (16%)``; '' for none."""
    return ", ".join(c.text() for c in changes)
