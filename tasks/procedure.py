"""The benchmark procedure of one experiment, run inside one worker process.

Nothing here knows about Ray: the caller says where the experiment was placed
(``Placement``) and gets a ``Result`` back, whatever happened. An exception inside the
experiment becomes a failed result, never a crash of the caller.
"""

from __future__ import annotations

import functools
import os
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch._dynamo
import torch._inductor.config
from torch._dynamo.utils import calculate_time_spent, counters

from tasks import phases, precision
from tasks.correctness import check_compiled, checked_inputs, take_references
from tasks.dynamo_watch import DynamoWatch, Snapshot
from tasks.hygiene import out_of_memory
from tasks.isolation import Isolation, isolate
from tasks.metadata import result_metadata, versions
from tasks.models import (
    CompileConfig,
    ErrorInfo,
    Experiment,
    Measurement,
    Result,
    SideTiming,
    Status,
    TimingConfig,
    WorkerInfo,
    WorkInfo,
    result_identity,
)
from tasks.nvml import gpu_state
from tasks.phases import PhaseRun
from tasks.stats import speedup_ci
from tasks.targets import FreshInputs, Workload, build, copy_inputs, input_versions
from tasks.timers import CUDAGRAPH_MIN_WARMUP, Plan, Setup, Timer, plan, timer_for

_experiments_in_this_process = 0
MAX_REASONS = 5  # guard failures listed per result; the count says how many there were


@dataclass(frozen=True)
class Placement:
    """What the scheduler reserved for this experiment, as it sees it."""

    node_id: str | None = None
    gpu_ids: Sequence[str] = ()
    cpus: int | None = None  # cores reserved: claimed, pinned, and torch's thread count
    gpu_model: str | None = None  # the node's accelerator_type, when the scheduler knows it

    @property
    def slot(self) -> str:
        """What no two concurrent experiments on a node share: a GPU, or else the CPU side."""
        return "gpu" + "-".join(self.gpu_ids) if self.gpu_ids else "cpu"


@dataclass
class _Partial:
    """Result fields gathered so far, so that a failure still reports what was measured."""

    fields: dict[str, Any] = field(default_factory=dict)

    def finish(self, exp: Experiment, status: Status, error: BaseException | None = None) -> Result:
        if out_of_memory(error):  # wherever it was raised: not retried, the worker cleans the GPU
            status = "oom"
        return Result(
            **result_identity(exp),
            status=status,
            error=ErrorInfo.from_exception(error) if error is not None else None,
            finished_at=time.time(),
            **self.fields,
        )


def run_experiment(exp: Experiment, placement: Placement = Placement(), timer: Timer | None = None) -> Result:
    """Run one experiment on the cores and compile cache it owns; never raises."""
    global _experiments_in_this_process
    got = _Partial({"started_at": time.time(), "device": None})
    fresh_process = _experiments_in_this_process == 0
    _experiments_in_this_process += 1
    try:
        with isolate(placement.cpus, exp.compile.cache, placement.slot, exp.timing.allocator) as iso:
            got.fields.update(result_metadata(exp))
            return _run(exp, placement, timer, iso, fresh_process, got)
    except Exception as e:  # isolation itself failed (e.g. no permission to pin)
        return got.finish(exp, "runtime_error", e)


def _run(
    exp: Experiment, placement: Placement, timer: Timer | None, iso: Isolation, fresh_process: bool, got: _Partial
) -> Result:
    """Resolve the device and its timer, then measure under the experiment's precision and phase."""
    try:
        device = resolve_device(exp.device)
    except RuntimeError as e:
        return got.finish(exp, "runtime_error", e)
    timer = timer or timer_for(device, exp.timing)
    got.fields["device"] = device.type
    got.fields["worker"] = worker_info(device, placement)
    measurement = got.fields["measurement"] = Measurement(
        timer=timer.method,  # type: ignore[arg-type]
        flush_l2=exp.timing.flush_l2 and device.type == "cuda",
        cudagraphs=exp.compile.cudagraphs and device.type == "cuda",
        cache=exp.compile.cache,
        cache_dir=iso.cache_dir,
        fresh_process=fresh_process,
        cores=iso.cores,
        exclusive_cores=iso.exclusive,
        compile_threads=iso.compile_threads,
        allocator=iso.allocator,
    )
    try:
        precision.check_supported(exp.precision, device)
    except precision.PrecisionError as e:
        return got.finish(exp, "runtime_error", e)
    with precision.active(exp.precision, device), phases.grad_mode(exp.phase), harness_randomness(exp, got):
        return _measure(exp, device, timer, measurement, got)


