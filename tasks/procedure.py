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
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

import torch
from torch._dynamo.utils import calculate_time_spent

from tasks import phases, precision
from tasks.check.judge import Verdict
from tasks.check.outputs import Observed
from tasks.check.step import References, check_compiled, checked_inputs, take_references
from tasks.compiling import (
    analyse_graphs,
    cache_counters,
    cache_use,
    check_randomness,
    compiled_callable,
    compiled_target,
    eager_callable,
    forget_compiled,
    needs_own_check_compile,
    probe_cpu_isa,
)
from tasks.dynamo_watch import DynamoWatch
from tasks.failures import out_of_memory
from tasks.isolation import Isolation, isolate
from tasks.metadata import cpu_model, inductor_options, versions
from tasks.models import (
    CheckInfo,
    CompileCache,
    ErrorInfo,
    Experiment,
    Measurement,
    ReplayResult,
    Resources,
    Result,
    SideTiming,
    Status,
    TraceInfo,
    WorkerInfo,
    WorkInfo,
    result_identity,
)
from tasks.phases import PhaseRun
from tasks.replay import replay
from tasks.shared_cache import SharedCache
from tasks.sides import recompile_verdict, time_eager_alone, time_sides
from tasks.stats import speedup_ci
from tasks.targets import FreshInputs, Workload, build, copy_inputs, input_versions
from tasks.timers import CUDAGRAPH_MIN_WARMUP, Timer, timer_for
from tasks.tracing import CompileTrace

__all__ = ["Placement", "run_experiment", "time_sides"]

_experiments_in_this_process = 0  # experiments this process ran: the worker's ``experiments_before``


@dataclass(frozen=True)
class Placement:
    """What the scheduler reserved for this experiment, as it sees it."""

    node_id: str | None = None
    gpu_ids: Sequence[str] = ()
    cpus: int | None = None  # cores reserved: claimed, pinned, and torch's thread count
    gpu_model: str | None = None  # the node's accelerator_type, when the scheduler knows it
    compile_cache: str | None = None  # the run's shared compile cache (a directory or URL), for ``cache: shared``

    @property
    def slot(self) -> str:
        """What no two concurrent experiments on a node share: a GPU, or else the CPU side."""
        return "gpu" + "-".join(self.gpu_ids) if self.gpu_ids else "cpu"


@dataclass(slots=True)
class Draft:
    """The result's fields measured so far, typed: a misspelt field is an error at once, and a
    failure still reports everything measured before it (``finish``)."""

    started_at: float
    device: Literal["cuda", "cpu"] | None = None
    worker: WorkerInfo | None = None
    measurement: Measurement | None = None
    requested: Resources | None = None
    inductor_options: dict[str, Any] = field(default_factory=dict)
    work: WorkInfo | None = None
    graph_count: int | None = None
    graph_breaks: int | None = None
    break_reasons: list[str] = field(default_factory=list)
    eager: SideTiming | None = None
    compiled: SideTiming | None = None
    compile_latency_s: float | None = None
    compile_cache: CompileCache | None = None
    compile_breakdown: dict[str, float] = field(default_factory=dict)
    graphs_compiled: int | None = None
    recompiled: bool = False
    recompile_reasons: list[str] = field(default_factory=list)
    correct: bool | None = None
    check: CheckInfo | None = None
    check_note: str | None = None
    speedup: float | None = None
    speedup_ci: tuple[float, float] | None = None
    memory_ratio: float | None = None
    replay: ReplayResult | None = None
    trace: TraceInfo | None = None

    def finish(self, exp: Experiment, status: Status, error: BaseException | None = None) -> Result:
        if out_of_memory(error):  # wherever it was raised: not retried, the worker cleans the GPU
            status = "oom"
        return Result(
            **result_identity(exp),
            status=status,
            error=ErrorInfo.from_exception(error) if error is not None else None,
            finished_at=time.time(),
            **{f.name: getattr(self, f.name) for f in fields(self)},
        )


def run_experiment(exp: Experiment, placement: Placement = Placement(), timer: Timer | None = None) -> Result:
    """Run one experiment on the cores and compile cache it owns; never raises."""
    global _experiments_in_this_process
    draft = Draft(started_at=time.time())
    before = _experiments_in_this_process
    _experiments_in_this_process += 1
    try:
        with isolate(placement.cpus, exp.compile.cache, placement.slot, exp.timing.allocator) as iso:
            draft.requested = exp.resources
            draft.inductor_options = inductor_options(exp.compile)
            result = _run(exp, placement, timer, iso, before, draft)
            if result.measurement is not None:  # every thread stayed on the claimed cores to the end
                result.measurement.exclusive_cores = result.measurement.exclusive_cores and iso.still_exclusive()
            return result
    except Exception as e:  # isolation itself failed (e.g. no permission to pin)
        return draft.finish(exp, "runtime_error", e)


