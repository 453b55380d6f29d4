"""Time in collectives, per side, split out by torch's profiler from one more step of each side.

After the timed window, every rank runs one more step of each side under ``torch.profiler`` (in lockstep,
as every step is), and sums the time of the backend's own events: on the CPU, gloo's (``gloo:all_reduce``,
``gloo:broadcast``, ... recorded on gloo's threads, from the work's start to its end: the time the
collective took, waiting for the other ranks included); on CUDA, the device time of NCCL's kernels
(``ncclDevKernel_*``). A collective that overlaps computation counts whole: this is time spent in
collectives, not time the step lost to them. The profiled steps are not among the timed samples.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

CPU_PREFIXES = ("gloo:",)  # ProcessGroupGloo's work, recorded on its threads (torch 2.13)
CUDA_PREFIX = "nccl"  # NCCL's kernels: ncclDevKernel_AllReduce_Sum_f32_RING_LL, ...


def collective_ms(step: Callable[[], Any], device: torch.device) -> float | None:
    """Milliseconds the backend spent in collectives during one call of ``step``; None where the profiler
    gave nothing to read."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    with profile(activities=activities) as prof:
        step()
        if cuda:
            torch.cuda.synchronize(device)
    try:
        events = list(prof.events())
    except Exception:  # reading the trace never fails the experiment
        return None
    if cuda:
        us = sum(e.device_time_total for e in events if e.name.lower().startswith(CUDA_PREFIX))
    else:
        us = sum(e.cpu_time_total for e in events if e.name.startswith(CPU_PREFIXES))
    return us / 1e3
