"""The built-in workloads: blocks, models.gpt and hf.causal_lm, in every precision and both phases."""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

from tasks.models import Experiment
from tasks.procedure import run_experiment
from tasks.targets import REGISTRY, TargetError, build, check_params

CPU = torch.device("cpu")
HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
TARGETS_DIR = Path(__file__).resolve().parents[1] / "tasks" / "targets"

# Small enough for milliseconds per call, large enough for every code path (several heads, layers).
TINY: dict[str, dict] = {
    "blocks.mlp": {"batch": 2, "seq": 8, "dim": 16},
    "blocks.layernorm_gelu": {"batch": 2, "seq": 8, "dim": 32},
    "blocks.softmax": {"batch": 2, "heads": 2, "seq": 16},
    "blocks.attention": {"batch": 2, "seq": 8, "dim": 16, "heads": 2},
    "blocks.conv_bn_relu": {"batch": 2, "in_channels": 3, "channels": 4, "size": 8},
    "blocks.transformer_layer": {"batch": 2, "seq": 8, "dim": 16, "heads": 2},
    "models.gpt": {"batch": 2, "seq": 8, "layers": 2, "dim": 16, "heads": 2, "vocab": 64},
    "hf.causal_lm": {"batch": 2, "seq": 8, "layers": 2, "dim": 16, "heads": 2, "vocab": 64},
}
NEEDS_TRANSFORMERS = pytest.mark.skipif(not HAS_TRANSFORMERS, reason="transformers is not installed")
WORKLOADS = [pytest.param(t, marks=NEEDS_TRANSFORMERS) if t.startswith("hf.") else t for t in TINY]
PRECISIONS = {  # precision -> (dtype the module and floating inputs are cast to, autocast dtype)
    "fp32": (torch.float32, None),
    "tf32": (torch.float32, None),
    "bf16": (torch.bfloat16, None),
    "fp16": (torch.float16, None),
    "amp_bf16": (torch.float32, torch.bfloat16),
    "amp_fp16": (torch.float32, torch.float16),
}


def test_every_workload_is_registered_with_a_description():
    for name in TINY:
        assert name in REGISTRY
        assert REGISTRY[name].description
    assert "needs transformers" in REGISTRY["hf.causal_lm"].description


@pytest.mark.parametrize("module", ["blocks.py", "gpt.py", "hf.py"])
def test_target_modules_import_no_torch_at_import_time(module):
    """Listing targets must stay fast: torch is imported by the factories, when they run."""
    tree = ast.parse((TARGETS_DIR / module).read_text())
    for node in tree.body:  # top-level statements only; `if TYPE_CHECKING:` blocks are for hints
        if isinstance(node, ast.Import):
            assert not any(a.name.split(".")[0] in ("torch", "transformers") for a in node.names), module
        if isinstance(node, ast.ImportFrom):
            assert (node.module or "").split(".")[0] not in ("torch", "transformers"), module
            assert node.module != "tasks.targets.layers", module  # layers imports torch


def _cast(work, precision):
    dtype, _ = PRECISIONS[precision]
    module = work.fn.to(dtype)

    def cast(x):
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            return x.detach().to(dtype).requires_grad_(x.requires_grad)
        return x

    return module, tuple(cast(x) for x in work.inputs)


def _floating(output):
    if isinstance(output, torch.Tensor):
        return [output]
    return [v for v in output.values() if isinstance(v, torch.Tensor) and v.is_floating_point()]


@pytest.mark.parametrize("precision", list(PRECISIONS))
@pytest.mark.parametrize("target", WORKLOADS)
def test_workload_runs_inference_and_a_training_step_in_every_precision(target, precision):
    torch.manual_seed(0)
    work = build(target, CPU, TINY[target])
    module, inputs = _cast(work, precision)
    dtype, amp = PRECISIONS[precision]
    autocast = torch.autocast("cpu", dtype=amp) if amp else contextlib.nullcontext()

    module.eval()
    with torch.no_grad(), autocast:
        outputs = _floating(module(*inputs))
    assert outputs and all(torch.isfinite(o).all() for o in outputs)
    if amp is None:  # under autocast the dtype is the last op's choice (LayerNorm keeps float32)
        assert outputs[0].dtype == dtype

    module.train()
    if not list(module.parameters()):  # as the procedure trains a parameter-free target: by its inputs
        inputs = tuple(x.requires_grad_() if x.is_floating_point() else x for x in inputs)
    with autocast:
        output = module(*inputs)
        loss = work.loss_fn(output) if work.loss_fn else sum(o.float().sum() for o in _floating(output))
    loss.backward()
    assert loss.dim() == 0 and torch.isfinite(loss)
    leaves = [p for p in module.parameters()] or [x for x in inputs if x.requires_grad]
    assert leaves and all(p.grad is not None and torch.isfinite(p.grad).all() for p in leaves)


