"""GPU clocks, temperature, power and throttle reasons from NVML, where ``nvidia-ml-py`` is installed (optional)."""

from __future__ import annotations

from typing import Any

import torch

from tasks.models import GpuState

# NVML's clocks-event ("throttle") reason bits, as nvml.h and nvidia-ml-py define them
# (nvmlClocksThrottleReason*, renamed nvmlClocksEventReason* in CUDA 12.2's NVML; same values).
THROTTLE_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def gpu_state(device: torch.device) -> GpuState | None:
    """The device's state now, or None where NVML or the device is not available."""
    if device.type != "cuda":
        return None
    try:
        pynvml, handle = _handle(device)
        return GpuState(
            sm_clock_mhz=pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            memory_clock_mhz=pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            temperature_c=pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
            power_w=pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3,
        )
    except Exception:  # no NVML, no permission, an older driver: the state is simply unknown
        return None


def throttle_reasons(device: torch.device) -> list[str] | None:
    """Why the device's clocks are below their maximum now (``THROTTLE_REASONS``' names; empty: they
    are not held back), or None where NVML or the device is not available."""
    if device.type != "cuda":
        return None
    try:
        pynvml, handle = _handle(device)
        read = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        mask = (read or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons)(handle)
    except Exception:  # as in gpu_state: unknown
        return None
    return reason_names(int(mask))


def reason_names(mask: int) -> list[str]:
    """The names of the bits set in an NVML clocks-event reasons mask; an unknown bit as its hex value."""
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    return names + ([f"0x{unknown:x}"] if unknown else [])


def _handle(device: torch.device) -> tuple[Any, Any]:
    import pynvml  # from nvidia-ml-py

    pynvml.nvmlInit()
    uuid = str(torch.cuda.get_device_properties(device).uuid)
    return pynvml, pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
