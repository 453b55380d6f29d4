"""Calibration: the probe's figures on a fake GPU and on the real CPU, and the driver's slow verdict."""

from __future__ import annotations

import re
import time
from typing import ClassVar

import pytest
import torch

import tasks.nvml
from orchestrator.machines.calibration import SLOW_THRESHOLD, is_slow, judge, slow_reasons
from tasks.calibration import (
    GEMM_N,
    GPU_COPY_BYTES,
    CudaKernels,
    Timed,
    core_list,
    nvml_conditions,
    probe,
)
from tasks.models import Calibration
from tasks.nvml import reason_names

# What a healthy fake H200 takes per call (ms): fp32 GEMM, bf16 GEMM, 1 GiB copy.
FP32_MS, BF16_MS, COPY_MS = 20.0, 11.0, 0.5
NODE = "0123456789abcdef0123456789abcdef0123456789abcdef01234567"


class FakeGpu:
    """A GPU whose GEMMs run at ``speed`` times a healthy one's throughput (0.9: 10% slow); each
    step's last timed call is a 5x outlier that the median must ignore. ``broken``: steps that raise."""

    def __init__(self, speed: float = 1.0, copy_speed: float = 1.0, broken: tuple[str, ...] = ()) -> None:
        self.speed, self.copy_speed, self.broken = speed, copy_speed, broken
        self.calls: list[tuple[str, int]] = []

    def name(self) -> str:
        return "NVIDIA H200"

    def gemm(self, n: int, dtype: torch.dtype) -> Timed:
        kind = "fp32" if dtype == torch.float32 else "bf16"
        self.calls.append((kind, n))
        if kind in self.broken:
            raise RuntimeError("CUDA error: out of memory\nmore detail")
        ms = (FP32_MS if kind == "fp32" else BF16_MS) / self.speed
        return Timed([ms] * 9 + [5 * ms], {"sm_clock_mhz": 1980, "throttle_reasons": ["sw_power_cap"]})

    def copy(self, nbytes: int) -> Timed:
        self.calls.append(("copy", nbytes))
        ms = COPY_MS / self.copy_speed
        return Timed([ms] * 9 + [5 * ms], {})


def gpu_entry(gpu_id: str, speed: float = 1.0, model: str = "H200", **kwargs) -> Calibration:
    placement = {"node_id": NODE, "gpu_ids": [gpu_id], "gpu_model": model}
    return probe(placement, kernels=FakeGpu(speed, **kwargs))


# --- the probe on a fake GPU ---


def test_a_gpu_whose_gemms_are_10_percent_slow_reads_10_percent_lower():
    healthy, slow = gpu_entry("0"), gpu_entry("1", speed=0.9)
    for figure in ("fp32_tflops", "bf16_tflops"):
        assert slow.figures[figure] == pytest.approx(0.9 * healthy.figures[figure])
    assert slow.figures["copy_gbps"] == pytest.approx(healthy.figures["copy_gbps"])


def test_gpu_figures_are_the_work_over_the_median_call():
    entry = gpu_entry("2")
    assert entry.figures["fp32_tflops"] == pytest.approx(2 * GEMM_N["fp32"] ** 3 / (FP32_MS / 1e3) / 1e12)
    assert entry.figures["bf16_tflops"] == pytest.approx(2 * GEMM_N["bf16"] ** 3 / (BF16_MS / 1e3) / 1e12)
    assert entry.figures["copy_gbps"] == pytest.approx(2 * GPU_COPY_BYTES / (COPY_MS / 1e3) / 1e9)  # read + written


def test_a_gpu_entry_names_its_node_gpu_and_model_and_the_conditions_under_load():
    gpu = FakeGpu()
    entry = probe({"node_id": NODE, "gpu_ids": ["3"], "gpu_model": "H200"}, kernels=gpu)
    assert (entry.id, entry.device, entry.gpu_id, entry.node_id, entry.model) == (
        "01234567/gpu3",
        "cuda",
        "3",
        NODE,
        "H200",
    )
    assert entry.conditions == {"sm_clock_mhz": 1980, "throttle_reasons": ["sw_power_cap"]}
    assert gpu.calls == [("fp32", GEMM_N["fp32"]), ("bf16", GEMM_N["bf16"]), ("copy", GPU_COPY_BYTES)]
    assert entry.seconds > 0 and not entry.slow
    # without a gpu_model in the placement, the device's own name
    assert probe({"node_id": NODE, "gpu_ids": ["0"]}, kernels=FakeGpu()).model == "NVIDIA H200"