def _measure(exp: Experiment, device: torch.device, timer: Timer, measurement: Measurement, got: _Partial) -> Result:
    """Build, time eagerly, take the references, analyse graph breaks, compile, check, count the
    work, time both sides interleaved. Every call sees its own copy of the inputs when the target
    mutates them; every checked call starts from the same training state and seed."""
    # 1. Eager: build the target from a seeded RNG in its precision and phase; its first call.
    try:
        torch.manual_seed(exp.seed)
        work = precision.cast(build(exp.target, device, exp.params), exp.precision)
        run, work = PhaseRun.prepare(work, exp.phase, exp.optimizer)
        eager_fn = eager_callable(work.fn, exp.compile)
        eager_side = run.side(eager_fn)
        inputs = copy_inputs(work.inputs)
        versions_before = input_versions(inputs)
        _, eager_first_ms = timer.first_call(lambda: eager_side(*inputs))
        mutated = measurement.inputs_mutated = input_versions(inputs) != versions_before
        run.save()  # training: the state every checked step starts from

        # 2. References, before anything compiles: eager twice (does it repeat itself?) and a float64 copy.
        references = take_references(exp, run, eager_fn, work, device, mutated) if exp.check.enabled else []
    except Exception as e:
        return got.finish(exp, "runtime_error", precision.explain_failure(e, exp.precision))

    # 3. The work of one call (FLOPs, bytes); graphs and graph breaks, from a Dynamo trace.
    got.fields["work"] = count_work(eager_fn, copy_inputs(work.inputs), phase=exp.phase, loss_fn=run.loss_fn)
    got.fields.update(analyse_graphs(work.fn, copy_inputs(work.inputs)))

    # 4. Compile from a clean compiler state; the first call, from the checked state, pays for compilation.
    torch._dynamo.reset()  # also clears Dynamo's compile-time metrics
    with DynamoWatch() as watch:
        start = watch.snapshot()
        try:
            compiled_side = compiled_callable(work, run, exp.compile)
            inputs = checked_inputs(run, work.inputs, exp.seed)
            result, compiled_first_ms = timer.first_call(lambda: compiled_side(*inputs))
        except Exception as e:
            eager_alone = replace(work, fn=FreshInputs([]).wrap(eager_side) if mutated else eager_side)
            got.fields["eager"] = time_eager_alone(timer, eager_alone, exp, eager_first_ms)
            return got.finish(exp, "compile_error", e)
        first_result = run.observe(result, inputs, mutated)
        got.fields["compile_latency_s"] = compiled_first_ms / 1e3
        got.fields["compile_breakdown"] = {phase: float(s) for phase, s in calculate_time_spent().items()}
        got.fields["graphs_compiled"] = watch.snapshot().graphs - start.graphs

        # 5. Correctness: that first call, a later one (a CUDA graph replay), every check input.
        try:
            replays = CUDAGRAPH_MIN_WARMUP if measurement.cudagraphs else 1
            verdict = check_compiled(exp, run, compiled_side, first_result, references, mutated, replays)
        except Exception as e:
            return got.finish(exp, "runtime_error", e)
        got.fields.update(correct=verdict.correct, check=verdict.check, check_note=verdict.note)

        # 6. Both sides: estimate, warm up, then interleaved timed rounds; watch for compiles.
        sides, fresh = [eager_side, compiled_side], None
        if mutated:
            fresh = FreshInputs([work.inputs, *(work.cycle or [])])
            sides = [fresh.wrap(side) for side in sides]
        try:
            min_warmups = [0, CUDAGRAPH_MIN_WARMUP if measurement.cudagraphs else 0]
            eager, compiled = time_sides(
                timer,
                work,
                sides,
                [eager_first_ms, compiled_first_ms],
                exp.timing,
                min_warmups,
                device,
                measurement,
                watch,
                before_block=fresh.setup if fresh is not None else None,
            )
        except Exception as e:
            return got.finish(exp, "runtime_error", e)
        got.fields.update(recompile_verdict(watch, start))

    got.fields.update(
        eager=eager,
        compiled=compiled,
        speedup=eager.median_ms / compiled.median_ms if compiled.median_ms > 0 else None,
        speedup_ci=speedup_ci(eager.samples_ms, compiled.samples_ms) if compiled.median_ms > 0 else None,
        memory_ratio=(
            eager.peak_memory_bytes / compiled.peak_memory_bytes
            if eager.peak_memory_bytes and compiled.peak_memory_bytes
            else None
        ),
    )
    return got.finish(exp, "incorrect" if verdict.correct is False else "ok", verdict.mismatch)


