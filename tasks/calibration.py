"""A fixed probe of a worker's device, about a second, run in the worker before its first experiment
(``run --calibrate``): how fast this GPU or these cores are next to others of the same model.

The figures are not peaks: they are the same fixed work, timed the same way, on every device, so
that devices of one model can be compared (``orchestrator.machines.calibration`` judges them). Higher is
faster for every figure. A step that raises leaves its figure out and its error in
``conditions["errors"]``; the probe itself never raises.

On a GPU (``probe_gpu``), each step is 3 untimed calls, then 10 calls enqueued back to back, each
between its own pair of CUDA events, and one synchronisation at the end, so the GPU never waits on
the host between timed calls (as Triton's ``do_bench``); a figure comes from the median call:

1. ``fp32_tflops``: a square fp32 GEMM of ``GEMM_N["fp32"]``, TF32 off (``fp32_precision =
   "ieee"``, put back afterwards): 2n³ floating-point operations per call.
2. ``bf16_tflops``: a square bf16 GEMM of ``GEMM_N["bf16"]`` (cuBLAS's defaults otherwise).
3. ``copy_gbps``: a device-to-device copy of ``GPU_COPY_BYTES``, counted as bytes read plus bytes
   written per second, in 10⁹ bytes (the convention of CUDA's ``bandwidthTest``).

Inputs are random with a fixed seed: a GEMM on zeros draws less power and runs faster. While the
bf16 GEMMs run (the probe's most power-hungry step) NVML's clocks, temperature, power and clock
throttle reasons are read (``conditions``): once the GPU has reached the middle timed call, with the
other half still queued behind it.

On a CPU (``probe_cpu``), with as many torch threads as the worker's cores: a float32 matmul of
``CPU_MATMUL_N`` (``matmul_gflops``) and a copy of ``CPU_COPY_BYTES`` (``copy_gbps``, bytes read plus
written, as on a GPU), each 1 untimed call then 5 timed with ``time.perf_counter``; the medians.
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import torch

from tasks.metadata import cpu_model
from tasks.models import Calibration
from tasks.nvml import gpu_state, throttle_reasons
from tasks.text import error_line

# Square GEMM sizes: one call is tens of ms on an H100/H200 (fp32 without tensor cores at ~60 TFLOP/s:
# 2·8192³ = 1.1 TFLOP, ~18 ms; bf16 at ~700-800 TFLOP/s: 2·16384³ = 8.8 TFLOP, ~11-13 ms), ~60 ms and
# ~35 ms on an A100. Fixed, not fitted to the device: every device of a model runs the same work.
GEMM_N = {"fp32": 8192, "bf16": 16384}  # inputs and output: fp32 3x256 MiB, bf16 3x512 MiB
GPU_COPY_BYTES = 2**30  # 1 GiB, ~20x the L2 of an H100/H200 (50-60 MB): the copy runs from HBM
GPU_WARMUP = 3  # untimed calls before each step's timed ones: clocks up, cuBLAS's heuristics and handles made
GPU_REPEATS = 10  # timed calls per step; on an H200 the whole probe is ~0.5 s of GPU time
CPU_MATMUL_N = 1024  # 2·1024³ = 2.1 GFLOP: 10-40 ms on 2 cores of a current server CPU
CPU_COPY_BYTES = 256 * 2**20  # source and destination together 512 MiB: more than the last-level cache
# of a current server socket (Xeon 5th gen: up to 320 MB; EPYC: 32-96 MB per CCD), so it runs from DRAM
CPU_WARMUP = 1  # the destination's first-touch page faults, the thread pool started
CPU_REPEATS = 5  # with 1024 and 256 MiB, ~0.5 s per step on 2 loaded cores
SEED = 0  # the GEMM's random inputs, the same on every device

Conditions = dict[str, Any]


class Timed(NamedTuple):
    """One step's timed calls (ms each) and what NVML said while they ran (empty where it says nothing)."""

    samples_ms: list[float]
    conditions: Conditions


class GpuKernels(Protocol):
    """The GPU steps of the probe: CUDA's (``CudaKernels``), or a fake in tests."""

    def name(self) -> str:
        """The device's name (``torch.cuda.get_device_name``)."""
        ...

    def gemm(self, n: int, dtype: torch.dtype) -> Timed:
        """A square matmul of n in ``dtype``, timed as the module docstring says."""
        ...

    def copy(self, nbytes: int) -> Timed:
        """A device-to-device copy of ``nbytes``, timed as the module docstring says."""
        ...


def nvml_conditions(device: torch.device) -> Conditions:
    """NVML's SM and memory clocks, temperature, power and clock throttle reasons now; what it cannot
    say is left out."""
    state = gpu_state(device)
    found: Conditions = state.model_dump(exclude_none=True) if state else {}
    reasons = throttle_reasons(device)
    if reasons is not None:
        found["throttle_reasons"] = reasons
    return found


