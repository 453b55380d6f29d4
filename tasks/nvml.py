"""GPU clocks, temperature and power from NVML, where ``nvidia-ml-py`` is installed (optional)."""

from __future__ import annotations

import torch

from tasks.models import GpuState


def gpu_state(device: torch.device) -> GpuState | None:
    """The device's state now, or None where NVML or the device is not available."""
    if device.type != "cuda":
        return None
    try:
        import pynvml  # from nvidia-ml-py

        pynvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(device).uuid)
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        return GpuState(
            sm_clock_mhz=pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            memory_clock_mhz=pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            temperature_c=pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
            power_w=pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3,
        )
    except Exception:  # no NVML, no permission, an older driver: the state is simply unknown
        return None