def _run(
    exp: Experiment, placement: Placement, timer: Timer | None, iso: Isolation, before: int, draft: Draft
) -> Result:
    """Resolve the device and its timer, then measure under the experiment's precision and phase."""
    try:
        device = resolve_device(exp.device)
    except RuntimeError as e:
        return draft.finish(exp, "runtime_error", e)
    timer = timer or timer_for(device, exp.timing)
    draft.device = "cuda" if device.type == "cuda" else "cpu"
    draft.worker = worker_info(device, placement, before)
    measurement = draft.measurement = measurement_for(exp, device, timer.method, iso, before)
    try:
        precision.check_supported(exp.precision, device)
    except precision.PrecisionError as e:
        return draft.finish(exp, "runtime_error", e)
    # Shared: the artifacts stored for this compile loaded into the empty local caches, before anything compiles.
    shared = SharedCache.load(exp, device, placement.compile_cache) if exp.compile.cache == "shared" else None
    # Inductor's probe of the CPU, once per process, run and timed before anything compiles; a fresh process's
    # result records it (a warm one's priming compile would have paid it).
    probe_s = probe_cpu_isa(device, exp.compile)
    isa_probe_s = probe_s if exp.compile.cache != "warm" else None
    with precision.active(exp.precision, device), phases.grad_mode(exp.phase):
        if exp.replay is not None:  # shape traffic in place of one shape's timing
            result = _replay(exp, device, timer, draft)
        else:
            result = _measure(exp, device, timer, measurement, draft)
    if shared is not None:  # after everything was measured: what this process compiled, stored for the others
        shared.store()
        result.compile_cache = shared.recorded(result.compile_cache)
    if isa_probe_s is not None and result.compile_cache is not None:
        result.compile_cache = result.compile_cache.model_copy(update={"isa_probe_s": isa_probe_s})
    return result


def _replay(exp: Experiment, device: torch.device, timer: Timer, draft: Draft) -> Result:
    """Shape traffic served eagerly and compiled, then per shape warm (``tasks.replay``), in place
    of ``_measure``'s recipe; what it measured fills the draft."""
    replayed = replay(exp, device, timer)
    for name, value in replayed.result_fields().items():
        setattr(draft, name, value)  # Draft has slots: a name it lacks is an error at once
    return draft.finish(exp, replayed.status, replayed.error)


def _measure(exp: Experiment, device: torch.device, timer: Timer, measurement: Measurement, draft: Draft) -> Result:
    """The recipe: build and time eagerly, take the references, analyse the graphs, prime the
    caches, compile as configured, time both sides interleaved, then check on the check's own
    compile. Every call sees its own copy of the inputs when the target mutates them; every
    checked call starts from the same training state and seed."""
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
        return draft.finish(exp, "runtime_error", precision.explain_failure(e, exp.precision))
    eager_alone = replace(work, fn=FreshInputs([]).wrap(eager_side) if mutated else eager_side)

    # 3. The work of one call (FLOPs, bytes); graphs and graph breaks of what is compiled, from a Dynamo trace.
    draft.work = count_work(eager_fn, copy_inputs(work.inputs), phase=exp.phase, loss_fn=run.loss_fn)
    draft.graph_count, draft.graph_breaks, draft.break_reasons = analyse_graphs(
        compiled_target(work, run, exp.compile), checked_inputs(run, work.inputs, exp.seed)
    )

    # 4. Warm: prime the on-disk caches with this very compile, then forget everything in memory.
    #    Traced, a compile that fails here keeps this compile's trace; one that succeeds, the measured one's.
    priming = CompileTrace(exp.trace and exp.compile.cache == "warm")
    try:
        if exp.compile.cache == "warm":
            with priming:
                primed_side = compiled_callable(work, run, exp.compile)
                primed_inputs = checked_inputs(run, work.inputs, exp.seed)
                timer.first_call(lambda: primed_side(*primed_inputs))
            del primed_side
        forget_compiled()
    except Exception as e:
        draft.trace = priming.info
        draft.eager = time_eager_alone(timer, eager_alone, exp.timing, eager_first_ms)
        return draft.finish(exp, "compile_error", e)

    # 5. The measured compile, as configured; its first call, from the checked state, pays for compiling.
    #    Traced (``trace: true``): torch's structured trace records this compile and nothing else.
    with DynamoWatch() as watch:
        start = watch.snapshot()
        trace = CompileTrace(exp.trace)
        try:
            with trace:
                compiled_side = compiled_callable(work, run, exp.compile)
                inputs = checked_inputs(run, work.inputs, exp.seed)
                result, compiled_first_ms = timer.first_call(lambda: compiled_side(*inputs))
        except Exception as e:
            draft.trace = trace.info  # a failed compile's trace shows how far it got
            draft.eager = time_eager_alone(timer, eager_alone, exp.timing, eager_first_ms)
            return draft.finish(exp, "compile_error", e)
        draft.trace = trace.info
        first_result = run.observe(result, inputs, mutated)
        draft.compile_latency_s = compiled_first_ms / 1e3
        draft.compile_cache = cache_use(exp.compile.cache, exp.compile.cache == "warm", cache_counters())
        draft.compile_breakdown = {phase: float(s) for phase, s in calculate_time_spent().items()}
        draft.graphs_compiled = watch.snapshot().graphs - start.graphs

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
            return draft.finish(exp, "runtime_error", e)
        draft.recompiled, draft.recompile_reasons = recompile_verdict(watch, start)
    draft.eager, draft.compiled = eager, compiled
    if compiled.median_ms > 0:
        draft.speedup = eager.median_ms / compiled.median_ms
        draft.speedup_ci = speedup_ci(eager.samples_ms, compiled.samples_ms)
    if eager.peak_memory_bytes and compiled.peak_memory_bytes:
        draft.memory_ratio = eager.peak_memory_bytes / compiled.peak_memory_bytes

    # 7. Correctness: a first call, a later one (a CUDA graph replay), every check input; on a compile
    #    of its own with inductor's fallback_random, so that random ops draw what eager draws.
    try:
        verdict = check(exp, timer, run, work, compiled_side, first_result, references, mutated, measurement.cudagraphs)
    except Exception as e:
        return draft.finish(exp, "runtime_error", e)
    draft.correct, draft.check, draft.check_note = verdict.correct, verdict.check, verdict.note
    return draft.finish(exp, "incorrect" if verdict.correct is False else "ok", verdict.mismatch)


