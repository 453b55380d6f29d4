"""One rank's part of a distributed experiment, the recipe (``run_rank``); every rank runs it in lockstep.

1. **Build** the target from the experiment's seed with this rank's batch (``tasks.distributed.batch``),
   in the experiment's precision; count the graphs and breaks of the model alone (``torch._dynamo.explain``,
   as a single-process result does): what the user's code gives, apart from what DDP or FSDP2 add.
2. **Wrap** it (``tasks.distributed.wrap``), then make the training step (``tasks.phases``) and its
   optimizer on the wrapped parameters (FSDP2's are sharded ``DTensor``s).
3. **Eager**: the first step (timed), the training state saved, then the eager reference step from that
   state, on the same batch, with the RNG reseeded (``tasks.check.step.checked_call``).
4. **Prime** (``compile.cache: warm``): the compiled step once, then every in-memory compile cache
   cleared (``tasks.compiling.forget_compiled``), as a single-process experiment does.
5. **Compile**: the measured compiled step from the saved state, on the same batch: its wall time is the
   compile latency; Dynamo's graphs, the compile caches' hits and misses and DDPOptimizer's splits
   (``tasks.distributed.splits``) are read around it.
6. **Time** both sides interleaved (``tasks.sides.time_sides``), with every rank on one plan
   (``tasks.distributed.timing``); recompiles inside the timed window are counted. Then one more step
   of each side under the profiler: the time in collectives (``tasks.distributed.collectives``).
7. **Check**: the compiled step's loss, gradients and (after an optimizer step) parameters against the
   eager reference step's, leaf by leaf on what this rank holds, at the precision's training tolerance
   (``tasks.check.judge``). There is no float64 copy of a sharded model, so the default reference
   (``fp64``) judges as PyTorch's harness does where float64 cannot run: allclose, else cosine
   similarity >= 0.99; ``check.reference: eager`` is allclose alone.

Every stage ends where the ranks agree (``tasks.distributed.group.first_failed``): a rank that failed
in it stops every rank there. A failure inside a step (its collectives) leaves the other ranks in a
collective until the group's timeout; their outcome then blames a peer and marks the group unusable.
Not supported in a distributed experiment, as one-line errors: ``compile.scope: step``,
``compile.method: module_compile``, ``compile.cache: shared``, ``replay``.
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.distributed as dist
from torch._dynamo.utils import calculate_time_spent

from tasks import phases, precision
from tasks.check.judge import Tolerances, compare
from tasks.check.outputs import Observed
from tasks.check.step import checked_call, checked_inputs
from tasks.compiling import analyse_graphs, cache_counters, cache_use, forget_compiled, probe_cpu_isa
from tasks.distributed.batch import rank_params, samples_and_tokens
from tasks.distributed.collectives import collective_ms
from tasks.distributed.group import backend_for, first_failed
from tasks.distributed.outcome import RankCheck, RankOutcome
from tasks.distributed.splits import DdpSplits
from tasks.distributed.timing import GangTimer
from tasks.distributed.wrap import wrap
from tasks.dynamo_watch import DynamoWatch
from tasks.failures import out_of_memory
from tasks.isolation import isolate
from tasks.metadata import inductor_options
from tasks.models import ErrorInfo, Experiment, Measurement, RankFigures, Status
from tasks.phases import PhaseRun
from tasks.procedure import Placement, measurement_for, resolve_device, worker_info
from tasks.sides import recompile_verdict, time_sides
from tasks.targets import build, copy_inputs, resolve
from tasks.timers import CUDAGRAPH_MIN_WARMUP, timer_for

# Text of errors raised where a collective broke or timed out (gloo raises a plain RuntimeError).
COLLECTIVE_ERROR_TEXT = ("gloo/transport", "Connection closed by peer", "Connection reset by peer", "NCCL", "Timed out")
TIMEOUT_TEXT = ("Timed out", "timed out", "Watchdog caught collective operation timeout")  # gloo's, NCCL's


class Stop(Exception):
    """This rank stops the experiment here; its outcome says why."""


def collective_failure(error: BaseException) -> bool:
    """Whether ``error`` is a collective that broke or timed out: a peer failed, or the group is gone."""
    return isinstance(error, dist.DistError) or any(text in str(error) for text in COLLECTIVE_ERROR_TEXT)


def unsupported(exp: Experiment) -> str | None:
    """Why a distributed experiment cannot run as configured, or None."""
    if exp.compile.scope != "model":
        return "compile.scope 'step' is not supported with distributed (DDP and FSDP2 wrap the model; compile it)"
    if exp.compile.method != "torch_compile":
        return "compile.method 'module_compile' is not supported with distributed (use torch_compile)"
    if exp.compile.cache == "shared":
        return "compile.cache 'shared' is not supported with distributed (use warm or cold)"
    if exp.replay is not None:
        return "replay is not supported with distributed"
    return None


@dataclass
class Gang:
    """This rank's place in the gang for one experiment, and the outcome it fills."""

    rank: int
    world_size: int
    device: torch.device
    outcome: RankOutcome

    @property
    def figures(self) -> RankFigures:
        assert self.outcome.figures is not None  # set when the outcome is made
        return self.outcome.figures

    def fail(self, status: Status, error: BaseException, peer: bool = False) -> None:
        """Record this rank's failure (``oom`` wherever torch ran out of memory)."""
        out = self.outcome
        out.status = "oom" if out_of_memory(error) else status
        out.error = ErrorInfo.from_exception(error)
        out.peer_failure = peer
        self.figures.error = out.error

    def broken(self, error: BaseException) -> None:
        """A collective this rank waited in broke or timed out: a peer's failure, and the group is unusable."""
        timed_out = any(text in str(error) for text in TIMEOUT_TEXT)
        self.fail("timeout" if timed_out else "runtime_error", error, peer=True)
        self.outcome.group_ok = False

    @contextmanager
    def stage(self, doing: str, status: Status) -> Iterator[None]:
        """Run the body; then every rank learns whether any failed in it, and all stop if one did."""
        error: Exception | None = None
        try:
            yield
        except Stop:
            raise
        except Exception as e:
            error = e
        if error is not None and collective_failure(error):
            self.broken(error)
            raise Stop
        try:
            first = first_failed(error is not None, self.rank, self.world_size, self.device)
        except Exception as e:  # the agreement itself broke: a peer died or hangs
            if error is not None:
                self.fail(status, error)
            else:
                self.broken(e)
            self.outcome.group_ok = False
            raise Stop from e
        if error is not None:
            self.fail(status, error)
            raise Stop
        if first is not None:
            self.fail("runtime_error", PeerFailed(f"rank {first} failed while {doing}; this rank stopped there"), True)
            raise Stop