MEMORY_BOUND = {"blocks.layernorm_gelu", "blocks.softmax"}  # no matmul, conv or attention: 0 FLOPs counted


@pytest.mark.parametrize("phase", ["inference", "training"])
@pytest.mark.parametrize("target", WORKLOADS)
def test_workload_passes_the_procedure_with_the_eager_backend(target, phase):
    r = run_experiment(_experiment(target, phase))
    assert r.status == "ok", r.error
    assert r.correct is True
    assert r.phase == phase
    assert r.eager is not None and r.compiled is not None
    assert r.work is not None and r.work.bytes and r.work.bytes > 0
    assert (r.work.flops == 0) if target in MEMORY_BOUND else (r.work.flops and r.work.flops > 0)


def test_gpt_trains_in_bfloat16_through_the_procedure():
    r = run_experiment(_experiment("models.gpt", "training", precision="bf16", optimizer="adamw"))
    assert r.status == "ok", r.error
    assert r.correct is True and r.precision == "bf16"


def _experiment(target: str, phase: str, **fields) -> Experiment:
    return Experiment(
        target=target,
        params=TINY[target],
        device="cpu",
        phase=phase,
        optimizer=fields.pop("optimizer", "sgd" if phase == "training" else None),
        compile={"backend": "eager"},
        timing={"warmup": 0, "repeats": 2},
        **fields,
    )


def test_default_sizes_are_accepted_and_unknown_params_rejected():
    for name in TINY:
        check_params(name, {})
    with pytest.raises(TargetError, match="accepts: batch, seq, dim, hidden"):
        check_params("blocks.mlp", {"width": 3})


def test_attention_causal_flag_hides_later_positions():
    torch.manual_seed(0)
    for causal in (True, False):
        work = build("blocks.attention", CPU, {**TINY["blocks.attention"], "causal": causal})
        (x,) = work.inputs
        changed = x.clone()
        changed[:, -1] += 1.0  # only the last position changes
        with torch.no_grad():
            before, after = work.fn(x), work.fn(changed)
        assert torch.equal(before[:, :-1], after[:, :-1]) is causal


def test_gpt_loss_is_next_token_cross_entropy_near_log_vocab_at_init():
    torch.manual_seed(0)
    params = TINY["models.gpt"]
    work = build("models.gpt", CPU, params)
    (ids,) = work.inputs
    assert ids.shape == (params["batch"], params["seq"]) and ids.dtype == torch.int64
    logits = work.fn(ids)
    assert logits.shape == (params["batch"], params["seq"], params["vocab"])
    loss = work.loss_fn(logits)
    assert loss.item() == pytest.approx(math.log(params["vocab"]), abs=0.2)  # GPT-2's init: near-uniform logits
    expected = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, params["vocab"]), ids[:, 1:].reshape(-1))
    assert torch.allclose(loss, expected)
    assert work.fn.head.weight is work.fn.wte.weight  # tied


def test_hf_causal_lm_without_transformers_is_one_clear_target_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import now raises ImportError
    with pytest.raises(TargetError) as e:
        build("hf.causal_lm", CPU, TINY["hf.causal_lm"])
    assert "needs the 'transformers' package" in str(e.value)
    assert "\n" not in str(e.value)


def test_hf_causal_lm_without_transformers_is_a_runtime_error_result(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    r = run_experiment(Experiment(target="hf.causal_lm", device="cpu", compile={"backend": "eager"}))
    assert r.status == "runtime_error"
    assert r.error is not None and r.error.type == "tasks.targets.registry.TargetError"
    assert "pip install transformers" in r.error.message


@NEEDS_TRANSFORMERS
@pytest.mark.parametrize("use_cache", [False, True])
def test_hf_causal_lm_returns_a_model_output(use_cache):
    torch.manual_seed(0)
    params = TINY["hf.causal_lm"]
    work = build("hf.causal_lm", CPU, {**params, "use_cache": use_cache})
    with torch.no_grad():
        out = work.fn(*work.inputs)
    assert type(out).__name__.endswith("Output") or "Output" in type(out).__name__
    assert out.logits.shape == (params["batch"], params["seq"], params["vocab"])
    assert (getattr(out, "past_key_values", None) is not None) is use_cache
    assert work.loss_fn(out).item() == pytest.approx(math.log(params["vocab"]), abs=0.3)


@NEEDS_TRANSFORMERS
def test_hf_causal_lm_builds_another_architecture():
    torch.manual_seed(0)
    work = build("hf.causal_lm", CPU, {**TINY["hf.causal_lm"], "arch": "llama"})
    assert type(work.fn).__name__ == "LlamaForCausalLM"
    assert work.fn.config.intermediate_size == 4 * TINY["hf.causal_lm"]["dim"]
    with pytest.raises(TargetError, match=r"hf\.causal_lm"):
        build("hf.causal_lm", CPU, {"arch": "no-such-model"})