def check(
    exp: Experiment,
    timer: Timer,
    run: PhaseRun,
    work: Workload,
    timed_side: Callable[..., Any],
    timed_first: Observed,
    references: list[References],
    mutated: bool,
    cudagraphs: bool,
) -> Verdict:
    """Judge the compiled side (``tasks.check.step.check_compiled``). Under inductor with checking
    on, on a compile of its own with ``fallback_random`` (``tasks.compiling``), whose latency is
    recorded apart; otherwise on the timed compile, whose first call was kept for it."""
    replays = CUDAGRAPH_MIN_WARMUP if cudagraphs else 1
    if not needs_own_check_compile(exp.compile, exp.check.enabled):
        return check_compiled(exp, run, timed_side, timed_first, references, mutated, replays)
    forget_compiled()
    with check_randomness():
        side = compiled_callable(work, run, exp.compile)
        inputs = checked_inputs(run, work.inputs, exp.seed)
        value, first_ms = timer.first_call(lambda: side(*inputs))
        first = run.observe(value, inputs, mutated)
        verdict = check_compiled(exp, run, side, first, references, mutated, replays)
    verdict.check.fallback_random, verdict.check.compile_latency_s = True, first_ms / 1e3
    return verdict


def count_work(fn: Callable[..., Any], inputs: tuple[Any, ...], **kwargs: Any) -> WorkInfo | None:
    """FLOPs and bytes of one call (``tasks.work``); None when they cannot be counted."""
    try:
        from tasks.work import count_work as count

        return count(fn, inputs, **kwargs)
    except Exception:  # counting the work never fails the experiment
        return None


def resolve_device(requested: str) -> torch.device:
    """``auto`` is CUDA when this process sees a GPU, else the CPU; ``cuda`` insists on one."""
    has_cuda = torch.cuda.is_available()  # first CUDA touch: after Ray set CUDA_VISIBLE_DEVICES
    if requested == "cuda" and not has_cuda:
        raise RuntimeError("device 'cuda' requested but this worker sees no CUDA device")
    if requested == "cpu" or not has_cuda:
        return torch.device("cpu")
    return torch.device("cuda", 0)  # the one device Ray made visible to this process


def measurement_for(exp: Experiment, device: torch.device, timer: str, iso: Isolation, before: int) -> Measurement:
    """How an experiment is measured here: its timer, L2 flush and CUDA graphs on this device, its compile
    cache, whether its process is fresh (``before``: experiments the process ran before it), and what the
    isolation gave it (cores, cache directory, compile threads, the C allocator's setting)."""
    return Measurement(
        timer=timer,  # type: ignore[arg-type]
        flush_l2=exp.timing.flush_l2 and device.type == "cuda",
        cudagraphs=exp.compile.cudagraphs and device.type == "cuda",
        cache=exp.compile.cache,
        cache_dir=iso.cache_dir,
        fresh_process=before == 0,
        cores=iso.cores,
        exclusive_cores=iso.exclusive,
        compile_threads=iso.compile_threads,
        allocator=iso.allocator,
        niceness=os.getpriority(os.PRIO_PROCESS, 0),  # of this thread, on Linux: the one that times
    )


def worker_info(device: torch.device, placement: Placement, experiments_before: int) -> WorkerInfo:
    return WorkerInfo(
        hostname=socket.gethostname(),
        node_id=placement.node_id,
        pid=os.getpid(),
        gpu_ids=[str(g) for g in placement.gpu_ids],
        gpu_name=torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        cpu_model=cpu_model(),
        threads=torch.get_num_threads(),
        experiments_before=experiments_before,
        gpu_model=placement.gpu_model or (torch.cuda.get_device_name(device) if device.type == "cuda" else None),
        versions=versions(),
    )
