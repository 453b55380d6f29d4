"""Shape-traffic replay: the calls a service sees, whose sizes vary, served eagerly and compiled.

An experiment with ``replay: {param, values, weights, calls}`` measures what a compile policy
(``compile.dynamic``, ``compile.mark_dynamic``) costs and earns on traffic, not on one shape:

1. **Build** the target once per value of ``param`` (the experiment's ``params`` with
   ``param: value``), each from the experiment's seed, in its precision: the callable (the
   module) of the first build serves every call, so every size shares its weights; each build
   gives its inputs. A value whose build fails makes the result a ``runtime_error`` naming it.
2. **Draw** the traffic: ``calls`` value indices from ``random.Random(seed)``, each value with
   probability ``weight / sum(weights)`` (``draw``).
3. **References** for the check (``tasks.check.step.take_references``), before anything compiles.
4. **Prime** (``compile.cache: warm``): the compiled side calls each value once, in the order
   the sequence first draws them, then everything in memory is forgotten
   (``tasks.compiling.forget_compiled``), as the procedure primes its one compile.
5. **First pass**: the sequence served once eagerly and once by a fresh ``torch.compile``
   (``tasks.compiling.compiled_callable``) from its first call, each call timed alone by the
   timer's ``first_call`` (on CUDA between two synchronisations). The sides take turns, a block
   of ``FIRST_PASS_BLOCK`` calls each, the same calls in the same order: drift in clocks or load
   hits both sides alike. Dynamo's counters are read around every compiled call, outside its
   timing: a call during which Dynamo compiled a frame counts its whole wall time into
   ``compile_s`` (as ``compile_latency_s`` counts the first call); every compile after the first
   call's is a recompile, and the guard failures Dynamo gave for them (``tasks.dynamo_watch``)
   are kept. ``compile.mark_dynamic`` marks the inputs of every value
   (``torch._dynamo.mark_dynamic``) before the compiled side first sees them.
6. **Warm pass**: per value, both sides timed interleaved with the experiment's timing
   (``tasks.sides.prepare_sides`` and the timer's ``interleaved``); the medians are each value's
   steady-state times, and their samples give the weighted speedup its bootstrap interval
   (``weighted_speedup_ci``). A value the sequence never drew is compiled here, untimed and
   uncounted.
7. **Check**: per value, the compiled side's output (the code that was timed) against the
   references (``tasks.check.step.check_compiled``); a mismatch names the value. Inductor's
   random ops are not set to eager's RNG here, unlike the procedure's own check compile: a target
   with random ops in inference reads as incorrect under inductor.

Dynamo's recompile limit (``torch._dynamo.config.recompile_limit``, 8 in torch 2.13) caps the
compiles of one frame; past it Dynamo runs the frame eagerly, and ``recompile_limit_hit`` says so.
Recompiles are what a replay measures: its result is never marked ``recompiled``.

The first pass does not pause Python's garbage collector (a server does not); the warm pass
does, as every timer does. Inputs are not copied between calls: a target that mutates its inputs
sees them mutated call after call.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch
from torch._dynamo.utils import calculate_time_spent

from tasks import precision
from tasks.check.judge import Mismatch, Verdict, combine
from tasks.check.outputs import Observed
from tasks.check.step import References, check_compiled, checked_call, take_references
from tasks.compiling import (
    analyse_graphs,
    cache_counters,
    cache_use,
    compiled_callable,
    compiled_target,
    eager_callable,
    forget_compiled,
)
from tasks.dynamo_watch import DynamoWatch, Snapshot
from tasks.models import (
    CheckInfo,
    CompileCache,
    Experiment,
    ReplayConfig,
    ReplayResult,
    ShapeTiming,
    Status,
    TimingConfig,
    TraceInfo,
)
from tasks.phases import PhaseRun
from tasks.sides import prepare_sides
from tasks.stats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, CONFIDENCE, bootstrap_medians, describe
from tasks.targets import Workload, build, copy_inputs
from tasks.timers import Timer
from tasks.tracing import CompileTrace

CUMULATIVE_POINTS = 200  # points of each side's cumulative-time curve a result keeps: enough to draw it
MAX_REASONS = 50  # guard failures kept per replay (a static policy over n values gives n - 1)
# Calls one side serves before the other serves the same ones, in the first pass. A side's first
# calls after the other side's run slow (tasks.timers, BLOCK_TARGET_MS and SETTLE_BLOCKS: within
# 2-4% from the fifth call for most, from about the tenth for a memory-bound call of 0.2 ms, whose
# first ten cost some five calls more): over 50 calls that costs a side under 1% for most targets
# and up to about 10% of the pass's time for such a call, while blocks stay short against the
# swings in load of a shared machine (seconds), which then hit both sides alike. The steady-state
# times (the warm pass) are taken by the timer, which settles each side before timing it.
FIRST_PASS_BLOCK = 50


class ReplayBuildError(RuntimeError):
    """The target could not be built at one value of the replayed parameter."""


class EagerFailed(RuntimeError):
    """The eager side raised during the first pass: ``error``, the target's own error."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True)
