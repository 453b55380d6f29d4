"""Achieved throughput from counted work and a measured time: pure arithmetic, no torch.

The report side imports this to show TFLOP/s and GB/s next to the times. What the work counts
(matmul/conv/attention FLOPs only; a lower bound of bytes) is described in ``tasks.work``.
"""

from __future__ import annotations

from typing import NamedTuple

from tasks.models import WorkInfo


class Throughput(NamedTuple):
    """Achieved rates of one side; ``None`` where the work was not counted or the time is unknown."""

    tflops: float | None  # 1e12 floating-point operations per second
    gbps: float | None  # 1e9 bytes per second (a lower bound: see tasks.work)


def achieved(work: WorkInfo | None, median_ms: float | None) -> Throughput:
    """FLOPs and bytes of one call divided by the call's median time: TFLOP/s and GB/s.

    A side with 0 counted FLOPs (a memory-bound target) gets ``tflops`` ``None``, not 0: its
    matmul-family work is nil, not slow.
    """
    return Throughput(None, None) if work is None else rates(work.flops, work.bytes, median_ms)


def rates(flops: int | None, bytes_: int | None, median_ms: float | None) -> Throughput:
    """``achieved`` of a call's counted FLOPs and bytes (None: not counted), as a result's digest keeps them."""
    if median_ms is None or median_ms <= 0:
        return Throughput(None, None)
    seconds = median_ms / 1e3
    tflops = flops / seconds / 1e12 if flops else None
    gbps = bytes_ / seconds / 1e9 if bytes_ else None
    return Throughput(tflops, gbps)