@contextmanager
def harness_randomness(exp: Experiment, got: _Partial) -> Iterator[None]:
    """While checking, inductor's random ops fall back to eager's RNG (``fallback_random``), so a
    seed reset before each side gives both the same dropout masks, as the harness's accuracy runs
    do; the setting is recorded with the inductor options."""
    if not exp.check.enabled:
        yield
        return
    if exp.compile.backend == "inductor":
        got.fields["inductor_options"] = {**got.fields.get("inductor_options", {}), "fallback_random": True}
    with torch._inductor.config.patch(fallback_random=True):
        yield


def count_work(fn: Callable[..., Any], inputs: tuple[Any, ...], **kwargs: Any) -> WorkInfo | None:
    """FLOPs and bytes of one call (``tasks.work``); None when they cannot be counted."""
    try:
        from tasks.work import count_work as count

        return count(fn, inputs, **kwargs)
    except Exception:  # counting the work never fails the experiment
        return None


def prepare_sides(
    timer: Timer,
    work: Workload,
    fns: Sequence[Callable[..., Any]],
    timing: TimingConfig,
    min_warmups: Sequence[int] = (),
) -> tuple[list[Callable[[], Any]], list[Plan]]:
    """Each side's call (cycling inputs where the workload has them) and plan, from an estimate
    of one call on the first inputs; the warmup calls are made here.

    Every side gets the same block size, the largest any side needs: a side timed in blocks
    against one timed call by call would compare a loop's steady state with single calls.
    Counts the spec leaves out are chosen by the timer's device (``plan``)."""
    calls = [work.caller(fn) for fn in fns]
    min_warmups = list(min_warmups) or [0] * len(fns)
    by_device = getattr(timer, "budgets_by_default", False)
    estimates = [timer.estimate(functools.partial(fn, *work.inputs)) for fn in fns]
    block = max(plan(e, timing, timer.blocked).block_size for e in estimates)
    plans = [
        plan(e, timing, timer.blocked, minimum, block_size=block, budgets_by_default=by_device)
        for e, minimum in zip(estimates, min_warmups, strict=True)
    ]
    for call, p in zip(calls, plans, strict=True):
        timer.warm(call, p.warmup)
    return calls, plans


