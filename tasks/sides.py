"""Both sides, eager and compiled, prepared and timed in one interleaved window; their peak memory;
and whether Dynamo compiled inside the window.

The method, in order:

1. **Estimate** each side from one call on the first inputs (the timer's ``estimate``) and plan
   its counts (``tasks.timers.plan``): every side gets the same block size, the largest any side
   needs, since a side timed in blocks against one timed call by call would compare a loop's
   steady state with single calls. Counts the spec leaves out are chosen by the timer's device.
2. **Warm up** each side, its own calls after its own estimate.
3. **Time** every side in one interleaved window (drift hits both), cycling inputs restarting at
   the same position for every side in each round, fresh copies of inputs the target mutates
   made before each block, untimed; Dynamo's counters and the GPU's state read at the edges.
4. **Peak memory** (CUDA): each side's is the highest ``max_memory_allocated`` above what was
   allocated before, over windows that each start from a reset of the peak statistics: its
   estimate, its warmup, and one more call. The compiled side's first calls after compiling are
   where inductor's CUDA graphs are recorded and their memory pool is made (the harness measures
   from a reset before its warmup iterations for that reason); a replay afterwards allocates
   nothing, so one call alone would read ~0 for a graph that holds gigabytes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from tasks.dynamo_watch import DynamoWatch, Snapshot
from tasks.models import Measurement, SideTiming, TimingConfig
from tasks.nvml import gpu_state
from tasks.stats import side_timing
from tasks.targets import CycleCall, Workload
from tasks.timers import Plan, Setup, Timer, plan

MAX_REASONS = 5  # guard failures listed per result; the count says how many there were


class MemoryProbe(Protocol):
    """The device's allocator statistics (CUDA's, or a fake in tests)."""

    def start(self) -> int:
        """Synchronise, reset the peak statistics; the bytes allocated now."""
        ...

    def peak(self) -> int:
        """Synchronise; the peak bytes allocated since ``start``."""
        ...


class CudaMemory:
    """``torch.cuda``'s caching-allocator statistics of one device."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def start(self) -> int:
        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        return int(torch.cuda.memory_allocated(self.device))

    def peak(self) -> int:
        torch.cuda.synchronize(self.device)
        return int(torch.cuda.max_memory_allocated(self.device))


def memory_probe(device: torch.device) -> MemoryProbe | None:
    return CudaMemory(device) if device.type == "cuda" else None


@dataclass
class Peaks:
    """The highest allocation above its window's start seen for each side, over several windows."""

    probe: MemoryProbe | None
    bytes: dict[int, int] = field(default_factory=dict)  # side -> highest peak seen

    def measure(self, side: int, work: Callable[[], Any]) -> Any:
        """Run ``work`` in a window of its own and keep the side's highest peak."""
        if self.probe is None:
            return work()
        before = self.probe.start()
        value = work()
        self.bytes[side] = max(self.bytes.get(side, 0), self.probe.peak() - before, 0)
        return value

    def of(self, side: int) -> int | None:
        return self.bytes.get(side)


def prepare_sides(
    timer: Timer,
    work: Workload,
    fns: Sequence[Callable[..., Any]],
    timing: TimingConfig,
    min_warmups: Sequence[int] = (),
    peaks: Peaks | None = None,
) -> tuple[list[Callable[[], Any]], list[Plan]]:
    """Each side's call (cycling inputs where the workload has them) and plan, from an estimate
    of one call on the first inputs; the warmup calls are made here (steps 1 and 2)."""
    peaks = peaks or Peaks(None)
    calls = [work.caller(fn) for fn in fns]
    min_warmups = list(min_warmups) or [0] * len(fns)
    by_device = getattr(timer, "budgets_by_default", False)
    estimates = [
        peaks.measure(i, functools.partial(timer.estimate, functools.partial(fn, *work.inputs)))
        for i, fn in enumerate(fns)
    ]
    block = max(plan(e, timing, timer.blocked).block_size for e in estimates)
    plans = [
        plan(e, timing, timer.blocked, minimum, block_size=block, budgets_by_default=by_device)
        for e, minimum in zip(estimates, min_warmups, strict=True)
    ]
    for i, (call, p) in enumerate(zip(calls, plans, strict=True)):
        peaks.measure(i, functools.partial(timer.warm, call, p.warmup))
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
    probe: MemoryProbe | None = None,
) -> list[SideTiming]:
    """Every side timed in one interleaved window, after its warmup (see the module docstring);
    the GPU's state around the window and Dynamo's counters at its edges (``watch.window_*``);
    each side's peak memory; and whether inductor really used the CUDA graphs it was asked for."""
    peaks = Peaks(probe if probe is not None else memory_probe(device))
    calls, plans = prepare_sides(timer, work, fns, timing, min_warmups, peaks)
    setups: list[Setup | None] = [call.start_round if isinstance(call, CycleCall) else None for call in calls]
    if before_block is not None:  # fresh copies of inputs the target mutates, for each block
        setups = preceded_by(before_block, setups)
    measurement.gpu_before = gpu_state(device)
    watch.open_window()
    sides = timer.interleaved(calls, plans, min(p.repeats for p in plans), setups)
    watch.close_window()
    measurement.gpu_after = gpu_state(device)
    for i, call in enumerate(calls):
        peaks.measure(i, call)
    if measurement.cudagraphs:
        measurement.cudagraphs_used, measurement.cudagraph_skips = watch.cudagraph_verdict()
    return [
        side_timing(
            first,
            side.samples_ms,
            p.warmup,
            p.block_size,
            peak_memory_bytes=peaks.of(i),
            device_samples_ms=side.device_samples_ms,
            host_bound=side.host_bound,
        )
        for i, (first, side, p) in enumerate(zip(first_ms, sides, plans, strict=True))
    ]


def time_eager_alone(timer: Timer, work: Workload, timing: TimingConfig, first_ms: float) -> SideTiming | None:
    """The eager side when there is no compiled side to interleave with (compilation failed)."""
    try:
        calls, (p,) = prepare_sides(timer, work, [work.fn], timing)
        (side,) = timer.interleaved(calls, [p], p.repeats)
    except Exception:
        return None
    return side_timing(
        first_ms,
        side.samples_ms,
        p.warmup,
        p.block_size,
        device_samples_ms=side.device_samples_ms,
        host_bound=side.host_bound,
    )


def recompile_verdict(watch: DynamoWatch, start: Snapshot) -> tuple[bool, list[str]]:
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
    return bool(reasons), reasons


def preceded_by(first: Setup, setups: Sequence[Setup | None]) -> list[Setup | None]:
    """Per-block setups that each run ``first`` before their own."""

    def chain(then: Setup | None) -> Setup:
        def both(calls: int) -> None:
            first(calls)
            if then is not None:
                then(calls)

        return both

    return [chain(then) for then in setups]