@dataclass
class CudaKernels:
    """The probe's steps on one CUDA device, timed with CUDA events (``event`` and ``synchronize``
    are torch's; a test passes host-clock stand-ins and runs the same code on the CPU)."""

    device: torch.device
    event: Callable[..., Any] = torch.cuda.Event
    synchronize: Callable[[torch.device], None] = torch.cuda.synchronize
    read_conditions: Callable[[torch.device], Conditions] = nvml_conditions
    warmup: int = GPU_WARMUP
    repeats: int = GPU_REPEATS

    def name(self) -> str:
        return torch.cuda.get_device_name(self.device)

    def gemm(self, n: int, dtype: torch.dtype) -> Timed:
        generator = torch.Generator(self.device).manual_seed(SEED)
        a, b = (torch.randn(n, n, device=self.device, dtype=dtype, generator=generator) for _ in range(2))
        out = torch.empty(n, n, device=self.device, dtype=dtype)
        with ieee_fp32():
            return self.time(lambda: torch.mm(a, b, out=out))

    def copy(self, nbytes: int) -> Timed:
        source = torch.ones(nbytes, device=self.device, dtype=torch.uint8)
        target = torch.empty_like(source)
        return self.time(lambda: target.copy_(source))

    def time(self, fn: Callable[[], Any]) -> Timed:
        """``warmup`` calls, then ``repeats`` calls each between its own pair of events, all enqueued
        before the host waits; NVML read once the GPU reaches the middle timed call; one final sync."""
        for _ in range(self.warmup):
            fn()
        starts = [self.event(enable_timing=True) for _ in range(self.repeats)]
        ends = [self.event(enable_timing=True) for _ in range(self.repeats)]
        for start, end in zip(starts, ends, strict=True):
            start.record()
            fn()
            end.record()
        starts[self.repeats // 2].synchronize()  # the first half is done, the second still queued: under load
        seen = self.read_conditions(self.device)
        self.synchronize(self.device)
        return Timed([start.elapsed_time(end) for start, end in zip(starts, ends, strict=True)], seen)


@contextmanager
def ieee_fp32() -> Iterator[None]:
    """fp32 matmuls in full fp32 (no TF32) inside, whatever the process had set; its setting put back after.
    torch ≥ 2.9's ``fp32_precision``, since mixing it with the older ``allow_tf32`` raises."""
    matmul = torch.backends.cuda.matmul
    name, value = ("fp32_precision", "ieee") if hasattr(matmul, "fp32_precision") else ("allow_tf32", False)
    saved = getattr(matmul, name)
    setattr(matmul, name, value)
    try:
        yield
    finally:
        setattr(matmul, name, saved)


def probe(placement: dict[str, Any], device: str | None = None, kernels: GpuKernels | None = None) -> Calibration:
    """This worker's calibration entry: the GPU probe where ``device`` is "cuda" (or None, and the
    placement holds a GPU this process sees), else the CPU probe. ``placement`` is the worker's
    (``node_id``, ``gpu_ids``, ``gpu_model``, ``cpus``); ``kernels`` replaces CUDA's (tests)."""
    started = time.perf_counter()
    gpu_ids = [str(g) for g in placement.get("gpu_ids") or ()]
    if device is None:
        device = "cuda" if gpu_ids and (kernels is not None or torch.cuda.is_available()) else "cpu"
    entry = probe_gpu(placement, kernels) if device == "cuda" else probe_cpu(placement)
    entry.seconds = time.perf_counter() - started
    return entry


def probe_gpu(placement: dict[str, Any], kernels: GpuKernels | None = None) -> Calibration:
    """The GPU probe (see the module docstring) on the first of the placement's GPUs, this process's cuda:0."""
    gpu_ids = [str(g) for g in placement.get("gpu_ids") or ()]
    gpu_id = gpu_ids[0] if gpu_ids else os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    figures: dict[str, float] = {}
    under_load: Conditions = {}  # NVML's word while the bf16 GEMMs ran
    errors: dict[str, str] = {}
    if kernels is None and not torch.cuda.is_available():
        errors["cuda"] = "no CUDA device is visible to this process"
    else:
        gpu = kernels or CudaKernels(torch.device("cuda", 0))
        for figure, step in (
            ("fp32_tflops", lambda: gemm_tflops(gpu, GEMM_N["fp32"], torch.float32)),
            ("bf16_tflops", lambda: gemm_tflops(gpu, GEMM_N["bf16"], torch.bfloat16, under_load)),
            ("copy_gbps", lambda: copy_gbps(gpu, GPU_COPY_BYTES)),
        ):
            _measure(figures, errors, figure, step)
        if kernels is None:
            torch.cuda.empty_cache()  # hand the probe's ~2 GiB back to the driver before the experiments
    model = placement.get("gpu_model") or _gpu_name(kernels)
    return Calibration(
        id=f"{_node(placement)}/gpu{gpu_id}",
        node_id=placement.get("node_id"),
        hostname=socket.gethostname(),
        device="cuda",
        gpu_id=gpu_id,
        model=model,
        figures=figures,
        conditions={**under_load, **({"errors": errors} if errors else {})},
    )


def gemm_tflops(gpu: GpuKernels, n: int, dtype: torch.dtype, conditions: Conditions | None = None) -> float:
    """2n³ / the median call, in 10¹² per second; what NVML said meanwhile goes into ``conditions``."""
    timed = gpu.gemm(n, dtype)
    if conditions is not None:
        conditions.update(timed.conditions)
    return 2 * n**3 / (statistics.median(timed.samples_ms) * 1e-3) / 1e12


def copy_gbps(gpu: GpuKernels, nbytes: int) -> float:
    """Bytes read plus bytes written / the median call, in 10⁹ per second."""
    return 2 * nbytes / (statistics.median(gpu.copy(nbytes).samples_ms) * 1e-3) / 1e9


def probe_cpu(placement: dict[str, Any]) -> Calibration:
    """The CPU probe (see the module docstring) on the cores this process may run on, with one torch
    thread per core (``placement["cpus"]`` of them at most, as an experiment's isolation sizes it)."""
    cores = sorted(os.sched_getaffinity(0))
    cpus = placement.get("cpus")
    threads = min(int(cpus), len(cores)) if cpus else len(cores)
    figures: dict[str, float] = {}
    errors: dict[str, str] = {}
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        _measure(figures, errors, "matmul_gflops", lambda: cpu_matmul_gflops(CPU_MATMUL_N))
        _measure(figures, errors, "copy_gbps", lambda: cpu_copy_gbps(CPU_COPY_BYTES))
    finally:
        torch.set_num_threads(saved)
    name = cpu_model()
    return Calibration(
        id=f"{_node(placement)}/cpu{core_list(cores)}",
        node_id=placement.get("node_id"),
        hostname=socket.gethostname(),
        device="cpu",
        model=f"CPU ({name})" if name else "CPU",
        figures=figures,
        conditions={"threads": threads, **({"errors": errors} if errors else {})},
    )


def cpu_matmul_gflops(n: int, warmup: int = CPU_WARMUP, repeats: int = CPU_REPEATS) -> float:
    """2n³ / the median of ``repeats`` float32 matmuls after ``warmup``, in 10⁹ per second."""
    generator = torch.Generator().manual_seed(SEED)
    a, b = (torch.randn(n, n, generator=generator) for _ in range(2))
    out = torch.empty(n, n)
    return 2 * n**3 / _median_s(lambda: torch.mm(a, b, out=out), warmup, repeats) / 1e9


def cpu_copy_gbps(nbytes: int, warmup: int = CPU_WARMUP, repeats: int = CPU_REPEATS) -> float:
    """Bytes read plus bytes written / the median of ``repeats`` copies after ``warmup``, in 10⁹ per second."""
    source = torch.ones(nbytes, dtype=torch.uint8)
    target = torch.empty_like(source)
    return 2 * nbytes / _median_s(lambda: target.copy_(source), warmup, repeats) / 1e9


def core_list(cores: Sequence[int]) -> str:
    """Cores as ranges: [0, 1] → "0-1", [0, 2, 3] → "0,2-3", [5] → "5"."""
    ranges: list[list[int]] = []
    for core in sorted(cores):
        if ranges and core == ranges[-1][1] + 1:
            ranges[-1][1] = core
        else:
            ranges.append([core, core])
    return ",".join(f"{a}-{b}" if a != b else f"{a}" for a, b in ranges)


def _median_s(fn: Callable[[], Any], warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def _measure(figures: dict[str, float], errors: dict[str, str], figure: str, step: Callable[[], float]) -> None:
    """Run one step into ``figures``; an exception, as "Type: first line", into ``errors`` instead."""
    try:
        figures[figure] = step()
    except Exception as e:
        errors[figure] = error_line(e, with_type=True)


def _gpu_name(kernels: GpuKernels | None) -> str:
    try:
        return (kernels or CudaKernels(torch.device("cuda", 0))).name()
    except Exception:  # no CUDA device: the entry says so in its errors
        return "unknown GPU"


def _node(placement: dict[str, Any]) -> str:
    """The node's id, its first 8 characters (Ray's are 56 hex digits), or the hostname outside Ray."""
    node_id = placement.get("node_id")
    return str(node_id)[:8] if node_id else socket.gethostname()