def time_sides(
    timer: Timer,
    work: Workload,
    fns: Sequence[Callable[..., Any]],
    first_ms: Sequence[float],
    timing: TimingConfig,
    min_warmups: Sequence[int],
    device: torch.device,
    measurement: Measurement,
    watch: DynamoWatch,
    before_block: Setup | None = None,
) -> list[SideTiming]:
    """Every side timed in one interleaved window, after its warmup; the GPU's state around the
    window and Dynamo's counters at its edges (``watch.window_*``); then each side's peak memory,
    and whether inductor really used the CUDA graphs it was asked for.

    Cycling inputs restart at the same position for every side in each round (the timers'
    per-block setup), so both sides see the same input in the same round."""
    from tasks.targets import CycleCall

    calls, plans = prepare_sides(timer, work, fns, timing, min_warmups)
    setups: list[Setup | None] = [call.start_round if isinstance(call, CycleCall) else None for call in calls]
    if before_block is not None:  # fresh copies of inputs the target mutates, for each block
        setups = preceded_by(before_block, setups)
    measurement.gpu_before = gpu_state(device)
    watch.open_window()
    sides = timer.interleaved(calls, plans, min(p.repeats for p in plans), setups)
    watch.close_window()
    measurement.gpu_after = gpu_state(device)
    peaks = [peak_memory(call, device) for call in calls]
    if measurement.cudagraphs:
        measurement.cudagraphs_used, measurement.cudagraph_skips = watch.cudagraph_verdict()
    return [
        SideTiming.from_samples(
            first,
            side.samples_ms,
            p.warmup,
            p.block_size,
            peak_memory_bytes=peak,
            device_samples_ms=side.device_samples_ms,
            host_bound=side.host_bound,
        )
        for first, side, p, peak in zip(first_ms, sides, plans, peaks, strict=True)
    ]


def time_eager_alone(timer: Timer, work: Workload, exp: Experiment, first_ms: float) -> SideTiming | None:
    """The eager side when there is no compiled side to interleave with (compilation failed)."""
    try:
        calls, (p,) = prepare_sides(timer, work, [work.fn], exp.timing)
        (side,) = timer.interleaved(calls, [p], p.repeats)
    except Exception:
        return None
    return SideTiming.from_samples(
        first_ms,
        side.samples_ms,
        p.warmup,
        p.block_size,
        device_samples_ms=side.device_samples_ms,
        host_bound=side.host_bound,
    )


def resolve_device(requested: str) -> torch.device:
    """``auto`` is CUDA when this process sees a GPU, else the CPU; ``cuda`` insists on one."""
    has_cuda = torch.cuda.is_available()  # first CUDA touch: after Ray set CUDA_VISIBLE_DEVICES
    if requested == "cuda" and not has_cuda:
        raise RuntimeError("device 'cuda' requested but this worker sees no CUDA device")
    if requested == "cpu" or not has_cuda:
        return torch.device("cpu")
    return torch.device("cuda", 0)  # the one device Ray made visible to this process


def worker_info(device: torch.device, placement: Placement) -> WorkerInfo:
    return WorkerInfo(
        hostname=socket.gethostname(),
        node_id=placement.node_id,
        pid=os.getpid(),
        gpu_ids=[str(g) for g in placement.gpu_ids],
        gpu_name=torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        cpu_model=cpu_model(),
        threads=torch.get_num_threads(),
        gpu_model=placement.gpu_model or (torch.cuda.get_device_name(device) if device.type == "cuda" else None),
        versions=versions(),
    )


def compile_callable(fn: Callable[..., Any], cfg: CompileConfig) -> Callable[..., Any]:
    """``torch.compile(fn, ...)``, or ``fn.compile(...)`` in place for ``method: module_compile``."""
    kwargs: dict[str, Any] = {"backend": cfg.backend, "fullgraph": cfg.fullgraph, "dynamic": cfg.dynamic}
    if cfg.mode is not None:
        kwargs["mode"] = cfg.mode
    if cfg.options:
        kwargs["options"] = dict(cfg.options)
    if cfg.method == "module_compile":
        if not isinstance(fn, torch.nn.Module):
            raise TypeError(f"compile.method 'module_compile' needs an nn.Module target, got {type(fn).__name__}")
        fn.compile(**kwargs)
        return fn
    return torch.compile(fn, **kwargs)


def eager_callable(fn: Callable[..., Any], cfg: CompileConfig) -> Callable[..., Any]:
    """The uncompiled call of ``fn``: ``mod.compile()`` compiles ``mod.__call__`` in place, so
    for ``module_compile`` the eager side calls the module's own ``_call_impl`` (the path
    ``__call__`` takes when nothing is compiled: hooks, then ``forward``)."""
    if cfg.method == "module_compile" and isinstance(fn, torch.nn.Module):
        return fn._call_impl
    return fn


