"""How a compilebench result is named in PyTorch's benchmark tools: the model, its dtype, batch size and outcome;
and the error of an export that cannot be made.

Shared by both export formats (``pytorch_v3`` and ``harness_csv``); imports only the report's models.
The names are PyTorch's dynamo harness's (``benchmarks/dynamo/common.py``) wherever it has one, so that
its dashboards and checkers read an exported run as they read the harness's own.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

from orchestrator.report.models import group_label
from tasks.result import Result, Status

DTYPES: Final = {  # compilebench precision -> the dtype name the harness and its dashboards use
    "fp32": "float32",
    "tf32": "tf32",  # float32 with TF32 matmuls: kept apart from float32 so the two never share a series
    "bf16": "bfloat16",
    "fp16": "float16",
    "amp_bf16": "amp_bf16",
    "amp_fp16": "amp_fp16",
}

ACCURACY: Final[dict[Status, str]] = {  # compilebench status -> the harness's accuracy outcome
    "ok": "pass",
    "incorrect": "fail_accuracy",
    "compile_error": "fail_to_run",
    "runtime_error": "eager_fail_to_run",
    "timeout": "timeout",
    "oom": "OOM",
    "crashed": "infra_error",
    "unschedulable": "infra_error",
}


class Named(Protocol):
    """What names a result's model: its target and parameters (a ``Result``, or the part of one a format reads:
    ``harness_csv.CsvResult``)."""

    @property
    def target(self) -> str: ...

    @property
    def params(self) -> dict[str, Any]: ...


class ExportError(ValueError):
    """An export that cannot be made; the message is one line meant for the user."""


BATCH_PARAMS: Final = ("batch", "batch_size")  # the target parameters that are its batch size
BYTES_PER_GB: Final = 10**9  # the harness's peak memory unit: torch.cuda.max_memory_allocated() / 10**9


def model_name(result: Named) -> str:
    """The target and its parameters, as the report names a group: ``seed.foo3 shape=[4096, 4096]``."""
    return group_label(result.target, result.params)


def dtype_name(result: Result) -> str:
    return DTYPES[result.precision]


def batch_size(result: Named) -> int:
    """The target's ``batch`` (or ``batch_size``) parameter where the spec set it, else 0 (the harness's
    placeholder for a batch size it does not know)."""
    for name in BATCH_PARAMS:
        value = result.params.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return 0


def accuracy(result: Result) -> str:
    """The harness's accuracy outcome: ``pass`` (``pass_due_to_skip`` where correctness was not judged),
    ``fail_accuracy``, ``fail_to_run``, ``eager_fail_to_run``, ``timeout``, ``OOM``, ``infra_error``."""
    if result.status == "ok" and result.correct is None:
        return "pass_due_to_skip"
    return ACCURACY[result.status]


def peak_gb(peak_bytes: int | None) -> float | None:
    return None if peak_bytes is None else peak_bytes / BYTES_PER_GB
