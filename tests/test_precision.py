"""Precisions: casts, autocast, TF32, tolerances that follow the dtype, clear errors where a device cannot."""

from __future__ import annotations

import pytest
import torch

from tasks import precision
from tasks.models import Experiment
from tasks.procedure import run_experiment
from tasks.targets import build


def run(target: str, prec: str, backend: str = "eager", **kw):
    exp = Experiment(
        target=target,
        device="cpu",
        precision=prec,
        compile={"backend": backend},
        timing={"warmup": 1, "repeats": 3},
        **kw,
    )
    return run_experiment(exp)


@pytest.mark.parametrize(("prec", "rtol"), [("fp32", 1e-4), ("bf16", 1e-3), ("fp16", 1e-3), ("amp_bf16", 1e-3)])
def test_each_precision_runs_on_the_cpu_with_its_tolerance(prec, rtol):
    r = run("tests.user_targets:make_linear", prec, backend="aot_eager")
    assert r.status == "ok", r.error
    assert r.correct is True
    assert r.precision == prec
    assert r.check.rtol == rtol


def test_bf16_casts_the_module_and_its_floating_inputs():
    work = precision.cast(build("tests.user_targets:make_caching_lm", torch.device("cpu"), {}), "bf16")
    assert {p.dtype for p in work.fn.parameters()} == {torch.bfloat16}
    assert work.inputs[0].dtype == torch.int64  # token ids stay integers
    work = precision.cast(build("seed.foo", torch.device("cpu"), {"shape": [4]}), "fp16")
    assert {x.dtype for x in work.inputs} == {torch.float16}


def test_amp_runs_under_autocast_and_leaves_the_module_in_float32():
    work = build("tests.user_targets:make_linear", torch.device("cpu"), {})
    assert precision.cast(work, "amp_bf16") is work
    with precision.active("amp_bf16", torch.device("cpu")):
        assert work.fn(*work.inputs).dtype == torch.bfloat16
    assert work.fn(*work.inputs).dtype == torch.float32


def test_tf32_on_the_cpu_is_a_clear_runtime_error():
    r = run("seed.foo", "tf32", params={"shape": [4]})
    assert r.status == "runtime_error"
    assert r.error.type == "tasks.precision.PrecisionError"
    assert r.error.message == (
        "precision 'tf32' is a CUDA matmul mode (TF32 tensor cores, compute capability 8.0+); "
        "this experiment runs on the cpu"
    )
    assert r.precision == "tf32" and r.device == "cpu"


def test_a_device_without_the_kernel_is_a_clear_runtime_error(monkeypatch):
    real_linear = torch.nn.functional.linear

    def linear(x, w, b=None):
        if x.dtype == torch.float16:
            raise RuntimeError("\"addmm_impl_cpu_\" not implemented for 'Half'")
        return real_linear(x, w, b)

    monkeypatch.setattr(torch.nn.functional, "linear", linear)
    r = run("seed.foo", "fp16", params={"shape": [4]})
    assert r.status == "runtime_error"
    assert r.error.message.startswith("precision 'fp16' cannot run on this cpu: ")
    assert "not implemented for 'Half'" in r.error.message


def test_a_target_without_a_low_precision_kernel_fails_saying_so():
    error = precision.explain_failure(RuntimeError("\"foo_cpu\" not implemented for 'BFloat16'"), "bf16")
    assert isinstance(error, precision.PrecisionError)
    assert str(error).startswith("the target cannot run in precision 'bf16' on this device: ")
    other = ValueError("boom")
    assert precision.explain_failure(other, "bf16") is other


def test_settings_are_restored_after_the_experiment():
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    with precision.active("fp32", torch.device("cpu")):
        assert torch.get_float32_matmul_precision() == "highest"
        assert torch.backends.cudnn.allow_tf32 is False
    assert (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32) == before
    assert not torch.is_autocast_enabled("cpu")


def test_lower_arithmetic_sets_the_tolerance_dtype():
    assert precision.arithmetic_dtype("fp32") is None
    assert precision.arithmetic_dtype("tf32") == torch.float16  # the same 10-bit mantissa
    assert precision.arithmetic_dtype("amp_fp16") == torch.float16
