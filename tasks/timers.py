"""Timers: how a call is turned into milliseconds, on the CPU and on a CUDA device.

Each timer has two operations: ``first_call`` (one call, wall clock, including any
compilation it triggers) and ``samples`` (warmup calls, then one sample per timed call).
The procedure receives a timer; tests hand it a fake one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import torch

Clock = Callable[[], float]


class Timer(Protocol):
    def first_call(self, fn: Callable[[], Any]) -> tuple[Any, float]: ...

    def samples(self, fn: Callable[[], Any], warmup: int, repeats: int) -> list[float]: ...


class CpuTimer:
    def __init__(self, clock: Clock = time.perf_counter) -> None:
        self.clock = clock

    def first_call(self, fn: Callable[[], Any]) -> tuple[Any, float]:
        """Wall time of one call in ms, read with ``perf_counter`` around it."""
        start = self.clock()
        out = fn()
        return out, (self.clock() - start) * 1e3

    def samples(self, fn: Callable[[], Any], warmup: int, repeats: int) -> list[float]:
        """``warmup`` untimed calls, then ``repeats`` calls each timed alone with ``perf_counter``.

        No synchronisation is needed: CPU kernels have finished when the call returns.
        """
        for _ in range(warmup):
            fn()
        out = []
        for _ in range(repeats):
            start = self.clock()
            fn()
            out.append((self.clock() - start) * 1e3)
        return out


class CudaTimer:
    def __init__(self, device: torch.device) -> None:
        self.device = device

    def first_call(self, fn: Callable[[], Any]) -> tuple[Any, float]:
        """Wall time of one call in ms: synchronise, ``perf_counter``, call, synchronise, read.

        Wall time rather than CUDA events, since a first call's cost (tracing, compiling,
        autotuning) is spent on the host, not on the device.
        """
        torch.cuda.synchronize(self.device)
        start = time.perf_counter()
        out = fn()
        torch.cuda.synchronize(self.device)
        return out, (time.perf_counter() - start) * 1e3

    def samples(self, fn: Callable[[], Any], warmup: int, repeats: int) -> list[float]:
        """``warmup`` untimed calls, then one CUDA event pair around each of ``repeats`` calls.

        The events are recorded on the current stream and read after a single
        synchronisation at the end, so no host sync sits between timed calls.
        """
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize(self.device)
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeats)]
        for start, end in events:
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(self.device)
        return [start.elapsed_time(end) for start, end in events]


def timer_for(device: torch.device) -> Timer:
    return CudaTimer(device) if device.type == "cuda" else CpuTimer()
