"""Timers: how calls become milliseconds, on the CPU and on a CUDA device.

A timer does four things: ``first_call`` (one call by wall clock, compilation included),
``estimate`` (the length of one steady-state call, to plan counts and block sizes), ``warm``
(the untimed calls) and ``interleaved`` (timed rounds that alternate between the sides being
compared, so that drift in clocks or load hits every side alike). ``plan`` turns an estimate
and the experiment's timing settings into counts. The procedure receives a timer; tests hand
it fakes.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from tasks.models import TimingConfig

Clock = Callable[[], float]
Call = Callable[[], Any]
Setup = Callable[[int], None]  # called with a block's size before the block, outside the timed region

# A CPU call shorter than this is timed in blocks: perf_counter's own cost (~50 ns) and the
# loop around it stay below 0.1% of a block (torch.utils.benchmark's blocked_autorange idea).
MIN_UNBLOCKED_CALL_MS = 0.1
BLOCK_TARGET_MS = 1.0  # a block of short calls lasts at least this long
ESTIMATE_CALLS = 5  # calls averaged to estimate one call's length, as do_bench does
L2_FLUSH_BYTES = 256 * 2**20  # larger than H100/H200 L2 (50-60 MB); what Triton's do_bench zeroes
CUDAGRAPH_MIN_WARMUP = 3  # reduce-overhead records its CUDA graphs over the first calls


@dataclass(frozen=True)
class Plan:
    """How one side is timed: untimed warmup calls, timed samples, calls per sample."""

    warmup: int
    repeats: int
    block_size: int = 1


def plan(estimate_ms: float, timing: TimingConfig, blocked: bool, min_warmup: int = 0) -> Plan:
    """Counts for one side from the estimated length of one call.

    Blocks (CPU only): a call shorter than ``MIN_UNBLOCKED_CALL_MS`` is timed ``block_size``
    at a time so that each sample lasts ``BLOCK_TARGET_MS``; the sample is the block's time
    divided by its size. Budgets: ``warmup_ms``/``repeats_ms``, when given, replace the counts
    with as many calls (samples) as fit in the budget, at least one, as do_bench does.
    """
    per_call = max(estimate_ms, 1e-6)
    block = 1
    if blocked and per_call < MIN_UNBLOCKED_CALL_MS:
        block = math.ceil(BLOCK_TARGET_MS / per_call)
    warmup = timing.warmup if timing.warmup_ms is None else math.ceil(timing.warmup_ms / per_call)
    repeats = timing.repeats if timing.repeats_ms is None else max(1, int(timing.repeats_ms / (per_call * block)))
    return Plan(warmup=max(warmup, min_warmup), repeats=repeats, block_size=block)


@contextmanager
def gc_paused() -> Any:
    """Python's garbage collector off while timing, as ``timeit`` (and so torch.utils.benchmark)
    does: a collection triggered by one call's allocations would otherwise land in a random sample."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Timer(Protocol):
    method: str
    blocked: bool

    def first_call(self, fn: Call) -> tuple[Any, float]: ...

    def estimate(self, fn: Call) -> float: ...

    def warm(self, fn: Call, calls: int) -> None: ...

    def interleaved(
        self, fns: Sequence[Call], plans: Sequence[Plan], rounds: int, setups: Sequence[Setup | None] | None = None
    ) -> list[list[float]]: ...


class CpuTimer:
    method = "perf_counter"
    blocked = True

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
    ) -> list[list[float]]:
        """``rounds`` rounds of one timed block per side, in turn (warmup is ``warm``'s job).

        Method: ``perf_counter`` before and after a block of ``block_size`` calls; the sample
        is the block time divided by the block size. CPU kernels have finished when a call
        returns, so no synchronisation is needed. Side A's block, side B's block, A, B…: a
        change in clock speed or load during the measurement hits both sides alike. The
        garbage collector is paused throughout (``gc_paused``).
        """
        samples: list[list[float]] = [[] for _ in fns]
        setups = setups or [None] * len(fns)
        with gc_paused():
            for _ in range(rounds):
                for fn, p, out, setup in zip(fns, plans, samples, setups, strict=True):
                    if setup is not None:
                        setup(p.block_size)
                    start = self.clock()
                    for _ in range(p.block_size):
                        fn()
                    out.append((self.clock() - start) * 1e3 / p.block_size)
        return samples


class CudaTimer:
    method = "cuda_events"
    blocked = False

    def __init__(self, device: torch.device, flush_l2: bool = False) -> None:
        self.device = device
        self.flush_l2 = flush_l2
        self._flush_buffer: torch.Tensor | None = None

    def first_call(self, fn: Call) -> tuple[Any, float]:
        """Wall time of one call in ms: synchronise, ``perf_counter``, call, synchronise, read.

        Wall time rather than CUDA events, since a first call's cost (tracing, compiling,
        autotuning) is spent on the host, not on the device.
        """
        torch.cuda.synchronize(self.device)
        start = time.perf_counter()
        out = fn()
        torch.cuda.synchronize(self.device)
        return out, (time.perf_counter() - start) * 1e3

    def estimate(self, fn: Call) -> float:
        """Mean device time of one call over ``ESTIMATE_CALLS`` calls between two events."""
        fn()
        torch.cuda.synchronize(self.device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(ESTIMATE_CALLS):
            self._flush()
            fn()
        end.record()
        torch.cuda.synchronize(self.device)
        return start.elapsed_time(end) / ESTIMATE_CALLS

    def warm(self, fn: Call, calls: int) -> None:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize(self.device)

    def interleaved(
        self, fns: Sequence[Call], plans: Sequence[Plan], rounds: int, setups: Sequence[Setup | None] | None = None
    ) -> list[list[float]]:
        """``rounds`` rounds of one timed call per side, in turn (warmup is ``warm``'s job).

        Method: a CUDA event pair recorded on the current stream around each timed call; with
        ``flush_l2`` a 256 MB buffer is zeroed before each call (outside the events) so no
        call finds its inputs in L2. One synchronisation at the end reads all events: no host
        sync sits between timed calls. Sides alternate call by call. The garbage collector
        is paused throughout (``gc_paused``).
        """
        torch.cuda.synchronize(self.device)
        events = [
            [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(rounds)]
            for _ in fns
        ]
        setups = setups or [None] * len(fns)
        with gc_paused():
            for i in range(rounds):
                for fn, side, setup in zip(fns, events, setups, strict=True):
                    if setup is not None:
                        setup(1)
                    self._flush()
                    start, end = side[i]
                    start.record()
                    fn()
                    end.record()
            torch.cuda.synchronize(self.device)
        return [[start.elapsed_time(end) for start, end in side] for side in events]

    def _flush(self) -> None:
        if not self.flush_l2:
            return
        if self._flush_buffer is None:
            self._flush_buffer = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device=self.device)
        self._flush_buffer.zero_()


def timer_for(device: torch.device, timing: TimingConfig) -> Timer:
    return CudaTimer(device, flush_l2=timing.flush_l2) if device.type == "cuda" else CpuTimer()