def compiled_callable(work: Workload, run: PhaseRun, cfg: CompileConfig) -> Callable[..., Any]:
    """The compiled side's call: the phase's step around the compiled target (``scope: model``),
    or the whole step compiled (``scope: step``; for inference the step is the forward)."""
    if cfg.scope == "step":
        if cfg.method == "module_compile":
            raise TypeError("compile.scope 'step' compiles a step function; it cannot go with method 'module_compile'")
        return compile_callable(run.side(work.fn), cfg)
    return run.side(compile_callable(work.fn, cfg))


def peak_memory(call: Callable[[], Any], device: torch.device) -> int | None:
    """Bytes one call allocates at its peak beyond what was allocated before it (CUDA only).

    ``max_memory_allocated`` after a reset of the peak statistics, minus ``memory_allocated``
    just before the call: the inputs, parameters, outputs still held and the L2-flush buffer
    are excluded, so ``memory_ratio`` compares what eager and compiled allocate themselves (the
    harness's compression ratio)."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    call()
    torch.cuda.synchronize(device)
    return max(0, torch.cuda.max_memory_allocated(device) - before)


def recompile_verdict(watch: DynamoWatch, start: Snapshot) -> dict[str, Any]:
    """``recompiled`` when Dynamo compiled inside the timed window, or hit its recompile limit
    at any point since compilation began (after which it silently runs the frame eagerly)."""
    reasons = []
    before, after = watch.window_before or start, watch.window_after or watch.snapshot()
    if after.frames > before.frames:
        window_reasons = watch.reasons[watch.window_reasons :]
        count = after.frames - before.frames
        reasons.append(f"{count} compilation(s) inside the timed window")
        reasons += [f"guard failure: {r}" for r in window_reasons[:MAX_REASONS]]
        if len(window_reasons) > MAX_REASONS:
            reasons.append(f"... and {len(window_reasons) - MAX_REASONS} more guard failures")
    if after.limit_hits > start.limit_hits or watch.limit_messages:
        reasons.append("recompile limit hit: Dynamo ran the frame eagerly from then on")
        reasons += watch.limit_messages[:1]
    return {"recompiled": bool(reasons), "recompile_reasons": reasons}


def analyse_graphs(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> dict[str, Any]:
    """Graph count, graph breaks and their reasons, from ``torch._dynamo.explain`` of the target's
    forward on ``inputs`` (a copy: the trace runs the target).

    ``explain`` resets Dynamo before and after its own trace. Some reasons it gives are
    internal (``generic_jump TensorVariable()``); the user-facing message Dynamo logged
    for the same source line replaces them.
    """
    counters.clear()
    try:
        explained = torch._dynamo.explain(fn)(*inputs)
    except Exception:
        return {"graph_count": None, "graph_breaks": None, "break_reasons": []}
    logged = [*counters["unimplemented"], *counters["graph_break"]]
    reasons = [_describe_break(r, logged) for r in explained.break_reasons if r.graph_break]
    counters.clear()
    return {"graph_count": explained.graph_count, "graph_breaks": len(reasons), "break_reasons": reasons}


def _describe_break(reason: Any, logged: list[str]) -> str:
    text = str(reason.reason).strip().splitlines()[0]
    frame = reason.user_stack[-1] if reason.user_stack else None
    if frame is None:
        return text
    where = f'File "{frame.filename}", line {frame.lineno}'
    if text.startswith("generic_jump"):
        text = next((m.splitlines()[0] for m in logged if where in m), text)
    return f"{text} ({Path(frame.filename).name}:{frame.lineno})"


def preceded_by(first: Setup, setups: Sequence[Setup | None]) -> list[Setup | None]:
    """Per-block setups that each run ``first`` before their own."""

    def chain(then: Setup | None) -> Setup:
        def both(calls: int) -> None:
            first(calls)
            if then is not None:
                then(calls)

        return both

    return [chain(then) for then in setups]


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None