def test_a_step_that_raises_leaves_its_figure_out_and_says_why():
    entry = gpu_entry("0", broken=("bf16",))
    assert set(entry.figures) == {"fp32_tflops", "copy_gbps"}
    assert entry.conditions["errors"] == {"bf16_tflops": "RuntimeError: CUDA error: out of memory"}


def test_asking_for_cuda_without_a_gpu_is_an_entry_with_an_error_not_an_exception():
    entry = probe({"node_id": NODE, "gpu_ids": ["0"], "gpu_model": "H200"}, device="cuda")
    assert entry.device == "cuda" and entry.figures == {} and entry.model == "H200"
    assert entry.conditions["errors"] == {"cuda": "no CUDA device is visible to this process"}


class HostEvent:
    """A CUDA event stand-in on the host clock that logs what the timing loop does with it."""

    log: ClassVar[list[str]] = []

    def __init__(self, enable_timing: bool = False) -> None:
        self.at = 0.0

    def record(self) -> None:
        self.at = time.perf_counter()
        HostEvent.log.append("record")

    def synchronize(self) -> None:
        HostEvent.log.append("wait")

    def elapsed_time(self, end: HostEvent) -> float:
        return (end.at - self.at) * 1e3


def test_the_cuda_steps_warm_up_enqueue_every_timed_call_and_read_nvml_under_load():
    HostEvent.log = []
    saved = torch.backends.cuda.matmul.fp32_precision

    def conditions(device: torch.device) -> dict:
        HostEvent.log.append("nvml")
        return {"fp32_precision": torch.backends.cuda.matmul.fp32_precision}

    kernels = CudaKernels(
        torch.device("cpu"),
        event=HostEvent,
        synchronize=lambda device: HostEvent.log.append("sync"),
        read_conditions=conditions,
    )
    timed = kernels.gemm(64, torch.float32)
    assert len(timed.samples_ms) == 10 and all(ms >= 0 for ms in timed.samples_ms)
    # every timed call between its own pair of events, then the middle one waited on, NVML, one sync
    assert HostEvent.log == ["record"] * 20 + ["wait", "nvml", "sync"]
    assert timed.conditions == {"fp32_precision": "ieee"}  # TF32 off while the fp32 GEMM ran
    assert torch.backends.cuda.matmul.fp32_precision == saved  # and the process's setting put back
    assert len(kernels.gemm(32, torch.bfloat16).samples_ms) == 10
    assert len(kernels.copy(1 << 16).samples_ms) == 10


def test_nvml_conditions_decode_the_throttle_reasons(monkeypatch):
    class FakeNvml:
        NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

        def nvmlDeviceGetClockInfo(self, handle, clock):
            return {1: 1755, 2: 3201}[clock]

        def nvmlDeviceGetTemperature(self, handle, sensor):
            return 71

        def nvmlDeviceGetPowerUsage(self, handle):
            return 690_000  # mW

        def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):  # an older nvidia-ml-py's name
            return 0x4 | 0x40

    monkeypatch.setattr(tasks.nvml, "_handle", lambda device: (FakeNvml(), "handle"))
    assert nvml_conditions(torch.device("cuda", 0)) == {
        "sm_clock_mhz": 1755,
        "memory_clock_mhz": 3201,
        "temperature_c": 71,
        "power_w": 690.0,
        "throttle_reasons": ["sw_power_cap", "hw_thermal_slowdown"],
    }
    assert nvml_conditions(torch.device("cpu")) == {}


def test_throttle_reason_bits_are_named_and_unknown_bits_kept():
    assert reason_names(0) == []
    assert reason_names(0x1) == ["gpu_idle"]
    assert reason_names(0x8 | 0x80 | 0x1000) == ["hw_slowdown", "hw_power_brake_slowdown", "0x1000"]


# --- the probe on the real CPU ---


def test_the_cpu_probe_measures_positive_figures_with_a_well_formed_id():
    entry = probe({"node_id": NODE, "gpu_ids": [], "cpus": 2})
    assert entry.device == "cpu" and entry.gpu_id is None
    assert re.fullmatch(r"01234567/cpu\d+(-\d+)?(,\d+(-\d+)?)*", entry.id), entry.id
    assert entry.model.startswith("CPU")
    assert set(entry.figures) == {"matmul_gflops", "copy_gbps"}
    assert all(value > 0 for value in entry.figures.values())
    assert entry.conditions["threads"] >= 1 and entry.seconds > 0


