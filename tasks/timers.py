"""Timers: how calls become milliseconds, on the CPU and on a CUDA device.

A timer does four things: ``first_call`` (one call by wall clock, compilation included),
``estimate`` (the length of one steady-state call, to plan counts and block sizes), ``warm``
(the untimed calls) and ``interleaved`` (timed rounds that alternate between the sides being
compared, so that drift in clocks or load hits every side alike). ``plan`` turns an estimate
and the experiment's timing settings into counts. The procedure receives a timer; tests hand
it fakes.

On CUDA there are two methods (``timing.method``):

- ``wall`` (the default): what a user waits for. Each timed call sits between two
  synchronisations and is read with ``perf_counter``, host overhead included, as PyTorch's
  dynamo harness (``timed()``) does. Each round also takes the *device* time of one more call
  of the same side on the same inputs, queued behind a spin kernel so that its launches cannot
  starve the GPU (NVBench's blocking-kernel idea): comparing the two says whether the side is
  host-bound.
- ``events``: device time between CUDA events, no synchronisation between calls, as Triton's
  ``do_bench``. Launch overhead is hidden whenever the GPU still has queued work, so a
  launch-bound side can look as fast as its kernels.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import torch

from tasks.heap import collector_paused
from tasks.models import TimingConfig

Clock = Callable[[], float]
# One call of a side. A call whose inputs change from call to call (``tasks.targets.CycleCall``)
# also has ``repeat()``: the call once more on the inputs of its last call, without moving on; and
# ``peek()``: the call on the inputs its next call will take, without moving on.
Call = Callable[[], Any]
# Run once per round of each side, before the round's first call and outside the timed region,
# with the number of calls the side makes in the round, untimed settling calls included (twice a
# block on the CPU; 3 in CUDA ``wall`` mode, 2 in ``events``): fresh input copies are made here.
Setup = Callable[[int], None]

# A CPU call shorter than this is timed in blocks of calls that last at least this long
# (torch.utils.benchmark's blocked_autorange idea): perf_counter's own cost (~50 ns) and the loop
# around it vanish in a block, and the untimed block before each timed one (``SETTLE_BLOCKS``)
# lasts long enough for a side to settle after the other side's run. 5 ms, measured on a 2-core
# CPU with torch 2.13 (``python benchmarks/fidelity.py interleaving``): seed.foo3 1024x1024
# compiled (0.15-0.17 ms a call, 8 MB read and written) takes 3.6-3.7x its steady time on the
# first call after 10 ms of eager, 2.2-2.3x on the second, 1.2-1.4x on the sixth, within 4% from
# the eleventh; with one untimed call before one timed call it read 1.3-2.5x blocked_autorange,
# with untimed and timed blocks of 12-30 calls 0.95-1.18x, within the machine's spread.
BLOCK_TARGET_MS = 5.0
ESTIMATE_CALLS = 5  # calls averaged to estimate one call's length, as do_bench does
L2_FLUSH_BYTES = 256 * 2**20  # larger than H100/H200 L2 (50-60 MB); what Triton's do_bench zeroes
CUDAGRAPH_MIN_WARMUP = 3  # reduce-overhead records its CUDA graphs over the first calls

# Counts when a spec gives none. CPU: the counts compilebench always used. CUDA: do_bench's
# budgets (warmup=25 ms, rep=100 ms), so that clocks settle, and never fewer than 10 samples.
CPU_WARMUP, CPU_REPEATS = 3, 10
CUDA_WARMUP_MS, CUDA_REPEATS_MS, CUDA_MIN_REPEATS = 25.0, 100.0, 10

# A side's first calls after the other side's run slow (caches, branch predictors and the
# allocator's free lists hold the other side's state): measured on a 2-core CPU with torch 2.13
# (``python benchmarks/fidelity.py interleaving``), gelu(x @ w + b) + x at 64x64 takes 3.1-4.6x its
# steady time on the first call after a switch, 1.1-1.3x on the second, within 2-4% from the
# fifth; at 512x256, 1.2-1.3x then within 4%; a memory-bound call settles over more calls (see
# ``BLOCK_TARGET_MS``). Timed right after a switch, both sides read slow against blocked_autorange
# on the same callable; with one untimed block first, within the machine's spread. So each timed
# block of a side is preceded by as many untimed calls of the same side, on the same inputs.
SETTLE_BLOCKS = 1

HOST_BOUND_RATIO = 1.2  # wall median above 1.2x the device median: the GPU idles >1/6 of the call
SPIN_CALIBRATION_CYCLES = 1_000_000  # torch.cuda._sleep cycles timed once to learn cycles per ms
SPIN_MARGIN = 1.5  # a spin lasts 1.5x the host's launch time of the call it hides (clocks vary)
SPIN_MIN_MS, SPIN_MAX_MS = 0.02, 200.0


@dataclass(frozen=True)
class Plan:
    """How one side is timed: untimed warmup calls, timed samples, calls per sample."""

    warmup: int
    repeats: int
    block_size: int = 1


@dataclass(frozen=True)
class SideSamples:
    """One side's timed samples (ms per call, in the timer's method) and, on CUDA, the device
    times of calls of the same side in the same rounds; ``host_bound`` where both were taken."""

    samples_ms: list[float]
    device_samples_ms: list[float] | None = None
    host_bound: bool | None = None


def host_bound(wall_ms: Sequence[float], device_ms: Sequence[float]) -> bool | None:
    """Wall time above ``HOST_BOUND_RATIO`` x device time (medians); None without both."""
    if not wall_ms or not device_ms:
        return None
    return statistics.median(wall_ms) > HOST_BOUND_RATIO * statistics.median(device_ms)


def plan(
    estimate_ms: float,
    timing: TimingConfig,
    blocked: bool,
    min_warmup: int = 0,
    block_size: int | None = None,
    budgets_by_default: bool = False,
) -> Plan:
    """Counts for one side from the estimated length of one call.

    Blocks (CPU only): a call shorter than ``BLOCK_TARGET_MS`` is timed ``block_size`` at a
    time so that each sample lasts at least that long; the sample is the block's time
    divided by its size. ``block_size``, when given, is used as it is (the procedure gives every
    side the same). Budgets: ``warmup_ms``/``repeats_ms``, when given, replace the counts with
    as many calls (samples) as fit in the budget, at least one, as do_bench does. Counts not
    given at all: ``CPU_WARMUP``/``CPU_REPEATS``, or with ``budgets_by_default`` (CUDA) the
    budgets ``CUDA_WARMUP_MS``/``CUDA_REPEATS_MS`` with at least ``CUDA_MIN_REPEATS`` samples.
    """
    per_call = max(estimate_ms, 1e-6)
    block = 1
    if blocked and per_call < BLOCK_TARGET_MS:
        block = math.ceil(BLOCK_TARGET_MS / per_call)
    if block_size is not None:
        block = block_size
    warmup_ms, repeats_ms, min_repeats = timing.warmup_ms, timing.repeats_ms, 1
    if budgets_by_default and timing.warmup is None and warmup_ms is None:
        warmup_ms = CUDA_WARMUP_MS
    if budgets_by_default and timing.repeats is None and repeats_ms is None:
        repeats_ms, min_repeats = CUDA_REPEATS_MS, CUDA_MIN_REPEATS
    if timing.warmup is not None:
        warmup = timing.warmup
    elif warmup_ms is not None:
        warmup = math.ceil(warmup_ms / per_call)
    else:
        warmup = CPU_WARMUP
    if timing.repeats is not None:
        repeats = timing.repeats
    elif repeats_ms is not None:
        repeats = max(min_repeats, int(repeats_ms / (per_call * block)))
    else:
        repeats = CPU_REPEATS
    return Plan(warmup=max(warmup, min_warmup), repeats=repeats, block_size=block)


class Timer(Protocol):
    method: str  # what ``Measurement.timer`` records
    blocked: bool  # short calls are timed in blocks
    budgets_by_default: bool  # counts not given mean time budgets (CUDA), not fixed counts

    def first_call(self, fn: Call) -> tuple[Any, float]: ...

    def estimate(self, fn: Call) -> float: ...

    def warm(self, fn: Call, calls: int) -> None: ...

    def interleaved(
        self, fns: Sequence[Call], plans: Sequence[Plan], rounds: int, setups: Sequence[Setup | None] | None = None
    ) -> list[SideSamples]: ...


class CpuTimer:
    method = "perf_counter"
    blocked = True
    budgets_by_default = False

    def __init__(self, clock: Clock = time.perf_counter) -> None:
        self.clock = clock

    def first_call(self, fn: Call) -> tuple[Any, float]:
        """Wall time of one call in ms, read with ``perf_counter`` around it."""
        start = self.clock()
        out = fn()
        return out, (self.clock() - start) * 1e3

    def estimate(self, fn: Call) -> float:
        """Mean length of one call in ms over ``ESTIMATE_CALLS`` calls after one untimed call."""
        fn()
        start = self.clock()
        for _ in range(ESTIMATE_CALLS):
            fn()
        return (self.clock() - start) * 1e3 / ESTIMATE_CALLS

    def warm(self, fn: Call, calls: int) -> None:
        for _ in range(calls):
            fn()

    def interleaved(
        self, fns: Sequence[Call], plans: Sequence[Plan], rounds: int, setups: Sequence[Setup | None] | None = None
    ) -> list[SideSamples]:
        """``rounds`` rounds of one timed block per side, in turn (warmup is ``warm``'s job).

        Method: per round and side, ``setup`` once, then an untimed block of the same side on the
        inputs the timed block starts with (``SETTLE_BLOCKS``: a side's first calls after the other
        side's run slow), then ``perf_counter`` before and after a block of ``block_size`` calls;
        the sample is the block time divided by the block size. CPU kernels have finished when a
        call returns, so no synchronisation is needed. Side A's block, side B's block, A, B…: a
        change in clock speed or load during the measurement hits both sides alike. The garbage
        collector is paused throughout (``tasks.heap.collector_paused``, as ``timeit`` does).
        """
        samples: list[list[float]] = [[] for _ in fns]
        setups = setups or [None] * len(fns)
        with collector_paused():
            for _ in range(rounds):
                for fn, p, out, setup in zip(fns, plans, samples, setups, strict=True):
                    if setup is not None:
                        setup((1 + SETTLE_BLOCKS) * p.block_size)
                    settle = peek(fn)
                    for _ in range(SETTLE_BLOCKS * p.block_size):
                        settle()
                    start = self.clock()
                    for _ in range(p.block_size):
                        fn()
                    out.append((self.clock() - start) * 1e3 / p.block_size)
        return [SideSamples(side) for side in samples]


class CudaTimer:
    blocked = False
    budgets_by_default = True

    def __init__(
        self,
        device: torch.device,
        flush_l2: bool = False,
        method: Literal["wall", "events"] = "wall",
        clock: Clock = time.perf_counter,
    ) -> None:
        self.device = device
        self.flush_l2 = flush_l2
        self.wall = method == "wall"
        self.method = "wall" if self.wall else "cuda_events"
        self.clock = clock
        self._flush_buffer: torch.Tensor | None = None
        self._spin_cycles_per_ms: float | None = None

    def first_call(self, fn: Call) -> tuple[Any, float]:
        """Wall time of one call in ms: synchronise, ``perf_counter``, call, synchronise, read.

        Wall time rather than CUDA events, since a first call's cost (tracing, compiling,
        autotuning) is spent on the host, not on the device.
        """
        self._sync()
        start = self.clock()
        out = fn()
        self._sync()
        return out, (self.clock() - start) * 1e3

    def estimate(self, fn: Call) -> float:
        """Mean length of one call in ms over ``ESTIMATE_CALLS`` calls, after one untimed call.

        ``wall``: each call between synchronisations, by ``perf_counter`` (what the plan's
        budgets are spent on). ``events``: device time between two events around all the calls.
        """
        fn()
        if self.wall:
            total = 0.0
            for _ in range(ESTIMATE_CALLS):
                self._flush()
                total += self._wall_call(fn)[0]
            return total / ESTIMATE_CALLS
        self._sync()
        start, end = _event(), _event()
        start.record()
        for _ in range(ESTIMATE_CALLS):
            self._flush()
            fn()
        end.record()
        self._sync()
        return start.elapsed_time(end) / ESTIMATE_CALLS

    def warm(self, fn: Call, calls: int) -> None:
        for _ in range(calls):
            fn()
        self._sync()

    def interleaved(
        self, fns: Sequence[Call], plans: Sequence[Plan], rounds: int, setups: Sequence[Setup | None] | None = None
    ) -> list[SideSamples]:
        """``rounds`` rounds of timed calls per side, in turn (warmup is ``warm``'s job).

        With ``flush_l2`` a 256 MB buffer is zeroed before each timed call, outside the timed
        region, so no call finds its inputs in L2. The garbage collector is paused throughout.

        Every round of a side starts with one untimed call of that side on the inputs its round
        times (``SETTLE_BLOCKS``: a side's first call after the other side's runs slow).

        ``wall``: per round and side, ``setup(3)`` once (the round makes three calls), then (1) the
        wall sample: synchronise, ``perf_counter``, call, synchronise, ``perf_counter``; (2) the
        device sample: a spin kernel (``torch.cuda._sleep``) lasting 1.5x the host time the wall
        call took to launch its work, then an event pair around the same call again, on the same
        inputs (``repeat()``, where the call's inputs change from call to call): the launches queue
        behind the spin, so the events measure the kernels back to back, with no launch gaps, of
        the very input the wall sample timed. Changing inputs move on once per round, so every
        input is timed as often by the wall samples as by the device samples.

        ``events``: an event pair around each call, one synchronisation at the end reads them
        all; no host sync between calls (launch overhead overlaps earlier queued work).
        """
        if not self.wall:
            samples = self._events_only(fns, rounds, setups)
            return [SideSamples(side, list(side)) for side in samples]
        setups = setups or [None] * len(fns)
        walls: list[list[float]] = [[] for _ in fns]
        events: list[list[tuple[Any, Any]]] = [[] for _ in fns]
        cycles_per_ms = self._spin_rate()
        with collector_paused():
            for _ in range(rounds):
                for fn, setup, wall, pairs in zip(fns, setups, walls, events, strict=True):
                    if setup is not None:
                        setup(2 + SETTLE_BLOCKS)  # settling, the wall sample, the device sample
                    for _ in range(SETTLE_BLOCKS):
                        peek(fn)()
                    again = repeat(fn)
                    self._flush()
                    wall_ms, launch_ms = self._wall_call(fn)
                    wall.append(wall_ms)
                    self._flush()
                    spin_ms = min(max(SPIN_MARGIN * launch_ms, SPIN_MIN_MS), SPIN_MAX_MS)
                    torch.cuda._sleep(int(spin_ms * cycles_per_ms))
                    start, end = _event(), _event()
                    start.record()
                    again()
                    end.record()
                    pairs.append((start, end))
            self._sync()
        sides = []
        for wall, pairs in zip(walls, events, strict=True):
            device = [start.elapsed_time(end) for start, end in pairs]
            sides.append(SideSamples(wall, device, host_bound(wall, device)))
        return sides

    def _events_only(
        self, fns: Sequence[Call], rounds: int, setups: Sequence[Setup | None] | None
    ) -> list[list[float]]:
        self._sync()
        events = [[(_event(), _event()) for _ in range(rounds)] for _ in fns]
        setups = setups or [None] * len(fns)
        with collector_paused():
            for i in range(rounds):
                for fn, side, setup in zip(fns, events, setups, strict=True):
                    if setup is not None:
                        setup(1 + SETTLE_BLOCKS)
                    for _ in range(SETTLE_BLOCKS):
                        peek(fn)()
                    self._flush()
                    start, end = side[i]
                    start.record()
                    fn()
                    end.record()
            self._sync()
        return [[start.elapsed_time(end) for start, end in side] for side in events]

    def _wall_call(self, fn: Call) -> tuple[float, float]:
        """One call between synchronisations: its wall time and the host time until it returned
        (its launches), in ms."""
        self._sync()
        start = self.clock()
        fn()
        launched = self.clock()
        self._sync()
        return (self.clock() - start) * 1e3, (launched - start) * 1e3

    def _spin_rate(self) -> float:
        """Cycles of ``torch.cuda._sleep`` per ms on this device, timed once per timer."""
        if self._spin_cycles_per_ms is None:
            self._sync()
            start, end = _event(), _event()
            start.record()
            torch.cuda._sleep(SPIN_CALIBRATION_CYCLES)
            end.record()
            self._sync()
            self._spin_cycles_per_ms = SPIN_CALIBRATION_CYCLES / max(start.elapsed_time(end), 1e-6)
        return self._spin_cycles_per_ms

    def _sync(self) -> None:
        torch.cuda.synchronize(self.device)

    def _flush(self) -> None:
        if not self.flush_l2:
            return
        if self._flush_buffer is None:
            self._flush_buffer = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device=self.device)
        self._flush_buffer.zero_()


def repeat(fn: Call) -> Call:
    """``fn`` once more on the inputs of its last call: its ``repeat``, or ``fn`` itself when its
    inputs never change."""
    again: Call = getattr(fn, "repeat", fn)
    return again


def peek(fn: Call) -> Call:
    """``fn`` on the inputs its next call will take, without moving on: its ``peek``, or ``fn``
    itself when its inputs never change."""
    ahead: Call = getattr(fn, "peek", fn)
    return ahead


def _event() -> Any:
    return torch.cuda.Event(enable_timing=True)


def timer_for(device: torch.device, timing: TimingConfig) -> Timer:
    if device.type == "cuda":
        return CudaTimer(device, flush_l2=timing.flush_l2, method=timing.method or "wall")
    return CpuTimer()
