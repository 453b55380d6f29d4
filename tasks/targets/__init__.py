"""The library of benchmark targets and how a target name becomes a workload.

A target is a factory ``factory(device: torch.device, **params)`` returning
``(callable_or_module, example_inputs)`` or ``(callable_or_module, example_inputs,
check_inputs)`` (or a ``Workload``, to give a training ``loss_fn`` too), where
``check_inputs`` is a list of further input tuples on which the
compiled result is checked against eager but never timed (to cover every branch of a
data-dependent target). Built-in targets are registered under a name (``seed.foo``);
user targets are named by import path (``package.module:factory``) and follow the
same contract.

``example_inputs`` may also be an ``InputCycle``: a list of input tuples that successive
calls take in turn (a workload whose shapes change between calls). The first tuple is the
one for the first call, the correctness check and the estimate of a call's length.
"""

# the built-in targets register themselves when imported
from tasks.targets import blocks as _blocks  # noqa: F401
from tasks.targets import dynamic as _dynamic  # noqa: F401
from tasks.targets import gpt as _gpt  # noqa: F401
from tasks.targets import hf as _hf  # noqa: F401
from tasks.targets import seed as _seed  # noqa: F401
from tasks.targets.registry import (
    REGISTRY,
    Factory,
    Target,
    TargetError,
    build,
    check_params,
    dtype_of,
    params_of,
    register,
    resolve,
)
from tasks.targets.workload import CycleCall, FreshInputs, InputCycle, Workload, copy_inputs, input_versions

__all__ = [
    "REGISTRY",
    "CycleCall",
    "Factory",
    "FreshInputs",
    "InputCycle",
    "Target",
    "TargetError",
    "Workload",
    "build",
    "check_params",
    "copy_inputs",
    "dtype_of",
    "input_versions",
    "params_of",
    "register",
    "resolve",
]
