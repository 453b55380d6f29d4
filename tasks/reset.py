"""What is put back in a long-lived worker's process between experiments.

What an experiment leaves behind in the process is undone before the next one (``reset``):
Dynamo's caches and compiled code (``torch._dynamo.reset``), inductor's in-process caches,
inductor's and Dynamo's configuration, torch's process-wide switches (grad mode, default dtype
and device, matmul precision, TF32 and cuDNN flags, deterministic algorithms), the environment and
the working directory as they were when the worker started, the RNGs, garbage (a full collection,
after which what survived is frozen out of later ones: each then scans only what the last
experiment left, milliseconds rather than the ~130 ms of a full collection in a process holding
torch), the C heap's free memory (given back to the system: the steady allocator never trims on
its own), and, where CUDA has been initialised, the CUDA caching allocator's memory and its peak
statistics. Cores and affinity are the worker's for life (``tasks.isolation``); thread counts and
the compile-cache variables are set back by ``tasks.isolation`` around each experiment.

What a reset cannot give back (generated modules kept in ``sys.modules``, allocator arenas,
cuDNN's autotuner cache) is bounded by replacing the worker (``tasks.worker``).
"""

from __future__ import annotations

import gc
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class _Switch:
    """A process-wide torch setting an experiment may change."""

    name: str
    get: Callable[[], Any]
    set: Callable[[Any], object]


def _switches() -> list[_Switch]:
    import torch

    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn

    def attr(obj: Any, name: str) -> _Switch:
        return _Switch(name, lambda: getattr(obj, name), lambda v: setattr(obj, name, v))

    return [
        _Switch("grad", torch.is_grad_enabled, torch.set_grad_enabled),
        _Switch("dtype", torch.get_default_dtype, torch.set_default_dtype),
        _Switch("device", torch.get_default_device, torch.set_default_device),
        _Switch("matmul_precision", torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
        _Switch(
            "deterministic",
            lambda: (
                torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled(),
            ),
            lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1]),
        ),
        attr(matmul, "allow_tf32"),
        attr(matmul, "allow_fp16_reduced_precision_reduction"),
        attr(matmul, "allow_bf16_reduced_precision_reduction"),
        attr(cudnn, "allow_tf32"),
        attr(cudnn, "benchmark"),
        attr(cudnn, "deterministic"),
    ]


class Baseline:
    """The process's state when the worker started, to return to after each experiment."""

    def __init__(self) -> None:
        import torch._dynamo.config as dynamo_config
        import torch._inductor.config as inductor_config

        self.configs = [(m, m.get_config_copy()) for m in (inductor_config, dynamo_config)]
        self.switches = [(s, s.get()) for s in _switches()]
        self.environ = dict(os.environ)
        self.cwd = os.getcwd()

    def restore(self) -> None:
        """Set back only what differs (setting a config key marks it as overridden by the user)."""
        for module, saved in self.configs:
            now = module.get_config_copy()
            for key, value in saved.items():
                if not _same(now.get(key), value):
                    setattr(module, key, value)
        for switch, value in self.switches:
            if not _same(switch.get(), value):
                switch.set(value)
        if os.environ != self.environ:
            os.environ.clear()
            os.environ.update(self.environ)
        if os.getcwd() != self.cwd:
            os.chdir(self.cwd)


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # tensors and other values without a plain truth value
        return False


def reset(baseline: Baseline) -> None:
    """Undo what an experiment left behind in this process (see the module docstring)."""
    import numpy as np
    import torch

    from tasks.compiling import forget_compiled
    from tasks.isolation import trim_heap

    forget_compiled()  # Dynamo's caches and code, inductor's caches and loaded modules, counters
    baseline.restore()
    torch.manual_seed(0)  # every experiment seeds itself too; this leaves no trace of the last one
    random.seed(0)
    np.random.seed(0)
    gc.collect()
    gc.freeze()  # what survived lives as long as the worker (modules imported on first use): out of later collections
    trim_heap()  # the heap the experiment freed goes back to the system: the next one starts as a fresh process would
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.reset_accumulated_memory_stats()