class PeerFailed(RuntimeError):
    """Another rank failed at a stage the ranks agree on."""


def run_rank(exp: Experiment, placement: Placement, rank: int, world_size: int, before: int) -> RankOutcome:
    """This rank's part of ``exp`` (see the module docstring); never raises."""
    figures = RankFigures(rank=rank, hostname=socket.gethostname(), pid=os.getpid(), gpu_ids=list(placement.gpu_ids))
    gang = Gang(rank, world_size, torch.device("cpu"), RankOutcome(rank=rank, figures=figures))
    try:
        with isolate(placement.cpus, exp.compile.cache, placement.slot, exp.timing.allocator) as iso:
            gang.device = resolve_device(exp.device)
            out = gang.outcome
            out.device = "cuda" if gang.device.type == "cuda" else "cpu"
            out.backend = backend_for(gang.device)
            out.worker = worker_info(gang.device, placement, before)
            out.inductor_options = inductor_options(exp.compile)
            timer = GangTimer(timer_for(gang.device, exp.timing), gang.device)
            out.measurement = measurement_for(exp, gang.device, timer.method, iso, before)
            with precision.active(exp.precision, gang.device), phases.grad_mode("training"):
                measure(exp, gang, timer, out.measurement)
            out.measurement.exclusive_cores = out.measurement.exclusive_cores and iso.still_exclusive()
    except Stop:
        pass
    except Exception as e:  # isolation or the device, before the ranks could agree on anything
        gang.fail("runtime_error", e)
    return gang.outcome


