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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch._dynamo
from torch._dynamo.utils import calculate_time_spent, counters

from tasks.dynamo_watch import DynamoWatch, Snapshot
from tasks.isolation import Isolation, isolate
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
)
from tasks.nvml import gpu_state
from tasks.stats import speedup_ci
from tasks.targets import Workload, build
from tasks.timers import CUDAGRAPH_MIN_WARMUP, Plan, Timer, plan, timer_for

_experiments_in_this_process = 0
MAX_REASONS = 5  # guard failures listed per result; the count says how many there were


@dataclass(frozen=True)
class Placement:
    """What the scheduler reserved for this experiment, as it sees it."""

    node_id: str | None = None
    gpu_ids: Sequence[str] = ()
    cpus: int | None = None  # cores reserved: claimed, pinned, and torch's thread count

    @property
    def slot(self) -> str:
        """What no two concurrent experiments on a node share: a GPU, or else the CPU side."""
        return "gpu" + "-".join(self.gpu_ids) if self.gpu_ids else "cpu"


@dataclass
class _Partial:
    """Result fields gathered so far, so that a failure still reports what was measured."""

    fields: dict[str, Any] = field(default_factory=dict)

    def finish(self, exp: Experiment, status: Status, error: BaseException | None = None) -> Result:
        return Result(
            experiment_id=exp.id,
            target=exp.target,
            params=exp.params,
            compile=exp.compile,
            timing=exp.timing,
            seed=exp.seed,
            phase=exp.phase,
            precision=exp.precision,
            gpu_model=exp.gpu_model,
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
        with isolate(placement.cpus, exp.compile.cache, placement.slot) as iso:
            return _run(exp, placement, timer, iso, fresh_process, got)
    except Exception as e:  # isolation itself failed (e.g. no permission to pin)
        return got.finish(exp, "runtime_error", e)


def _run(
    exp: Experiment, placement: Placement, timer: Timer | None, iso: Isolation, fresh_process: bool, got: _Partial
) -> Result:
    """Build, time eagerly, analyse graph breaks, compile, check, time both sides interleaved."""
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

    # 1. Eager: build the target from a seeded RNG and take its first call.
    try:
        torch.manual_seed(exp.seed)
        work = build(exp.target, device, exp.params)
        eager_out, eager_first_ms = timer.first_call(lambda: work.fn(*work.inputs))
        references = [work.fn(*inputs) for inputs in work.check_inputs]
    except Exception as e:
        return got.finish(exp, "runtime_error", e)

    # 2. Graphs and graph breaks, from a Dynamo trace of the eager callable.
    got.fields.update(analyse_graphs(work))

    # 3. Compile from a clean compiler state; the first call pays for compilation.
    torch._dynamo.reset()  # also clears Dynamo's compile-time metrics
    with DynamoWatch() as watch:
        start = watch.snapshot()
        try:
            compiled_fn = compile_callable(work.fn, exp.compile)
            compiled_out, compiled_first_ms = timer.first_call(lambda: compiled_fn(*work.inputs))
        except Exception as e:
            got.fields["eager"] = time_eager_alone(timer, work, exp, eager_first_ms)
            return got.finish(exp, "compile_error", e)
        got.fields["compile_latency_s"] = compiled_first_ms / 1e3
        got.fields["compile_breakdown"] = {phase: float(s) for phase, s in calculate_time_spent().items()}
        got.fields["graphs_compiled"] = watch.snapshot().graphs - start.graphs

        eager_fn = eager_callable(work.fn, exp.compile)

        # 4. Correctness against eager, on the first inputs and on every check input.
        try:
            mismatch = compare(compiled_out, eager_out)
            for inputs, reference in zip(work.check_inputs, references, strict=True):
                mismatch = mismatch or compare(compiled_fn(*inputs), reference)
        except Exception as e:
            return got.finish(exp, "runtime_error", e)
        got.fields["correct"] = mismatch is None

        # 5. Both sides: estimate, warm up, then interleaved timed rounds; watch for compiles.
        try:
            min_warmups = [0, CUDAGRAPH_MIN_WARMUP if measurement.cudagraphs else 0]
            eager, compiled = time_sides(
                timer,
                work,
                [eager_fn, compiled_fn],
                [eager_first_ms, compiled_first_ms],
                exp.timing,
                min_warmups,
                device,
                measurement,
                watch,
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
    return got.finish(exp, "ok" if mismatch is None else "incorrect", mismatch)


def prepare_sides(
    timer: Timer,
    work: Workload,
    fns: Sequence[Callable[..., Any]],
    timing: TimingConfig,
    min_warmups: Sequence[int] = (),
) -> tuple[list[Callable[[], Any]], list[Plan]]:
    """Each side's call (cycling inputs where the workload has them) and plan, from an estimate
    of one call on the first inputs; the warmup calls are made here."""
    calls = [work.caller(fn) for fn in fns]
    min_warmups = list(min_warmups) or [0] * len(fns)
    plans = [
        plan(timer.estimate(functools.partial(fn, *work.inputs)), timing, timer.blocked, minimum)
        for fn, minimum in zip(fns, min_warmups, strict=True)
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
) -> list[SideTiming]:
    """Every side timed in one interleaved window, after its warmup; the GPU's state around the
    window and Dynamo's counters at its edges (``watch.window_*``); then each side's peak memory."""
    calls, plans = prepare_sides(timer, work, fns, timing, min_warmups)
    measurement.gpu_before = gpu_state(device)
    watch.open_window()
    samples = timer.interleaved(calls, plans, min(p.repeats for p in plans))
    watch.close_window()
    measurement.gpu_after = gpu_state(device)
    peaks = [peak_memory(call, device) for call in calls]
    return [
        SideTiming.from_samples(first, side, p.warmup, p.block_size, peak_memory_bytes=peak)
        for first, side, p, peak in zip(first_ms, samples, plans, peaks, strict=True)
    ]


def time_eager_alone(timer: Timer, work: Workload, exp: Experiment, first_ms: float) -> SideTiming | None:
    """The eager side when there is no compiled side to interleave with (compilation failed)."""
    try:
        calls, (p,) = prepare_sides(timer, work, [work.fn], exp.timing)
        (samples,) = timer.interleaved(calls, [p], p.repeats)
    except Exception:
        return None
    return SideTiming.from_samples(first_ms, samples, p.warmup, p.block_size)


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


def compare(actual: Any, expected: Any) -> AssertionError | None:
    """``torch.testing.assert_close`` with its per-dtype tolerances; the mismatch, or None."""
    try:
        torch.testing.assert_close(actual, expected, equal_nan=True)
    except AssertionError as e:
        return e
    return None


def peak_memory(call: Callable[[], Any], device: torch.device) -> int | None:
    """Peak bytes allocated during one call, from a reset of the peak statistics (CUDA only)."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    call()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device)


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


def analyse_graphs(work: Workload) -> dict[str, Any]:
    """Graph count, graph breaks and their reasons, from ``torch._dynamo.explain``.

    ``explain`` resets Dynamo before and after its own trace. Some reasons it gives are
    internal (``generic_jump TensorVariable()``); the user-facing message Dynamo logged
    for the same source line replaces them.
    """
    counters.clear()
    try:
        explained = torch._dynamo.explain(work.fn)(*work.inputs)
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


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None