def test_core_lists_read_as_ranges():
    assert [core_list(c) for c in ([0, 1], [5], [0, 2, 3], [3, 1, 2, 8])] == ["0-1", "5", "0,2-3", "1-3,8"]


# --- the verdict ---


def entry(id: str, model: str = "H200", **figures: float) -> Calibration:
    return Calibration(id=id, hostname="h", device="cuda", model=model, figures=figures or {"bf16_tflops": 790.0})


def test_a_gpu_10_percent_slow_among_3_normal_ones_is_flagged_with_the_figure_named():
    entries = [gpu_entry(str(i)) for i in range(3)] + [gpu_entry("3", speed=0.9)]
    judged = judge(entries)
    assert [e.slow for e in judged] == [False, False, False, True]
    reasons = judged[3].slow_reasons
    assert len(reasons) == 2  # both GEMMs; the copy is as fast as its peers'
    assert reasons[0].startswith("fp32_tflops ") and reasons[1].startswith("bf16_tflops ")
    assert "is 10.0% below the H200 median" in reasons[1] and reasons[1].endswith("(of 3 others)")
    assert not any(e.slow_reasons for e in judged[:3])
    assert [e.id for e in judged] == [e.id for e in entries] and not entries[3].slow  # copies, in order


def test_the_reason_reads_as_a_sentence():
    entries = [entry(f"n/gpu{i}", bf16_tflops=790.0) for i in range(3)] + [entry("n/gpu3", bf16_tflops=712.0)]
    assert slow_reasons(entries[3], entries) == ["bf16_tflops 712 is 9.9% below the H200 median 790 (of 3 others)"]


def test_a_gpu_4_percent_slow_is_not_flagged():
    entries = [gpu_entry(str(i)) for i in range(3)] + [gpu_entry("3", speed=0.96)]
    assert not any(e.slow for e in judge(entries))
    assert SLOW_THRESHOLD == 0.05


def test_a_slow_copy_alone_is_enough():
    entries = [gpu_entry(str(i)) for i in range(3)] + [gpu_entry("3", copy_speed=0.9)]
    (reason,) = judge(entries)[3].slow_reasons
    assert reason.startswith("copy_gbps ")


def test_different_models_are_never_compared():
    h200s = [entry(f"a/gpu{i}", bf16_tflops=790.0) for i in range(3)]
    a100 = entry("b/gpu0", model="A100", bf16_tflops=280.0)  # far below every H200, alone of its model
    slow_a100 = entry("b/gpu1", model="A100", bf16_tflops=250.0)
    judged = judge([*h200s, a100])
    assert not any(e.slow for e in judged)
    # a slow A100 is slow next to the other A100, whatever the H200s read
    assert slow_reasons(slow_a100, [*h200s, a100, slow_a100]) == [
        "bf16_tflops 250 is 10.7% below the A100 median 280 (of 1 other)"
    ]


def test_one_entry_alone_is_not_flagged():
    (alone,) = judge([entry("a/gpu0", bf16_tflops=10.0)])
    assert not alone.slow and alone.slow_reasons == []


def test_with_two_the_slower_is_judged_against_the_other():
    fast, slow = entry("a/gpu0", bf16_tflops=800.0), entry("a/gpu1", bf16_tflops=720.0)  # 10% apart
    assert [e.slow for e in judge([fast, slow])] == [False, True]
    close = entry("a/gpu2", bf16_tflops=770.0)  # 3.75% below the faster
    assert not any(e.slow for e in judge([fast, close]))


def test_a_device_is_not_its_own_peer():
    # two entries of one device (a replaced worker probed it again) do not vouch for each other
    first, again = entry("a/gpu0", bf16_tflops=700.0), entry("a/gpu0", bf16_tflops=705.0)
    peer = entry("a/gpu1", bf16_tflops=790.0)
    assert [e.slow for e in judge([first, again, peer])] == [True, True, False]


def test_a_figure_its_peers_measured_but_it_could_not_is_a_reason():
    entries = [gpu_entry(str(i)) for i in range(3)] + [gpu_entry("3", broken=("bf16",))]
    (reason,) = judge(entries)[3].slow_reasons
    assert reason == (
        "bf16_tflops not measured (RuntimeError: CUDA error: out of memory); 3 other H200 devices measured it"
    )


def test_is_slow_judges_one_entry_online_against_those_seen_so_far():
    seen = [gpu_entry("0")]
    newcomer = gpu_entry("1", speed=0.9)
    assert is_slow(newcomer, seen) and not is_slow(seen[0], [*seen, newcomer])
    assert not is_slow(newcomer, [])  # nothing to compare with yet