class Traffic:
    """The replayed sequence: value indices, one per call, and the normalised weights it was drawn from."""

    values: list[Any]
    weights: list[float]  # sum to 1
    sequence: list[int]  # an index into values per call

    def first_seen(self) -> list[int]:
        """The value indices in the order the sequence first draws them, then those it never draws."""
        order = list(dict.fromkeys(self.sequence))
        return order + [i for i in range(len(self.values)) if i not in order]


@dataclass(frozen=True)
class Pass:
    """One side's first pass: each call's wall time, in order; and for the compiled side, the calls
    during which Dynamo compiled."""

    call_ms: list[float]
    compiled_calls: list[int] = field(default_factory=list)  # 0-based positions in the sequence

    @property
    def total_ms(self) -> float:
        return sum(self.call_ms)


@dataclass(slots=True)
class Replayed:
    """A replay's outcome: its status, its error, and the result fields it measured, named as
    ``Result``'s (``result_fields``)."""

    status: Status = "ok"
    error: BaseException | None = None
    replay: ReplayResult | None = None
    compile_latency_s: float | None = None
    compile_cache: CompileCache | None = None
    compile_breakdown: dict[str, float] = field(default_factory=dict)
    graphs_compiled: int | None = None
    graph_count: int | None = None
    graph_breaks: int | None = None
    break_reasons: list[str] = field(default_factory=list)
    correct: bool | None = None
    check: CheckInfo | None = None
    check_note: str | None = None
    speedup: float | None = None
    speedup_ci: tuple[float, float] | None = None
    trace: TraceInfo | None = None

    def failed(self, status: Status, error: BaseException) -> Replayed:
        self.status, self.error = status, error
        return self

    def result_fields(self) -> dict[str, Any]:
        """Every measured field but the status and the error, by the name ``Result`` gives it."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("status", "error")}


def replay(exp: Experiment, device: torch.device, timer: Timer) -> Replayed:
    """The recipe of the module docstring, steps 1 to 7; never raises."""
    cfg = _config(exp)
    out = Replayed()

    # 1. Every value's inputs; the first build's callable serves them all. 2. The traffic.
    try:
        run, fn, shapes = build_all(exp, cfg, device)
    except Exception as e:
        return out.failed("runtime_error", e)
    eager_side = run.side(eager_callable(fn, exp.compile))
    traffic = draw(cfg, exp.seed)

    # 3. The references, before anything compiles.
    try:
        references = _references(exp, run, fn, shapes, device)
    except Exception as e:
        return out.failed("runtime_error", precision.explain_failure(e, exp.precision))

    # 4. Graphs and breaks of the first value; prime the on-disk caches; forget everything in memory.
    first = Workload(fn, shapes[0])
    out.graph_count, out.graph_breaks, out.break_reasons = analyse_graphs(
        compiled_target(first, run, exp.compile), copy_inputs(shapes[0])
    )
    try:
        mark_dynamic(shapes, exp.compile.mark_dynamic)
        if exp.compile.cache == "warm":
            primed = compiled_callable(first, run, exp.compile)
            for i in traffic.first_seen():
                primed(*shapes[i])
            del primed
        forget_compiled()
    except Exception as e:
        return out.failed("compile_error", e)

    # 5. The first pass, both sides, the compiled one from a fresh compile; 6. the warm pass.
    #    Traced (``trace: true``): torch's structured trace records the first pass, where the compiles are measured.
    with DynamoWatch() as watch:
        start = watch.snapshot()
        trace = CompileTrace(exp.trace)
        try:
            with trace:
                compiled_side = compiled_callable(first, run, exp.compile)
                eager, compiled = serve(timer, eager_side, compiled_side, shapes, traffic.sequence, watch.snapshot)
        except EagerFailed as e:
            out.trace = trace.info
            return out.failed("runtime_error", precision.explain_failure(e.error, exp.precision))
        except Exception as e:
            out.trace = trace.info
            return out.failed("compile_error", e)
        out.trace = trace.info
        out.compile_cache = cache_use(exp.compile.cache, exp.compile.cache == "warm", cache_counters())
        out.compile_breakdown = {phase: float(s) for phase, s in calculate_time_spent().items()}
        after = watch.snapshot()
        reasons = watch.reasons[:MAX_REASONS]
        try:
            per_shape = warm_pass(timer, eager_side, compiled_side, shapes, traffic, exp.timing)
        except Exception as e:
            return out.failed("runtime_error", e)
        limit_hit = watch.snapshot().limit_hits > start.limit_hits or bool(watch.limit_messages)

    # 7. The check, per value, on the code that was timed.
    try:
        verdict = check_values(exp, cfg, run, compiled_side, references)
    except Exception as e:
        return out.failed("runtime_error", e)

    out.replay = summarise(cfg, traffic, eager, compiled, per_shape, reasons, limit_hit)
    out.compile_latency_s = compiled.call_ms[0] / 1e3
    out.graphs_compiled = after.graphs - start.graphs
    out.speedup, out.speedup_ci = out.replay.weighted_speedup, out.replay.weighted_speedup_ci
    out.correct, out.check, out.check_note = verdict.correct, verdict.check, verdict.note
    return out.failed("incorrect", verdict.mismatch) if verdict.mismatch is not None else out


def _config(exp: Experiment) -> ReplayConfig:
    if exp.replay is None:
        raise ValueError("the experiment replays no traffic (replay is not set)")
    return exp.replay


def draw(cfg: ReplayConfig, seed: int) -> Traffic:
    """``cfg.calls`` value indices drawn with replacement from ``random.Random(seed)``, value i with
    probability ``weights[i] / sum(weights)`` (uniform without weights): the same seed draws the
    same sequence on every machine and Python 3 release."""
    raw = cfg.weights or [1.0] * len(cfg.values)
    total = sum(raw)
    weights = [w / total for w in raw]
    sequence = random.Random(seed).choices(range(len(cfg.values)), weights=weights, k=cfg.calls)
    return Traffic(list(cfg.values), weights, sequence)


def build_all(
    exp: Experiment, cfg: ReplayConfig, device: torch.device
) -> tuple[PhaseRun, Callable[..., Any], list[tuple[Any, ...]]]:
    """The target built at each value, from the experiment's seed, in its precision: the phase's
    run and the callable of the first build, and every build's inputs (a later build's callable
    is dropped as soon as its inputs are taken)."""
    first = build_at(exp, cfg.param, cfg.values[0], device)
    inputs = [first.inputs, *(build_at(exp, cfg.param, value, device).inputs for value in cfg.values[1:])]
    run, _ = PhaseRun.prepare(first, exp.phase, exp.optimizer)
    return run, first.fn, inputs


def build_at(exp: Experiment, param: str, value: Any, device: torch.device) -> Workload:
    """The target with ``param: value`` over its params, from the experiment's seed, in its precision;
    a failure is a ``ReplayBuildError`` naming the value."""
    try:
        torch.manual_seed(exp.seed)
        return precision.cast(build(exp.target, device, {**exp.params, param: value}), exp.precision)
    except Exception as e:
        cause = precision.explain_failure(e, exp.precision)
        raise ReplayBuildError(
            f"building {exp.target} with {param}={value!r} failed: {type(cause).__name__}: {cause}"
        ) from e


def mark_dynamic(shapes: Sequence[tuple[Any, ...]], pairs: Sequence[tuple[int, int]]) -> None:
    """``torch._dynamo.mark_dynamic(inputs[i], dim)`` for every ``[i, dim]`` pair and every value's
    inputs. The mark stays on the tensor: marking once before the compiled side first sees it
    marks every compiled call of it."""
    for inputs in shapes:
        for index, dim in pairs:
            if index >= len(inputs) or not isinstance(inputs[index], torch.Tensor):
                raise ValueError(
                    f"compile.mark_dynamic: input {index} is not a tensor (the target takes {len(inputs)})"
                )
            torch._dynamo.mark_dynamic(inputs[index], dim)


def serve(
    timer: Timer,
    eager_side: Callable[..., Any],
    compiled_side: Callable[..., Any],
    shapes: Sequence[tuple[Any, ...]],
    sequence: Sequence[int],
    counters: Callable[[], Snapshot],
) -> tuple[Pass, Pass]:
    """The sequence served by both sides in turn, ``FIRST_PASS_BLOCK`` calls at a time, eager first,
    each call timed alone (``timer.first_call``). Dynamo's ``counters`` are read before and after
    each compiled call, outside its timing: the call compiled when Dynamo's frame attempts that the
    recompile limit did not refuse grew."""
    eager_calls = [functools.partial(eager_side, *inputs) for inputs in shapes]
    compiled_calls = [functools.partial(compiled_side, *inputs) for inputs in shapes]
    eager_ms: list[float] = []
    compiled_ms: list[float] = []
    compiled_at: list[int] = []
    for start in range(0, len(sequence), FIRST_PASS_BLOCK):
        block = sequence[start : start + FIRST_PASS_BLOCK]
        for i in block:
            try:
                eager_ms.append(timer.first_call(eager_calls[i])[1])
            except Exception as e:
                raise EagerFailed(e) from e
        for position, i in enumerate(block, start):
            before = counters()
            compiled_ms.append(timer.first_call(compiled_calls[i])[1])
            after = counters()
            if after.frames - after.limit_hits > before.frames - before.limit_hits:
                compiled_at.append(position)
    return Pass(eager_ms), Pass(compiled_ms, compiled_at)


def warm_pass(
    timer: Timer,
    eager_side: Callable[..., Any],
    compiled_side: Callable[..., Any],
    shapes: Sequence[tuple[Any, ...]],
    traffic: Traffic,
    timing: TimingConfig,
) -> list[ShapeTiming]:
    """Per value, both sides estimated, warmed up and timed interleaved as the procedure times
    them (``tasks.sides.prepare_sides``, then the timer's ``interleaved``)."""
    per_shape = []
    for i, inputs in enumerate(shapes):
        calls, plans = prepare_sides(timer, Workload(eager_side, inputs), [eager_side, compiled_side], timing)
        eager, compiled = timer.interleaved(calls, plans, min(p.repeats for p in plans))
        per_shape.append(
            ShapeTiming(
                value=traffic.values[i],
                weight=traffic.weights[i],
                drawn=traffic.sequence.count(i),
                eager_ms=describe(eager.samples_ms).median_ms,
                compiled_ms=describe(compiled.samples_ms).median_ms,
                eager_samples_ms=eager.samples_ms,
                compiled_samples_ms=compiled.samples_ms,
            )
        )
    return per_shape


def _references(
    exp: Experiment, run: PhaseRun, fn: Callable[..., Any], shapes: list[tuple[Any, ...]], device: torch.device
) -> list[References]:
    """Each value's references (one float64 copy of the target for all), when the check is on."""
    if not exp.check.enabled:
        return []
    work = Workload(fn, shapes[0], check_inputs=shapes[1:])
    return take_references(exp, run, eager_callable(fn, exp.compile), work, device, False)


def check_values(
    exp: Experiment, cfg: ReplayConfig, run: PhaseRun, compiled_side: Callable[..., Any], references: list[References]
) -> Verdict:
    """Each value's compiled output judged against its references (``check_compiled``: a call and
    the call after it); a mismatch names the value. Unchecked when the check is off."""
    if not references:  # check.enabled is false: check_compiled says so
        return check_compiled(exp, run, compiled_side, Observed(), [], False, 1)
    verdicts = []
    for value, ref in zip(cfg.values, references, strict=True):
        first = checked_call(run, compiled_side, ref.inputs, exp.seed, False)
        verdict = check_compiled(exp, run, compiled_side, first, [ref], False, 1)
        if verdict.mismatch is not None:
            verdict.mismatch = Mismatch(f"{cfg.param}={value!r}: {verdict.mismatch}")
        verdicts.append(verdict)
    return combine(verdicts)


def summarise(
    cfg: ReplayConfig,
    traffic: Traffic,
    eager: Pass,
    compiled: Pass,
    per_shape: list[ShapeTiming],
    reasons: list[str],
    limit_hit: bool,
) -> ReplayResult:
    """The replay's figures: the passes' totals and curves, the compiles, the derived figures."""
    compile_s = sum(compiled.call_ms[p] for p in compiled.compiled_calls) / 1e3
    first_call_compiles = 1 if compiled.compiled_calls[:1] == [0] else 0
    at = sample_points(cfg.calls)
    return ReplayResult(
        param=cfg.param,
        calls=cfg.calls,
        total_ms={"eager": eager.total_ms, "compiled": compiled.total_ms},
        compile_s=compile_s,
        compiles=len(compiled.compiled_calls),
        recompiles=len(compiled.compiled_calls) - first_call_compiles,
        recompile_reasons=reasons,
        recompile_limit_hit=limit_hit,
        per_shape=per_shape,
        weighted_speedup=weighted_speedup(per_shape),
        weighted_speedup_ci=weighted_speedup_ci(per_shape),
        break_even_calls=break_even_calls(compile_s, per_shape),
        cumulative_at=at,
        cumulative_ms={"eager": cumulative(eager.call_ms, at), "compiled": cumulative(compiled.call_ms, at)},
    )


def weighted_speedup(per_shape: Sequence[ShapeTiming]) -> float | None:
    """Steady-state speedup over the traffic: sum(w eager_ms) / sum(w compiled_ms), the time a
    call takes on average in each mode, weights normalised; None without a compiled time."""
    eager = sum(s.weight * s.eager_ms for s in per_shape)
    compiled = sum(s.weight * s.compiled_ms for s in per_shape)
    return eager / compiled if compiled > 0 else None


def weighted_speedup_ci(
    per_shape: Sequence[ShapeTiming], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float] | None:
    """95% percentile-bootstrap interval of ``weighted_speedup``: each replicate resamples every
    value's two sides (``tasks.stats.bootstrap_medians``) and weighs their medians as
    ``weighted_speedup`` does. None where some value has no samples."""
    if not per_shape or any(not s.eager_samples_ms or not s.compiled_samples_ms for s in per_shape):
        return None
    rng = np.random.default_rng(seed)
    eager = sum(s.weight * bootstrap_medians(s.eager_samples_ms, rng, resamples) for s in per_shape)
    compiled = sum(s.weight * bootstrap_medians(s.compiled_samples_ms, rng, resamples) for s in per_shape)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(eager / compiled, [tail, 100 - tail])
    return float(low), float(high)


def break_even_calls(compile_s: float, per_shape: Sequence[ShapeTiming]) -> float | None:
    """Calls after which compiling has paid for itself: ``compile_s`` over the time a compiled call
    saves on average over the traffic, sum(w (eager_ms - compiled_ms)) with the weights normalised;
    None where compiled is not faster."""
    total = sum(s.weight for s in per_shape)
    saved_ms = sum(s.weight * (s.eager_ms - s.compiled_ms) for s in per_shape) / total if total else 0.0
    return compile_s * 1e3 / saved_ms if saved_ms > 0 else None


def sample_points(calls: int, points: int = CUMULATIVE_POINTS) -> list[int]:
    """At most ``points`` call counts (1-based) along a sequence of ``calls``, evenly spaced, the
    first and the last call always among them."""
    if calls <= points:
        return list(range(1, calls + 1))
    step = math.ceil((calls - 1) / (points - 1))
    return sorted({*range(1, calls, step), calls})


def cumulative(call_ms: Sequence[float], at: Sequence[int]) -> list[float]:
    """The running total of ``call_ms`` after each of the calls ``at`` (1-based)."""
    totals, running = [], 0.0
    for ms in call_ms:
        running += ms
        totals.append(running)
    return [totals[n - 1] for n in at]
