"""The benchmark procedure of one experiment, run inside one worker process.

Nothing here knows about Ray: the caller says where the experiment was placed
(``Placement``) and gets a ``Result`` back, whatever happened. An exception inside the
experiment becomes a failed result, never a crash of the caller.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from tasks.models import CompileConfig, ErrorInfo, Experiment, Result, SideTiming, Status, WorkerInfo
from tasks.targets import Workload, build
from tasks.timers import Timer, timer_for


@dataclass(frozen=True)
class Placement:
    """What the scheduler reserved for this experiment, as it sees it."""

    node_id: str | None = None
    gpu_ids: Sequence[str] = ()
    cpus: int | None = None  # cores reserved; torch's thread count is set to it


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
            status=status,
            error=ErrorInfo.from_exception(error) if error is not None else None,
            finished_at=time.time(),
            **self.fields,
        )


def run_experiment(exp: Experiment, placement: Placement = Placement(), timer: Timer | None = None) -> Result:
    """Build, time eagerly, analyse graph breaks, compile, check, time compiled; never raises."""
    got = _Partial({"started_at": time.time(), "device": None})
    try:
        device = resolve_device(exp.device)
    except RuntimeError as e:
        return got.finish(exp, "runtime_error", e)
    got.fields["device"] = device.type
    got.fields["worker"] = worker_info(device, placement)
    timer = timer or timer_for(device)

    # 1. Eager: build the target from a seeded RNG, first call, warmup, timed calls.
    try:
        torch.manual_seed(exp.seed)
        work = build(exp.target, device, exp.params)
        eager_out, eager = time_side(timer, work.fn, work.inputs, exp.timing.warmup, exp.timing.repeats, device)
        references = [work.fn(*inputs) for inputs in work.check_inputs]
    except Exception as e:
        return got.finish(exp, "runtime_error", e)
    got.fields["eager"] = eager

    # 2. Graphs and graph breaks, from a Dynamo trace of the eager callable.
    got.fields.update(analyse_graphs(work))

    # 3. Compile from a clean compiler state; the first call pays for compilation.
    torch._dynamo.reset()
    try:
        compiled_fn = compile_callable(work.fn, exp.compile)
        compiled_out, first_ms = timer.first_call(lambda: compiled_fn(*work.inputs))
    except Exception as e:
        return got.finish(exp, "compile_error", e)
    got.fields["compile_latency_s"] = first_ms / 1e3

    # 4. Correctness against eager, on the timed inputs and on every check input.
    try:
        mismatch = compare(compiled_out, eager_out)
        for inputs, reference in zip(work.check_inputs, references, strict=True):
            mismatch = mismatch or compare(compiled_fn(*inputs), reference)
    except Exception as e:
        return got.finish(exp, "runtime_error", e)
    got.fields["correct"] = mismatch is None

    # 5. Compiled: warmup and timed calls (the first call was taken above).
    try:
        _, compiled = time_side(
            timer, compiled_fn, work.inputs, exp.timing.warmup, exp.timing.repeats, device, first=(None, first_ms)
        )
    except Exception as e:
        return got.finish(exp, "runtime_error", e)
    got.fields["compiled"] = compiled
    got.fields["speedup"] = eager.median_ms / compiled.median_ms if compiled.median_ms > 0 else None
    return got.finish(exp, "ok" if mismatch is None else "incorrect", mismatch)


def resolve_device(requested: str) -> torch.device:
    """``auto`` is CUDA when this process sees a GPU, else the CPU; ``cuda`` insists on one."""
    has_cuda = torch.cuda.is_available()  # first CUDA touch: after Ray set CUDA_VISIBLE_DEVICES
    if requested == "cuda" and not has_cuda:
        raise RuntimeError("device 'cuda' requested but this worker sees no CUDA device")
    if requested == "cpu" or not has_cuda:
        return torch.device("cpu")
    return torch.device("cuda", 0)  # the one device Ray made visible to this process


def worker_info(device: torch.device, placement: Placement) -> WorkerInfo:
    if placement.cpus:  # never more threads than cores this process may run on
        torch.set_num_threads(max(1, min(placement.cpus, len(os.sched_getaffinity(0)))))
    return WorkerInfo(
        hostname=socket.gethostname(),
        node_id=placement.node_id,
        pid=os.getpid(),
        gpu_ids=[str(g) for g in placement.gpu_ids],
        gpu_name=torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        cpu_model=cpu_model(),
        threads=torch.get_num_threads(),
    )


def time_side(
    timer: Timer,
    fn: Callable[..., Any],
    inputs: tuple[Any, ...],
    warmup: int,
    repeats: int,
    device: torch.device,
    first: tuple[Any, float] | None = None,
) -> tuple[Any, SideTiming]:
    """First call (unless already taken), then warmup and timed calls; peak memory on CUDA."""
    call = lambda: fn(*inputs)  # noqa: E731
    out, first_ms = first if first is not None else timer.first_call(call)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    samples = timer.samples(call, warmup, repeats)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return out, SideTiming(
        first_call_ms=first_ms,
        median_ms=float(np.median(samples)),
        min_ms=float(np.min(samples)),
        samples_ms=samples,
        peak_memory_bytes=peak,
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


def compare(actual: Any, expected: Any) -> AssertionError | None:
    """``torch.testing.assert_close`` with its per-dtype tolerances; the mismatch, or None."""
    try:
        torch.testing.assert_close(actual, expected, equal_nan=True)
    except AssertionError as e:
        return e
    return None


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