def measure(exp: Experiment, gang: Gang, timer: GangTimer, measurement: Measurement) -> None:
    """Steps 1-7 of the module docstring, filling ``gang.outcome``."""
    cfg, fig, out, device = exp.distributed, gang.figures, gang.outcome, gang.device
    assert cfg is not None  # a RankWorker runs distributed experiments only
    with gang.stage("checking the experiment", "runtime_error"):
        problem = unsupported(exp)
        if problem is not None:
            raise ValueError(problem)
        precision.check_supported(exp.precision, device)

    # 1. Build, from the seed, this rank's batch; the model's own graphs and breaks.
    with gang.stage("building the target", "runtime_error"):
        torch.manual_seed(exp.seed)
        try:
            work = precision.cast(build(exp.target, device, rank_params(exp, gang.world_size)), exp.precision)
        except Exception as e:
            raise precision.explain_failure(e, exp.precision) from e
        out.samples, out.tokens = samples_and_tokens(work.inputs)
        fig.graph_count, fig.graph_breaks, fig.break_reasons = analyse_graphs(work.fn, copy_inputs(work.inputs))

    # 2. Wrap; the step and its optimizer on the wrapped parameters.
    with gang.stage("wrapping the target", "runtime_error"):
        wrapped = wrap(work.fn, cfg, exp.compile, device, resolve(exp.target))
        run, work = PhaseRun.prepare(replace(work, fn=wrapped.model), "training", exp.optimizer)
        eager_side = within(run.side(wrapped.eager), wrapped.eager_context)
        compiled_side = within(run.side(wrapped.compiled), wrapped.compiled_context)

    # 3. The first eager step; the state every checked step starts from; the eager reference step.
    with gang.stage("running the first eager step", "runtime_error"):
        inputs = copy_inputs(work.inputs)
        _, eager_first_ms = timer.first_call(lambda: eager_side(*inputs))
        run.save()
        reference = local(checked_call(run, eager_side, work.inputs, exp.seed, False))

    # 4. Prime the on-disk caches with this very compile (warm), then forget everything in memory.
    with gang.stage("priming the compile caches", "compile_error"):
        probe_s = probe_cpu_isa(device, exp.compile)  # once per process; a fresh process's result records it
        if exp.compile.cache == "warm":
            primed = checked_inputs(run, work.inputs, exp.seed)
            timer.first_call(lambda: compiled_side(*primed))
        forget_compiled()
        isa_probe_s = probe_s if exp.compile.cache != "warm" else None

    # 5. The measured compile: the first compiled step from the saved state, on the same batch.
    with DynamoWatch() as watch, DdpSplits() as splits:
        start = watch.snapshot()
        with gang.stage("compiling", "compile_error"):
            inputs = checked_inputs(run, work.inputs, exp.seed)
            value, compiled_first_ms = timer.first_call(lambda: compiled_side(*inputs))
            observed = local(run.observe(value, inputs, False))
        fig.compile_latency_s = compiled_first_ms / 1e3
        cache = cache_use(exp.compile.cache, exp.compile.cache == "warm", cache_counters())
        fig.compile_cache = cache.model_copy(update={"isa_probe_s": isa_probe_s})
        out.compile_breakdown = {phase: float(s) for phase, s in calculate_time_spent().items()}
        fig.graphs_compiled = watch.snapshot().graphs - start.graphs
        fig.ddp_splits = splits.splits if cfg.strategy == "ddp" else None

        # 6. Both sides timed interleaved, every rank on the same plan.
        with gang.stage("timing both sides", "runtime_error"):
            min_warmups = [0, CUDAGRAPH_MIN_WARMUP if measurement.cudagraphs else 0]
            sides = [eager_side, compiled_side]
            firsts = [eager_first_ms, compiled_first_ms]
            fig.eager, fig.compiled = time_sides(
                timer, work, sides, firsts, exp.timing, min_warmups, device, measurement, watch
            )
        with gang.stage("profiling the collectives", "runtime_error"):
            named = {"eager": eager_side, "compiled": compiled_side}
            fig.collective_ms = profile_collectives(work.inputs, named, device)
        before, after = watch.window_before or start, watch.window_after or watch.snapshot()
        fig.recompiles = after.frames - before.frames
        recompiled, reasons = recompile_verdict(watch, start)
        out.recompile_reasons = [f"rank {gang.rank}: {r}" for r in reasons] if recompiled else []

    # 7. The compiled step against the eager step, on what this rank holds.
    out.check = judge(exp, observed, reference)
    sides_seen = (("eager", reference), ("compiled", observed))
    fig.loss = {side: float(o.leaves["loss"]) for side, o in sides_seen if "loss" in o.leaves}
    out.status = "incorrect" if out.check.correct is False else "ok"


def profile_collectives(
    inputs: tuple[Any, ...], sides: dict[str, Callable[..., Any]], device: torch.device
) -> dict[str, float] | None:
    """Each side's time in collectives over one more step (``tasks.distributed.collectives``)."""
    found = {name: collective_ms(functools.partial(side, *copy_inputs(inputs)), device) for name, side in sides.items()}
    return {name: ms for name, ms in found.items() if ms is not None} or None


def within(step: Callable[..., Any], context: Callable[[], AbstractContextManager[Any]]) -> Callable[..., Any]:
    """``step`` run inside a fresh ``context()`` at each call."""

    def call(*inputs: Any) -> Any:
        with context():
            return step(*inputs)

    return call


def local(observed: Observed) -> Observed:
    """The leaves as this rank holds them: a ``DTensor``'s local shard, other leaves as they are."""
    from torch.distributed.tensor import DTensor

    leaves = {k: v.to_local() if isinstance(v, DTensor) else v for k, v in observed.leaves.items()}
    return Observed(leaves, observed.note)


def judge(exp: Experiment, compiled: Observed, eager: Observed) -> RankCheck:
    """The compiled step against the eager one at the training tolerance of the precision: allclose, else (with
    the default reference, as no float64 copy exists) cosine similarity, the harness's rule without float64.
    In bf16 a logit near zero is the difference of large products: eager and compiled sum them in other
    orders, and an element can differ by several of its own ULPs where the tensor as a whole agrees."""
    if not exp.check.enabled:
        return RankCheck(note="not checked: check.enabled is false")
    verdict = compare(compiled, eager, None, Tolerances.of(exp))  # training: distributed experiments train
    mismatch = str(verdict.mismatch) if verdict.mismatch is not None else None
    return RankCheck(correct=verdict.correct, info=verdict.check, note=verdict.note, mismatch=mismatch)
