"""Precisions: what an experiment's ``precision`` does to its target and to every call of it.

========  ============================================================================================
fp32      float32 throughout; matmuls in full float32 (``set_float32_matmul_precision("highest")``)
          and cuDNN convolutions without TF32
tf32      float32 tensors; CUDA matmuls and convolutions in TF32 (matmul precision ``"high"``,
          ``cudnn.allow_tf32``); needs a GPU of compute capability 8.0 or newer
bf16      the module and the floating inputs cast to bfloat16
fp16      the module and the floating inputs cast to float16
amp_bf16  float32 module and inputs; every call under ``torch.autocast(device, torch.bfloat16)``
amp_fp16  float32 module and inputs; every call under ``torch.autocast(device, torch.float16)``
========  ============================================================================================

The settings hold for the whole experiment, both sides alike (``active``), and the process's own
settings are restored afterwards. The float64 reference of the correctness check runs outside
autocast (``exact``). A precision the device cannot run is a ``PrecisionError`` (a
``runtime_error`` result) that says so, raised before anything is built.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from typing import Any

import torch
import torch.utils._pytree as pytree

from tasks.models import Precision
from tasks.targets import Workload

CAST: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16}
AUTOCAST: dict[str, torch.dtype] = {"amp_bf16": torch.bfloat16, "amp_fp16": torch.float16}
# The dtype whose tolerance a float32 output takes when its arithmetic ran lower: TF32 keeps
# float16's 10-bit mantissa; autocast runs matmuls in its dtype.
ARITHMETIC: dict[str, torch.dtype] = {"tf32": torch.float16, **AUTOCAST}
TF32_MIN_CAPABILITY = (8, 0)  # Ampere: the first GPUs with TF32 tensor cores


class PrecisionError(RuntimeError):
    """The device cannot run the experiment in the precision it asks for."""


def check_supported(precision: Precision, device: torch.device) -> None:
    """Raise ``PrecisionError`` when ``device`` cannot run ``precision``: TF32 off CUDA or before
    Ampere, bfloat16 on a GPU without it, or a probe matmul in the dtype that fails."""
    if precision == "fp32":
        return
    if precision == "tf32":
        if device.type != "cuda":
            raise PrecisionError(
                f"precision 'tf32' is a CUDA matmul mode (TF32 tensor cores, compute capability 8.0+); "
                f"this experiment runs on the {device.type}"
            )
        capability = torch.cuda.get_device_capability(device)
        if capability < TF32_MIN_CAPABILITY:
            raise PrecisionError(f"precision 'tf32' needs compute capability 8.0+; this GPU has {capability}")
        return
    dtype = CAST.get(precision) or AUTOCAST[precision]
    if device.type == "cuda" and dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported(False):
        raise PrecisionError(f"precision '{precision}': this GPU has no bfloat16 support")
    try:  # a small matmul in the dtype, or under autocast: the kernel every real target needs
        with active(precision, device):
            x = torch.ones(8, 8, device=device, dtype=CAST.get(precision, torch.float32))
            torch.nn.functional.linear(x, x).sum().item()
    except Exception as e:
        raise PrecisionError(f"precision '{precision}' cannot run on this {device.type}: {e}") from e


def cast(work: Workload, precision: Precision) -> Workload:
    """The workload in the precision's dtype: the module and every floating input tensor cast
    (``bf16``/``fp16``); unchanged otherwise."""
    dtype = CAST.get(precision)
    if dtype is None:
        return work
    if isinstance(work.fn, torch.nn.Module):
        work.fn.to(dtype)
    return replace(
        work,
        inputs=_cast_inputs(work.inputs, dtype),
        check_inputs=[_cast_inputs(i, dtype) for i in work.check_inputs],
        cycle=[_cast_inputs(i, dtype) for i in work.cycle] if work.cycle else work.cycle,
    )


def _cast_inputs(inputs: tuple[Any, ...], dtype: torch.dtype) -> tuple[Any, ...]:
    def convert(t: torch.Tensor) -> torch.Tensor:
        return t.detach().to(dtype).requires_grad_(t.requires_grad) if t.is_floating_point() else t

    return tuple(pytree.tree_map_only(torch.Tensor, convert, inputs))


def arithmetic_dtype(precision: Precision) -> torch.dtype | None:
    """The dtype the precision computes in when lower than its tensors' (tf32, amp), for tolerances."""
    return ARITHMETIC.get(precision)


@contextmanager
def active(precision: Precision, device: torch.device) -> Iterator[None]:
    """The precision's global settings for everything inside, then the previous ones again."""
    matmul, cudnn_tf32 = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    dtype = AUTOCAST.get(precision)
    try:
        with torch.autocast(device.type, dtype=dtype) if dtype is not None else nullcontext():
            yield
    finally:
        torch.set_float32_matmul_precision(matmul)
        torch.backends.cudnn.allow_tf32 = cudnn_tf32


def exact(device: torch.device) -> Any:
    """Autocast off: the float64 reference computes in float64 whatever the precision."""
    return torch.autocast(device.type, enabled=False)


def explain_failure(error: Exception, precision: Precision) -> Exception:
    """A target's own failure to run in a low precision ("... not implemented for 'Half'"),
    restated as a ``PrecisionError``; any other error unchanged."""
    if precision != "fp32" and "not implemented for" in str(error):
        return PrecisionError(f"the target cannot run in precision '{precision}' on this device: {error}")
    return error
